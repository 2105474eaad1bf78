"""The timeline of a simulation: every writer's World calls, in order, on its own lane.

One mark per World call (its ``before`` and ``after`` points are one call), on
the lane of the writer that made it (``orch d1``, ``step:charge d1``); the
events a call committed, with their payloads decoded, are its detail.  Events
committed outside interception (the script's own writes) and the trace's other
lines (deliveries, faults, holds, stale reads, notes) are marks too, on their
writer's lane or the ``simulation`` lane.

Calls and the trace's lines are merged in the order they happened (each line
records how many interception points had been passed when it was written).  A failed verdict is
highlighted where it points: the positions it names (``#12``), the trace line
where a determinism replay parted, else the run's last event (``property``,
``replay``) or the last thing that happened (``error``, ``stuck``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from durasim.runtime.lowlevel import RunPayloads
from durasim.sim import Point, Sim, TraceEntry
from durasim.worlds import Event

from ._timeline import (
    Timeline,
    TimelineLane,
    TimelineMark,
    TimelineVerdict,
    bounded,
    clip,
    describe_event,
    positions_named,
)

__all__ = ["timeline_from_sim"]

SIM_LANE = "simulation"
_PARTED = re.compile(r"traces part at line (\d+)")


def timeline_from_sim(
    sim: Sim,
    *,
    failures: Sequence[tuple[str, str]] = (),
    title: str = "simulation",
    summary: Sequence[tuple[str, str]] = (),
) -> Timeline:
    """The timeline of ``sim`` (run to rest), with ``failures`` as its verdicts.

    Args:
        sim: the simulation (read only: its points and trace).
        failures: ``(kind, detail)`` per failed verdict (an ``ExampleReport``'s).
        title: the page's heading.
        summary: ``(name, value)`` pairs for the page's head.
    """
    entries = sim.trace_entries
    calls = _calls(sim.points)
    logs: dict[str, list[Event]] = {}
    for entry in entries:
        if entry.event is not None:
            logs.setdefault(entry.event.run_id, []).append(entry.event)
    payloads = {run_id: RunPayloads.from_log(events) for run_id, events in logs.items()}
    multi = len(logs) > 1
    by_event = {
        (p.run_id, seq): ordinal for ordinal, p in calls.items() for _, _, seq in p.events if seq
    }
    builder = _Builder(multi=multi)
    pending = iter(sorted(calls))
    next_call = next(pending, None)
    line_marks: dict[int, int] = {}
    event_marks: dict[tuple[str, int], int] = {}
    for number, entry in enumerate(entries, 1):
        while next_call is not None and next_call <= entry.points:
            builder.call(next_call, calls[next_call])
            next_call = next(pending, None)
        event = entry.event
        ordinal = by_event.get((event.run_id, event.seq)) if event is not None else None
        found = builder.mark_of_call.get(ordinal) if ordinal is not None else None
        if found is not None and event is not None:
            builder.commit(found, event, payloads)
        else:
            found = builder.entry(entry, payloads)
        line_marks[number] = found
        if event is not None:
            event_marks[(event.run_id, event.seq)] = found
    while next_call is not None:
        builder.call(next_call, calls[next_call])
        next_call = next(pending, None)
    verdicts = [
        TimelineVerdict(kind=kind, detail=clip(detail, 20_000), seqs=positions_named(detail))
        for kind, detail in failures
    ]
    marks = builder.marks
    failed = _failure_marks(verdicts, marks, event_marks, line_marks, logs)
    marks = [attrs.evolve(m, failure=True) if m.index in failed else m for m in marks]
    kept, _, left_out = bounded(marks)
    return Timeline(
        title=title,
        summary=tuple(summary),
        lanes=tuple(builder.lanes.values()),
        marks=tuple(kept),
        spans=(),
        verdicts=tuple(verdicts),
        left_out=left_out,
    )


def _calls(points: Sequence[Point]) -> dict[int, Point]:
    """One point per call, by its first point's ordinal: the ``after`` one when it was passed
    (it knows what was committed), else the ``before`` one."""
    first: dict[int, int] = {}
    chosen: dict[int, Point] = {}
    for point in points:
        ordinal = first.setdefault(point.seq, point.ordinal)
        if point.phase == "after" or ordinal not in chosen:
            chosen[ordinal] = point
    return chosen


class _Builder:
    def __init__(self, *, multi: bool) -> None:
        self.multi = multi
        self.lanes: dict[str, TimelineLane] = {
            SIM_LANE: TimelineLane(key=SIM_LANE, label="simulation", kind="sim")
        }
        self.marks: list[TimelineMark] = []
        self.mark_of_call: dict[int, int] = {}

    def lane(self, label: str, run_id: str | None, kind: str) -> str:
        key = f"{run_id} {label}" if self.multi and run_id else label
        if key not in self.lanes:
            self.lanes[key] = TimelineLane(key=key, label=key, kind=kind)
        return key

    def add(self, **fields: object) -> int:
        index = len(self.marks)
        self.marks.append(TimelineMark(index=index, **fields))  # type: ignore[arg-type]
        return index

    def call(self, key: int, point: Point) -> None:
        writer = point.writer
        lane = self.lane(writer.label, writer.run_id or point.run_id, writer.kind)
        what = f" ({', '.join(point.types)})" if point.types else ""
        lines = [f"{point.call}{what} by {writer.label} [call {point.seq}]"]
        if point.run_id:
            lines.append(f"run: {point.run_id}")
        if len(point.writers) > 1:
            lines.append("for: " + ", ".join(w.label for w in point.writers))
        if point.token:
            lines.append(f"token: {point.token}")
        if point.phase == "before":
            lines.append("never returned (crashed, or held when the simulation ended)")
        if point.failed:
            lines.append(f"refused: {point.error}")
        committed = [seq for _, _, seq in point.events if seq]
        self.mark_of_call[key] = self.add(
            at=point.at,
            lane=lane,
            kind="reject" if point.failed else "call",
            label=point.call + (" " + ",".join(point.types) if point.types else ""),
            detail="\n".join(lines),
            seq=committed[0] if committed else None,
            status="failed" if point.failed or point.phase == "before" else "ok",
        )

    def commit(self, index: int, event: Event, payloads: dict[str, RunPayloads]) -> None:
        mark = self.marks[index]
        text = describe_event(event, payloads[event.run_id], None)
        self.marks[index] = attrs.evolve(mark, detail=clip(f"{mark.detail}\n--\n{text}"))

    def entry(self, entry: TraceEntry, payloads: dict[str, RunPayloads]) -> int:
        event = entry.event
        if event is None:
            return self.add(
                at=entry.at,
                lane=SIM_LANE,
                kind=entry.kind,
                label=entry.kind,
                detail=clip(entry.text),
                status="failed" if entry.kind in ("fault", "reject") else "",
            )
        run = event.run_id
        lane = self.lane(entry.writer or "external", run, "external")
        return self.add(
            at=entry.at,
            lane=lane,
            kind="event",
            label=event.type.value,
            detail=clip(describe_event(event, payloads[run], None)),
            seq=event.seq,
            status="failed" if event.type.value.endswith("failed") else "ok",
        )


def _failure_marks(
    verdicts: Sequence[TimelineVerdict],
    marks: Sequence[TimelineMark],
    event_marks: dict[tuple[str, int], int],
    line_marks: dict[int, int],
    logs: dict[str, list[Event]],
) -> set[int]:
    found: set[int] = set()
    for verdict in verdicts:
        runs = [r for r in logs if r in verdict.detail] or list(logs)
        hit = {event_marks[(r, s)] for r in runs for s in verdict.seqs if (r, s) in event_marks}
        parted = _PARTED.search(verdict.detail)
        if parted and int(parted.group(1)) in line_marks:
            hit.add(line_marks[int(parted.group(1))])
        if not hit and verdict.kind in ("property", "replay", "fresh-process", "authoring"):
            ends = [logs[r][-1] for r in runs if logs[r]]
            hit = {event_marks[(e.run_id, e.seq)] for e in ends if (e.run_id, e.seq) in event_marks}
        if not hit and marks:
            hit = {len(marks) - 1}
        found |= hit
    return found
