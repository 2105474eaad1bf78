"""Deterministic ``wait`` and ``as_completed`` for workflow code.

The stdlib's ``asyncio.wait`` and ``asyncio.as_completed`` put their arguments in
a set first; a set of coroutine objects iterates in memory-address order, which
differs between processes, so the tasks they wrap would be created (and their
steps called) in a different order on replay.  These versions wrap awaitables in
argument order and report completions in the order they happened, which in a
workflow is log order (ties: call order):

* :func:`wait` returns ``(done, pending)`` as lists, ``done`` in completion order;
* :func:`as_completed` yields in completion order.

Inside workflows the stdlib names are routed here too (``asyncio.wait`` keeps
returning sets; our tasks hash by creation order, so those sets iterate the same
everywhere), and only there: ``asyncio.wait`` is replaced while a workflow loop
runs workflow code (:func:`route_while_running`) and is the stdlib's otherwise.
A name bound at import time (``from asyncio import as_completed``) is the stdlib's:
call them through the module, or use these.
Passing them a *set of coroutines* is refused: its order is already lost.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ._errors import WorkflowSandboxError
from ._loop import in_workflow, route_while_running

__all__ = ["as_completed", "sleep", "wait"]

T = TypeVar("T")

_stdlib_wait = asyncio.wait
_stdlib_as_completed = asyncio.as_completed


def _futures(aws: Iterable[Awaitable[T]], *, what: str) -> list[asyncio.Future[T]]:
    if isinstance(aws, set | frozenset) and any(asyncio.iscoroutine(a) for a in aws):
        raise WorkflowSandboxError(
            f"{what} got a set of coroutines, whose order differs between processes: pass a "
            "list (durasim.runtime.wait / as_completed keep its order)"
        )
    return [asyncio.ensure_future(a) for a in aws]


async def wait(
    aws: Iterable[Awaitable[T]],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 -- asyncio.wait's own signature
    return_when: str = asyncio.ALL_COMPLETED,
) -> tuple[list[asyncio.Future[T]], list[asyncio.Future[T]]]:
    """Like :func:`asyncio.wait`, with ordered results: ``done`` in completion order."""
    futures = _futures(aws, what="wait()")
    if not futures:
        raise ValueError("wait() needs at least one awaitable")
    order: dict[asyncio.Future[T], int] = {}
    counter = itertools.count()
    for future in futures:
        if future.done():
            order[future] = next(counter)
        else:
            future.add_done_callback(lambda f: order.setdefault(f, next(counter)))
    await _stdlib_wait(futures, timeout=timeout, return_when=return_when)
    position = {f: i for i, f in enumerate(futures)}
    done = sorted((f for f in futures if f.done()), key=lambda f: (order.get(f, 0), position[f]))
    pending = [f for f in futures if not f.done()]
    return done, pending


async def as_completed(aws: Iterable[Awaitable[T]]) -> AsyncIterator[T]:
    """Yield results in completion order (log order in a workflow), raising failures."""
    futures = _futures(aws, what="as_completed()")
    pending = list(futures)
    while pending:
        done, pending = await wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for future in done:
            yield future.result()


async def _routed_wait(fs: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
    if in_workflow() is None:
        return await _stdlib_wait(fs, *args, **kwargs)
    done, pending = await wait(list(_futures(fs, what="asyncio.wait()")), *args, **kwargs)
    return set(done), set(pending)


def _routed_as_completed(fs: Iterable[Any], *, timeout: float | None = None) -> Iterator[Any]:
    if in_workflow() is None:
        return _stdlib_as_completed(fs, timeout=timeout)
    return _stdlib_as_completed(_futures(fs, what="asyncio.as_completed()"), timeout=timeout)


def route_stdlib() -> None:
    """Route ``asyncio.wait`` / ``asyncio.as_completed`` through the ordered versions.

    Only while workflow code runs: nothing changes when this is called.
    """
    for owner in (asyncio, asyncio.tasks):
        route_while_running(owner, "wait", _routed_wait)
        route_while_running(owner, "as_completed", _routed_as_completed)


async def sleep(duration: float | timedelta | datetime) -> None:
    """A durable sleep: seconds, a ``timedelta``, or until an aware ``datetime``.

    Inside a workflow it is recorded (``wait_created`` with its ``resume_at``)
    and survives restarts; the deadline of a ``datetime`` is taken as is, so
    every replay waits for the same moment.  Outside workflows it is a plain
    ``asyncio.sleep``.
    """
    if isinstance(duration, datetime):
        if duration.tzinfo is None:
            raise ValueError(
                f"sleep until {duration!r}: pass an aware datetime (tzinfo=UTC), not a naive one"
            )
        loop = asyncio.get_running_loop()
        seconds = duration.timestamp() - loop.time()
    elif isinstance(duration, timedelta):
        seconds = duration.total_seconds()
    else:
        seconds = float(duration)
    await asyncio.sleep(max(0.0, seconds))
