"""The cold-replay oracle on real runs: ok, and each verdict on a run made to disagree."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import attrs
import pytest

from durasim.checkers import verify_replay, verify_replay_log
from durasim.runtime import Worker, create_hook, resume_hook, start, step, workflow
from durasim.runtime.serialization import serialize
from durasim.worlds import CountingIds, EventType, FixedClock, MemoryWorld, World

SMUGGLED: dict[str, Any] = {"branch": "a", "sleep": False}


@step(module="oracletests")
def double(x: int) -> int:
    return 2 * x


@step(module="oracletests")
def boom() -> int:
    raise ValueError("no")


@workflow(module="oracletests")
async def steady(n: int) -> int:
    total = 0
    for i in range(n):
        total += await double(i)
    await asyncio.sleep(60)
    with create_hook(token="oracle") as hook:
        total += await hook
    return total


@workflow(module="oracletests")
async def failing() -> int:
    return await boom()


@workflow(module="oracletests")
async def smuggler() -> str:
    # Branches on a value from outside the run: exactly what determinism forbids.
    first = await double(1)
    if SMUGGLED["branch"] == "b":
        await double(first)
    if SMUGGLED["sleep"]:
        await asyncio.sleep(5)
    return SMUGGLED["branch"]


async def _finish(world: World, clock: FixedClock, run_id: str) -> None:
    worker = Worker(world)
    for _ in range(20):
        await worker.drain()
        if (await world.runs.get(run_id)).status.terminal:
            return
        events = (await world.events.list(run_id)).events
        hooked = any(e.type is EventType.HOOK_CREATED for e in events)
        if hooked and not any(e.type is EventType.HOOK_RECEIVED for e in events):
            await resume_hook("oracle", 100, world=world)
            continue
        due = await world.queue.next_due()
        if due is not None:
            clock.current = max(clock.current, due)
    raise AssertionError("run did not end")


@pytest.fixture
def mem() -> tuple[MemoryWorld, FixedClock]:
    clock = FixedClock()
    return MemoryWorld(
        clock=clock, ids=CountingIds(retry_with_backoff=False) if False else CountingIds()
    ), clock


async def test_a_run_that_completed_replays_to_the_same_end(mem: Any) -> None:
    world, clock = mem
    run = await start(steady, 3, world=world)
    await _finish(world, clock, run.run_id)
    assert await run.result() == 106
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "ok", verdict.render()
    assert verdict.steps_started == 0
    assert [e.type for e in verdict.written] == [EventType.RUN_COMPLETED]


async def test_a_run_that_failed_replays_to_the_same_failure(mem: Any) -> None:
    world, clock = mem
    run = await start(failing, world=world)
    await _finish(world, clock, run.run_id)
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "ok", verdict.render()


async def test_a_workflow_that_reads_a_smuggled_value_diverges(mem: Any) -> None:
    world, clock = mem
    SMUGGLED.update(branch="a", sleep=False)
    run = await start(smuggler, world=world)
    await _finish(world, clock, run.run_id)
    try:
        SMUGGLED["branch"] = "b"  # the replay now asks for a second step
        verdict = await verify_replay(world, run.run_id)
        assert verdict.kind == "replay.diverged", verdict.render()
        assert "asked for step step//oracletests//double#2" in verdict.detail
        SMUGGLED.update(branch="a", sleep=True)  # the replay now waits for a sleep
        verdict = await verify_replay(world, run.run_id)
        assert verdict.kind == "replay.suspended", verdict.render()
        assert re.search(r"wait_created sleep/smuggler:[0-9a-f]{6}#1", verdict.detail)
        SMUGGLED.update(branch="c", sleep=False)  # the same steps, another result
        verdict = await verify_replay(world, run.run_id)
        assert verdict.kind == "replay.output-differs", verdict.render()
    finally:
        SMUGGLED.update(branch="a", sleep=False)


async def test_a_log_whose_step_result_was_edited_is_caught(mem: Any) -> None:
    world, clock = mem
    run = await start(steady, 2, world=world)
    await _finish(world, clock, run.run_id)
    events = list((await world.events.list(run.run_id)).events)
    edited = [
        attrs.evolve(e, data={**e.data, "result": serialize(41)})
        if e.type is EventType.STEP_COMPLETED and e.correlation_id == "step//oracletests//double#2"
        else e
        for e in events
    ]
    verdict = await verify_replay_log(edited)
    assert verdict.kind == "replay.output-differs", verdict.render()
    assert f"#{events[-1].seq}" in verdict.detail


async def test_runs_the_oracle_does_not_judge_are_skipped(mem: Any) -> None:
    world, _clock = mem
    run = await start(steady, 1, world=world)
    await Worker(world).drain()
    assert (await verify_replay(world, run.run_id)).kind == "replay.skipped"  # not ended
    await run.cancel("stop")
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "replay.skipped"
    assert verdict.ok


async def test_a_log_that_breaks_the_contract_is_unseedable(mem: Any) -> None:
    world, clock = mem
    run = await start(steady, 1, world=world)
    await _finish(world, clock, run.run_id)
    events = list((await world.events.list(run.run_id)).events)
    early = [
        attrs.evolve(e, created_at=e.created_at - timedelta(seconds=30))
        if e.type is EventType.WAIT_COMPLETED
        else e
        for e in events
    ]
    verdict = await verify_replay_log(early)
    assert verdict.kind == "replay.unseedable", verdict.render()
