"""What this process knows is cancelled: runs and workflow-made tokens.

Keys are a run id, or ``<run id>/durasim.cancel.<token id>`` for a token.  The
log is the truth; this registry is how a step body in this process learns of
it quickly: a cancel written here is marked at once, and a waiting awaitable
reads the run every ``poll`` seconds (:func:`refresh`).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import weakref
from collections import OrderedDict

from durasim.worlds import RunStatus, World

__all__ = [
    "CANCEL_ATTR",
    "DEFAULT_POLL",
    "cancelled_reason",
    "mark_cancelled",
    "refresh",
    "wait_cancelled",
]

#: Attribute key prefix of workflow-made cancellations (mirrors the replay's).
CANCEL_ATTR = "durasim.cancel."
#: Seconds between two reads of the run by a waiting awaitable.
DEFAULT_POLL = 1.0
_MAX_KEYS = 10_000

_Key = tuple[int, str]  # (the World's serial in this process, key)
_lock = threading.Lock()
_reasons: OrderedDict[_Key, str] = OrderedDict()  # bounded, oldest dropped
_waiters: dict[_Key, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]]] = {}
_serials: weakref.WeakKeyDictionary[object, int] = weakref.WeakKeyDictionary()
_next_serial = itertools.count(1)


def _scoped(world: World | None, key: str) -> _Key:
    # Run ids are unique within one World only: two Worlds in one process (tests,
    # the simulator) may both have a run-1.
    if world is None:
        return (0, key)
    try:
        serial = _serials.get(world)
        if serial is None:
            serial = _serials[world] = next(_next_serial)
    except TypeError:  # not weak-referenceable: its id, for as long as it lives
        serial = -id(world)
    return (serial, key)


def mark_cancelled(world: World | None, key: str, reason: str) -> None:
    """Record that ``key`` (a run id, or ``<run id>/durasim.cancel.<token>``) is cancelled."""
    scoped = _scoped(world, key)
    with _lock:
        _reasons[scoped] = reason
        _reasons.move_to_end(scoped)
        while len(_reasons) > _MAX_KEYS:
            _reasons.popitem(last=False)
        waiting = _waiters.pop(scoped, [])
    for loop, future in waiting:
        loop.call_soon_threadsafe(_resolve, future, reason)


def _resolve(future: asyncio.Future[str], reason: str) -> None:
    if not future.done():
        future.set_result(reason)


def cancelled_reason(world: World | None, key: str) -> str | None:
    """The reason ``key`` of ``world`` was cancelled, if this process knows it was."""
    with _lock:
        return _reasons.get(_scoped(world, key))


async def refresh(world: World, run_id: str) -> None:
    """Read the run once and record what it says is cancelled."""
    run = await world.runs.get(run_id)
    if run.status is RunStatus.CANCELLED:
        mark_cancelled(world, run_id, run.cancel_reason or "cancelled")
    for key, value in run.attributes.items():
        if key.startswith(CANCEL_ATTR) and isinstance(value, str):
            mark_cancelled(world, f"{run_id}/{key}", value)


async def wait_cancelled(
    world: World | None, key: str, run_id: str, *, poll: float = DEFAULT_POLL
) -> str:
    """Wait until ``key`` is cancelled; its reason.  Reads the run every ``poll`` s."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    scoped = _scoped(world, key)
    with _lock:
        known = _reasons.get(scoped)
        if known is None:
            _waiters.setdefault(scoped, []).append((loop, future))
    if known is not None:
        return known
    try:
        while True:
            if world is not None:
                await refresh(world, run_id)
            if future.done():
                return future.result()
            done, _ = await asyncio.wait({future}, timeout=poll)
            if done:
                return future.result()
    finally:
        with _lock:
            entries = _waiters.get(scoped, [])
            if (loop, future) in entries:
                entries.remove((loop, future))
            if not entries:
                _waiters.pop(scoped, None)
