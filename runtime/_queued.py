"""Steps dispatched through the queue, run by whichever worker claims them.

A delivery that has more new steps than it may run inline (``Limits.queue_steps``)
creates the rest with ``inline=False`` and queues one message per step.  Any
worker that has the step's code claims it and runs it here, out of band:
``step_started``, the body, the outcome, then a wake-up for the run's
orchestrator.  Nested steps (whose code exists only inside a replay) always run
inline.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from durasim.worlds import (
    EntityConflict,
    EventRequest,
    RunExpired,
    StepNotFound,
    TooEarly,
    World,
)

from ._authoring import find_step
from ._metadata import STEP_WORLD, WorkflowMetadata
from ._orchestrator import load_log
from ._payloads import RunPayloads, refers_to_records
from ._steps import execute_step, exhausted
from ._wake import enqueue_wake

__all__ = ["run_queued_step"]

log = logging.getLogger("durasim.runtime")


async def run_queued_step(
    world: World, payload: bytes, *, sync_in_thread: bool, quick_inline: bool = False
) -> float | None:
    """Run one queued step attempt; returns a delay to retry the message after, or None (done)."""
    body = json.loads(payload)
    run_id, correlation_id = str(body["run"]), str(body["step"])
    try:
        step = await world.steps.get(run_id, correlation_id)
    except StepNotFound:
        return None
    if step.status.terminal:
        return None
    try:
        definition = find_step(step.step_name)
    except LookupError as exc:
        log.error(
            "run %s: %s; leaving step %s to a worker that has it", run_id, exc, correlation_id
        )
        return 30.0
    try:
        started = await world.events.create(run_id, EventRequest.of("step_started", correlation_id))
    except TooEarly as exc:
        wait: float = (exc.retry_after - world.clock.now()).total_seconds()
        return max(0.0, wait)
    except (EntityConflict, RunExpired):
        return None  # finished meanwhile, or the run ended
    assert started.event is not None
    attempt = int(started.event.data.get("attempt", 1))
    run = await world.runs.get(run_id)
    metadata = WorkflowMetadata(
        run_id=run_id,
        workflow_id=run.workflow_name,
        started_at=run.started_at or run.created_at,
        execution_context=run.execution_context,
    )
    if attempt > definition.max_retries + 1:
        outcome = exhausted(definition, correlation_id, attempt)
    else:
        if refers_to_records(step.input):  # frozen values stored in earlier records
            payloads = RunPayloads.from_log((await load_log(world, run_id))[0])
        else:  # the input alone: the result may still refer to it
            payloads = RunPayloads()
            payloads.records.add_step_input(correlation_id, step.input)
        token = STEP_WORLD.set(world)
        try:
            outcome = await execute_step(
                definition,
                correlation_id,
                step.input,
                attempt=attempt,
                now=world.clock.now(),
                workflow=metadata,
                sync_in_thread=sync_in_thread,
                quick_inline=quick_inline,
                payloads=payloads,
            )
        finally:
            STEP_WORLD.reset(token)
    try:
        recorded = await world.events.create(run_id, outcome.request)
    except (EntityConflict, RunExpired):
        return None
    seq = recorded.event.seq if recorded.event is not None else 0
    await enqueue_wake(world, run_id, key=f"step-done:{run_id}:{correlation_id}:{attempt}", seq=seq)
    if outcome.retrying:
        retry_after: datetime = outcome.request.data["retry_after"]
        return max(0.0, (retry_after - world.clock.now()).total_seconds())
    return None
