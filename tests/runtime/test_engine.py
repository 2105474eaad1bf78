"""The replay engine end to end: runs on both Worlds, in virtual time."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from _drive import run_to_end

from durasim.runtime import FatalError, RetryableError
from durasim.runtime._authoring import step, workflow
from durasim.runtime._client import start
from durasim.runtime._errors import WorkflowFailed
from durasim.runtime._metadata import get_step_metadata, get_workflow_metadata
from durasim.runtime._worker import Worker
from durasim.worlds import FixedClock, RunStatus, World

CALLS: Counter[str] = Counter()


@step
def add(a: int, b: int) -> int:
    CALLS["add"] += 1
    return a + b


@step
async def double(x: int) -> int:
    CALLS["double"] += 1
    return x * 2


@workflow
async def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


async def test_sequential_steps_run_once_each(world: World, clock: FixedClock) -> None:
    CALLS.clear()
    run = await start(sequential, 10, world=world)
    worker = await run_to_end(world, clock, run)
    assert await run.result() == 45
    assert CALLS["add"] == 10
    events = await run.events()
    assert Counter(e.type.value for e in events)["step_completed"] == 10
    assert len({e.correlation_id for e in events if e.type.value == "step_completed"}) == 10
    # one delivery ran all ten steps inline, replaying from the top once
    assert [(r.status, r.full_replays, r.steps_run) for r in worker.reports] == [
        ("finished", 1, 10)
    ]


@workflow
async def fan_out() -> list[int]:
    return list(await asyncio.gather(*(double(i) for i in range(5))))


async def test_gather_runs_steps_in_parallel_and_keeps_order(
    world: World, clock: FixedClock
) -> None:
    run = await start(fan_out, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == [0, 2, 4, 6, 8]
    created = [e for e in await run.events() if e.type.value == "step_created"]
    assert [e.correlation_id for e in created] == [
        f"step//test_engine//double#{i}" for i in range(1, 6)
    ]
    assert len({e.seq for e in created}) == 5


@workflow
async def sleeper() -> float:
    before = time.time()
    await asyncio.sleep(3600)
    return time.time() - before


async def test_durable_sleep_suspends_and_resumes_in_virtual_time(
    world: World, clock: FixedClock
) -> None:
    run = await start(sleeper, world=world)
    worker = await run_to_end(world, clock, run)
    assert worker.reports[0].status == "suspended"
    assert worker.reports[0].wake_at is not None
    # the run's own clock moved by the sleep, not by the wall clock
    assert await run.result() >= 3600
    kinds = [e.type.value for e in await run.events()]
    assert kinds.count("wait_created") == 1
    assert kinds.count("wait_completed") == 1


FLAKY: Counter[str] = Counter()


@step(max_retries=3)
def flaky(key: str, failures: int) -> str:
    FLAKY[key] += 1
    if FLAKY[key] <= failures:
        raise ConnectionError(f"attempt {FLAKY[key]} failed")
    return f"{key} ok after {FLAKY[key]}"


@workflow
async def retrying(key: str, failures: int) -> str:
    return await flaky(key, failures)


async def test_failing_step_is_retried_with_backoff(world: World, clock: FixedClock) -> None:
    FLAKY.clear()
    run = await start(retrying, "a", 2, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == "a ok after 3"
    events = await run.events()
    assert [e.type.value for e in events if e.type.value.startswith("step_")] == [
        "step_created",
        "step_started",
        "step_retrying",
        "step_started",
        "step_retrying",
        "step_started",
        "step_completed",
    ]
    retries = [e for e in events if e.type.value == "step_retrying"]
    starts = [e for e in events if e.type.value == "step_started"]
    # each retry waited out its back-off (1 s, then 2 s) in virtual time
    assert starts[1].created_at >= retries[0].data["retry_after"]
    assert starts[2].created_at >= retries[1].data["retry_after"]
    assert [s.data["attempt"] for s in starts] == [1, 2, 3]


async def test_exhausted_retries_fail_the_run(world: World, clock: FixedClock) -> None:
    FLAKY.clear()
    run = await start(retrying, "b", 10, world=world)
    await run_to_end(world, clock, run)
    assert await run.status() is RunStatus.FAILED
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert FLAKY["b"] == 4  # 1 + max_retries


@step
def refuse(amount: int) -> None:
    raise FatalError(f"amount {amount} is over the limit")


@step
def record(note: str) -> str:
    return note


@workflow
async def catches() -> str:
    try:
        await refuse(500)
    except FatalError as exc:
        return await record(f"caught: {exc}")
    return "not reached"


async def test_fatal_error_fails_the_step_at_once_and_the_workflow_may_catch_it(
    world: World, clock: FixedClock
) -> None:
    run = await start(catches, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == "caught: amount 500 is over the limit"
    kinds = [e.type.value for e in await run.events()]
    assert kinds.count("step_failed") == 1
    assert "step_retrying" not in kinds


@step
def wait_a_bit(seconds: float) -> None:
    raise RetryableError("not yet", retry_after=seconds)


@workflow
async def retry_after_workflow() -> None:
    await wait_a_bit(90)


async def test_retryable_error_sets_retry_after(world: World, clock: FixedClock) -> None:
    run = await start(retry_after_workflow, world=world)
    await Worker(world).drain()
    events = await run.events()
    retrying_event = next(e for e in events if e.type.value == "step_retrying")
    started = next(e for e in events if e.type.value == "step_started")
    assert (retrying_event.data["retry_after"] - started.created_at).total_seconds() == 90


@step
def observe() -> tuple[str, int]:
    meta = get_step_metadata()
    return meta.step_id, meta.attempt


@workflow
async def deterministic() -> dict[str, object]:
    meta = get_workflow_metadata()
    first = await observe()
    return {
        "random": [random.random() for _ in range(3)],
        "uuid": str(uuid.uuid4()),
        "time": time.time(),
        "run": meta.run_id,
        "step": first,
    }


async def test_time_randomness_and_ids_replay_identically(world: World, clock: FixedClock) -> None:
    run = await start(deterministic, world=world, run_id="det-1")
    await run_to_end(world, clock, run)
    result = await run.result()
    assert result["run"] == "det-1"
    assert result["step"] == ("step//test_engine//observe#1", 1)
    # a cold replay of the finished log reproduces every value
    from durasim.runtime._authoring import find_workflow
    from durasim.runtime._replay import Replay

    events = await run.events()
    started = next(e for e in events if e.type.value == "run_started").created_at
    created = next(e for e in events if e.type.value == "run_created")
    replay = Replay(
        find_workflow(created.data["workflow_name"]),
        run_id="det-1",
        input=created.data["input"],
        started_at=started,
    )
    replay.begin()
    for event in events[:-1]:
        replay.deliver(event)
    assert replay.outcome() == (True, result)


@workflow
async def writes_a_file(path: str) -> None:
    with open(path, "w") as handle:  # noqa: ASYNC230 -- the point of the test
        handle.write("no")


async def test_io_inside_a_workflow_is_refused(
    world: World, clock: FixedClock, tmp_path: Path
) -> None:
    target = tmp_path / "nope.txt"
    run = await start(writes_a_file, str(target), world=world)
    await run_to_end(world, clock, run)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    cause = caught.value.__cause__
    assert getattr(cause, "type_name", type(cause).__name__).endswith("WorkflowSandboxError")
    assert "inside a @step" in str(cause)
    assert not target.exists()


async def test_start_with_a_run_id_is_idempotent(world: World, clock: FixedClock) -> None:
    first = await start(sequential, 3, world=world, run_id="order-42")
    second = await start(sequential, 3, world=world, run_id="order-42")
    assert first.run_id == second.run_id == "order-42"
    await run_to_end(world, clock, first)
    assert await second.result() == 3
    assert sum(1 for e in await first.events() if e.type.value == "run_created") == 1


async def test_a_worker_without_the_workflow_gives_the_message_back(
    world: World, clock: FixedClock
) -> None:
    from durasim.runtime.lowlevel import ORCHESTRATOR_QUEUE, wake_message
    from durasim.worlds import EventRequest

    await world.events.create(
        "elsewhere",
        EventRequest.of("run_created", workflow_name="workflow//not_here//flow", input=b""),
    )
    await world.queue.enqueue(
        ORCHESTRATOR_QUEUE, wake_message("elsewhere"), run_id="elsewhere", orchestrator=True
    )
    worker = Worker(world)
    await worker.drain()
    assert [r.status for r in worker.reports] == ["unavailable"]
    (message,) = await world.queue.messages()
    assert message.available_at > clock.now()  # released with a back-off, not acked
    assert (await world.runs.get("elsewhere")).status is RunStatus.PENDING
