"""A write's rows encoded at once (``append_events``, ``append_steps``) equal them one by one.

The SQLite World encodes a write's event and step rows in one loop each, with the
write's moment converted once; these compare that with the general encoding of
each value by itself (``to_micros`` of every time, ``encode_event`` of every
payload), for events of every type and steps in every status, with times shared
(the same object, as a write's are) or not.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_sqlite_codec_rows import events

from durasim.worlds import StepRecord, StepStatus
from durasim.worlds import _sqlite_codec as codec
from durasim.worlds._events import Event, EventType
from durasim.worlds._time import to_micros

_NOW = datetime(2024, 1, 1, tzinfo=UTC)
_REF_SLOT = {
    EventType.STEP_CREATED: 0,
    EventType.STEP_COMPLETED: 1,
    EventType.STEP_RETRYING: 2,
    EventType.STEP_FAILED: 2,
}


def _one_by_one(batch: list[Event], in_band_seq: int) -> tuple[list[Any], dict[str, list[Any]]]:
    params: list[Any] = []
    refs: dict[str, list[Any]] = {}
    for event in batch:
        in_band_seq += 1 if event.in_band else 0
        text, main = codec.encode_event(event)
        resume_id = event.data.get("resume_id") if event.type is EventType.HOOK_RECEIVED else None
        params += (
            event.run_id,
            event.seq,
            event.type.value,
            to_micros(event.created_at),
            codec.NULL if event.correlation_id is None else event.correlation_id,
            int(event.in_band),
            in_band_seq,
            codec.NULL if text is None else text,
            codec.NULL if main is None else main,
            codec.NULL if resume_id is None else resume_id,
        )
        slot = _REF_SLOT.get(event.type)
        if slot is not None and event.correlation_id is not None:
            refs.setdefault(event.correlation_id, [None, None, None])[slot] = event.seq
    return params, refs


@given(st.lists(events(), max_size=5), st.integers(min_value=0, max_value=99), st.booleans())
def test_append_events_is_each_event_row(batch: list[Event], in_band_seq: int, same: bool) -> None:
    if same:  # a write's events share one moment (the same object)
        batch = [
            Event(
                run_id=e.run_id,
                seq=e.seq,
                type=e.type,
                created_at=_NOW,
                correlation_id=e.correlation_id,
                in_band=e.in_band,
                data=e.data,
            )
            for e in batch
        ]
    params: list[Any] = []
    refs: dict[str, list[Any]] = {}
    codec.append_events(params, batch, in_band_seq, refs)
    expected, expected_refs = _one_by_one(batch, in_band_seq)
    assert len(params) == len(expected) == codec.EVENT_WIDTH * len(batch)
    for got, want in zip(params, expected, strict=True):
        assert type(got) is not bytes or len(got) >= 1 << 16  # small blobs go as bytearrays
        assert got == want
    assert refs == expected_refs
    for event in batch:  # event_values is the same encoding, one event at a time
        row = codec.event_values(event, in_band_seq + 1, 7)
        assert row[3] == 7
        assert row[6] == in_band_seq + 1


_TIMES = st.one_of(
    st.just(_NOW),
    st.integers(min_value=0, max_value=10**9).map(lambda s: _NOW + timedelta(microseconds=s)),
)
_SEQ = st.one_of(st.none(), st.integers(min_value=1, max_value=99))


@st.composite
def steps(draw: st.DrawFn) -> StepRecord:
    return StepRecord(
        run_id="wrun_1",
        step_id=draw(st.sampled_from(["s1", "s2", "add#3"])),
        step_name="step//m//f",
        status=draw(st.sampled_from(list(StepStatus))),
        input=b"in",
        attempt=draw(st.integers(min_value=0, max_value=5)),
        created_at=draw(_TIMES),
        updated_at=draw(_TIMES),
        retry_after=draw(st.one_of(st.none(), _TIMES)),
        started_at=draw(st.one_of(st.none(), _TIMES)),
        completed_at=draw(st.one_of(st.none(), _TIMES)),
        inline=draw(st.booleans()),
    )


def _step_row(step: StepRecord, refs: list[int | None]) -> tuple[Any, ...]:
    def nullable(value: Any) -> Any:
        return codec.NULL if value is None else value

    def micros(moment: datetime | None) -> Any:
        return codec.NULL if moment is None else to_micros(moment)

    return (
        step.run_id,
        step.step_id,
        step.step_name,
        step.status.value,
        step.attempt,
        nullable(refs[0]),
        nullable(refs[1]),
        nullable(refs[2]),
        micros(step.retry_after),
        to_micros(step.created_at),
        to_micros(step.updated_at),
        micros(step.started_at),
        micros(step.completed_at),
        int(step.inline),
    )


@given(
    st.lists(steps(), max_size=4),
    st.dictionaries(st.sampled_from(["s1", "add#3"]), st.lists(_SEQ, min_size=3, max_size=3)),
)
def test_append_steps_is_each_step_row(drawn: list[StepRecord], refs: dict[str, list[Any]]) -> None:
    by_id = {s.step_id: s for s in drawn}
    params: list[Any] = []
    codec.append_steps(params, by_id, refs)
    expected: list[Any] = []
    for step_id, step in by_id.items():
        expected += _step_row(step, refs.get(step_id, [None, None, None]))
    assert params == expected
    assert [type(v) for v in params] == [type(v) for v in expected]
    for step_id, step in by_id.items():
        assert codec.step_to_row(step, refs.get(step_id, (None, None, None))) == _step_row(
            step, refs.get(step_id, [None, None, None])
        )


def test_batch_result_builder_is_the_class() -> None:
    from durasim.worlds import BatchResult, RunRecord, RunStatus
    from durasim.worlds._sqlite_facets import _batch_result

    run = RunRecord(
        run_id="wrun_1",
        workflow_name="wf",
        status=RunStatus.RUNNING,
        input=b"",
        created_at=_NOW,
        updated_at=_NOW,
    )
    built = _batch_result(events=(), run=run, unseen=())
    assert type(built) is BatchResult
    assert built == BatchResult(events=(), run=run, unseen=())
