"""Contract: when several refusals apply, the first in the order of docs/protocol.md §5 wins."""

from __future__ import annotations

from datetime import timedelta

from durasim.worlds import (
    EntityConflict,
    EventRequest,
    FixedClock,
    InBandSuperseded,
    InvalidRequest,
    RunExpired,
    RunNotFound,
    StepNotFound,
    World,
)

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import assert_refused, end_run, new_hook, new_run, new_running_run, new_step, req


def _bad_shape() -> EventRequest:
    return EventRequest(type="step_completed", correlation_id="s1", data={"result": "str"})  # type: ignore[arg-type]


async def test_shape_before_unknown_run(world: World) -> None:
    await assert_refused(world, InvalidRequest, lambda: world.events.create("nope", _bad_shape()))


async def test_shape_before_duplicate_run(world: World) -> None:
    await new_run(world, "r1")
    bad = EventRequest(type="run_created", data={"workflow_name": "wf"})  # type: ignore[arg-type]
    await assert_refused(world, InvalidRequest, lambda: world.events.create("r1", bad))


async def test_shape_before_fence(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create(run_id, _bad_shape(), in_band=True, expected_seq_in_band=99),
    )


async def test_unknown_run_before_fence(world: World) -> None:
    await assert_refused(
        world,
        RunNotFound,
        lambda: world.events.create("nope", req("run_started"), in_band=True),
    )
    await assert_refused(
        world,
        RunNotFound,
        lambda: world.events.create(
            "nope", req("run_started"), in_band=True, expected_seq_in_band=3
        ),
    )


async def test_fence_before_duplicate_resume(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    await world.events.create(run_id, req("hook_received", "h1", payload=b"", resume_id="r"))
    await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create(
            run_id,
            req("hook_received", "h1", payload=b"", resume_id="r"),
            in_band=True,
            expected_seq_in_band=0,
        ),
    )


async def test_fence_before_terminal_run(world: World) -> None:
    run_id = await new_running_run(world)
    await end_run(world, run_id, "completed")
    await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create(
            run_id, req("run_started"), in_band=True, expected_seq_in_band=7
        ),
    )


async def test_missing_step_on_a_terminal_run_is_step_not_found(world: World) -> None:
    run_id = await new_running_run(world)
    await end_run(world, run_id, "failed")
    await assert_refused(
        world, StepNotFound, lambda: world.events.create(run_id, req("step_started", "ghost"))
    )


async def test_run_expiry_before_too_early(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    await world.events.create(
        run_id,
        req("step_retrying", "s1", error=b"", retry_after=clock.now() + timedelta(seconds=60)),
    )
    await end_run(world, run_id, "cancelled")
    await assert_refused(
        world, RunExpired, lambda: world.events.create(run_id, req("step_started", "s1"))
    )


async def test_terminal_run_before_pending_run_rules(world: World) -> None:
    # A run cancelled while pending: child creation is a terminal-run conflict, start is expired.
    run_id = await new_run(world)
    await end_run(world, run_id, "cancelled")
    await assert_refused(world, RunExpired, lambda: world.events.create(run_id, req("run_started")))
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("run_completed", output=b"")),
    )


async def test_batch_shape_before_fence(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create_batch(
            run_id, [req("run_started")], in_band=True, expected_seq_in_band=99
        ),
    )
