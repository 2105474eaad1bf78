"""A deep copy of a MemoryWorld is a World of its own (the linearizability checker's reference)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from durasim.worlds import EntityConflict, EventRequest, FixedClock, MemoryWorld, StepStatus


async def _with_pending_step() -> MemoryWorld:
    world = MemoryWorld(clock=FixedClock())
    await world.events.create("r", EventRequest.of("run_created", workflow_name="wf", input=b"i"))
    await world.events.create("r", EventRequest.of("run_started"))
    await world.events.create(
        "r", EventRequest.of("step_created", correlation_id="s1", step_name="st", input=b"i")
    )
    return world


def test_a_deep_copy_judges_and_changes_its_own_steps() -> None:
    async def scenario() -> None:
        original = await _with_pending_step()
        twin = copy.deepcopy(original)
        # The copy's guards read the copy's steps: the step is pending there too...
        with pytest.raises(EntityConflict, match="'s1' is pending"):
            await twin.events.create(
                "r", EventRequest.of("step_failed", correlation_id="s1", error=b"e")
            )
        # ...and a step the copy creates is the copy's alone.
        await twin.events.create(
            "r", EventRequest.of("step_created", correlation_id="s2", step_name="st", input=b"i")
        )
        await twin.events.create("r", EventRequest.of("step_started", correlation_id="s2"))
        assert (await twin.steps.get("r", "s2")).status is StepStatus.RUNNING
        assert [s.step_id for s in await original.steps.list("r")] == ["s1"]
        # The original, written after the copy, is judged on its own steps.
        await original.events.create("r", EventRequest.of("step_started", correlation_id="s1"))
        assert (await original.steps.get("r", "s1")).status is StepStatus.RUNNING
        assert (await twin.steps.get("r", "s1")).status is StepStatus.PENDING

    asyncio.run(scenario())
