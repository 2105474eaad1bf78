"""The SQLite World's event row (its inline encoding) stores what ``encode_event`` says.

``event_row`` encodes the payload itself (it runs for every event written); this
checks it against ``encode_event`` (which the PostgreSQL World also uses) and the
stored row's decoding, for events of every type drawn from their schemas.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from durasim.worlds import EventType, InvalidRequest, validate_request
from durasim.worlds import _sqlite_codec as codec
from durasim.worlds._events import _SCHEMA, Event
from durasim.worlds._time import to_micros

TEXT = st.text(alphabet="abcxyz-_/#0123456789", min_size=1, max_size=12)
KINDS: dict[str, st.SearchStrategy[Any]] = {
    "bytes": st.one_of(st.binary(max_size=8), st.just(b"x" * (1 << 16))),
    "str": TEXT,
    "int": st.integers(min_value=0, max_value=5),
    "bool": st.booleans(),
    "time": st.integers(min_value=0, max_value=10**9).map(
        lambda s: datetime(2024, 1, 1, tzinfo=UTC) + timedelta(microseconds=s)
    ),
    "changes": st.dictionaries(TEXT, st.one_of(st.none(), TEXT), max_size=2),
}


@st.composite
def events(draw: st.DrawFn) -> Event:
    type_ = draw(st.sampled_from(list(EventType)))
    fields = _SCHEMA[type_]
    names = draw(st.sets(st.sampled_from(list(fields)))) if fields else set()
    data = {name: draw(KINDS[fields[name].kind]) for name in names}
    correlation_id = draw(st.one_of(st.none(), st.sampled_from(["s1", "add#2"])))
    try:
        request = validate_request(type_, correlation_id, data, world=True)
    except InvalidRequest:
        assume(False)
        raise
    return Event(
        run_id="wrun_1",
        seq=draw(st.integers(min_value=1, max_value=99)),
        type=request.type,
        created_at=draw(KINDS["time"]),
        correlation_id=request.correlation_id,
        in_band=draw(st.booleans()),
        data=request.data,
    )


@given(events(), st.integers(min_value=0, max_value=99))
def test_event_row_stores_what_encode_event_says(event: Event, in_band_seq: int) -> None:
    row = codec.event_row(event, in_band_seq)
    text, main = codec.encode_event(event)
    resume_id = event.data.get("resume_id") if event.type is EventType.HOOK_RECEIVED else None
    assert len(row) == codec.EVENT_WIDTH
    assert row[:7] == (
        event.run_id,
        event.seq,
        event.type.value,
        to_micros(event.created_at),
        codec.NULL if event.correlation_id is None else event.correlation_id,
        int(event.in_band),
        in_band_seq,
    )
    assert type(row[2]) is str
    assert row[7] == (codec.NULL if text is None else text)
    if main is None:
        assert row[8] == codec.NULL
    else:
        # Small bytes are bound as a bytearray (no adapter lookup in sqlite3).
        assert type(row[8]) is (bytearray if len(main) < 1 << 16 else bytes)
        assert bytes(row[8]) == main
    assert row[9] == (codec.NULL if resume_id is None else resume_id)
    # What is stored decodes back to the event.
    stored = [None if value == codec.NULL else value for value in row]
    decoded = codec.decode_event(*stored[:6], stored[7], stored[8])
    assert decoded == event
