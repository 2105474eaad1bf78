"""Shared argument checks and cursors for the read APIs of every World."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from ._entities import Run, RunStatus
from ._errors import InvalidRequest
from ._time import from_micros, to_micros

__all__ = [
    "check_limit",
    "check_queue_name",
    "decode_run_cursor",
    "encode_run_cursor",
    "normalize_statuses",
    "run_sort_key",
]

MAX_PAGE = 10_000
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/@#-]{0,199}")


def check_limit(limit: object, *, what: str = "limit") -> int:
    """A page size in 1..10,000, or :class:`InvalidRequest`."""
    if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"{what} must be an int in 1..{MAX_PAGE}, got {limit!r}")
    return limit


def check_queue_name(name: object) -> str:
    """A queue name of 1-200 characters from ``[A-Za-z0-9_.:/@#-]``."""
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise InvalidRequest(
            f"queue name {name!r} is malformed: use 1-200 characters from [A-Za-z0-9_.:/@#-]"
        )
    return name


def normalize_statuses(
    status: RunStatus | Sequence[RunStatus] | None,
) -> frozenset[RunStatus] | None:
    """``None`` (no filter) or the set of statuses to keep (possibly empty)."""
    if status is None:
        return None
    items = [status] if isinstance(status, str) else list(status)
    try:
        return frozenset(RunStatus(s) for s in items)
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise InvalidRequest(
            f"unknown run status in {status!r}; the statuses are: {known}"
        ) from None


def run_sort_key(run: Run) -> tuple[int, str]:
    """Runs list newest first: descending by this key."""
    return (to_micros(run.created_at), run.run_id)


def encode_run_cursor(run: Run) -> str:
    """An opaque cursor pointing just past ``run`` in newest-first order."""
    micros, run_id = run_sort_key(run)
    return f"{micros}|{run_id}"


def decode_run_cursor(cursor: str) -> tuple[int, str]:
    """The sort key a cursor points past; :class:`InvalidRequest` if it is not ours."""
    micros, sep, run_id = cursor.partition("|") if isinstance(cursor, str) else ("", "", "")
    if not sep or not micros.lstrip("-").isdigit() or not run_id:
        raise InvalidRequest(
            f"run cursor {cursor!r} is malformed: pass back the cursor of a RunPage unchanged"
        )
    return int(micros), run_id


def cursor_time(cursor: str) -> datetime:
    """The creation time a cursor points past (for messages)."""
    return from_micros(decode_run_cursor(cursor)[0])
