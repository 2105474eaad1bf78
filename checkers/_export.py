"""Logs as JSON lines: exported by ``durasim inspect events ID --json``, checked offline.

One event per line, lossless: bytes as ``{"$bytes": "<base64>"}``, times as
``{"$time": "<ISO 8601>"}``, pairs as lists.  A file may hold several runs'
events (each line names its run); a directory is every ``*.jsonl`` in it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from durasim.worlds import (
    DurasimError,
    Event,
    EventType,
    InvalidRequest,
    check_correlation_id,
    check_run_id,
    validate_request,
)

__all__ = ["LogFileError", "event_from_json", "event_to_json", "load_logs"]


class LogFileError(DurasimError):
    """Log files that cannot be read as exported events: one ``file:line: what`` per bad line.

    Attributes:
        path: the (first) file.
        line: the first bad line (0: the file itself).
        problems: every ``file:line: what is wrong``, in file and line order.
    """

    path: str
    line: int
    problems: tuple[str, ...]


_MAX_PROBLEMS = 50
_SHOWN = 40


def shown(value: object) -> str:
    """``repr(value)`` cut short: a message never echoes a megabyte of a bad line."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


_HINT = "export logs with `durasim inspect events RUN_ID --json > FILE.jsonl`"


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        return {"$time": value.isoformat()}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


#: Deepest nesting of brackets a line may hold (an exported event nests 4 deep).
MAX_DEPTH = 32
#: The fields of an exported event line.
_FIELDS = frozenset(
    {"run_id", "seq", "type", "correlation_id", "in_band", "created_at", "data", "decoded"}
)
#: Fields a reader ignores: ``decoded`` is the payloads as JSON values, written by
#: ``durasim inspect events --json`` for people (:func:`annotated_event_json`).
_ANNOTATIONS = frozenset({"decoded"})
_REQUIRED = ("run_id", "seq", "type", "created_at")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_MAX_SEQ = 2**63 - 1


def _check_depth(line: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` before the JSON parser recurses into it."""
    depth = 0
    for char in _NOT_BRACKET.sub("", _STRING.sub("", line)):
        depth += 1 if char in "[{" else -1
        if depth > MAX_DEPTH:
            raise ValueError(f"brackets nest deeper than {MAX_DEPTH} levels")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number this format uses")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"key {duplicate!r} appears twice in one object")
    return dict(pairs)


def _time(value: Any, what: str) -> datetime:
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"{what} must be an ISO 8601 time string, got {shown(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{what} {shown(value)} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{what} {shown(value)} has no UTC offset: times must be aware")
    return moment


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
            try:
                return base64.b64decode(value["$bytes"], validate=True)
            except binascii.Error as exc:
                raise ValueError(f"$bytes is not base64 ({exc})") from None
        if set(value) == {"$time"}:
            return _time(value["$time"], "$time")
        raise ValueError(
            f"unknown value {shown(value)}: expected {{'$bytes': ...}} or {{'$time': ...}}"
        )
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    if isinstance(value, float):
        raise ValueError(f"{value!r} is not a value an event holds (no fractional numbers)")
    return value


def event_to_json(event: Event) -> str:
    """One line of JSON that :func:`event_from_json` turns back into an equal event."""
    return json.dumps(
        {
            "run_id": event.run_id,
            "seq": event.seq,
            "type": event.type.value,
            "correlation_id": event.correlation_id,
            "in_band": event.in_band,
            "created_at": event.created_at.isoformat(),
            "data": {k: _encode(v) for k, v in event.data.items()},
        },
        sort_keys=True,
    )


def annotated_event_json(event: Event, decoded: Any) -> str:
    """:func:`event_to_json` with ``decoded`` (the payloads as JSON values) beside ``data``.

    A reader ignores ``decoded``; when it would nest deeper than :data:`MAX_DEPTH`
    (the line could not be read back) it is replaced by a note saying so.
    """
    line = json.loads(event_to_json(event))
    line["decoded"] = decoded
    text = json.dumps(line, sort_keys=True)
    try:
        _check_depth(text)
    except ValueError:
        line["decoded"] = {"omitted": f"nests deeper than {MAX_DEPTH} levels"}
        text = json.dumps(line, sort_keys=True)
    return text


def event_from_json(line: str) -> Event:
    """The event a line of :func:`event_to_json` describes.

    Raises ``ValueError`` naming what is wrong: not JSON, nesting deeper than
    :data:`MAX_DEPTH`, not an object, an unknown or missing field, a position that
    is not a positive integer (``1.5``, ``1e999``), a naive time, a malformed run
    or correlation id, data that is not an object or breaks the event's schema
    (docs/protocol.md §2, §9).
    """
    _check_depth(line)
    try:
        raw = json.loads(
            line,
            parse_constant=_refuse_constant,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"a line must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(map(repr, unknown))}")
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(map(repr, missing))}")
    seq = raw["seq"]
    if type(seq) is not int or not 1 <= seq <= _MAX_SEQ:
        raise ValueError(f"seq must be a positive integer, got {shown(seq)}")
    try:
        run_id = check_run_id(raw["run_id"])
        event_type = EventType(raw["type"]) if isinstance(raw["type"], str) else None
        if event_type is None:
            raise ValueError(f"type must be a str, got {shown(raw['type'])}")
        correlation_id = raw.get("correlation_id")
        if correlation_id is not None:
            check_correlation_id(correlation_id)
        in_band = raw.get("in_band", False)
        if type(in_band) is not bool:
            raise ValueError(f"in_band must be true or false, got {shown(in_band)}")
        created_at = _time(raw["created_at"], "created_at")
        data = raw.get("data")
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise ValueError(f"data must be a JSON object, got {type(data).__name__}")
        decoded = {k: _decode(v) for k, v in data.items()}
        request = validate_request(event_type, correlation_id, decoded, world=True)
    except InvalidRequest as exc:
        raise ValueError(str(exc)) from None
    return Event(
        run_id=run_id,
        seq=seq,
        type=event_type,
        created_at=created_at,
        correlation_id=correlation_id,
        in_band=in_band,
        data=request.data,
    )


def load_logs(path: Path) -> dict[str, list[Event]]:
    """Every run's events found in ``path`` (a file, or a directory of ``*.jsonl``), by run."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not path.exists():
        raise LogFileError(
            f"{path} does not exist: pass a file written by `durasim inspect events ID --json` "
            "or a directory of such *.jsonl files",
            path=str(path),
            line=0,
            problems=(),
        )
    if not files:
        raise LogFileError(f"{path} holds no *.jsonl file", path=str(path), line=0, problems=())
    logs: dict[str, list[Event]] = {}
    problems: list[str] = []
    first: tuple[Path, int] | None = None
    for file in files:
        try:
            lines = file.read_bytes().splitlines()
        except OSError as exc:
            problems.append(f"{file}:0: cannot be read: {exc.strerror or exc}")
            first = first or (file, 0)
            continue
        for number, raw_line in enumerate(lines, 1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(f"{file}:{number}: not an exported event: not UTF-8 ({exc.reason})")
                first = first or (file, number)
                continue
            if not line.strip():
                continue
            try:
                event = event_from_json(line)
            except (ValueError, TypeError, RecursionError) as exc:
                problems.append(f"{file}:{number}: not an exported event: {exc}")
                first = first or (file, number)
                continue
            logs.setdefault(event.run_id, []).append(event)
    if problems:
        shown_problems = problems[:_MAX_PROBLEMS]
        more = len(problems) - len(shown_problems)
        tail = [f"... and {more} more bad line(s)"] if more else []
        raise LogFileError(
            "\n".join([*shown_problems, *tail, _HINT]),
            path=str(first[0] if first else files[0]),
            line=first[1] if first else 0,
            problems=tuple(problems),
        )
    return logs
