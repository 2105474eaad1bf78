"""Logs as JSON lines: exported by ``durasim inspect events ID --json``, checked offline.

One event per line, lossless: bytes as ``{"$bytes": "<base64>"}``, times as
``{"$time": "<ISO 8601>"}``, pairs as lists.  A file may hold several runs'
events (each line names its run); a directory is every ``*.jsonl`` in it.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from durasim.worlds import DurasimError, Event, EventType

__all__ = ["LogFileError", "event_from_json", "event_to_json", "load_logs"]


class LogFileError(DurasimError):
    """A log file that cannot be read as exported events; names the file and line."""

    path: str
    line: int


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, datetime):
        return {"$time": value.isoformat()}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"], validate=True)
        if set(value) == {"$time"}:
            return datetime.fromisoformat(value["$time"])
        raise ValueError(f"unknown value {value!r}")
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
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


def event_from_json(line: str) -> Event:
    """The event a line of :func:`event_to_json` describes (``ValueError`` if it is not one)."""
    raw = json.loads(line)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    try:
        return Event(
            run_id=str(raw["run_id"]),
            seq=int(raw["seq"]),
            type=EventType(raw["type"]),
            created_at=datetime.fromisoformat(raw["created_at"]),
            correlation_id=raw.get("correlation_id"),
            in_band=bool(raw.get("in_band", False)),
            data={k: _decode(v) for k, v in (raw.get("data") or {}).items()},
        )
    except KeyError as exc:
        raise ValueError(f"missing field {exc}") from None


def load_logs(path: Path) -> dict[str, list[Event]]:
    """Every run's events found in ``path`` (a file, or a directory of ``*.jsonl``), by run."""
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not path.exists():
        raise LogFileError(
            f"{path} does not exist: pass a file written by `durasim inspect events ID --json` "
            "or a directory of such *.jsonl files",
            path=str(path),
            line=0,
        )
    if not files:
        raise LogFileError(f"{path} holds no *.jsonl file", path=str(path), line=0)
    logs: dict[str, list[Event]] = {}
    for file in files:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise LogFileError(f"{file}: cannot be read: {exc}", path=str(file), line=0) from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                event = event_from_json(line)
            except (ValueError, TypeError, binascii.Error) as exc:
                raise LogFileError(
                    f"{file}:{number}: not an exported event ({exc}); export logs with "
                    "`durasim inspect events RUN_ID --json > FILE.jsonl`",
                    path=str(file),
                    line=number,
                ) from None
            logs.setdefault(event.run_id, []).append(event)
    return logs
