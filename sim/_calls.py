"""What the World calls did: the points passed, the events committed, the calls refused.

The scheduler (``_scheduler.py``) decides who goes next at each interception
point; this module keeps the record of it: every point passed (built lazily
into :class:`~durasim.sim.Point` s, as most are never read), each committed
event written to the trace under the writer that made it, and each call the
World refused (:class:`Rejection`).  It also names a call's writers: the task's
actor, and the step whose outcome or body the call carries.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import attrs

from durasim.runtime.lowlevel import STEP_METADATA
from durasim.worlds import BatchResult, Event, EventRequest, EventResult, WorldError
from durasim.worlds._build import builder

from ._faults import Faults
from ._points import STEP, Point, PointEvent, Writer, step_short_name
from ._trace import Trace
from ._world import Actor

__all__ = [
    "COMMIT",
    "COMMITS",
    "WRITES",
    "Asked",
    "CallLog",
    "Rejection",
    "asked_of",
    "commit_labels",
    "committed_events",
    "committed_types",
    "describe_asked",
    "describe_call",
    "describe_read",
    "describe_requests",
    "describe_write",
    "make_point",
    "point_events",
    "writers_of",
]

_OUTCOMES = frozenset({"step_completed", "step_failed", "step_retrying"})
#: The World calls that append to a log.
WRITES = frozenset({"events.create", "events.create_batch"})
#: What a call returns when it may have committed events (see CallLog.committed).
COMMITS = (EventResult, BatchResult)


@attrs.frozen(kw_only=True)
class Rejection:
    """A World call that raised (the World refused it, or a fault was injected)."""

    seq: int
    writer: str
    call: str
    types: tuple[str, ...]
    error: str
    message: str


class CallLog:
    """The record of every call: points passed, events committed (traced), calls refused.

    Args:
        trace: where committed events and refusals are written.
        faults: told of each committed event (a stale read may be armed for it).
    """

    def __init__(self, trace: Trace, faults: Faults) -> None:
        self.trace = trace
        self.faults = faults
        #: Points passed, in order; one passed with nobody looking is kept as its
        #: fields (a tuple) and built into a Point when the history is read.
        self.history: list[Point | tuple[Any, ...]] = []
        self._built = 0  # history[:_built] are Points
        self.rejections: list[Rejection] = []
        trace.labels = commit_labels  # names the writers of its COMMIT rows

    def points(self) -> list[Point]:
        """Every point passed, in order."""
        history = self.history
        for index in range(self._built, len(history)):
            fields = history[index]
            if isinstance(fields, tuple):
                history[index] = make_point(fields)
        self._built = len(history)
        return history  # type: ignore[return-value]  # all built above

    def committed(
        self, writers: tuple[Writer, ...], result: Any, points: int
    ) -> tuple[str | None, tuple[PointEvent, ...]]:
        """Trace the events ``result`` committed: their run and ``(type, correlation
        id, position)`` each (``(None, ())`` when it committed none).

        ``points``: how many interception points had been passed (each line records it).
        """
        run_id, events = self.trace_events(writers, result, points)
        return run_id, point_events(events) if events else ()

    def trace_events(
        self, writers: tuple[Writer, ...], result: Any, points: int
    ) -> tuple[str | None, tuple[Event, ...]]:
        """:meth:`committed` with the events themselves for their point events (``()``
        when none): :func:`point_events` makes those (a point holding the events makes
        them when it is built: see :func:`make_point`)."""
        events = committed_events(result)
        if not events:
            return None, ()
        self._trace_rows(writers, events, STEP_METADATA.get() is not None, points)
        return events[0].run_id, events

    def trace_write(self, asked: Asked, result: Any, points: int) -> tuple[Event, ...]:
        """Trace the events a write committed (``()``: none), its writers named when
        the trace is read (see :func:`commit_labels`); ``asked``: the write as
        :func:`asked_of` (and the caller's writer and step metadata) give it.

        The rows are :meth:`trace_events`'s (same lines, same places); a stale read
        armed is armed now, by that very path.
        """
        events = committed_events(result)
        if not events:
            return ()
        if self.faults.withhold_armed:
            _, writers, _ = describe_asked(*asked)
            self._trace_rows(writers, events, asked[3] is not None, points)
            return events
        clock = self.trace._clock  # Trace.event's time, inline
        at = (clock._micros - clock._epoch) / 1_000_000
        self.trace._rows.append((COMMIT, at, "", events, asked, points))
        return events

    def _trace_rows(
        self, writers: tuple[Writer, ...], events: tuple[Event, ...], in_step: bool, points: int
    ) -> None:
        """A row per committed event, under its writer (see :func:`_event_writer`)."""
        faults = self.faults
        # Trace.event, inline (the clock does not move while the loops below run).
        rows = self.trace._rows
        clock = self.trace._clock
        at = (clock._micros - clock._epoch) / 1_000_000
        if len(writers) == 1 and not faults.withhold_armed:
            # One writer, no stale read armed: every event is that writer's.
            label = writers[0].label
            for event in events:
                rows.append(("event", at, "", event, label, points))
            return
        default = writers[0] if in_step else writers[-1]
        for event in events:
            writer = _event_writer(writers, default, event)
            rows.append(("event", at, "", event, writer.label, points))
            if faults.withhold_armed:
                faults.arm_withhold(event)

    def reject(
        self, seq: int, writer: Writer, call: str, types: tuple[str, ...], exc: WorldError
    ) -> None:
        """Record (and trace) a call that raised."""
        rejection = Rejection(
            seq=seq,
            writer=writer.label,
            call=call,
            types=types,
            error=type(exc).__name__,
            message=str(exc),
        )
        self.rejections.append(rejection)
        what = f" ({', '.join(types)})" if types else ""
        self.trace.add("reject", f"{writer.label} {call}{what} {rejection.error}: {exc}")


_build_point = builder(Point)


#: committed(): the writer of a step's outcome among a call's writers (None: the default),
#: by (correlation id, the last writer's run and delivery): (those writers, the writer).
_OUTCOME_WRITER: dict[tuple[str, str | None, int], tuple[tuple[Writer, ...], Writer | None]] = {}


#: The kind of a trace row holding a write's committed events, its writers named when
#: the trace is read (see CallLog.trace_write, commit_labels).
COMMIT = "commit"


def committed_events(result: Any) -> tuple[Event, ...]:
    """The events a World call's result says it committed (``()``: none)."""
    if isinstance(result, BatchResult):
        return result.events
    if isinstance(result, EventResult) and result.allocated and result.event is not None:
        return (result.event,)
    return ()


def _event_writer(writers: tuple[Writer, ...], default: Writer, event: Event) -> Writer:
    """The writer a committed event is traced under: the step whose outcome it is
    (among several writers), else ``default`` (the step body's, else the task's)."""
    cid = event.correlation_id
    if len(writers) == 1 or not cid or event.type._value_ not in _OUTCOMES:
        return default
    # Keyed by plain values (no Writer hashed; no id(), which the runtime's audit hook
    # sees): the entry keeps the writers, and is used only for that very tuple.
    key = (cid, writers[-1].run_id, writers[-1].delivery)
    seen = _OUTCOME_WRITER.get(key)
    if seen is not None and seen[0] is writers:
        step = seen[1]
    else:
        name = step_short_name(cid)
        step = next((w for w in writers if w.kind == STEP and w.name == name), None)
        if len(_OUTCOME_WRITER) >= 4096:
            _OUTCOME_WRITER.clear()
        _OUTCOME_WRITER[key] = (writers, step)
    return default if step is None else step


def commit_labels(asked: Any, events: Sequence[Event]) -> list[str]:
    """The writers' labels of a write's committed events (a :data:`COMMIT` row's), as
    :meth:`CallLog.trace_events` names them (``asked``: an :data:`Asked`)."""
    _, writers, _ = describe_asked(*asked)
    default = writers[0] if asked[3] is not None else writers[-1]
    return [_event_writer(writers, default, event).label for event in events]


def make_point(fields: tuple[Any, ...]) -> Point:
    """A Point from (ordinal, at, seq, call, phase, writers, run_id, types, correlation ids,
    token, events[, failed, error]).

    With ``None`` for the writers, the run id's place holds the write (an
    :data:`Asked`: see :func:`describe_asked`) and the events are ``None`` (the
    request events) or the committed Events.  With ``None`` for the correlation
    ids, the types' place holds the write's request events (``(type, correlation
    id, 0)`` each): the point's types are theirs then those only ``events`` has,
    its correlation ids their non-empty ones.
    """
    ordinal, at, seq, call, phase, writers, run_id, types, cids, token, events, *failure = fields
    failed, error = failure or (False, None)
    if writers is None:
        # A write as the scheduler records it (see Scheduler.call): no writers, the
        # write (Asked) in the run id's place, and for events None (its request
        # events) or the Events it committed.
        run_id, writers, asked = describe_asked(*run_id)
        if events is None:
            events = asked
        else:
            run_id = run_id or events[0].run_id
            events = point_events(events)
        types, cids = committed_types(asked, events), _cids_of(asked)
    elif events and type(events[0]) is not tuple:
        events = point_events(events)  # a write's committed events (see CallLog.trace_events)
    if cids is None:
        # A write's point keeps its request events in place of the types (see
        # Scheduler.call): the types and correlation ids follow from them.
        asked = types
        types, cids = committed_types(asked, events), _cids_of(asked)
    return _build_point(
        ordinal=ordinal,
        seq=seq,
        call=call,
        phase=phase,
        writer=writers[0],
        writers=writers,
        run_id=run_id,
        types=types,
        correlation_ids=cids,
        token=token,
        failed=failed,
        error=error,
        events=events,
        at=at,
    )


def point_events(events: tuple[Event, ...]) -> tuple[PointEvent, ...]:
    """Committed events as points see them: ``(type, correlation id, position)`` each."""
    return tuple([(e.type._value_, e.correlation_id, e.seq) for e in events])


def describe_read(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, str | None]:
    """A call's run id and hook token, for a call that carries no event request."""
    run_id = kwargs.get("run_id")
    if run_id is None and args and isinstance(args[0], str) and not call.startswith("queue."):
        run_id = args[0]
    if call == "hooks.get_by_token":
        return None, run_id
    return run_id, None


def describe_call(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, list[EventRequest], str | None]:
    """A call's run id, the event requests it carries and the hook token it names."""
    run_id = kwargs.get("run_id")
    if run_id is None and args and isinstance(args[0], str) and not call.startswith("queue."):
        run_id = args[0]
    requests: list[EventRequest] = []
    token = None
    if call == "events.create":
        requests = [args[1] if len(args) > 1 else kwargs["request"]]
    elif call == "events.create_batch":
        requests = list(args[1] if len(args) > 1 else kwargs["requests"])
    elif call == "hooks.get_by_token":
        token, run_id = run_id, None
    return run_id, requests, token


@functools.lru_cache(maxsize=4096)
def _step_writer(run_id: str | None, step: str, delivery: int) -> Writer:
    """The writer of a step body (``step``: its name or correlation id); shared, immutable."""
    return Writer(kind=STEP, run_id=run_id, name=step_short_name(step), delivery=delivery)


def writers_of(actor: Actor, requests: list[EventRequest]) -> tuple[Writer, ...]:
    """Who makes a call: the step body running it and the steps whose outcomes it carries,
    then the actor's own writer."""
    base = actor.writer
    meta = STEP_METADATA.get()
    if meta is None and not any(r.type in _OUTCOMES for r in requests):
        return (base,)
    found: list[Writer] = []
    if meta is not None:
        found.append(_step_writer(meta.run_id, meta.step_name, base.delivery))
    for request in requests:
        if request.type in _OUTCOMES and request.correlation_id:
            found.append(_step_writer(base.run_id, request.correlation_id, base.delivery))
    if not found or (found[0] is not base and found[0] != base):
        found.append(base)
    return tuple(dict.fromkeys(found))


_CREATE, _CREATE_BATCH = "events.create", "events.create_batch"


def describe_write(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any], base: Writer, meta: Any
) -> tuple[
    str | None,
    tuple[Writer, ...],
    tuple[tuple[str, str | None, int], ...],
    tuple[str, ...],
    tuple[str, ...],
]:
    """A write's (run id, writers, events, types, correlation ids), in one pass.

    What :func:`describe_call` and :func:`writers_of` give (``base``: the actor's
    writer; ``meta``: the step metadata of the task, if any), with the point's
    events ``(type, correlation id, 0)``, their types and their non-empty
    correlation ids.  (The scheduler calls :func:`describe_requests`, and makes
    the types and correlation ids only when a point is built: :func:`make_point`.)
    """
    run_id, writers, events = describe_requests(call, args, kwargs, base, meta)
    return run_id, writers, events, _types_of(events), _cids_of(events)


def describe_requests(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any], base: Writer, meta: Any
) -> tuple[str | None, tuple[Writer, ...], tuple[tuple[str, str | None, int], ...]]:
    """A write's (run id, writers, events): :func:`describe_write` without the types
    and correlation ids (both follow from the events: see :func:`make_point`)."""
    run_id, requests = asked_of(call, args, kwargs)
    return describe_asked(run_id, requests, base, meta)


#: A write as the scheduler records it: (run id, requests, the caller's writer, the
#: step metadata of its task): see :func:`asked_of`, :func:`describe_asked`.
Asked = tuple[str | None, tuple[EventRequest, ...], Writer, Any]


def asked_of(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, tuple[EventRequest, ...]]:
    """A write's run id and requests (a tuple of them: the caller's list may change)."""
    run_id = kwargs.get("run_id")
    if run_id is None and args and isinstance(args[0], str):
        run_id = args[0]
    if call == _CREATE:
        return run_id, (args[1] if len(args) > 1 else kwargs["request"],)
    return run_id, tuple(args[1] if len(args) > 1 else kwargs["requests"])


def describe_asked(
    run_id: str | None, requests: tuple[EventRequest, ...], base: Writer, meta: Any
) -> tuple[str | None, tuple[Writer, ...], tuple[tuple[str, str | None, int], ...]]:
    """:func:`describe_requests` of a write's run id and requests (see :func:`asked_of`)."""
    events = []
    outcomes: list[str] | None = None
    for request in requests:
        type_, cid = request.type._value_, request.correlation_id
        events.append((type_, cid, 0))
        if cid and type_ in _OUTCOMES:
            if outcomes is None:
                outcomes = [cid]
            else:
                outcomes.append(cid)
    writers: tuple[Writer, ...] | None
    if meta is not None:
        writers = _writers(base, meta, outcomes or ())
    elif outcomes is None:
        writers = (base,)
    elif len(outcomes) == 1:
        # The orchestrator committing one step's outcome (with the next step's start).
        # Keyed by the writer's fields (plain values: no Writer hashed or compared).
        key = (base.kind, base.run_id, base.name, base.delivery, outcomes[0])
        writers = _OUTCOME_WRITERS.get(key)
        if writers is None:
            writers = _writers(base, None, outcomes)
            if len(_OUTCOME_WRITERS) >= 4096:
                _OUTCOME_WRITERS.clear()
            _OUTCOME_WRITERS[key] = writers
    else:
        writers = _writers(base, None, outcomes)
    return run_id, writers, tuple(events)


def _types_of(events: tuple[PointEvent, ...]) -> tuple[str, ...]:
    return tuple([type_ for type_, _, _ in events])


def _cids_of(events: tuple[PointEvent, ...]) -> tuple[str, ...]:
    return tuple([cid for _, cid, _ in events if cid])


def committed_types(
    asked: tuple[PointEvent, ...], events: tuple[PointEvent, ...]
) -> tuple[str, ...]:
    """A write's point types: its requests' (``asked``), then those only ``events`` has
    (what it committed, after the commit)."""
    types = _types_of(asked)
    if events is not asked:
        types += tuple([t for t, _, _ in events if t not in types])
    return types


#: describe_write's writers of one outcome committed by a task outside a step body.
_OUTCOME_WRITERS: dict[tuple[str, str | None, str, int, str], tuple[Writer, ...]] = {}


def _writers(base: Writer, meta: Any, outcomes: list[str] | tuple[str, ...]) -> tuple[Writer, ...]:
    """:func:`writers_of` from the outcomes' correlation ids (see describe_write)."""
    found: list[Writer] = []
    if meta is not None:
        found.append(_step_writer(meta.run_id, meta.step_name, base.delivery))
    for cid in outcomes:
        found.append(_step_writer(base.run_id, cid, base.delivery))
    if not found or (found[0] is not base and found[0] != base):
        found.append(base)
    return tuple(dict.fromkeys(found))
