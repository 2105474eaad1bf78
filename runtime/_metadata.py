"""What a workflow or a step may know about itself."""

from __future__ import annotations

import contextvars
from datetime import datetime

import attrs

from durasim.worlds import DurasimError, World

from ._signals import cancelled_reason, wait_cancelled

__all__ = [
    "StepMetadata",
    "WorkflowMetadata",
    "get_step_metadata",
    "get_workflow_metadata",
]


@attrs.frozen(kw_only=True)
class WorkflowMetadata:
    """The run a workflow (or one of its steps) belongs to."""

    run_id: str
    workflow_id: str
    started_at: datetime
    #: the run's ``execution_context`` (a resumed or forked run's reused results).
    execution_context: bytes | None = attrs.field(default=None, repr=False)


@attrs.frozen(kw_only=True)
class StepMetadata:
    """The step being executed: ``step_id`` is stable across retries; ``attempt`` counts from 1."""

    run_id: str
    step_id: str
    step_name: str
    attempt: int

    @property
    def cancelled(self) -> bool:
        """Whether the run is cancelled, as far as this process knows (see ``cancellation``)."""
        return cancelled_reason(STEP_WORLD.get(), self.run_id) is not None

    async def cancellation(self, *, poll: float = 1.0) -> str:
        """Wait until the run is cancelled; the reason.  Reads the run every ``poll`` s."""
        return await wait_cancelled(STEP_WORLD.get(), self.run_id, self.run_id, poll=poll)


WORKFLOW_METADATA: contextvars.ContextVar[WorkflowMetadata | None] = contextvars.ContextVar(
    "durasim_workflow_metadata", default=None
)
STEP_METADATA: contextvars.ContextVar[StepMetadata | None] = contextvars.ContextVar(
    "durasim_step_metadata", default=None
)
#: The World a step body runs against (streams, hooks made from steps); set around each body.
STEP_WORLD: contextvars.ContextVar[World | None] = contextvars.ContextVar(
    "durasim_step_world", default=None
)


def get_workflow_metadata() -> WorkflowMetadata:
    """The current run; inside workflow code or a step body."""
    found = WORKFLOW_METADATA.get()
    if found is None:
        raise DurasimError(
            "get_workflow_metadata() was called outside a workflow or step: call it from "
            "workflow code or from a step body"
        )
    return found


def step_world() -> World:
    """The World the running step body belongs to; inside a step body only."""
    found = STEP_WORLD.get()
    if found is None:
        raise DurasimError(
            "this call needs the World of a running step and was made outside a step body: "
            "make it from a function decorated with @step while it runs as a step"
        )
    return found


def get_step_metadata() -> StepMetadata:
    """The current step; inside a step body only."""
    found = STEP_METADATA.get()
    if found is None:
        raise DurasimError(
            "get_step_metadata() was called outside a step body: call it from a function "
            "decorated with @step while it runs as a step"
        )
    return found
