"""Contract: the run, step and wait lifecycles, attr_set, and every refusal on them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durasim.worlds import (
    EntityConflict,
    EventType,
    FixedClock,
    RunExpired,
    RunStatus,
    StepNotFound,
    StepStatus,
    TooEarly,
    WaitNotFound,
    WaitStatus,
    World,
)

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import (
    all_events,
    assert_refused,
    end_run,
    new_hook,
    new_run,
    new_running_run,
    new_step,
    new_wait,
    req,
    world_state,
)

ENDINGS = ["completed", "failed", "cancelled"]

# --- runs -----------------------------------------------------------------------------


async def test_run_lifecycle_to_completed(world: World, clock: FixedClock) -> None:
    run_id = await new_run(world)
    clock.advance(1)
    started = await world.events.create(run_id, req("run_started"))
    assert started.allocated == 1
    assert started.run.status is RunStatus.RUNNING
    assert started.run.started_at == clock.now()
    clock.advance(1)
    done = await world.events.create(run_id, req("run_completed", output=b"out"))
    run = done.run
    assert run.status is RunStatus.COMPLETED
    assert run.output == b"out"
    assert run.completed_at == run.updated_at == clock.now()
    assert run.started_at == clock.now() - timedelta(seconds=1)
    assert await world.runs.get(run_id) == run
    assert [e.type for e in await all_events(world, run_id)] == [
        EventType.RUN_CREATED,
        EventType.RUN_STARTED,
        EventType.RUN_COMPLETED,
    ]


async def test_run_failed_keeps_error_and_code(world: World) -> None:
    run_id = await new_running_run(world)
    result = await world.events.create(
        run_id, req("run_failed", error=b"boom", error_code="USER_ERROR")
    )
    assert result.run.status is RunStatus.FAILED
    assert (result.run.error, result.run.error_code) == (b"boom", "USER_ERROR")


@pytest.mark.parametrize("started", [False, True], ids=["pending", "running"])
async def test_run_cancelled_from_pending_or_running(world: World, started: bool) -> None:
    run_id = await (new_running_run(world) if started else new_run(world))
    result = await world.events.create(run_id, req("run_cancelled", reason="operator"))
    assert result.run.status is RunStatus.CANCELLED
    assert result.run.cancel_reason == "operator"
    assert result.allocated == 1


async def test_second_run_started_appends_nothing(world: World) -> None:
    run_id = await new_running_run(world)
    before = await world_state(world)
    again = await world.events.create(run_id, req("run_started"))
    assert again.event is None
    assert again.allocated == 0
    assert again.run.status is RunStatus.RUNNING
    assert await world_state(world) == before


async def test_run_cancelled_on_cancelled_run_appends_nothing(world: World) -> None:
    run_id = await new_running_run(world)
    await end_run(world, run_id, "cancelled")
    before = await world_state(world)
    again = await world.events.create(run_id, req("run_cancelled", reason="twice"))
    assert again.event is None
    assert again.allocated == 0
    assert again.run.status is RunStatus.CANCELLED
    assert again.run.cancel_reason == "operator"
    assert await world_state(world) == before


@pytest.mark.parametrize("kind", ["run_completed", "run_failed"])
async def test_pending_run_cannot_finish(world: World, kind: str) -> None:
    run_id = await new_run(world)
    data = {"output": b""} if kind == "run_completed" else {"error": b""}
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req(kind, **data)),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("ending", ENDINGS)
async def test_terminal_run_cannot_start_again(world: World, ending: str) -> None:
    run_id = await new_running_run(world)
    await end_run(world, run_id, ending)
    exc = await assert_refused(
        world, RunExpired, lambda: world.events.create(run_id, req("run_started"))
    )
    assert exc.run_id == run_id  # type: ignore[attr-defined]


_TERMINAL_WRITES = {
    "run_completed": {"output": b"o"},
    "run_failed": {"error": b"e"},
    "run_cancelled": {},
}


@pytest.mark.parametrize(
    ("ending", "kind"),
    [
        (ending, kind)
        for ending in ENDINGS
        for kind in _TERMINAL_WRITES
        # cancelling a cancelled run is tolerated (tested above)
        if (ending, kind) != ("cancelled", "run_cancelled")
    ],
)
async def test_terminal_to_terminal_is_refused(world: World, ending: str, kind: str) -> None:
    data = _TERMINAL_WRITES[kind]
    run_id = await new_running_run(world)
    await end_run(world, run_id, ending)
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req(kind, **data)),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize(
    "request_",
    [
        req("step_created", "s9", step_name="a", input=b""),
        req("hook_created", "h9", token="fresh-token"),
        req("wait_created", "w9", resume_at=FixedClock().now()),
        req("attr_set", changes={"k": "v"}),
    ],
    ids=["step_created", "hook_created", "wait_created", "attr_set"],
)
async def test_terminal_run_accepts_no_children(
    world: World, ending: str, request_: object
) -> None:
    run_id = await new_running_run(world)
    await end_run(world, run_id, ending)
    exc = await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )
    assert exc.run_id == run_id  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "request_",
    [
        req("step_created", "s9", step_name="a", input=b""),
        req("hook_created", "h9", token="fresh-token"),
        req("wait_created", "w9", resume_at=FixedClock().now()),
    ],
    ids=["step_created", "hook_created", "wait_created"],
)
async def test_pending_run_accepts_no_children(world: World, request_: object) -> None:
    run_id = await new_run(world)
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )


# --- steps ----------------------------------------------------------------------------


async def test_step_lifecycle_to_completed(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    created = await world.events.create(
        run_id,
        req(
            "step_created",
            "s1",
            step_name="charge",
            input=b"i",
            inline=True,
            creator_message_id="m1",
        ),
    )
    step = created.step
    assert step is not None
    assert (step.step_id, step.step_name, step.status, step.attempt, step.input, step.inline) == (
        "s1",
        "charge",
        StepStatus.PENDING,
        0,
        b"i",
        True,
    )
    assert created.event is not None
    assert created.event.correlation_id == "s1"
    assert created.event.data["creator_message_id"] == "m1"
    clock.advance(1)
    started = await world.events.create(
        run_id, req("step_started", "s1", owner_message_id="m1", start_reason="inline")
    )
    assert started.step is not None
    assert (started.step.status, started.step.attempt) == (StepStatus.RUNNING, 1)
    assert started.step.started_at == clock.now()
    assert started.event is not None
    assert dict(started.event.data) == {
        "attempt": 1,
        "owner_message_id": "m1",
        "start_reason": "inline",
    }
    clock.advance(1)
    done = await world.events.create(run_id, req("step_completed", "s1", result=b"r"))
    assert done.step is not None
    assert (done.step.status, done.step.output) == (StepStatus.COMPLETED, b"r")
    assert done.step.completed_at == clock.now()
    assert await world.steps.get(run_id, "s1") == done.step
    assert await world.steps.list(run_id) == (done.step,)


async def test_step_failed(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    result = await world.events.create(run_id, req("step_failed", "s1", error=b"e"))
    assert result.step is not None
    assert (result.step.status, result.step.error) == (StepStatus.FAILED, b"e")


async def test_step_retry_with_retry_after(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    retry_after = clock.now() + timedelta(seconds=10)
    retrying = await world.events.create(
        run_id, req("step_retrying", "s1", error=b"flaky", retry_after=retry_after)
    )
    step = retrying.step
    assert step is not None
    assert (step.status, step.error, step.retry_after, step.attempt) == (
        StepStatus.PENDING,
        b"flaky",
        retry_after,
        1,
    )
    clock.advance(9.999)
    exc = await assert_refused(
        world, TooEarly, lambda: world.events.create(run_id, req("step_started", "s1"))
    )
    assert exc.retry_after == retry_after  # type: ignore[attr-defined]
    assert exc.run_id == run_id  # type: ignore[attr-defined]
    clock.advance(0.001)  # exactly retry_after: allowed
    again = await world.events.create(run_id, req("step_started", "s1"))
    assert again.step is not None
    assert (again.step.status, again.step.attempt, again.step.retry_after) == (
        StepStatus.RUNNING,
        2,
        None,
    )
    assert again.event is not None
    assert again.event.data["attempt"] == 2


async def test_step_retry_without_retry_after_restarts_at_once(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    await world.events.create(run_id, req("step_retrying", "s1", error=b"e"))
    again = await world.events.create(run_id, req("step_started", "s1"))
    assert again.step is not None
    assert again.step.attempt == 2


async def test_running_step_may_start_again(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    again = await world.events.create(run_id, req("step_started", "s1"))
    assert again.step is not None
    assert (again.step.status, again.step.attempt) == (StepStatus.RUNNING, 2)


async def test_steps_list_in_creation_order(world: World) -> None:
    run_id = await new_running_run(world)
    for step_id in ("zeta", "alpha", "mid"):
        await new_step(world, run_id, step_id)
    assert [s.step_id for s in await world.steps.list(run_id)] == ["zeta", "alpha", "mid"]
    with pytest.raises(StepNotFound):
        await world.steps.get(run_id, "nope")


async def test_duplicate_step_created_is_refused(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1")
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("step_created", "s1", step_name="x", input=b"")),
    )


@pytest.mark.parametrize(
    "request_",
    [
        req("step_started", "nope"),
        req("step_retrying", "nope", error=b""),
        req("step_completed", "nope", result=b""),
        req("step_failed", "nope", error=b""),
    ],
    ids=lambda r: r.type.value,
)
async def test_step_events_need_the_step(world: World, request_: object) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        StepNotFound,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "request_",
    [
        req("step_retrying", "s1", error=b""),
        req("step_completed", "s1", result=b""),
        req("step_failed", "s1", error=b""),
    ],
    ids=lambda r: r.type.value,
)
async def test_pending_step_cannot_report(world: World, request_: object) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1")
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("outcome", ["step_completed", "step_failed"])
@pytest.mark.parametrize(
    "request_",
    [
        req("step_started", "s1"),
        req("step_retrying", "s1", error=b""),
        req("step_completed", "s1", result=b""),
        req("step_failed", "s1", error=b""),
    ],
    ids=lambda r: r.type.value,
)
async def test_terminal_step_accepts_nothing(world: World, outcome: str, request_: object) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    data = {"result": b""} if outcome == "step_completed" else {"error": b""}
    await world.events.create(run_id, req(outcome, "s1", **data))
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize(
    "request_",
    [req("step_completed", "s1", result=b"late"), req("step_failed", "s1", error=b"late")],
    ids=lambda r: r.type.value,
)
async def test_running_step_may_report_after_the_run_ended(
    world: World, ending: str, request_: object
) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    await end_run(world, run_id, ending)
    result = await world.events.create(run_id, request_)  # type: ignore[arg-type]
    assert result.allocated == 1
    assert result.step is not None
    assert result.step.status.terminal
    assert result.run.status.value == ending


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize(
    ("running", "request_"),
    [
        (False, req("step_started", "s1")),
        (True, req("step_started", "s1")),
        (True, req("step_retrying", "s1", error=b"")),
    ],
    ids=["start-pending", "restart-running", "retry-running"],
)
async def test_after_run_end_steps_may_only_report_outcomes(
    world: World, ending: str, running: bool, request_: object
) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=running)
    await end_run(world, run_id, ending)
    await assert_refused(
        world,
        RunExpired,
        lambda: world.events.create(run_id, request_),  # type: ignore[arg-type]
    )


async def test_terminal_step_check_precedes_run_expiry(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s1", start=True)
    await world.events.create(run_id, req("step_completed", "s1", result=b""))
    await end_run(world, run_id, "completed")
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("step_completed", "s1", result=b"")),
    )


# --- waits ----------------------------------------------------------------------------


async def test_wait_lifecycle(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    resume_at = clock.now() + timedelta(seconds=30)
    created = await world.events.create(run_id, req("wait_created", "w1", resume_at=resume_at))
    wait = created.wait
    assert wait is not None
    assert (wait.wait_id, wait.status, wait.resume_at) == ("w1", WaitStatus.WAITING, resume_at)
    clock.advance(29)
    exc = await assert_refused(
        world, TooEarly, lambda: world.events.create(run_id, req("wait_completed", "w1"))
    )
    assert exc.retry_after == resume_at  # type: ignore[attr-defined]
    clock.advance(1)
    done = await world.events.create(run_id, req("wait_completed", "w1"))
    assert done.wait is not None
    assert (done.wait.status, done.wait.completed_at) == (WaitStatus.COMPLETED, clock.now())
    assert done.event is not None
    assert done.event.data["resume_at"] == resume_at
    assert await world.waits.get(run_id, "w1") == done.wait
    assert await world.waits.list(run_id) == (done.wait,)


async def test_wait_completed_early(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    await new_wait(world, run_id, "w1", seconds=3600)
    done = await world.events.create(run_id, req("wait_completed", "w1", early=True))
    assert done.wait is not None
    assert done.wait.status is WaitStatus.COMPLETED
    assert done.wait.completed_at == clock.now()
    assert done.event is not None
    assert done.event.data["early"] is True


async def test_wait_refusals(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    await new_wait(world, run_id, "w1", seconds=0)
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("wait_created", "w1", resume_at=clock.now())),
    )
    await assert_refused(
        world, WaitNotFound, lambda: world.events.create(run_id, req("wait_completed", "nope"))
    )
    await world.events.create(run_id, req("wait_completed", "w1"))
    await assert_refused(
        world, EntityConflict, lambda: world.events.create(run_id, req("wait_completed", "w1"))
    )
    with pytest.raises(WaitNotFound):
        await world.waits.get(run_id, "nope")


@pytest.mark.parametrize("ending", ENDINGS)
async def test_run_end_releases_waiting_waits(world: World, ending: str) -> None:
    run_id = await new_running_run(world)
    await new_wait(world, run_id, "done", seconds=0)
    await world.events.create(run_id, req("wait_completed", "done"))
    await new_wait(world, run_id, "open", seconds=60)
    await end_run(world, run_id, ending)
    statuses = {w.wait_id: w.status for w in await world.waits.list(run_id)}
    assert statuses == {"done": WaitStatus.COMPLETED, "open": WaitStatus.RELEASED}
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("wait_completed", "open", early=True)),
    )


# --- attr_set -------------------------------------------------------------------------


async def test_attr_set_merges_and_deletes(world: World) -> None:
    run_id = await new_run(world, attributes={"keep": "1", "drop": "2", "gone": None})
    assert dict((await world.runs.get(run_id)).attributes) == {"keep": "1", "drop": "2"}
    # attr_set is accepted on a pending run
    result = await world.events.create(
        run_id, req("attr_set", changes=[("drop", None), ("new", "3")], writer="workflow")
    )
    assert dict(result.run.attributes) == {"keep": "1", "new": "3"}
    assert result.event is not None
    assert result.event.data["writer"] == "workflow"
    assert result.event.correlation_id is None
    await world.events.create(run_id, req("run_started"))
    await world.events.create(run_id, req("attr_set", changes={"keep": "9", "absent": None}))
    assert dict((await world.runs.get(run_id)).attributes) == {"keep": "9", "new": "3"}


async def test_attr_set_changes_round_trip(world: World) -> None:
    run_id = await new_running_run(world)
    result = await world.events.create(run_id, req("attr_set", changes={"a": "1", "b": None}))
    assert result.event is not None
    assert await world.events.get(run_id, result.event.seq) == result.event
    assert (await world.events.list(run_id)).events[-1] == result.event


async def test_correlation_ids_are_scoped_to_their_run(world: World) -> None:
    """A step, hook and wait id names an entity of its run: another run may use it too.

    Each run gets its own entity under the same id, with its own data (protocol.md §3).
    """
    run_a = await new_running_run(world)
    run_b = await new_running_run(world)
    for run_id, token in ((run_a, "tok-a"), (run_b, "tok-b")):
        await new_step(world, run_id, "s1")
        await new_hook(world, run_id, "h1", token)
        await new_wait(world, run_id, "w1")
    for run_id, token in ((run_a, "tok-a"), (run_b, "tok-b")):
        step = await world.steps.get(run_id, "s1")
        hook = await world.hooks.get(run_id, "h1")
        wait = await world.waits.get(run_id, "w1")
        assert (step.run_id, hook.run_id, wait.run_id) == (run_id, run_id, run_id)
        assert hook.token == token
        assert (await world.hooks.get_by_token(token)).run_id == run_id
        types = [e.type for e in await all_events(world, run_id)]
        assert types.count(EventType.STEP_CREATED) == 1
        assert types.count(EventType.HOOK_CREATED) == 1
        assert types.count(EventType.WAIT_CREATED) == 1
