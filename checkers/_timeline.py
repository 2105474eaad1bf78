"""A timeline: what happened, lane by lane, in order, and where it went wrong.

The neutral model the HTML page (``_timeline_html.py``) draws, built either from
one run's event log (:func:`timeline_from_log`: a lane per step, hook and wait)
or from a simulation (``_timeline_sim.py``: a lane per writer, one mark per
World call).  The model holds plain strings and numbers only, already clipped,
so any renderer can show it as it is; the renderer escapes them.

The axis is the order things happened in (log positions, or World calls), each
mark labelled with its time: in virtual time most of a simulation happens at
``+0s`` and a durable sleep jumps days, so a proportional axis would show
nothing.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from durasim.runtime.lowlevel import RunPayloads, decode_payload
from durasim.runtime.serialization import format_error
from durasim.worlds import RUN_TERMINAL_TYPES, DurasimError, Event, EventType

from ._report import Report

__all__ = [
    "MAX_DETAIL",
    "MAX_MARKS",
    "Timeline",
    "TimelineLane",
    "TimelineMark",
    "TimelineSpan",
    "TimelineVerdict",
    "bounded",
    "clip",
    "describe_event",
    "positions_named",
    "timeline_from_log",
]

#: Marks kept in one timeline: past it, the middle is left out (the first and last
#: halves stay, and every failure mark), so a page stays a few megabytes at most.
MAX_MARKS = 20_000
#: Characters kept of one mark's detail (a payload, an error, a traceback).
MAX_DETAIL = 2_000


@attrs.frozen(kw_only=True)
class TimelineLane:
    """One row of the timeline.

    Attributes:
        key: the lane's identity (a correlation id, a writer label).
        label: how the page names it.
        kind: ``run``, ``step``, ``hook``, ``wait``, ``orchestrator``, ``external``, ``sim``.
    """

    key: str
    label: str
    kind: str


@attrs.frozen(kw_only=True)
class TimelineMark:
    """One thing that happened: an event committed, a World call, a fault.

    Attributes:
        index: its place on the axis (0, 1, 2 ... in order).
        at: seconds since the timeline's start.
        lane: the key of its lane.
        kind: ``event``, ``call``, ``reject``, ``fault``, ``delivery``, ``hold``,
            ``stale`` or ``note``.
        label: a short name (``step_completed``, ``events.create``).
        detail: the long text (payload, error, traceback), clipped.
        seq: the log position it committed or names, if any.
        status: ``ok``, ``failed``, ``retry`` or ``""``.
        failure: the mark is where the failure shows.
    """

    index: int
    at: float
    lane: str
    kind: str
    label: str
    detail: str = ""
    seq: int | None = None
    status: str = ""
    failure: bool = False


@attrs.frozen(kw_only=True)
class TimelineSpan:
    """An entity's life on its lane: a step from created to its end, a wait, a hook.

    Attributes:
        lane: the key of its lane.
        start: the index of its first mark; ``end`` of its last (inclusive).
        status: ``completed``, ``failed``, ``running``, ``waiting``, ``active``, ``disposed``.
        label: the text on the bar.
    """

    lane: str
    start: int
    end: int
    status: str
    label: str = ""


@attrs.frozen(kw_only=True)
class TimelineVerdict:
    """A check that failed: an invariant, a replay divergence, a property.

    Attributes:
        kind: ``invariants``, ``replay``, ``property``, ``run failed`` ...
        detail: its text, as the checker wrote it.
        seqs: the log positions it names (``#12``): their marks are highlighted.
    """

    kind: str
    detail: str
    seqs: tuple[int, ...] = ()


@attrs.frozen(kw_only=True)
class Timeline:
    """Everything one page shows.

    Attributes:
        title: the page's heading.
        summary: ``(name, value)`` pairs shown under it (workflow, status, seed ...).
        lanes: every lane, in the order the page lists them.
        marks: every mark, ``marks[i].index == i``.
        spans: the entities' lives.
        verdicts: what failed (empty: nothing did).
        left_out: marks left out of the middle (see :data:`MAX_MARKS`).
        started: the wall or virtual instant time 0 stands for, if known.
    """

    title: str
    summary: tuple[tuple[str, str], ...] = ()
    lanes: tuple[TimelineLane, ...] = ()
    marks: tuple[TimelineMark, ...] = ()
    spans: tuple[TimelineSpan, ...] = ()
    verdicts: tuple[TimelineVerdict, ...] = ()
    left_out: int = 0
    started: datetime | None = None

    @property
    def failures(self) -> tuple[TimelineMark, ...]:
        """The highlighted marks."""
        return tuple(m for m in self.marks if m.failure)


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """``text``, cut to ``limit`` characters with a note of how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


_POSITION = re.compile(r"#(\d+)\b")


def positions_named(text: str) -> tuple[int, ...]:
    """The log positions a checker's message names (``#12``), in order, once each."""
    return tuple(dict.fromkeys(int(n) for n in _POSITION.findall(text)))


def bounded(
    marks: list[TimelineMark], spans: Sequence[TimelineSpan] = (), *, limit: int = MAX_MARKS
) -> tuple[list[TimelineMark], list[TimelineSpan], int]:
    """The first and last ``limit // 2`` marks and every failure mark between them,
    reindexed; the spans moved onto the kept marks; how many marks were left out."""
    if len(marks) <= limit:
        return marks, list(spans), 0
    half = limit // 2
    kept = marks[:half] + [m for m in marks[half:-half] if m.failure] + marks[-half:]
    old = [m.index for m in kept]
    moved = []
    for span in spans:
        start = bisect.bisect_left(old, span.start)  # the first kept mark at or after it
        end = bisect.bisect_right(old, span.end) - 1  # the last kept mark at or before it
        if start <= end:
            moved.append(attrs.evolve(span, start=start, end=end))
    reindexed = [attrs.evolve(m, index=i) for i, m in enumerate(kept)]
    return reindexed, moved, len(marks) - len(kept)


# -- from a run's event log -----------------------------------------------------------

_LANE_KINDS = {"step": "step", "hook": "hook", "wait": "wait"}
_ENDS = {
    EventType.STEP_COMPLETED: "completed",
    EventType.STEP_FAILED: "failed",
    EventType.HOOK_DISPOSED: "disposed",
    EventType.WAIT_COMPLETED: "completed",
}
_OPEN = {"step": "running", "hook": "active", "wait": "waiting"}
_FAILED = {EventType.STEP_FAILED, EventType.RUN_FAILED, EventType.HOOK_CONFLICT}
_RETRY = {EventType.STEP_RETRYING}


def timeline_from_log(
    events: Sequence[Event],
    *,
    title: str | None = None,
    summary: Sequence[tuple[str, str]] = (),
    report: Report | None = None,
) -> Timeline:
    """The timeline of one run's log: a lane for the run and for each step, hook and wait.

    Args:
        events: the run's log, in order.
        title: the heading (default: ``run <id>``).
        summary: extra ``(name, value)`` pairs for the page's head.
        report: a check of this log (``check_log``): its violations become verdicts
            and the positions they name are highlighted.

    A failed run's ``run_failed`` and the last ``step_failed`` before it are its
    failure marks.
    """
    run_id = events[0].run_id if events else "?"
    payloads = RunPayloads.from_log(events)
    lanes: dict[str, TimelineLane] = {"": TimelineLane(key="", label=f"run {run_id}", kind="run")}
    opened: dict[str, int] = {}
    spans: list[TimelineSpan] = []
    marks: list[TimelineMark] = []
    start = events[0].created_at if events else None
    for index, event in enumerate(events):
        key = event.correlation_id or ""
        if key and key not in lanes:
            kind = _lane_kind(event)
            lanes[key] = TimelineLane(key=key, label=f"{kind} {key.rsplit('//', 1)[-1]}", kind=kind)
        if key and key not in opened:
            opened[key] = index
        status = "failed" if event.type in _FAILED else "retry" if event.type in _RETRY else "ok"
        marks.append(
            TimelineMark(
                index=index,
                at=(event.created_at - start).total_seconds() if start else 0.0,
                lane=key,
                kind="event",
                label=event.type.value,
                detail=clip(describe_event(event, payloads, start)),
                seq=event.seq,
                status=status,
            )
        )
        end = _ENDS.get(event.type)
        if end is not None and key in opened:
            spans.append(
                TimelineSpan(lane=key, start=opened.pop(key), end=index, status=end, label=end)
            )
    last = len(events) - 1
    for key, begun in opened.items():
        status = _OPEN.get(lanes[key].kind, "running")
        spans.append(TimelineSpan(lane=key, start=begun, end=last, status=status, label=status))
    if events:
        spans.append(TimelineSpan(lane="", start=0, end=last, status=_run_status(events), label=""))
    verdicts = _verdicts(events, payloads, report)
    wanted = {s for v in verdicts for s in v.seqs}
    marks = [attrs.evolve(m, failure=True) if m.seq in wanted else m for m in marks]
    marks, spans, left_out = bounded(marks, spans)
    head = [("run", run_id), ("status", _run_status(events)), ("events", str(len(events)))]
    workflow = events[0].data.get("workflow_name") if events else None
    if workflow:
        head.insert(1, ("workflow", str(workflow)))
    if start is not None:
        head.append(("started", start.isoformat()))
    return Timeline(
        title=title or f"run {run_id}",
        summary=(*head, *summary),
        lanes=tuple(lanes.values()),
        marks=tuple(marks),
        spans=tuple(spans),
        verdicts=tuple(verdicts),
        left_out=left_out,
        started=start,
    )


def _lane_kind(event: Event) -> str:
    prefix = event.type.value.split("_", 1)[0]
    return _LANE_KINDS.get(prefix, "step")


def _run_status(events: Sequence[Event]) -> str:
    status = "pending"
    for event in events:
        if event.type is EventType.RUN_STARTED:
            status = "running"
        elif event.type in RUN_TERMINAL_TYPES:
            status = event.type.value.removeprefix("run_")
    return status


def _verdicts(
    events: Sequence[Event], payloads: RunPayloads, report: Report | None
) -> list[TimelineVerdict]:
    verdicts: list[TimelineVerdict] = []
    ends = [i for i, e in enumerate(events) if e.type is EventType.RUN_FAILED]
    if ends:
        failed = events[ends[-1]]
        cause = next(
            (e for e in reversed(events[: ends[-1]]) if e.type is EventType.STEP_FAILED), None
        )
        seqs: tuple[int, ...] = (failed.seq,) if cause is None else (cause.seq, failed.seq)
        code = failed.data.get("error_code")
        where = f" in step {cause.correlation_id} (#{cause.seq})" if cause is not None else ""
        error = _value(failed.data.get("error"), payloads)
        kind = f"run failed ({code})" if code else "run failed"
        verdicts.append(
            TimelineVerdict(kind=kind, detail=clip(f"the run failed{where}: {error}"), seqs=seqs)
        )
    if report is not None:
        for violation in report.violations:
            seqs = positions_named(violation.message)
            if violation.seq is not None and violation.seq not in seqs:
                seqs = (violation.seq, *seqs)
            verdicts.append(
                TimelineVerdict(kind="invariants", detail=violation.render(), seqs=seqs)
            )
    return verdicts


def describe_event(event: Event, payloads: RunPayloads, start: datetime | None) -> str:
    """An event as lines of text: position, type, entity, time and each field decoded."""
    head = f"#{event.seq} {event.type.value}" + (" (in band)" if event.in_band else "")
    fields = [
        f"{name}={_value(value, payloads).partition(chr(10))[0]}"
        for name, value in event.data.items()
        if value is not None and not isinstance(value, datetime)
    ]
    lines = [clip(" ".join([head, *fields]), 160)]
    if event.correlation_id:
        lines.append(f"entity: {event.correlation_id}")
    lines.append(f"at: {event.created_at.isoformat()}")
    for name, value in event.data.items():
        if value is None:
            continue
        if isinstance(value, datetime) and start is not None:
            shown = f"{value.isoformat()} (+{(value - start).total_seconds():g}s)"
        else:
            shown = _value(value, payloads)
        lines.append(f"{name}: {shown}")
    return "\n".join(lines)


def _value(value: Any, payloads: RunPayloads) -> str:
    """A field as text: a payload decoded (an error with its type), else its repr."""
    if isinstance(value, bytes | bytearray):
        try:
            decoded = decode_payload(bytes(value), payloads)
        except (DurasimError, ValueError, TypeError):
            return f"<{len(value)} bytes>"
        if isinstance(decoded, BaseException):  # as Python prints it, stored traceback too
            return format_error(decoded)
        return repr(decoded)
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value) if not isinstance(value, str) else value
