"""Row <-> value conversions for the PostgreSQL World.

Times are ``bigint`` microseconds since the Unix epoch.  Event data uses the
SQLite World's encoding (a small JSON text plus the type's main bytes field in a
``bytea``), a symmetric pair this module only calls.  Entity rows carry their
bytes in full (a step's input, output and error), so a step is read with one
lookup by key.
"""

from __future__ import annotations

import json
from typing import Any, Final

from ._entities import Hook, HookStatus, Run, RunStatus, Step, StepStatus, Wait, WaitStatus
from ._sqlite_codec import decode_event, encode_event
from ._time import from_micros, to_micros

__all__ = [
    "HOOK_COLUMNS",
    "RUN_COLUMNS",
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


def marks(columns: str) -> str:
    """``%s, %s, ...``: one placeholder per column."""
    return ", ".join("%s" for _ in columns.split(","))


def _micros(value: Any) -> int | None:
    return None if value is None else to_micros(value)


def _moment(value: int | None) -> Any:
    return None if value is None else from_micros(value)


RUN_COLUMNS: Final = (
    "run_id, workflow_name, status, input, deployment_id, execution_context, output, error, "
    "error_code, cancel_reason, attributes, created_at, updated_at, started_at, completed_at"
)


def run_to_row(run: Run) -> tuple[Any, ...]:
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
        _micros(run.started_at),
        _micros(run.completed_at),
    )


def run_from_row(row: tuple[Any, ...]) -> Run:
    """Inverse of :func:`run_to_row` (extra trailing columns are ignored)."""
    return Run(
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
        started_at=_moment(row[13]),
        completed_at=_moment(row[14]),
    )


STEP_COLUMNS: Final = (
    "run_id, step_id, step_name, status, input, attempt, output, error, retry_after, "
    "created_at, updated_at, started_at, completed_at, inline"
)


def step_to_row(step: Step) -> tuple[Any, ...]:
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
        _micros(step.retry_after),
        to_micros(step.created_at),
        to_micros(step.updated_at),
        _micros(step.started_at),
        _micros(step.completed_at),
        step.inline,
    )


def step_from_row(row: tuple[Any, ...]) -> Step:
    """Inverse of :func:`step_to_row`."""
    return Step(
        run_id=row[0],
        step_id=row[1],
        step_name=row[2],
        status=StepStatus(row[3]),
        input=bytes(row[4]),
        attempt=row[5],
        output=None if row[6] is None else bytes(row[6]),
        error=None if row[7] is None else bytes(row[7]),
        retry_after=_moment(row[8]),
        created_at=from_micros(row[9]),
        updated_at=from_micros(row[10]),
        started_at=_moment(row[11]),
        completed_at=_moment(row[12]),
        inline=bool(row[13]),
    )


HOOK_COLUMNS: Final = (
    "run_id, hook_id, token, status, metadata, is_webhook, received_count, created_at, updated_at"
)


def hook_to_row(hook: Hook) -> tuple[Any, ...]:
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


def hook_from_row(row: tuple[Any, ...]) -> Hook:
    """Inverse of :func:`hook_to_row`."""
    return Hook(
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


def wait_to_row(wait: Wait) -> tuple[Any, ...]:
    """Values for :data:`WAIT_COLUMNS`."""
    return (
        wait.run_id,
        wait.wait_id,
        wait.status.value,
        to_micros(wait.resume_at),
        to_micros(wait.created_at),
        to_micros(wait.updated_at),
        _micros(wait.completed_at),
    )


def wait_from_row(row: tuple[Any, ...]) -> Wait:
    """Inverse of :func:`wait_to_row`."""
    return Wait(
        run_id=row[0],
        wait_id=row[1],
        status=WaitStatus(row[2]),
        resume_at=from_micros(row[3]),
        created_at=from_micros(row[4]),
        updated_at=from_micros(row[5]),
        completed_at=_moment(row[6]),
    )
