"""What a simulation reports: idle/stall reports, run outcomes, snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from durasim.worlds import Event, Hook, Message, Run, RunStatus, Step, Wait

from ._calls import Rejection

__all__ = ["IdleReport", "RunOutcome", "RunStall", "SimSnapshot", "StallReport", "StuckCode"]


@attrs.frozen(kw_only=True)
class RunStall:
    """A run that cannot progress, and what it waits for."""

    run_id: str
    status: str
    waiting_for: tuple[str, ...]

    def __str__(self) -> str:
        return f"run {self.run_id} ({self.status}) waits for: " + "; ".join(self.waiting_for)


@attrs.frozen(kw_only=True)
class StallReport:
    """Every run left unfinished when nothing more could run."""

    runs: tuple[RunStall, ...]
    held: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [str(r) for r in self.runs]
        lines += [f"held by the script: {h}" for h in self.held]
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class StuckCode:
    """Code the wall-time watchdog interrupted: it ran past the budget without yielding.

    Attributes:
        function: the innermost running function (its qualified name).
        filename: its file.
        lineno: the line it was running.
        writer: who ran it: a delivery's writer label (``orchestrator run=...``),
            ``the script`` or ``the simulation loop``.
        stack: ``function (file:line)`` of each frame, innermost first (a few).
    """

    function: str
    filename: str
    lineno: int
    writer: str
    stack: tuple[str, ...] = ()

    def __str__(self) -> str:
        return (
            f"{self.writer} did not yield: it was running {self.function}() "
            f"at {self.filename}:{self.lineno}"
        )


@attrs.frozen(kw_only=True)
class IdleReport:
    """How :meth:`Sim.run_until_idle` ended.

    Attributes:
        status: ``"idle"`` (every run ended), ``"stalled"`` (a run cannot
            progress: see ``stall``) or ``"budget"`` (a budget ran out: ``reason``).
        stall: the unfinished runs and what they wait for.
        reason: why the simulation halted (budget).
        stuck: the code the wall-time watchdog interrupted (it never yielded), if any.
        deliveries: deliveries made so far.
        virtual_seconds: virtual time elapsed since the start.
    """

    status: str
    stall: StallReport | None = None
    reason: str | None = None
    stuck: StuckCode | None = None
    deliveries: int = 0
    virtual_seconds: float = 0.0


@attrs.frozen(kw_only=True)
class RunOutcome:
    """A run's end as :meth:`Sim.run` saw it.

    Attributes:
        run_id: the run.
        status: its status (pending/running when it stalled).
        value: the workflow's return value (completed runs).
        error: what ``Run.result()`` raised (failed or cancelled runs).
        idle: how the simulation ended.
    """

    run_id: str
    status: RunStatus
    value: Any = None
    error: BaseException | None = None
    idle: IdleReport = attrs.field(factory=lambda: IdleReport(status="idle"))


@attrs.frozen(kw_only=True)
class SimSnapshot:
    """A read-only view of everything the store holds, and what the simulation saw."""

    now: datetime
    runs: tuple[Run, ...]
    events: Mapping[str, tuple[Event, ...]]
    steps: Mapping[str, tuple[Step, ...]]
    hooks: Mapping[str, tuple[Hook, ...]]
    waits: Mapping[str, tuple[Wait, ...]]
    pending: tuple[Message, ...]
    rejections: tuple[Rejection, ...]

    def log(self, run_id: str) -> list[tuple[str, str | None]]:
        """``(type, correlation id)`` of each event of the run, in log order."""
        return [(e.type.value, e.correlation_id) for e in self.events[run_id]]
