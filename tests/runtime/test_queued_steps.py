"""Steps beyond a delivery's inline slots go through the queue (Limits.queue_steps)."""

from __future__ import annotations

import asyncio
from collections import Counter

from _drive import check_cold_replay

from durasim.runtime import Limits, Worker, start, step, workflow
from durasim.worlds import FixedClock, RunStatus, World

FLAKES: Counter[int] = Counter()


@step
def square(i: int) -> int:
    return i * i


@step(max_retries=2)
def flaky_square(i: int) -> int:
    FLAKES[i] += 1
    if FLAKES[i] == 1:
        raise ConnectionError("first attempt fails")
    return i * i


@workflow
async def fan_out(n: int) -> list[int]:
    return list(await asyncio.gather(*(square(i) for i in range(n))))


@workflow
async def flaky_fan_out(n: int) -> list[int]:
    return list(await asyncio.gather(*(flaky_square(i) for i in range(n))))


async def _serve(world: World, clock: FixedClock, worker: Worker, run_id: str) -> None:
    for _ in range(50):
        await worker.drain()
        if (await world.runs.get(run_id)).status.terminal:
            return
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due)
    raise AssertionError("the run did not end")


async def test_steps_beyond_the_inline_slots_are_queued(world: World, clock: FixedClock) -> None:
    run = await start(fan_out, 6, world=world)
    worker = Worker(world, limits=Limits(inline_steps=2, queue_steps=True))
    await _serve(world, clock, worker, run.run_id)
    assert await run.result() == [i * i for i in range(6)]
    events = await run.events()
    created = {e.correlation_id: e.data["inline"] for e in events if e.type.value == "step_created"}
    assert sorted(created.values()) == [False] * 4 + [True] * 2
    queued_starts = [
        e for e in events if e.type.value == "step_started" and not created[e.correlation_id]
    ]
    assert len(queued_starts) == 4
    assert not any(e.in_band for e in queued_starts)  # written by the step's own worker
    outcomes = Counter(e.correlation_id for e in events if e.type.value == "step_completed")
    assert set(outcomes.values()) == {1}
    check_cold_replay(events)


async def test_queued_steps_retry_through_the_queue(world: World, clock: FixedClock) -> None:
    FLAKES.clear()
    run = await start(flaky_fan_out, 4, world=world)
    worker = Worker(world, limits=Limits(inline_steps=1, queue_steps=True))
    await _serve(world, clock, worker, run.run_id)
    assert await run.status() is RunStatus.COMPLETED
    assert await run.result() == [0, 1, 4, 9]
    assert all(FLAKES[i] == 2 for i in range(4))
    kinds = Counter(e.type.value for e in await run.events())
    assert kinds["step_retrying"] == 4
    assert kinds["step_completed"] == 4
    assert await world.queue.messages() == ()
