"""The oracle's trusted bulk load equals writing the log back event by event.

``verify_replay_log(events, checked=True)`` loads a log a MemoryWorld wrote as it is
(``MemoryWorld.load_checked_log``) instead of seeding it through the guards.  On
simulated runs with every fault kind, hooks, sleeps and child runs, both ways give
the same World (events, rows, tokens) and the same verdict.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from durasim.checkers import check_invariants, finished_logs, verify_replay_log
from durasim.checkers._oracle import _loads_as_is, _seed
from durasim.runtime import create_hook, start, step, workflow
from durasim.sim import FAULT_KINDS, Sim
from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    CountingIds,
    Event,
    FixedClock,
    MemoryWorld,
)


@step(module="oraclebulktests")
def add(a: int, b: int) -> int:
    return a + b


@step(module="oraclebulktests")
def picky(n: int) -> int:
    if n == 3:
        raise ValueError("three")
    return n


@workflow(module="oraclebulktests")
async def mixed(n: int) -> list[Any]:
    total = 0
    for i in range(n):
        total = await add(total, i)
    await asyncio.sleep(30)
    with create_hook(token=f"bulk-{n}") as hook:
        payload = await hook
    child = await start(children, 2)
    return [total, payload, await child.result()]


@workflow(module="oraclebulktests")
async def children(n: int) -> int:
    results = await asyncio.gather(*(add(i, i) for i in range(n)))
    return sum(results)


@workflow(module="oraclebulktests")
async def failing(n: int) -> int:
    total = 0
    for i in range(n):
        total += await picky(i)
    return total


async def _script(sim: Sim, workflow: Any, n: int) -> None:
    await sim.start(workflow, n)
    for _ in range(6):
        await sim.run_until_idle()
        try:
            await sim.deliver_hook(f"bulk-{n}", n)
        except Exception:
            continue


def _logs(workflow: Any, n: int, seed: int) -> list[list[Event]]:
    found: list[list[Event]] = []

    async def script(sim: Sim) -> None:
        await _script(sim, workflow, n)
        assert (await check_invariants(sim.store)).ok
        found.extend(await finished_logs(sim.store))

    Sim(seed=seed, faults=FAULT_KINDS, fault_odds=4).run_sync(script)
    return found


def _prefix(events: list[Event]) -> list[Event]:
    end = next(i for i, e in enumerate(events) if e.type in RUN_TERMINAL_TYPES)
    return events[:end]


@pytest.mark.parametrize(("workflow", "n"), [(mixed, 3), (children, 3), (failing, 5)])
def test_bulk_load_is_the_seeded_world_and_gives_the_same_verdict(workflow: Any, n: int) -> None:
    loaded = 0
    for seed in range(12):
        for events in _logs(workflow, n, seed):
            prefix = _prefix(events)
            if not prefix or not _loads_as_is(prefix):
                continue
            seeded = MemoryWorld(clock=FixedClock(prefix[0].created_at), ids=CountingIds())
            asyncio.run(_seed(seeded, seeded.clock, prefix))  # type: ignore[arg-type]
            bulk = MemoryWorld(clock=FixedClock(prefix[0].created_at), ids=CountingIds())
            bulk.load_checked_log(prefix)
            bulk._check()
            run_id = prefix[0].run_id
            assert bulk._runs[run_id].events == seeded._runs[run_id].events
            assert bulk._runs[run_id].state == seeded._runs[run_id].state
            assert bulk._tokens == seeded._tokens
            assert bulk._last_holders == seeded._last_holders
            slow = asyncio.run(verify_replay_log(events))
            fast = asyncio.run(verify_replay_log(events, checked=True))
            assert fast == slow
            loaded += 1
    assert loaded >= 6


def test_bulk_load_refuses_a_run_it_holds() -> None:
    events = _logs(children, 2, 0)[0]
    world = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    world.load_checked_log(events)
    with pytest.raises(Exception, match="here already"):
        world.load_checked_log(events)


def test_logs_written_back_differently_are_seeded() -> None:
    events = _prefix(_logs(children, 2, 0)[0])
    assert _loads_as_is(events)
    assert not _loads_as_is(events[1:])  # not from run_created: seq 1 missing
    assert not _loads_as_is([])
