"""Row <-> value conversions for the PostgreSQL World.

Times are ``bigint`` microseconds since the Unix epoch.  Event data uses the
SQLite World's encoding (a small JSON text plus the type's main bytes field in a
``bytea``), a symmetric pair this module only calls.  Entity rows carry their
bytes in full (a step's input, output and error), so a step is read with one
lookup by key.
"""

from __future__ import annotations

from typing import Any, Final

from ._entities import HookRecord, StepRecord, StepStatus
from ._sqlite_codec import (  # the same rows as SQLite's, but for booleans and steps
    HOOK_COLUMNS,
    RUN_COLUMNS,
    WAIT_COLUMNS,
    decode_event,
    encode_event,
    hook_from_row,
    micros,
    moment,
    run_from_row,
    run_to_row,
    wait_from_row,
    wait_to_row,
)
from ._time import from_micros, to_micros

__all__ = [
    "EVENT_COLUMNS",
    "HOOK_COLUMNS",
    "RUN_COLUMNS",
    "RUN_SELECT",
    "STEP_COLUMNS",
    "WAIT_COLUMNS",
    "decode_event",
    "encode_event",
    "hook_from_row",
    "hook_to_row",
    "marks",
    "run_from_row",
    "run_to_row",
    "step_from_row",
    "step_to_row",
    "wait_from_row",
    "wait_to_row",
]


EVENT_COLUMNS = "run_id, seq, type, created_at, correlation_id, in_band, data, blob"
RUN_SELECT = f"SELECT {RUN_COLUMNS}, seq, seq_in_band FROM runs WHERE run_id = %s"


def marks(columns: str) -> str:
    """``%s, %s, ...``: one placeholder per column."""
    return ", ".join("%s" for _ in columns.split(","))


STEP_COLUMNS: Final = (
    "run_id, step_id, step_name, status, input, attempt, output, error, retry_after, "
    "created_at, updated_at, started_at, completed_at, inline"
)


def step_to_row(step: StepRecord) -> tuple[Any, ...]:
    """Values for :data:`STEP_COLUMNS`."""
    return (
        step.run_id,
        step.step_id,
        step.step_name,
        step.status.value,
        step.input,
        step.attempt,
        step.output,
        step.error,
        micros(step.retry_after),
        to_micros(step.created_at),
        to_micros(step.updated_at),
        micros(step.started_at),
        micros(step.completed_at),
        step.inline,
    )


def step_from_row(row: tuple[Any, ...]) -> StepRecord:
    """Inverse of :func:`step_to_row`."""
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


def hook_to_row(hook: HookRecord) -> tuple[Any, ...]:
    """Values for :data:`HOOK_COLUMNS`."""
    return (
        hook.run_id,
        hook.hook_id,
        hook.token,
        hook.status.value,
        hook.metadata,
        hook.is_webhook,
        hook.received_count,
        to_micros(hook.created_at),
        to_micros(hook.updated_at),
    )
