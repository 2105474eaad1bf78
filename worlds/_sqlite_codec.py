"""Row <-> value conversions for the SQLite World.

Times are stored as integer microseconds since the Unix epoch (exact round
trip).  An event's ``data`` is stored as a small JSON object plus one BLOB: the
type's main bytes field (input, result, error, payload ...) goes to the BLOB
column unencoded, so a large step result costs no base64; any other bytes field
is base64 inside the JSON.  Decoding is driven by the event schema's field kinds,
so no value carries a type tag.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from ._entities import (
    HookRecord,
    HookStatus,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    WaitRecord,
    WaitStatus,
)
from ._events import _SCHEMA, Event, EventType, Payload
from ._time import from_micros, to_micros

__all__ = [
    "NULL",
    "decode_event",
    "encode_event",
    "event_row",
    "hook_from_row",
    "run_from_row",
    "step_from_row",
    "wait_from_row",
]

#: The field of each type stored raw in the BLOB column.
MAIN_BLOB: Final[dict[EventType, str]] = {
    EventType.RUN_CREATED: "input",
    EventType.RUN_COMPLETED: "output",
    EventType.RUN_FAILED: "error",
    EventType.STEP_CREATED: "input",
    EventType.STEP_RETRYING: "error",
    EventType.STEP_COMPLETED: "result",
    EventType.STEP_FAILED: "error",
    EventType.HOOK_CREATED: "metadata",
    EventType.HOOK_RECEIVED: "payload",
    EventType.HOOK_CONFLICT: "metadata",
}

#: What a NULL is bound as.  :mod:`sqlite3` binds an exact int, float or str
#: (and a bytearray) as it is, but first looks for an adapter for anything else:
#: ``None``, ``bytes`` and enum members cost about 3,500 instructions each there
#: (CPython 3.11), a fifth of a step's World writes.  No column stores a float,
#: so the statements turn this one back into NULL with ``nullif(?, 0.5)``.
NULL: Final = 0.5
#: Blobs up to this size are bound as a bytearray (copied once, no adapter lookup).
_COPY_BELOW: Final = 1 << 16

_TYPES: Final = {t.value: t for t in EventType}
_TEXT: Final[dict[object, str]] = {
    member: member.value
    for kind in (EventType, RunStatus, StepStatus, HookStatus, WaitStatus)
    for member in kind
}
_RESUME_TYPE: Final = EventType.HOOK_RECEIVED
_ORDER: Final = {t: tuple(_SCHEMA[t]) for t in EventType}
# One encoder, built once: json.dumps with options builds a new one per call.
_JSON: Final = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


def micros(moment: datetime | None) -> int | None:
    """``to_micros`` that passes ``None`` through."""
    return None if moment is None else to_micros(moment)


def moment(value: int | None) -> datetime | None:
    """``from_micros`` that passes ``None`` through."""
    return None if value is None else from_micros(value)


def nullable(value: Any) -> Any:
    """``value``, or :data:`NULL` for ``None`` (for a ``nullif(?, 0.5)`` parameter)."""
    return NULL if value is None else value


def blob(value: bytes | None) -> Any:
    """A ``nullif(?, 0.5)`` parameter for a BLOB: small bytes as a bytearray (see :data:`NULL`)."""
    if value is None:
        return NULL
    return bytearray(value) if len(value) < _COPY_BELOW else value


#: Values per :func:`event_row`.
EVENT_WIDTH: Final = 10

_CONVERTED_KINDS: Final = frozenset({"bytes", "time"})
#: Per event type: the field stored raw in the BLOB column, and the other fields
#: whose values are converted for the JSON (bytes: base64; time: microseconds)
#: with their kinds.  Every other field goes into the JSON as it is.
_ENCODING: Final[dict[EventType, tuple[str | None, dict[str, str]]]] = {
    t: (
        MAIN_BLOB.get(t),
        {
            name: field.kind
            for name, field in _SCHEMA[t].items()
            if field.kind in _CONVERTED_KINDS and name != MAIN_BLOB.get(t)
        },
    )
    for t in EventType
}


#: Per event type, what :func:`append_events` needs: the type's stored text, the
#: field stored raw in the BLOB column, the other fields converted for the JSON
#: (``None`` when none is), and whether the type carries a ``resume_id`` column.
_ROW_ENCODING: Final[dict[EventType, tuple[str, str | None, dict[str, str] | None, bool]]] = {
    t: (_TEXT[t], _ENCODING[t][0], _ENCODING[t][1] or None, t is _RESUME_TYPE) for t in EventType
}


def append_events(
    params: list[Any], events: Sequence[Event], in_band_seq: int, refs: dict[str, list[Any]]
) -> None:
    """Append :func:`event_values` of each event to ``params``, in order.

    ``in_band_seq``: the run's in-band count before the first event.  ``refs``
    gets, per step the events change, the positions of its new input, output and
    error bytes (``[input, output, error]``; ``None``: not in these events).
    :func:`event_values` inline, for a write's events at once.
    """
    encoding = _ROW_ENCODING
    slots = _STEP_REF_SLOT
    fields_json = _FIELDS_JSON
    moment: Any = None
    created_at = 0
    for event in events:
        event_type = event.type
        text_type, main, converted, resumable = encoding[event_type]
        if event.in_band:
            in_band_seq += 1
            in_band = 1
        else:
            in_band = 0
        if event.created_at is not moment:  # a write's events share their time
            moment = event.created_at
            created_at = to_micros(moment)
        items = event.data._items
        raw: Any = NULL
        text: Any = NULL
        if items:
            rest: list[tuple[str, Any]] | None = None
            for name, value in items.items():
                if name == main:
                    if value is not None:  # small bytes as a bytearray (see NULL)
                        raw = bytearray(value) if len(value) < _COPY_BELOW else value
                    continue
                stored = (
                    _converted(converted[name], value)
                    if converted is not None and name in converted
                    else value
                )
                if rest is None:
                    rest = [(name, stored)]
                else:
                    rest.append((name, stored))  # changes stay tuples: hashable, JSON arrays
            if rest is not None:
                key = tuple(rest)
                text = fields_json.get(key)
                if text is None:
                    text = _fields_json(key)
        correlation_id: Any = event.correlation_id
        if correlation_id is None:
            correlation_id = NULL
        else:
            slot = slots.get(event_type)
            if slot is not None:
                ref = refs.get(correlation_id)
                if ref is None:
                    ref = refs[correlation_id] = [None, None, None]
                ref[slot] = event.seq
        resume_id = items.get("resume_id") if resumable else None
        params += (
            event.run_id,
            event.seq,
            text_type,
            created_at,
            correlation_id,
            in_band,
            in_band_seq,
            text,
            raw,
            NULL if resume_id is None else resume_id,
        )


#: Which of a step's (input, output, error) positions each step event sets.
_STEP_REF_SLOT: Final = {
    EventType.STEP_CREATED: 0,
    EventType.STEP_COMPLETED: 1,
    EventType.STEP_RETRYING: 2,
    EventType.STEP_FAILED: 2,
}


def event_row(event: Event, in_band_seq: int) -> tuple[Any, ...]:
    """Values for :data:`._sqlite_schema.INSERT_EVENTS`."""
    return event_values(event, in_band_seq, to_micros(event.created_at))


def event_values(event: Event, in_band_seq: int, created_at: int) -> tuple[Any, ...]:
    """:func:`event_row` with the event's time already in microseconds (a write's
    events share it): :func:`append_events` of the one event.
    """
    params: list[Any] = []
    append_events(params, (event,), in_band_seq - (1 if event.in_band else 0), {})
    params[3] = created_at
    return tuple(params)


#: The JSON of an event's non-blob fields by their (name, value) pairs: they
#: repeat (step names, writers).  A plain dict read first (no LRU bookkeeping),
#: emptied when full.  Every field has one kind (the schema's, checked), so
#: equal pairs (``True == 1``) never mix kinds.
_FIELDS_JSON: Final[dict[tuple[tuple[str, Any], ...], str]] = {}
_FIELDS_JSON_MAX: Final = 4096


def _fields_json(key: tuple[tuple[str, Any], ...]) -> str:
    if len(_FIELDS_JSON) >= _FIELDS_JSON_MAX:
        _FIELDS_JSON.clear()
    text = _FIELDS_JSON[key] = _JSON.encode(dict(key))
    return text


def _converted(kind: str, value: Any) -> Any:
    """A bytes or time field's value as stored in the JSON."""
    if kind == "bytes":
        return base64.b64encode(value).decode("ascii")
    return to_micros(value)


def encode_event(event: Event) -> tuple[str | None, bytes | None]:
    """The (json, blob) pair stored for ``event.data``."""
    main, converted = _ENCODING[event.type]
    blob: bytes | None = None
    rest: list[tuple[str, Any]] = []
    for name, value in event.data.items():
        if name == main:
            blob = value
        elif name in converted:
            rest.append((name, _converted(converted[name], value)))
        else:
            rest.append((name, value))  # changes stay tuples: hashable for the cache, JSON arrays
    text = _encode_fields(tuple(rest)) if rest else None
    return text, blob


@functools.lru_cache(maxsize=4096)
def _encode_fields(items: tuple[tuple[str, Any], ...]) -> str:
    """The JSON of an event's non-blob fields; cached, as they repeat (step names, writers)."""
    return _JSON.encode(dict(items))


def decode_event(  # noqa: PLR0917 -- called with a row splatted in column order
    run_id: str,
    seq: int,
    type_name: str,
    created_at: int,
    correlation_id: str | None,
    in_band: int,
    data: str | None,
    blob: bytes | None,
) -> Event:
    """Rebuild an :class:`Event` from its row."""
    event_type = _TYPES[type_name]
    main = MAIN_BLOB.get(event_type)
    fields = _decode_fields(event_type, data) if data else ()
    if main is not None and blob is not None:
        values = dict(fields)
        values[main] = bytes(blob)
        payload = Payload({name: values[name] for name in _ORDER[event_type] if name in values})
    else:
        payload = Payload(dict(fields))
    return Event(
        run_id=run_id,
        seq=seq,
        type=event_type,
        created_at=from_micros(created_at),
        correlation_id=correlation_id,
        in_band=bool(in_band),
        data=payload,
    )


@functools.lru_cache(maxsize=4096)
def _decode_fields(event_type: EventType, data: str) -> tuple[tuple[str, Any], ...]:
    """The JSON part of an event's data, decoded by the schema's field kinds.

    Cached: most of it repeats from event to event (step names, writers), and
    every value it yields is immutable.
    """
    schema = _SCHEMA[event_type]
    values: dict[str, Any] = {}
    for name, raw in json.loads(data).items():
        kind = schema[name].kind
        if kind == "bytes":
            values[name] = base64.b64decode(raw)
        elif kind == "time":
            values[name] = from_micros(raw)
        elif kind == "changes":
            values[name] = tuple((k, v) for k, v in raw)
        else:
            values[name] = raw
    return tuple((name, values[name]) for name in schema if name in values)


RUN_COLUMNS: Final = (
    "run_id, workflow_name, status, input, deployment_id, execution_context, output, error, "
    "error_code, cancel_reason, attributes, created_at, updated_at, started_at, completed_at"
)


def run_to_row(run: RunRecord) -> tuple[Any, ...]:
    """Values for :data:`RUN_COLUMNS`."""
    return (
        run.run_id,
        run.workflow_name,
        run.status.value,
        run.input,
        run.deployment_id,
        run.execution_context,
        run.output,
        run.error,
        run.error_code,
        run.cancel_reason,
        json.dumps(dict(run.attributes), separators=(",", ":")),
        to_micros(run.created_at),
        to_micros(run.updated_at),
        micros(run.started_at),
        micros(run.completed_at),
    )


def run_from_row(row: tuple[Any, ...]) -> RunRecord:
    """Inverse of :func:`run_to_row`."""
    return RunRecord(
        run_id=row[0],
        workflow_name=row[1],
        status=RunStatus(row[2]),
        input=bytes(row[3]),
        deployment_id=row[4],
        execution_context=None if row[5] is None else bytes(row[5]),
        output=None if row[6] is None else bytes(row[6]),
        error=None if row[7] is None else bytes(row[7]),
        error_code=row[8],
        cancel_reason=row[9],
        attributes=json.loads(row[10]),
        created_at=from_micros(row[11]),
        updated_at=from_micros(row[12]),
        started_at=moment(row[13]),
        completed_at=moment(row[14]),
    )


#: Stored step columns.  Input, output and error bytes are not copied into the
#: row: it points at the events that carry them (``*_seq``), so a step's bytes
#: are written once, in the log.
STEP_COLUMNS: Final = (
    "run_id, step_id, step_name, status, attempt, input_seq, output_seq, error_seq, "
    "retry_after, created_at, updated_at, started_at, completed_at, inline"
)

#: Reads a step with its bytes joined from the events that carry them, in the
#: column order :func:`step_from_row` expects.
STEP_SELECT: Final = (
    "SELECT s.run_id, s.step_id, s.step_name, s.status, i.blob, s.attempt, o.blob, x.blob, "
    "s.retry_after, s.created_at, s.updated_at, s.started_at, s.completed_at, s.inline "
    "FROM steps s JOIN events i ON i.run_id = s.run_id AND i.seq = s.input_seq "
    "LEFT JOIN events o ON o.run_id = s.run_id AND o.seq = s.output_seq "
    "LEFT JOIN events x ON x.run_id = s.run_id AND x.seq = s.error_seq"
)


#: Values per :func:`step_to_row`.
STEP_WIDTH: Final = 14


def step_to_row(step: StepRecord, refs: Sequence[int | None]) -> tuple[Any, ...]:
    """Values for :data:`._sqlite_schema.UPSERT_STEPS`; ``refs`` = (input, output, error) positions.

    A ``None`` ref keeps the stored one (the upsert coalesces).  Nullable values
    go as :data:`NULL`.  :func:`append_steps` of the one step.
    """
    params: list[Any] = []
    append_steps(params, {step.step_id: step}, {step.step_id: list(refs)})
    return tuple(params)


_NO_REFS: Final = (None, None, None)


def append_steps(
    params: list[Any], steps: dict[str, StepRecord], refs: dict[str, list[Any]]
) -> None:
    """Append :func:`step_to_row` of each step to ``params``; ``refs`` by step id (as
    :func:`append_events` fills it; a step not in it keeps its stored positions).

    Inline, for a write's steps at once: their times are mostly the write's one
    moment, converted once.
    """
    moment: Any = None
    micros = 0
    text = _TEXT
    for step_id, step in steps.items():
        ref = refs.get(step_id, _NO_REFS)
        input_seq, output_seq, error_seq = ref
        created_at = step.created_at
        updated_at = step.updated_at
        started_at = step.started_at
        completed_at = step.completed_at
        retry_after = step.retry_after
        if updated_at is not moment:
            moment = updated_at
            micros = to_micros(updated_at)
        params += (
            step.run_id,
            step_id,
            step.step_name,
            text[step.status],
            step.attempt,
            NULL if input_seq is None else input_seq,
            NULL if output_seq is None else output_seq,
            NULL if error_seq is None else error_seq,
            NULL if retry_after is None else to_micros(retry_after),
            micros if created_at is moment else to_micros(created_at),
            micros,
            NULL
            if started_at is None
            else micros
            if started_at is moment
            else to_micros(started_at),
            NULL
            if completed_at is None
            else micros
            if completed_at is moment
            else to_micros(completed_at),
            1 if step.inline else 0,
        )


def step_from_row(row: tuple[Any, ...]) -> StepRecord:
    """A step from a :data:`STEP_SELECT` row."""
    return StepRecord(
        run_id=row[0],
        step_id=row[1],
        step_name=row[2],
        status=StepStatus(row[3]),
        input=bytes(row[4]),
        attempt=row[5],
        output=None if row[6] is None else bytes(row[6]),
        error=None if row[7] is None else bytes(row[7]),
        retry_after=moment(row[8]),
        created_at=from_micros(row[9]),
        updated_at=from_micros(row[10]),
        started_at=moment(row[11]),
        completed_at=moment(row[12]),
        inline=bool(row[13]),
    )


HOOK_COLUMNS: Final = (
    "run_id, hook_id, token, status, metadata, is_webhook, received_count, created_at, updated_at"
)


def hook_to_row(hook: HookRecord) -> tuple[Any, ...]:
    """Values for :data:`HOOK_COLUMNS`."""
    return (
        hook.run_id,
        hook.hook_id,
        hook.token,
        hook.status,
        hook.metadata,
        int(hook.is_webhook),
        hook.received_count,
        to_micros(hook.created_at),
        to_micros(hook.updated_at),
    )


def hook_from_row(row: tuple[Any, ...]) -> HookRecord:
    """Inverse of :func:`hook_to_row`."""
    return HookRecord(
        run_id=row[0],
        hook_id=row[1],
        token=row[2],
        status=HookStatus(row[3]),
        metadata=None if row[4] is None else bytes(row[4]),
        is_webhook=bool(row[5]),
        received_count=row[6],
        created_at=from_micros(row[7]),
        updated_at=from_micros(row[8]),
    )


WAIT_COLUMNS: Final = "run_id, wait_id, status, resume_at, created_at, updated_at, completed_at"


def wait_to_row(wait: WaitRecord) -> tuple[Any, ...]:
    """Values for :data:`WAIT_COLUMNS`."""
    return (
        wait.run_id,
        wait.wait_id,
        wait.status.value,
        to_micros(wait.resume_at),
        to_micros(wait.created_at),
        to_micros(wait.updated_at),
        micros(wait.completed_at),
    )


def wait_from_row(row: tuple[Any, ...]) -> WaitRecord:
    """Inverse of :func:`wait_to_row`."""
    return WaitRecord(
        run_id=row[0],
        wait_id=row[1],
        status=WaitStatus(row[2]),
        resume_at=from_micros(row[3]),
        created_at=from_micros(row[4]),
        updated_at=from_micros(row[5]),
        completed_at=moment(row[6]),
    )
