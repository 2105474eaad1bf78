"""Argument checks and cursors shared by every World: refuse bad input before any I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ._entities import RunRecord, RunStatus
from ._errors import InvalidRequest
from ._events import EventRequest, check_run_id, validate_request
from ._text import check_text, shown
from ._time import to_micros

__all__ = [
    "MAX_CLOCK_SKEW",
    "MAX_PAGE",
    "check_chunks",
    "check_delay",
    "check_limit",
    "check_message",
    "check_queue_name",
    "check_queue_prefix",
    "check_request",
    "clamp_start",
    "decode_run_cursor",
    "encode_run_cursor",
    "event_time",
    "normalize_statuses",
    "run_sort_key",
]

#: The largest page a read may ask for (``limit``).
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
            f"queue name {shown(name)} is malformed: use 1-200 characters from [A-Za-z0-9_.:/@#-]",
            field="queue name",
            rule="format",
        )
    return name


def check_queue_prefix(prefix: object) -> str:
    """A ``queue_prefix`` to claim from: text of 0-200 characters (valid UTF-8, no NUL)."""
    return check_text(prefix, field="queue_prefix")


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


def run_sort_key(run: RunRecord) -> tuple[int, str]:
    """Runs list newest first: descending by this key."""
    return (to_micros(run.created_at), run.run_id)


def encode_run_cursor(run: RunRecord) -> str:
    """An opaque cursor pointing just past ``run`` in newest-first order."""
    micros, run_id = run_sort_key(run)
    return f"{micros}|{run_id}"


def decode_run_cursor(cursor: str) -> tuple[int, str]:
    """The sort key a cursor points past; :class:`InvalidRequest` if it is not ours."""
    micros, sep, run_id = (
        cursor.partition("|") if isinstance(cursor, str) and len(cursor) <= 160 else ("", "", "")
    )
    if (
        not sep
        or not micros.isascii()
        or not micros.lstrip("-").isdigit()
        or len(micros) > 24
        or not _is_run_id(run_id)
    ):
        raise InvalidRequest(
            f"run cursor {shown(cursor)} is malformed: pass back the cursor of a RunPage unchanged",
            field="cursor",
            rule="format",
        )
    return int(micros), run_id


def _is_run_id(text: str) -> bool:
    try:
        check_run_id(text)
    except InvalidRequest:
        return False
    return True


def check_request(request: object) -> EventRequest:
    """Re-validate a request whatever built it (a hand-made EventRequest skips ``of``)."""
    if not isinstance(request, EventRequest):
        raise InvalidRequest(
            f"expected an EventRequest, got {type(request).__name__}: build one with "
            "EventRequest.of(type, correlation_id, **data)"
        )
    # The exact class: a subclass could answer ``validated`` as it likes.
    if type(request) is EventRequest and request._validated:
        return request
    return validate_request(request.type, request.correlation_id, request.data)


def check_delay(delay: object, *, what: str = "delay") -> float:
    """A non-negative number of seconds, at most 366 days."""
    if (
        isinstance(delay, bool)
        or not isinstance(delay, int | float)
        or not 0 <= delay <= 31_622_400
    ):
        raise InvalidRequest(f"{what} must be a number of seconds in 0..31622400, got {delay!r}")
    return float(delay)


def check_message(payload: Any, run_id: Any, orchestrator: Any, key: Any) -> None:
    """Refuse a malformed queue message before it is stored."""
    if type(payload) is not bytes:
        raise InvalidRequest(
            f"queue payload must be bytes, got {type(payload).__name__}: serialize it first"
        )
    if run_id is not None:
        check_run_id(run_id)
    if orchestrator and run_id is None:
        raise InvalidRequest("an orchestrator message must name its run: pass run_id=")
    if key is not None:
        check_text(key, field="idempotency_key")


def check_chunks(chunks: Any) -> list[bytes]:
    """One chunk or a list of chunks, as a list; each must be bytes."""
    batch = (
        [chunks]
        if isinstance(chunks, bytes)
        else list(chunks)
        if isinstance(chunks, list | tuple)
        else None
    )
    if batch is None or not all(type(c) is bytes for c in batch):
        raise InvalidRequest(
            "stream chunks must be bytes or a list of bytes: serialize each chunk first"
        )
    return batch


def clamp_start(start: Any, length: int) -> int:
    """A stream read index: negative counts from the end, clamped to 0."""
    if type(start) is not int:
        raise InvalidRequest(f"start must be an int, got {start!r}")
    return max(0, length + start) if start < 0 else start


#: How far ahead of the World's clock a writer's ``occurred_at`` may be.
MAX_CLOCK_SKEW = timedelta(minutes=5)
#: A ``now`` before this year plus MAX_CLOCK_SKEW is a datetime (no OverflowError).
_LAST_YEAR = datetime.max.year


def event_time(now: datetime, occurred_at: object, *, in_band: bool) -> datetime:
    """The ``created_at`` of a write: the World's ``now``, or the writer's ``occurred_at``.

    An orchestrator that hands an outcome to the workflow before the write commits
    (running ahead) must record the time the workflow saw; only in-band writes may,
    and not further ahead of the World's clock than :data:`MAX_CLOCK_SKEW`.
    """
    if occurred_at is None:
        return now
    if not in_band:
        raise InvalidRequest("occurred_at is for in-band writes only: pass in_band=True")
    if not isinstance(occurred_at, datetime) or occurred_at.tzinfo is None:
        raise InvalidRequest(f"occurred_at must be an aware datetime, got {occurred_at!r}")
    if occurred_at is now and now.year < _LAST_YEAR:  # the World's own now (no overflow below)
        return now
    if occurred_at > now + MAX_CLOCK_SKEW:
        raise InvalidRequest(
            f"occurred_at {occurred_at.isoformat()} is more than {MAX_CLOCK_SKEW} ahead of the "
            f"World's clock ({now.isoformat()}): fix the writer's clock"
        )
    return occurred_at
