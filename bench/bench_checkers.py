"""The checkers on a 25,000-event run (issue 7, "Numbers").

Run by hand (never in CI):

    .venv/bin/python bench/bench_checkers.py [--steps 8333] [--repeat 5]

Builds one run of a sequential workflow of ``steps`` trivial steps (3 events
per step, plus 3: 8,333 steps make 25,002 events) with the real runtime, on
MemoryWorld and on SQLiteWorld (``durability="process"``), then times, median of
``--repeat``: ``check_invariants(world)`` (every rule, rows read through the
public API) and ``verify_replay(world, run_id)`` (the log seeded into a fresh
MemoryWorld, then one real delivery replaying it cold).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from durasim.checkers import check_invariants, verify_replay
from durasim.runtime import Limits, Worker, start, step, workflow
from durasim.worlds import CountingIds, FixedClock, MemoryWorld, SQLiteWorld, World


@step(module="bench_checkers")
def add(a: int, b: int) -> int:
    return a + b


@workflow(module="bench_checkers")
async def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


async def measure(world: World, steps: int, repeat: int) -> dict[str, float]:
    run = await start(sequential, steps, world=world)
    await Worker(world, limits=Limits(max_events=40_000, sync_steps="inline")).drain()
    assert await run.result() == steps * (steps - 1) // 2
    events = len(await run.events())
    invariants, replays = [], []
    for _ in range(repeat):
        began = time.perf_counter()
        report = await check_invariants(world)
        invariants.append(time.perf_counter() - began)
        assert report.ok, report.render()
        began = time.perf_counter()
        verdict = await verify_replay(world, run.run_id, limits=Limits(max_events=40_000))
        replays.append(time.perf_counter() - began)
        assert verdict.kind == "ok", verdict.render()
    return {
        "events": events,
        "check_invariants_s": statistics.median(invariants),
        "verify_replay_s": statistics.median(replays),
    }


async def main(args: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp(prefix="durasim-bench-checkers-"))
    memory = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    print("memory", await measure(memory, args.steps, args.repeat))
    sqlite = SQLiteWorld(
        directory / "w.db", durability="process", clock=FixedClock(), ids=CountingIds()
    )
    try:
        print("sqlite", await measure(sqlite, args.steps, args.repeat))
    finally:
        await sqlite.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8333)
    parser.add_argument("--repeat", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
