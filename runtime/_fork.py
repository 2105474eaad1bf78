"""Resuming and forking a run: a new run that reuses recorded step results.

A run that ended (failed or cancelled) cannot take more events: the contract
(docs/protocol.md) refuses any write to a terminal run.  So ``resume_run`` and
``fork_run`` start a *new* run of the same workflow with the same input, whose
``run_created`` carries, in ``execution_context``, the results the source run
recorded: every completed step's (resume), or the first ``n`` steps' in log
order (fork).  The new run replays from the top like any run; a step whose
correlation id has a seeded result is not executed: its attempt records that
result (``step_created``, ``step_started``, ``step_completed``, as for any step).
Every other step (the one that failed, and those after it) runs anew with fresh
attempts.  So both are journaled with events the contract already has, and the
new run's log says where its results came from.
"""

from __future__ import annotations

import logging
from typing import Any

from durasim.worlds import EventRequest, EventType, InvalidRequest, RunStatus, World

from ._client import Run, get_run
from ._payloads import RunPayloads, decode_payload
from ._seeds import SEED_KIND
from ._wake import enqueue_wake
from .serialization import SerializationError, serialize

__all__ = ["fork_run", "resume_run"]

log = logging.getLogger("durasim.runtime")


async def resume_run(world: World, run_id: str, *, new_run_id: str | None = None) -> Run[Any]:
    """A failed or cancelled run, continued in a new run from its last recorded step.

    Every step the run completed keeps its result; the step that failed (and
    every step after it) runs again with fresh attempts.

    Raises:
        InvalidRequest: the run is not failed or cancelled.
    """
    source = await world.runs.get(run_id)
    if source.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise InvalidRequest(
            f"run {run_id} is {source.status.value}: only a failed or cancelled run can be "
            "resumed (a live run goes on by itself; a completed one has nothing left: fork it "
            "with --from-step to run its end again)",
            run_id=run_id,
        )
    return await _seeded(world, run_id, None, new_run_id, "resume")


async def fork_run(
    world: World, run_id: str, *, from_step: int, new_run_id: str | None = None
) -> Run[Any]:
    """A new run of the same workflow and input that reuses the first ``from_step`` results.

    The steps are counted in the order their results were recorded; step
    ``from_step + 1`` and every later one run anew.  Any run may be forked,
    whatever its status.

    Raises:
        InvalidRequest: ``from_step`` is negative or more than the completed steps.
    """
    return await _seeded(world, run_id, from_step, new_run_id, "fork")


async def _seeded(
    world: World, run_id: str, from_step: int | None, new_run_id: str | None, how: str
) -> Run[Any]:
    source = await world.runs.get(run_id)
    events = await get_run(run_id, world=world).events()
    payloads = RunPayloads.from_log(events)
    completed = [e for e in events if e.type is EventType.STEP_COMPLETED]
    if from_step is not None and not 0 <= from_step <= len(completed):
        raise InvalidRequest(
            f"--from-step {from_step}: run {run_id} recorded {len(completed)} step results; "
            f"give a number from 0 to {len(completed)}",
            run_id=run_id,
        )
    kept = completed if from_step is None else completed[:from_step]
    results: dict[str, bytes] = {}
    for event in kept:
        assert event.correlation_id is not None
        try:  # standalone bytes: the source's records (frozen values) are not in the new run
            value = decode_payload(event.data["result"], payloads)
            results[event.correlation_id] = serialize(
                value, root=f"result of {event.correlation_id}"
            )
        except SerializationError as exc:
            raise InvalidRequest(
                f"run {run_id}: the result of {event.correlation_id} cannot be decoded here "
                f"({exc}); import the module that defines its types first",
                run_id=run_id,
            ) from exc
    context = serialize(
        {"kind": SEED_KIND, how: run_id, "from_step": len(kept), "results": results}
    )
    request = EventRequest.of(
        EventType.RUN_CREATED,
        workflow_name=source.workflow_name,
        input=source.input,
        execution_context=context,
    )
    created = await world.events.create(new_run_id, request)
    new_id = created.run.run_id
    await enqueue_wake(world, new_id, key=f"start:{new_id}")
    log.info(
        "run %s: %s of run %s, reusing %d recorded step results",
        new_id,
        how,
        run_id,
        len(kept),
        extra={"run_id": new_id, "outcome": how, "source_run_id": run_id},
    )
    return Run(run_id=new_id, world=world)
