"""Starting runs and reading them: the API used outside workflows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from durasim.worlds import (
    EntityConflict,
    Event,
    EventRequest,
    EventType,
    InvalidRequest,
    RunStatus,
    World,
)

from ._authoring import workflow_definition
from ._errors import RunCancelledError, RunNotFinished, WorkflowFailed
from ._orchestrator import enqueue_wake
from .serialization import deserialize, serialize

__all__ = ["Run", "get_run", "start"]


@attrs.define(eq=False)
class Run:
    """A handle on one run in a World."""

    run_id: str
    world: World

    async def status(self) -> RunStatus:
        """The run's status now."""
        return (await self.world.runs.get(self.run_id)).status

    async def result(self) -> Any:
        """The workflow's return value, or its failure raised.

        Raises:
            RunNotFinished: the run has not ended (drive a worker, then ask again).
            WorkflowFailed: the run failed; ``__cause__`` is the workflow's error.
            RunCancelledError: the run was cancelled.
        """
        run = await self.world.runs.get(self.run_id)
        if run.status is RunStatus.COMPLETED:
            return deserialize(run.output or b"")
        if run.status is RunStatus.FAILED:
            cause = deserialize(run.error) if run.error else None
            error = WorkflowFailed(
                f"run {self.run_id} failed ({run.error_code}): {cause}",
                run_id=self.run_id,
                error_code=run.error_code or "USER_ERROR",
            )
            if isinstance(cause, BaseException):
                raise error from cause
            raise error
        if run.status is RunStatus.CANCELLED:
            raise RunCancelledError(
                f"run {self.run_id} was cancelled: {run.cancel_reason or 'no reason given'}",
                run_id=self.run_id,
            )
        raise RunNotFinished(
            f"run {self.run_id} is {run.status.value}: run a worker until it ends "
            "(Worker(world).run_until_complete(run)), then ask again",
            run_id=self.run_id,
        )

    async def events(self) -> list[Event]:
        """The run's whole log, in order."""
        events: list[Event] = []
        after = 0
        while True:
            page = await self.world.events.list(self.run_id, after_seq=after, limit=5000)
            events.extend(page.events)
            after = page.next_after
            if not page.has_more:
                return events

    async def wake_up(self) -> int:
        """Complete every open durable sleep now; returns how many were woken."""
        open_waits = [w for w in await self.world.waits.list(self.run_id) if w.status == "waiting"]
        woken = 0
        for wait in open_waits:
            try:
                await self.world.events.create(
                    self.run_id, EventRequest.of("wait_completed", wait.wait_id, early=True)
                )
                woken += 1
            except EntityConflict:
                continue  # completed meanwhile
        if woken:
            await enqueue_wake(self.world, self.run_id)
        return woken


async def start(
    workflow: Callable[..., Any],
    *args: Any,
    world: World,
    run_id: str | None = None,
    **kwargs: Any,
) -> Run:
    """Start ``workflow(*args, **kwargs)`` as a durable run and queue its first delivery.

    With a caller-chosen ``run_id`` start is idempotent: starting the same run
    again returns the existing run (and re-queues its delivery, which is
    harmless).  A different workflow under an existing run id is refused.
    """
    definition = workflow_definition(workflow)
    data = serialize({"args": list(args), "kwargs": kwargs}, root=f"{definition.name}(...)")
    request = EventRequest.of(
        EventType.RUN_CREATED, workflow_name=definition.workflow_id, input=data
    )
    try:
        created = await world.events.create(run_id, request)
        run_id = created.run.run_id
    except EntityConflict:
        assert run_id is not None
        existing = await world.runs.get(run_id)
        if existing.workflow_name != definition.workflow_id:
            raise InvalidRequest(
                f"run {run_id!r} already exists for {existing.workflow_name}, not "
                f"{definition.workflow_id}: choose another run id",
                run_id=run_id,
            ) from None
    await enqueue_wake(world, run_id, key=f"start:{run_id}")
    return Run(run_id=run_id, world=world)


def get_run(run_id: str, *, world: World) -> Run:
    """A handle on an existing run (no I/O until you ask it something)."""
    return Run(run_id=run_id, world=world)
