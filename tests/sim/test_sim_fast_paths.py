"""The interception hot path's one-pass forms give what the plain forms give.

``describe_write`` (one pass over a write's requests) against ``describe_call`` +
``writers_of`` and the point fields built from them; ``CallLog.committed``'s
point events against the events it traced; a parked task's lazily built Point
against ``make_point``.
"""

from __future__ import annotations

import types
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime.lowlevel import STEP_METADATA
from durasim.sim._calls import (
    _OUTCOMES,
    CallLog,
    asked_of,
    describe_call,
    describe_write,
    make_point,
    writers_of,
)
from durasim.sim._clock import SimClock
from durasim.sim._points import EXTERNAL, ORCHESTRATOR, STEP, Writer, step_short_name
from durasim.sim._scheduler import Parked, _caller
from durasim.sim._trace import Trace
from durasim.sim._world import Actor
from durasim.worlds import BatchResult, EventRequest, EventResult, EventType

_TYPES = [
    EventType.STEP_CREATED,
    EventType.STEP_STARTED,
    EventType.STEP_COMPLETED,
    EventType.STEP_FAILED,
    EventType.STEP_RETRYING,
    EventType.RUN_COMPLETED,
    EventType.WAIT_CREATED,
]
_CIDS = [None, "", "step//m//charge#1", "step//m//charge#2", "step//m//ship#1", "wait#1"]

requests = st.lists(
    st.builds(
        lambda t, c: EventRequest(type=t, correlation_id=c),
        st.sampled_from(_TYPES),
        st.sampled_from(_CIDS),
    ),
    min_size=0,
    max_size=4,
)
bases = st.builds(
    Writer,
    kind=st.sampled_from([ORCHESTRATOR, STEP, EXTERNAL]),
    run_id=st.sampled_from([None, "run-1", "run-2"]),
    name=st.sampled_from(["", "charge", "ship"]),
    delivery=st.integers(0, 3),
)
metas = st.one_of(
    st.none(),
    st.builds(
        lambda run, step: types.SimpleNamespace(run_id=run, step_name=step),
        st.sampled_from(["run-1", "run-2"]),
        st.sampled_from(["step//m//charge", "step//m//ship#3", "charge"]),
    ),
)


def _plain(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any], actor: Actor
) -> tuple[Any, ...]:
    run_id, reqs, _ = describe_call(call, args, kwargs)
    writers = writers_of(actor, reqs)
    events = tuple([(r.type._value_, r.correlation_id, 0) for r in reqs])
    types_ = tuple([e[0] for e in events])
    cids = tuple([e[1] for e in events if e[1]])
    return run_id, writers, events, types_, cids


def _write_call(
    reqs: list[EventRequest],
    run: str,
    *,
    batch: bool,
    keyword: bool,
    run_kw: bool,
    as_list: bool = False,
) -> tuple[str, tuple[Any, ...], dict[str, Any], Any]:
    """A write call's (name, args, kwargs, requests): one request or a batch (a tuple,
    or with ``as_list`` the caller's list), its run id and requests by position or by
    keyword."""
    payload: Any
    if not batch:
        reqs = reqs[:1] or [EventRequest(type=EventType.STEP_CREATED, correlation_id="c")]
        call, payload, name = "events.create", reqs[0], "request"
    else:
        call, payload = "events.create_batch", list(reqs) if as_list else tuple(reqs)
        name = "requests"
    if run_kw:
        return call, (), {"run_id": run, name: payload}, payload
    if keyword:
        return call, (run,), {name: payload}, payload
    return call, (run, payload), {}, payload


@settings(max_examples=400, deadline=None)
@given(
    reqs=requests,
    base=bases,
    meta=metas,
    batch=st.booleans(),
    keyword=st.booleans(),
    run_kw=st.booleans(),
)
def test_describe_write_is_describe_call_and_writers_of(
    *, reqs: list[EventRequest], base: Writer, meta: Any, batch: bool, keyword: bool, run_kw: bool
) -> None:
    call, args, kwargs, _ = _write_call(reqs, "run-1", batch=batch, keyword=keyword, run_kw=run_kw)
    actor = Actor(writer=base)
    token = STEP_METADATA.set(meta)
    try:
        expected = _plain(call, args, kwargs, actor)
        for _ in range(2):  # the second time from describe_write's cache of writers
            assert describe_write(call, args, kwargs, base, meta) == expected
    finally:
        STEP_METADATA.reset(token)


def test_a_parked_point_is_make_point_of_its_fields() -> None:
    writer = Writer(kind=ORCHESTRATOR, run_id="run-1", delivery=1)
    fields = (7, 1.5, 3, "events.create", "before", (writer,), "run-1", ("x",), ("c",), None, ())
    parked = Parked(fields, Actor(writer=writer))
    assert parked.ordinal == 7
    assert parked.writer is writer
    assert parked.future is None
    assert parked.point == make_point(fields)
    assert parked.point is parked.point  # built once


@settings(max_examples=300, deadline=None)
@given(
    writers=st.lists(bases, min_size=1, max_size=4).map(tuple),
    picks=st.lists(st.tuples(st.sampled_from(_TYPES), st.sampled_from(_CIDS)), max_size=4),
    meta=metas,
)
def test_committed_traces_each_event_under_the_plain_rules_writer(
    writers: tuple[Writer, ...], picks: list[tuple[EventType, str | None]], meta: Any
) -> None:
    events = tuple(
        types.SimpleNamespace(type=t, correlation_id=c, seq=n, run_id="run-1")
        for n, (t, c) in enumerate(picks, 1)
    )
    log = CallLog(Trace(SimClock()), types.SimpleNamespace(withhold_armed=[]))  # type: ignore[arg-type]
    token = STEP_METADATA.set(meta)
    try:
        for _ in range(2):  # the second time from committed's cache of writers
            before = len(log.trace._rows)
            run_id, done = log.committed(writers, BatchResult(events=events, run=None), 5)  # type: ignore[arg-type]
            default = writers[0] if meta is not None else writers[-1]
            expected = []
            for event in events:
                writer = default
                if len(writers) > 1 and event.type in _OUTCOMES and event.correlation_id:
                    name = step_short_name(event.correlation_id)
                    writer = next((w for w in writers if w.kind == STEP and w.name == name), writer)
                expected.append(("event", 0.0, "", event, writer.label, 5))
            assert log.trace._rows[before:] == expected
            assert done == tuple((e.type.value, e.correlation_id, e.seq) for e in events)
            assert run_id == ("run-1" if events else None)
    finally:
        STEP_METADATA.reset(token)


@settings(max_examples=400, deadline=None)
@given(
    reqs=requests,
    base=bases,
    meta=metas,
    batch=st.booleans(),
    keyword=st.booleans(),
    run_kw=st.booleans(),
    picks=st.lists(st.tuples(st.sampled_from(_TYPES), st.sampled_from(_CIDS)), max_size=4),
    run=st.sampled_from(["run-1", "run-2", ""]),
    outcome=st.sampled_from(["batch", "one", "none", "failed"]),
    armed=st.booleans(),
)
def test_a_write_recorded_as_asked_is_the_write_described(
    *,
    reqs: list[EventRequest],
    base: Writer,
    meta: Any,
    batch: bool,
    keyword: bool,
    run_kw: bool,
    picks: list[tuple[EventType, str | None]],
    run: str,
    outcome: str,
    armed: bool,
) -> None:
    # Scheduler.call records a write as asked (asked_of, the writer, the step metadata):
    # its points, its trace rows and a refusal's record are those of the write
    # described at once (describe_write), as the call recorded it before.
    call, args, kwargs, payload = _write_call(
        reqs, run, batch=batch, keyword=keyword, run_kw=run_kw, as_list=True
    )
    asked = (*asked_of(call, args, kwargs), base, meta)
    run_id, writers, events, _, _ = describe_write(call, args, kwargs, base, meta)
    if batch:
        payload.append(EventRequest(type=EventType.RUN_COMPLETED))  # the caller's list changes
    committed = tuple(
        types.SimpleNamespace(
            type=t, correlation_id=c, seq=n, run_id="run-9", data={"n": n}, in_band=True
        )
        for n, (t, c) in enumerate(picks, 1)
    )
    result: Any
    if outcome == "batch":
        result = BatchResult(events=committed, run=None)  # type: ignore[arg-type]
    elif outcome == "one":
        committed = committed[:1]
        result = EventResult(event=committed[0] if committed else None, run=None, allocated=1)  # type: ignore[arg-type]
    else:
        committed, result = (), None
    head = (3, 0.5, 2, call)
    tail = (None,)
    # The before point, and the after one (what it committed, or the request events).
    eager_before = make_point((*head, "before", writers, run_id, events, None, *tail, events))
    lazy_before = make_point((*head, "before", None, asked, None, None, *tail, None))
    assert lazy_before == eager_before
    failure = (True, "EntityConflict") if outcome == "failed" else ()
    first = (run_id or committed[0].run_id) if committed else run_id
    eager_after = make_point(
        (*head, "after", writers, first, events, None, *tail, committed or events, *failure)
    )
    lazy_after = make_point(
        (*head, "after", None, asked, None, None, *tail, committed or None, *failure)
    )
    assert lazy_after == eager_after
    # A refusal names the same writer and types.
    assert _caller(None, asked, None, None) == _caller(writers, run_id, events, None)
    # The trace: the same rows, named when read (or at once when a stale read is armed).
    armed_by: dict[str, list[Any]] = {"plain": [], "fast": []}
    logs = {}
    for kind in ("plain", "fast"):
        faults = types.SimpleNamespace(
            withhold_armed=[(1, None)] if armed else [], arm_withhold=armed_by[kind].append
        )
        logs[kind] = CallLog(Trace(SimClock()), faults)  # type: ignore[arg-type]
        logs[kind].trace.add("note", "before")
    token = STEP_METADATA.set(meta)
    try:
        plain_run, plain = logs["plain"].trace_events(writers, result, 5)
    finally:
        STEP_METADATA.reset(token)
    fast = logs["fast"].trace_write(asked, result, 5)
    assert fast == plain
    assert plain_run == (committed[0].run_id if committed else None)
    for kind in ("plain", "fast"):
        logs[kind].trace.add("note", "after")
    assert armed_by["fast"] == armed_by["plain"]
    assert logs["fast"].trace.entries == logs["plain"].trace.entries
    assert logs["fast"].trace.text() == logs["plain"].trace.text()
    assert logs["fast"].trace._rows == logs["plain"].trace._rows


def test_a_parked_write_names_its_writer_from_its_point() -> None:
    writer = Writer(kind=ORCHESTRATOR, run_id="run-1", delivery=1)
    request = EventRequest(type=EventType.STEP_CREATED, correlation_id="step//m//charge#1")
    asked = ("run-1", (request,), writer, None)
    fields = (7, 1.5, 3, "events.create", "before", None, asked, None, None, None, None)
    parked = Parked(fields, Actor(writer=writer))
    assert parked.ordinal == 7
    assert parked.writer == writer == parked.point.writer
    assert parked.point == make_point(fields)
