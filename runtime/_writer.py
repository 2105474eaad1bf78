"""A delivery's in-band writes: the fence, the log it holds and its live replay, in step.

:class:`InBandWriter` is the one way an orchestrator delivery writes to its run:
every write carries the count of in-band events the delivery has seen, so a
delivery that lost the run to another is refused before it writes anything
(:class:`Superseded`); the events a write reports as unseen (another writer
landed first) are appended to the log it holds and handed to the live replay,
or mark the replay stale when it cannot take them in log order.
:class:`~durasim.runtime._delivery.RunDelivery` drives the workflow through it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from datetime import datetime

import attrs

from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    DurasimError,
    EntityConflict,
    Event,
    EventRequest,
    InBandSuperseded,
    RunExpired,
    RunRecord,
    World,
)

from ._replay import Replay
from .serialization import FatalError, SerializationError, serialize

__all__ = ["InBandWriter", "Kept", "Superseded", "error_bytes", "fail_unfenced"]


class Superseded(DurasimError):
    """Another delivery owns the run: stop without writing anything more."""


class _Lock(asyncio.Lock):
    """``asyncio.Lock``, its two fields declared: the writes take it uncontended inline.

    (``acquire()`` is a coroutine to create and await; free and with nobody
    waiting, it only sets ``_locked``.  Every Python from 3.11 to 3.14 has these
    two fields.)
    """

    _locked: bool
    _waiters: collections.deque[asyncio.Future[bool]] | None

    def take(self) -> bool:
        """Take the lock if it is free and nobody waits (``acquire()`` without its
        coroutine); False: await :meth:`acquire`."""
        if self._locked or self._waiters:
            return False
        self._locked = True
        return True

    def give(self) -> None:
        """``release()``; a held lock nobody waits for is only marked free."""
        if self._waiters:
            self.release()
        else:
            self._locked = False


class InBandWriter:
    """This delivery's in-band writes, with the log and the live replay kept in step."""

    def __init__(self, world: World, run_id: str, events: list[Event], seq_in_band: int) -> None:
        self.world = world
        self.run_id = run_id
        self.events = events
        self.expected = seq_in_band
        self.replay: Replay | None = None
        self.stale = False  # another writer's events landed amid ours, past the replay
        self.ended = False  # the log holds a terminal event (e.g. a cancel landed)
        self.written = 0
        self.lock = _Lock()

    async def write(self, request: EventRequest) -> Event | None:
        """One in-band event; ``None`` if the World appended nothing (a tolerated repeat)."""
        lock = self.lock
        if not lock.take():
            await lock.acquire()
        try:
            try:
                one = await self.world.events.create(
                    self.run_id,
                    request,
                    in_band=True,
                    expected_seq_in_band=self.expected,
                    seen_seq=len(self.events),
                )
            except InBandSuperseded as exc:
                raise Superseded(str(exc)) from exc
            event = one.event if one.allocated else None
            mine: tuple[Event, ...] = () if event is None else (event,)
            self.expected += len(mine)
            self._absorb(one.unseen, mine)
            return event
        finally:
            lock.give()

    async def write_batch(
        self,
        requests: list[EventRequest],
        *,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> tuple[Event, ...]:
        """In-band events at consecutive positions, atomically."""
        lock = self.lock
        if not lock.take():
            await lock.acquire()
        try:
            events = self.events
            try:
                many = await self.world.events.create_batch(
                    self.run_id,
                    requests,
                    in_band=True,
                    expected_seq_in_band=self.expected,
                    seen_seq=len(events),
                    occurred_at=occurred_at,
                    expected_seq=expected_seq,
                )
            except InBandSuperseded as exc:
                raise Superseded(str(exc)) from exc
            mine = many.events
            self.expected += len(mine)
            unseen = many.unseen
            if unseen:
                self._absorb(unseen, mine)
            else:  # self._absorb((), mine), inlined: nobody else wrote meanwhile
                self.written += len(mine)
                events += mine
                replay = self.replay
                if replay is not None and not self.stale:
                    replay.take(mine)
            return mine
        finally:
            lock.give()

    def _absorb(self, unseen: tuple[Event, ...], mine: tuple[Event, ...]) -> None:
        if unseen:
            self.ended = self.ended or any(e.type in RUN_TERMINAL_TYPES for e in unseen)
            # Another writer's events landed first.  A replay that has consumed
            # only what this delivery had seen takes them in log order, as a cold
            # replay would; one that ran ahead (fed an event provisionally) cannot.
            if self.replay is None or self.replay.consumed > len(self.events) or self.ended:
                self.stale = True
        self.written += len(mine)
        landed = (*unseen, *mine) if unseen else mine
        self.events += landed
        replay = self.replay if not self.stale else None
        if replay is not None:
            # A cold replay would hold these too (patch decisions depend on it).
            # Events the replay already consumed were handed to it ahead of their
            # commit (run-ahead); the caller compares them with what committed.
            replay.take(landed)


@attrs.define(eq=False)
class Kept:
    """A suspended run's live replay, kept by this process for its next delivery."""

    replay: Replay
    events: list[Event]
    in_band: int
    run: RunRecord


async def fail_unfenced(world: World, run_id: str, error: BaseException, code: str) -> None:
    """Fail a run whose log cannot be loaded (no fence count to write with)."""
    with contextlib.suppress(EntityConflict, RunExpired):
        await world.events.create(
            run_id, EventRequest.of("run_failed", error=error_bytes(error), error_code=code)
        )


def error_bytes(error: BaseException) -> bytes:
    try:
        return serialize(error, root="workflow error")
    except SerializationError:
        return serialize(FatalError(f"{type(error).__name__}: {error}"), root="workflow error")
