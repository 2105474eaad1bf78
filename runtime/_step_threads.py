"""Sync step bodies in threads, with a cheap hand-off for the quick ones.

``asyncio.to_thread`` costs ~100-150 us a call here: an executor work item, a
``concurrent.futures`` future chained to an asyncio one, and a wake-up of the
loop through its self-pipe, an ``epoll`` round and a task step.  Most step
bodies are short, so that hop is a large part of a step.

:func:`run_in_step_thread` hands the body to an idle long-lived thread (a new
one when none is idle, up to :data:`MAX_THREADS`, so concurrent bodies still run
side by side).  When no other body is in flight, it then *waits for it on the
loop's thread*, up to :data:`QUICK_WAIT` seconds, with the GIL released: a body
that ends within that time is handed back by one lock release, with no loop
wake-up at all.  A body still running by then, or one started beside others,
is awaited like ``to_thread``'s (the loop is woken when it ends).  So the loop,
and the lease renewals it runs, is never held for more than :data:`QUICK_WAIT`,
far below any lease, and concurrent bodies never wait for each other.  A
function whose last body outlasted the quick wait is awaited at once the next
time (holding the loop would only delay the rest of the worker), until one of
its bodies is quick again.

The body runs in a copy of the caller's context (contextvars reach it, as with
``to_thread``), and whatever it raises (``BaseException`` s too) is raised
from the ``await``.  If the awaiting task is cancelled, the body runs to its
end in its thread and its result is dropped, as with ``to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from ._determinism import wall_perf_counter

__all__ = [
    "INLINE_AFTER",
    "INLINE_BELOW",
    "MAX_THREADS",
    "QUICK_WAIT",
    "ran_inline",
    "run_in_step_thread",
    "runs_inline",
]

#: Seconds the loop's thread waits for a body before awaiting it asynchronously.
QUICK_WAIT = 0.001

#: Step threads kept at most; beyond that, bodies go to ``asyncio.to_thread``.
MAX_THREADS = 32

#: ``sync_steps="auto"``: a function whose last this many bodies each ended within
#: :data:`INLINE_BELOW` seconds is run on the loop (:func:`runs_inline`).
INLINE_AFTER = 8
INLINE_BELOW = 0.0005


class _Job:
    """One body call, handed to a step thread and back."""

    __slots__ = (
        *("args", "context", "done", "elapsed", "ended", "error", "fn", "future", "kwargs"),
        "result",
    )

    def __init__(
        self,
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.context, self.fn, self.args, self.kwargs = context, fn, args, kwargs
        self.result: Any = None
        self.error: BaseException | None = None
        self.elapsed = 0.0
        self.ended = False
        # Held until the body ends; the loop's thread waits on it.
        self.done = threading.Lock()
        self.done.acquire()
        # Set by the loop's thread once it stopped waiting synchronously.
        self.future: asyncio.Future[None] | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            error, self.error = self.error, None  # no reference cycle through the traceback
            try:
                raise error
            finally:
                del error  # nor through this frame, which the traceback holds
        return self.result


class _StepThread:
    """A daemon thread running one job after another; idle ones wait in ``_idle``."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        threading.Thread(target=self._main, name="durasim-step", daemon=True).start()

    def _main(self) -> None:
        get = self.jobs.get
        while True:
            job = get()
            began = wall_perf_counter()
            try:
                job.result = job.context.run(job.fn, *job.args, **job.kwargs)
            except BaseException as exc:  # handed to the awaiting task, which re-raises it
                job.error = exc
            job.elapsed = wall_perf_counter() - began
            job.ended = True
            job.fn = job.args = job.kwargs = job.context = None  # type: ignore[assignment]
            # Back on the idle list before the loop can hand out the next job.
            _idle.append(self)
            # Sequentially consistent under the GIL: the loop's thread sets
            # ``future`` before its last try of ``done``, we read it after release.
            job.done.release()
            future = job.future
            if future is not None:
                # A closed loop has no one left to wake.
                with contextlib.suppress(RuntimeError):
                    future.get_loop().call_soon_threadsafe(_wake, future)


_idle: list[_StepThread] = []
_started = 0
_start_lock = threading.Lock()
#: Functions (by qualified name) whose last body outlasted the quick wait.
_slow: set[str] = set()
#: Bodies handed to step threads and not yet handed back (set updates are atomic).
_out: set[_Job] = set()
#: Consecutive quick bodies of each function, by code object (a closure copy of a
#: step shares its code); capped at INLINE_AFTER.  Plain dict updates, atomic.
_quick: dict[object, int] = {}


def runs_inline(fn: Callable[..., Any]) -> bool:
    """Whether ``fn``'s body may run on the loop now (``sync_steps="auto"``).

    Yes when its last :data:`INLINE_AFTER` bodies each ended within
    :data:`INLINE_BELOW` (in a step thread or inline) and no other body is out in
    a step thread (one that may be waiting on the loop).  The hand-off it saves
    costs far more than such a body; a body that turns out long holds the loop
    once and sends its function back to the threads (:func:`ran_inline`).
    """
    try:
        code: object = fn.__code__  # every step body's (an attribute read, not getattr's call)
    except AttributeError:
        return False
    return code is not None and not _out and _quick.get(code, 0) >= INLINE_AFTER


def ran_inline(fn: Callable[..., Any], elapsed: float) -> None:
    """Note a body of ``fn`` that took ``elapsed`` seconds (inline or in a step thread)."""
    try:
        code: object = fn.__code__
    except AttributeError:
        return
    if code is None:
        return
    if elapsed < INLINE_BELOW:
        count = _quick.get(code, 0)
        if count < INLINE_AFTER:
            _quick[code] = count + 1
    else:
        _quick.pop(code, None)


def _forget_threads() -> None:
    """In a forked child: the parent's threads do not exist there."""
    global _idle, _started, _start_lock
    _idle, _started, _start_lock = [], 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_threads)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _thread() -> _StepThread | None:
    global _started  # noqa: PLW0603 -- the process's pool of step threads
    try:
        return _idle.pop()
    except IndexError:
        pass
    with _start_lock:
        if _started >= MAX_THREADS:
            return None
        _started += 1
    return _StepThread()


async def run_in_step_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``await asyncio.to_thread(fn, *args, **kwargs)``, cheaper for quick bodies."""
    thread = _thread()
    if thread is None:
        return await asyncio.to_thread(fn, *args, **kwargs)
    job = _Job(contextvars.copy_context(), fn, args, kwargs)
    alone = not _out
    _out.add(job)
    try:
        thread.jobs.put(job)
        return await _handed_back(job, getattr(fn, "__qualname__", ""), quick=alone)
    finally:
        _out.discard(job)
        if job.ended:  # (a cancelled await may leave it running)
            ran_inline(fn, job.elapsed)


async def _handed_back(job: _Job, key: str, *, quick: bool) -> Any:
    if quick and key not in _slow and job.done.acquire(timeout=QUICK_WAIT):
        return job.outcome()
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    job.future = future
    if not job.done.acquire(blocking=False):  # else it ended between the wait and now
        await future
    else:
        future.cancel()  # the thread may still wake it: that is a no-op
    if job.elapsed < QUICK_WAIT:
        _slow.discard(key)
    else:
        _slow.add(key)
    return job.outcome()
