"""Handles a script holds: writers by name, raw holds, deferred commits.

:class:`WriterHandle` (``sim.orchestrator()``, ``sim.step("charge")``) holds a
writer at the next matching interception point, level-triggered; :class:`Hold`
(``sim.park(match)``) is the raw, edge-triggered hold; :class:`DeferredCommit`
(``sim.begin_hook_delivery``) lets an out-of-band write commit when the script
says.  Each wraps a :class:`~durasim.sim._scheduler.Watch` of the scheduler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any

import attrs

from durasim.worlds import Event

from ._errors import AlreadyPassedError, SimError
from ._points import Match, Point, WriterPattern
from ._scheduler import Parked, Scheduler, Watch

__all__ = ["DeferredCommit", "Hold", "WriterHandle"]


class Hold:
    """A raw hold (:meth:`Sim.park`): ``await`` it until a writer is held, then release it."""

    def __init__(self, core: Scheduler, watch: Watch) -> None:
        self._core = core
        self._watch = watch
        self._parked: Parked | None = None

    async def wait(self) -> Point:
        """Until a matching point is reached; the writer is then held there."""
        assert self._watch.future is not None
        found = await self._watch.future
        assert isinstance(found, Parked)
        self._parked = found
        return found.point

    def __await__(self) -> Any:
        return self.wait().__await__()

    @property
    def point(self) -> Point | None:
        """Where the writer is held (``None`` before it is)."""
        return None if self._parked is None else self._parked.point

    def release(self) -> None:
        """Let the held writer continue now (idempotent); disarms the hold if unfired."""
        self._core.unwatch(self._watch)
        if self._parked is not None:
            self._core.resume(self._parked)

    def crash(self) -> None:
        """Crash the held writer's delivery here (its lease expires later)."""
        if self._parked is None:
            raise SimError("crash(): nothing is held yet; await the hold first")
        self._core.deliveries.crash(self._parked.actor, self._parked.point)


class WriterHandle:
    """A writer by name (:meth:`Sim.orchestrator`, :meth:`Sim.step`, :meth:`Sim.any_step`).

    ``run_to_*`` holds the writer at the next matching point; the hold is
    level-triggered: a point the writer already passed (since its last hold)
    raises :class:`AlreadyPassedError` instead of waiting forever.
    """

    def __init__(self, core: Scheduler, pattern: WriterPattern) -> None:
        self._core = core
        self.pattern = pattern
        self.watermark = 0
        self._held: Parked | None = None

    async def run_to_event_produced(
        self,
        event_type: str | Sequence[str],
        *,
        step: str | None = None,
        correlation_id: str | None = None,
    ) -> Point:
        """Hold at the ``before`` point of the write carrying ``event_type`` (no position yet)."""
        match = Match(
            phase="before", event_type=event_type, step=step, correlation_id=correlation_id
        )
        return await self.run_to(match)

    async def run_to_event_committed(
        self,
        event_type: str | Sequence[str],
        *,
        step: str | None = None,
        correlation_id: str | None = None,
    ) -> Point:
        """Hold at the ``after`` point of that write once committed (caller not resumed)."""
        match = Match(
            phase="after",
            event_type=event_type,
            step=step,
            correlation_id=correlation_id,
            failed=False,
        )
        return await self.run_to(match)

    async def run_to(self, match: Match) -> Point:
        """Hold this writer at the next point ``match`` selects (releasing any current hold)."""
        match = attrs.evolve(match, writer=self.pattern)
        if match.where is None:
            for point in self._core.history:
                if point.ordinal > self.watermark and match.matches(point):
                    raise AlreadyPassedError(
                        f"{self.pattern.label} already passed {point.describe()} "
                        f"(asked: {match.describe()}); arm the hold before it gets there, "
                        "or ask for a later point",
                        point=point.describe(),
                    )
        watch = self._core.watch(match, "hold", label=f"{self.pattern.label} run_to")
        self.release()
        assert watch.future is not None
        found = await watch.future
        assert isinstance(found, Parked)
        self._held = found
        self.watermark = found.point.ordinal
        return found.point

    def release(self) -> None:
        """Let the held writer continue (idempotent)."""
        if self._held is not None:
            held, self._held = self._held, None
            self._core.resume(held)

    @property
    def is_held(self) -> bool:
        """Whether the script holds this writer now."""
        return self._held is not None

    def history(self) -> list[Point]:
        """Every point this writer has passed."""
        return [p for p in self._core.history if any(self.pattern.matches(w) for w in p.writers)]

    def crash(self) -> None:
        """Crash the held writer's delivery at its point."""
        if self._held is None:
            raise SimError(f"crash(): {self.pattern.label} is not held; run it to a point first")
        held, self._held = self._held, None
        self._core.deliveries.crash(held.actor, held.point)


class DeferredCommit:
    """An out-of-band hook delivery whose commit the script releases (:meth:`commit`)."""

    def __init__(self, core: Scheduler, watch: Watch, task: Awaitable[Event]) -> None:
        self._core = core
        self._watch = watch
        self._task = task

    async def commit(self) -> Event:
        """Let the write commit now; the committed ``hook_received`` event."""
        assert self._watch.future is not None
        found = await self._watch.future
        assert isinstance(found, Parked)
        self._core.resume(found)
        return await self._task
