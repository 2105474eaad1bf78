"""What this process knows is cancelled: runs and workflow-made tokens.

Each World's :class:`~durasim.runtime.lowlevel.Engine` holds its own
:class:`Cancellations` (no table keyed by World identity).

Keys are a run id, or ``<run id>/durasim.cancel.<token id>`` for a token.  The
log is the truth; this registry is how a step body in this process learns of
it quickly: a cancel written here is marked at once, and a waiting awaitable
reads the run every ``poll`` seconds (:func:`refresh`).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict

from durasim.worlds import RunStatus, World

__all__ = [
    "CANCEL_ATTR",
    "DEFAULT_POLL",
    "Cancellations",
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


class Cancellations:
    """What one World's engine knows is cancelled (thread-safe: step threads read it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: OrderedDict[str, str] = OrderedDict()  # bounded, oldest dropped
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]]] = {}

    def mark(self, key: str, reason: str) -> None:
        """Record that ``key`` is cancelled, and wake whoever waits for it."""
        with self._lock:
            self._reasons[key] = reason
            self._reasons.move_to_end(key)
            while len(self._reasons) > _MAX_KEYS:
                self._reasons.popitem(last=False)
            waiting = self._waiters.pop(key, [])
        for loop, future in waiting:
            loop.call_soon_threadsafe(_resolve, future, reason)

    def reason(self, key: str) -> str | None:
        """The reason ``key`` was cancelled, if known."""
        with self._lock:
            return self._reasons.get(key)

    def subscribe(
        self, key: str, loop: asyncio.AbstractEventLoop, future: asyncio.Future[str]
    ) -> str | None:
        """The reason if known; else resolve ``future`` with it when it is marked."""
        with self._lock:
            known = self._reasons.get(key)
            if known is None:
                self._waiters.setdefault(key, []).append((loop, future))
        return known

    def unsubscribe(
        self, key: str, loop: asyncio.AbstractEventLoop, future: asyncio.Future[str]
    ) -> None:
        """Forget a waiter :meth:`subscribe` registered."""
        with self._lock:
            entries = self._waiters.get(key, [])
            if (loop, future) in entries:
                entries.remove((loop, future))
            if not entries:
                self._waiters.pop(key, None)


#: Cancellations of code that runs with no World (a step body called directly).
_WORLDLESS = Cancellations()


def _registry(world: World | None) -> Cancellations:
    # Run ids are unique within one World only: two Worlds in one process (tests,
    # the simulator) may both have a run-1, so each World's engine has its own.
    if world is None:
        return _WORLDLESS
    from ._engine import engine_for  # noqa: PLC0415 -- the engine imports the orchestrator

    return engine_for(world).cancellations


def mark_cancelled(world: World | None, key: str, reason: str) -> None:
    """Record that ``key`` (a run id, or ``<run id>/durasim.cancel.<token>``) is cancelled."""
    _registry(world).mark(key, reason)


def _resolve(future: asyncio.Future[str], reason: str) -> None:
    if not future.done():
        future.set_result(reason)


def cancelled_reason(world: World | None, key: str) -> str | None:
    """The reason ``key`` of ``world`` was cancelled, if this process knows it was."""
    return _registry(world).reason(key)


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
    registry = _registry(world)
    known = registry.subscribe(key, loop, future)
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
        registry.unsubscribe(key, loop, future)
