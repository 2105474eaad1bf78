"""Two deliveries of one run at once (a lease expired under a live one): the fence decides."""

from __future__ import annotations

import asyncio
from collections import Counter

from _drive import check_cold_replay

from durasim.runtime import start, step, workflow
from durasim.runtime.lowlevel import engine_for
from durasim.worlds import FixedClock, World


@step
async def hop(i: int) -> int:
    await asyncio.sleep(0)  # yields to the other delivery between writes
    return i


@workflow
async def hops(n: int) -> int:
    total = 0
    for i in range(n):
        total += await hop(i)
    return total


async def test_overlapping_deliveries_write_one_history(world: World, clock: FixedClock) -> None:
    run = await start(hops, 6, world=world)
    engine = engine_for(world)
    first, second = await asyncio.gather(engine.deliver(run.run_id), engine.deliver(run.run_id))
    statuses = sorted([first.status, second.status])
    assert "finished" in statuses
    assert statuses in (["finished", "superseded"], ["finished", "finished"])
    assert await run.result() == sum(range(6))
    events = await run.events()
    outcomes = Counter(e.correlation_id for e in events if e.type.value == "step_completed")
    assert len(outcomes) == 6
    assert set(outcomes.values()) == {1}
    check_cold_replay(events)
    checker = getattr(world, "_check", None)
    if checker is not None:
        checker()


async def test_a_superseded_delivery_writes_nothing_more(world: World, clock: FixedClock) -> None:
    run = await start(hops, 3, world=world)
    winner = await engine_for(world).deliver(run.run_id)
    assert winner.status == "finished"
    before = len(await run.events())
    late = await engine_for(world).deliver(run.run_id)  # a duplicate message, after the end
    assert late.status == "finished"
    assert len(await run.events()) == before
