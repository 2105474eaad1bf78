"""Child workflows: ``start()`` inside a workflow, and waiting for a child durably.

Starting a child is a step (``step//durasim//start_child``): its body writes the
child's ``run_created`` under an id derived from the parent's run id and the
step's call number, so a retried or replayed start finds the child it made
instead of making another.  The child records ``durasim.parent_run_id`` and
``durasim.root_run_id`` in its attributes.

``await child.result()`` in the parent suspends without polling: the parent
creates a hook with the token ``durasim.child:<child id>`` and then asks, in a
step, whether the child has ended.  When a child ends, the delivery that saw it
end resumes that hook with the outcome.  Whichever comes first (the child
ended before the hook existed, or after) the parent learns the outcome exactly
once.

Cancelling a parent cancels its unfinished children, and theirs (the reason
names the parent); cancelling a child alone makes the parent's
``await child.result()`` raise :class:`RunCancelledError`, which the parent may
catch.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from durasim.worlds import (
    EntityConflict,
    EventRequest,
    EventType,
    RunNotFound,
    RunRecord,
    RunStatus,
    StepStatus,
    World,
)

from ._decorators import step
from ._errors import HookNotFoundError, RunCancelledError, RunNotFinished, WorkflowFailed
from ._hooks import create_hook, resume_hook
from ._metadata import get_step_metadata, step_world
from ._versions import run_deployment
from ._wake import enqueue_wake
from .serialization import deserialize

__all__ = [
    "PARENT_ATTR",
    "ROOT_ATTR",
    "START_CHILD_STEP",
    "await_child",
    "cascade_cancel",
    "notify_parent",
    "outcome_of",
    "raise_or_return",
    "start_child",
]

PARENT_ATTR = "durasim.parent_run_id"
ROOT_ATTR = "durasim.root_run_id"
_TOKEN_PREFIX = "durasim.child:"  # noqa: S105 -- a hook token prefix, not a secret
START_CHILD_STEP = "step//durasim//start_child"


def child_run_id(parent_run_id: str, number: str) -> str:
    """The id of the child made by the parent's ``number``-th start: stable across retries."""
    candidate = f"{parent_run_id}-c{number}"
    if len(candidate) <= 128:
        return candidate
    digest = hashlib.sha256(f"{parent_run_id}/{number}".encode()).hexdigest()[:40]
    return f"c{digest}"


def outcome_of(run: RunRecord) -> dict[str, Any]:
    """A terminal run's outcome as a plain value (a hook payload, a step result)."""
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "output": run.output,
        "error": run.error,
        "error_code": run.error_code,
        "cancel_reason": run.cancel_reason,
    }


def raise_or_return(outcome: dict[str, Any]) -> Any:
    """The run's return value, or its failure or cancellation raised."""
    run_id = outcome["run_id"]
    status = outcome["status"]
    if status == RunStatus.COMPLETED.value:
        return deserialize(outcome["output"] or b"")
    if status == RunStatus.FAILED.value:
        cause = deserialize(outcome["error"]) if outcome["error"] else None
        error = WorkflowFailed(
            f"run {run_id} failed ({outcome['error_code']}): {cause}",
            run_id=run_id,
            error_code=outcome["error_code"] or "USER_ERROR",
        )
        if isinstance(cause, BaseException):
            raise error from cause
        raise error
    if status == RunStatus.CANCELLED.value:
        raise RunCancelledError(
            f"run {run_id} was cancelled: {outcome['cancel_reason'] or 'no reason given'}",
            run_id=run_id,
        )
    raise RunNotFinished(
        f"run {run_id} is {status}: run a worker until it ends "
        "(Worker(world).run_until_complete(run)), then ask again",
        run_id=run_id,
    )


@step(module="durasim", name="start_child", max_retries=10)
async def start_child(workflow_id: str, input: bytes) -> str:
    """Create the child run (once) and queue its first delivery; its id."""
    meta = get_step_metadata()
    world = step_world()
    number = meta.step_id.rsplit("#", 1)[-1]
    child_id = child_run_id(meta.run_id, number)
    parent = await world.runs.get(meta.run_id)
    root = parent.attributes.get(ROOT_ATTR) or meta.run_id
    deployment = run_deployment(parent)  # a run tree runs on the version of its root
    request = EventRequest.of(
        EventType.RUN_CREATED,
        workflow_name=workflow_id,
        input=input,
        attributes=((PARENT_ATTR, meta.run_id), (ROOT_ATTR, root)),
        **({} if deployment is None else {"deployment_id": deployment}),
    )
    with contextlib.suppress(EntityConflict):  # made by an earlier attempt
        await world.events.create(child_id, request)
    await enqueue_wake(world, child_id, key=f"start:{child_id}", deployment=deployment)
    return child_id


assert start_child.definition.step_id == START_CHILD_STEP


@step(module="durasim", name="child_outcome", max_retries=10)
async def child_outcome(child_id: str) -> dict[str, Any] | None:
    """The child's outcome if it has ended, else ``None``."""
    run = await step_world().runs.get(child_id)
    return outcome_of(run) if run.status.terminal else None


async def await_child(child_id: str) -> Any:
    """Workflow code: wait durably for the child to end; its result (or its error raised)."""
    with create_hook(token=_TOKEN_PREFIX + child_id) as hook:
        outcome = await child_outcome(child_id)
        if outcome is None:
            outcome = await hook
    return raise_or_return(outcome)


async def notify_parent(world: World, run_id: str, *, parent: str | None = None) -> None:
    """If ``run_id`` is a child that has ended, hand its outcome to a waiting parent.

    ``parent``: the run's parent as read earlier (``""``: none), ``None`` if it was
    not read.  A run is a child from its ``run_created`` on (the runtime never sets
    the attribute later): a run read without a parent is not read again.
    """
    if parent == "":
        return
    try:
        run = await world.runs.get(run_id)
    except RunNotFound:
        return
    parent = run.attributes.get(PARENT_ATTR)
    if not parent or not run.status.terminal:
        return
    with contextlib.suppress(HookNotFoundError):  # the parent is not waiting (yet, or any more)
        await resume_hook(
            _TOKEN_PREFIX + run_id, outcome_of(run), world=world, resume_id=f"child-end:{run_id}"
        )


async def cascade_cancel(world: World, run_id: str, reason: str) -> list[str]:
    """Cancel the unfinished children of ``run_id`` (and theirs); the ids cancelled."""
    cancelled: list[str] = []
    for row in await world.steps.list(run_id):
        if row.step_name != START_CHILD_STEP or row.status is not StepStatus.COMPLETED:
            continue
        child_id = deserialize(row.output or b"")
        with contextlib.suppress(EntityConflict, RunNotFound):  # it had ended
            written = await world.events.create(
                child_id,
                EventRequest.of("run_cancelled", reason=f"parent run {run_id} cancelled: {reason}"),
            )
            if written.allocated:
                cancelled.append(child_id)
                cancelled += await cascade_cancel(world, child_id, reason)
    return cancelled
