"""What a simulation reports: idle/stall reports, run outcomes, snapshots (and reading them)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from durasim.runtime import Run as RunHandle
from durasim.worlds import (
    Event,
    HookRecord,
    Message,
    RunRecord,
    RunStatus,
    StepRecord,
    WaitRecord,
    World,
)

from ._calls import Rejection

__all__ = [
    "IdleReport",
    "RunOutcome",
    "RunStall",
    "SimSnapshot",
    "StallReport",
    "StuckCode",
    "find_stalls",
    "take_snapshot",
]


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
    runs: tuple[RunRecord, ...]
    events: Mapping[str, tuple[Event, ...]]
    steps: Mapping[str, tuple[StepRecord, ...]]
    hooks: Mapping[str, tuple[HookRecord, ...]]
    waits: Mapping[str, tuple[WaitRecord, ...]]
    pending: tuple[Message, ...]
    rejections: tuple[Rejection, ...]

    def log(self, run_id: str) -> list[tuple[str, str | None]]:
        """``(type, correlation id)`` of each event of the run, in log order."""
        return [(e.type.value, e.correlation_id) for e in self.events[run_id]]


async def take_snapshot(
    store: World,
    *,
    now: datetime,
    pending: tuple[Message, ...],
    rejections: tuple[Rejection, ...],
) -> SimSnapshot:
    """Everything ``store`` holds now (read directly, not intercepted)."""
    runs = await _all_runs(store)
    events, steps, hooks, waits = {}, {}, {}, {}
    for run in runs:
        events[run.run_id] = tuple(await RunHandle(run_id=run.run_id, world=store).events())
        steps[run.run_id] = await store.steps.list(run.run_id)
        hooks[run.run_id] = await store.hooks.list(run.run_id)
        waits[run.run_id] = await store.waits.list(run.run_id)
    return SimSnapshot(
        now=now,
        runs=tuple(runs),
        events=events,
        steps=steps,
        hooks=hooks,
        waits=waits,
        pending=pending,
        rejections=rejections,
    )


async def find_stalls(
    store: World, *, pending: tuple[Message, ...], held: tuple[str, ...]
) -> StallReport:
    """The unfinished runs of ``store`` and what each waits for."""
    stalls = []
    for run in await _all_runs(store):
        if run.status.terminal:
            continue
        waiting = [
            f"hook {h.hook_id} token {h.token!r} never resumed"
            for h in await store.hooks.list(run.run_id)
            if h.status.value == "active"
        ]
        waiting += [
            f"wait {w.wait_id} due {w.resume_at.isoformat()} never completed"
            for w in await store.waits.list(run.run_id)
            if w.status.value == "waiting"
        ]
        waiting += [
            f"step {s.step_id} {s.status.value}: no delivery will finish it"
            for s in await store.steps.list(run.run_id)
            if not s.status.terminal
        ]
        waiting += [
            f"message {m.message_id} never deliverable (leased, lease never expires)"
            for m in pending
            if m.run_id == run.run_id
        ]
        waiting += [h for h in held if run.run_id in h]
        if not waiting:
            waiting = ["nothing queued: no delivery of the run is pending"]
        stalls.append(
            RunStall(run_id=run.run_id, status=run.status.value, waiting_for=tuple(waiting))
        )
    return StallReport(runs=tuple(stalls), held=held)


async def _all_runs(store: World) -> list[Any]:
    runs: list[Any] = []
    cursor = None
    while True:
        page = await store.runs.list(limit=1000, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.cursor
        if cursor is None:
            break
    runs.sort(key=lambda r: (r.created_at, r.run_id))
    return runs
