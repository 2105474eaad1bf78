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
import contextlib
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

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
        self.lock = asyncio.Lock()

    async def write(self, request: EventRequest) -> Event | None:
        """One in-band event; ``None`` if the World appended nothing (a tolerated repeat)."""
        written = await self._commit([request], batch=False)
        return written[0] if written else None

    def write_batch(
        self,
        requests: list[EventRequest],
        *,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> Coroutine[Any, Any, list[Event]]:
        """In-band events at consecutive positions, atomically (await the result)."""
        return self._commit(
            requests, batch=True, occurred_at=occurred_at, expected_seq=expected_seq
        )

    async def _commit(
        self,
        requests: list[EventRequest],
        *,
        batch: bool,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> list[Event]:
        lock = self.lock
        await lock.acquire()  # not ``async with``: two coroutines less per write
        try:
            expected, seen = self.expected, len(self.events)
            try:
                if batch:
                    many = await self.world.events.create_batch(
                        self.run_id,
                        requests,
                        in_band=True,
                        expected_seq_in_band=expected,
                        seen_seq=seen,
                        occurred_at=occurred_at,
                        expected_seq=expected_seq,
                    )
                    unseen, mine = many.unseen, list(many.events)
                else:
                    one = await self.world.events.create(
                        self.run_id,
                        requests[0],
                        in_band=True,
                        expected_seq_in_band=expected,
                        seen_seq=seen,
                    )
                    unseen = one.unseen
                    mine = [one.event] if one.allocated and one.event is not None else []
            except InBandSuperseded as exc:
                raise Superseded(str(exc)) from exc
            self.expected += len(mine)
            self._absorb(unseen, mine)
            return mine
        finally:
            lock.release()

    def _absorb(self, unseen: tuple[Event, ...], mine: list[Event]) -> None:
        if unseen:
            self.ended = self.ended or any(e.type in RUN_TERMINAL_TYPES for e in unseen)
            # Another writer's events landed first.  A replay that has consumed
            # only what this delivery had seen takes them in log order, as a cold
            # replay would; one that ran ahead (fed an event provisionally) cannot.
            if self.replay is None or self.replay.consumed > len(self.events) or self.ended:
                self.stale = True
        self.written += len(mine)
        landed = [*unseen, *mine] if unseen else mine
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
