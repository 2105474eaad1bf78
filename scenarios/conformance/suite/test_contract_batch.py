"""Contract: create_batch: consecutive positions, all or nothing, legal mixes only."""

from __future__ import annotations

import pytest

from durasim.worlds import (
    EntityConflict,
    EventType,
    FixedClock,
    InvalidRequest,
    RunExpired,
    StepNotFound,
    StepStatus,
    World,
)

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import all_events, assert_refused, new_hook, new_running_run, new_step, req


async def test_batch_takes_consecutive_positions(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    await world.events.create(run_id, req("attr_set", changes={"a": "1"}))
    result = await world.events.create_batch(
        run_id,
        [
            req("step_created", "s1", step_name="a", input=b"1"),
            req("step_created", "s2", step_name="b", input=b"2"),
            req("wait_created", "w1", resume_at=clock.now()),
        ],
    )
    assert [e.seq for e in result.events] == [4, 5, 6]
    assert [e.correlation_id for e in result.events] == ["s1", "s2", "w1"]
    assert all(e.created_at == clock.now() for e in result.events)
    assert result.allocated == 3
    assert result.run == await world.runs.get(run_id)
    assert (await all_events(world, run_id))[3:] == result.events


async def test_step_created_and_started_pair(world: World) -> None:
    run_id = await new_running_run(world)
    result = await world.events.create_batch(
        run_id,
        [req("step_created", "s1", step_name="a", input=b"i"), req("step_started", "s1")],
    )
    assert [e.type for e in result.events] == [EventType.STEP_CREATED, EventType.STEP_STARTED]
    assert result.events[1].data["attempt"] == 1
    step = await world.steps.get(run_id, "s1")
    assert (step.status, step.attempt, step.input) == (StepStatus.RUNNING, 1, b"i")


async def test_batch_can_end_the_run_with_its_outcomes(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    result = await world.events.create_batch(
        run_id,
        [
            req("run_completed", output=b"o"),
            req("step_completed", "s1", result=b"r"),  # a running step may still report
        ],
    )
    assert result.run.status.terminal
    assert (await world.steps.get(run_id, "s1")).status is StepStatus.COMPLETED


async def test_illegal_third_item_leaves_nothing(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        StepNotFound,
        lambda: world.events.create_batch(
            run_id,
            [
                req("step_created", "s1", step_name="a", input=b""),
                req("step_created", "s2", step_name="b", input=b""),
                req("step_completed", "missing", result=b""),
            ],
        ),
    )
    assert await world.steps.list(run_id) == ()


async def test_batch_sees_its_own_writes(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    # The run ends inside the batch; a later item that adds a child is refused.
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create_batch(
            run_id,
            [
                req("run_failed", error=b"e"),
                req("step_created", "s1x", step_name="a", input=b""),
            ],
        ),
    )


async def test_batch_item_refusal_after_run_end_in_same_batch(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "pending")
    await assert_refused(
        world,
        RunExpired,
        lambda: world.events.create_batch(
            run_id, [req("run_completed", output=b""), req("step_started", "pending")]
        ),
    )


@pytest.mark.parametrize(
    "request_",
    [
        req("run_created", workflow_name="wf", input=b""),
        req("run_started"),
        req("run_cancelled"),
        req("hook_created", "h9", token="t9"),
        req("hook_disposed", "h1"),
        req("attr_set", changes={"a": "1"}),
    ],
    ids=lambda r: r.type.value,
)
async def test_forbidden_types_refuse_the_whole_batch(world: World, request_: object) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create_batch(
            run_id,
            [req("step_created", "s1", step_name="a", input=b""), request_],  # type: ignore[list-item]
        ),
    )


async def test_empty_batch_is_invalid(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(world, InvalidRequest, lambda: world.events.create_batch(run_id, []))


@pytest.mark.parametrize(
    "pair",
    [
        [
            req("step_created", "s1", step_name="a", input=b""),
            req("step_created", "s1", step_name="a", input=b""),
        ],
        [
            req("step_created", "s1", step_name="a", input=b""),
            req("step_completed", "s1", result=b""),
        ],
        [req("step_started", "s0"), req("step_completed", "s0", result=b"")],
        [req("step_started", "s0"), req("step_created", "s0", step_name="a", input=b"")],
        [req("wait_created", "w1", resume_at=FixedClock().now()), req("wait_completed", "w1")],
    ],
    ids=["created-twice", "created-completed", "started-completed", "started-created", "wait"],
)
async def test_one_entity_twice_is_invalid_except_created_started(
    world: World, pair: list[object]
) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s0")
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create_batch(run_id, pair),  # type: ignore[arg-type]
    )


async def test_batch_refusal_of_a_duplicate_create(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s0")
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create_batch(
            run_id,
            [
                req("step_created", "s1", step_name="a", input=b""),
                req("step_created", "s0", step_name="a", input=b""),
            ],
        ),
    )
