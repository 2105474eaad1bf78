"""Simulator throughput: simulated runs/s and virtual seconds per wall second.

Run: ``.venv/bin/python bench/bench_sim.py``.  Two figures (median of 5):

* runs/s of a 10-step sequential workflow, each run in a fresh Sim with a
  seeded scheduler (``Sim(seed=i)``), 8 runs started together per Sim so the
  scheduler has real choices to make between their World calls;
* virtual seconds per wall second of a sleep-heavy workflow (365 daily sleeps).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from durasim.runtime import sleep, step, workflow
from durasim.sim import Sim


@step(module="bench_sim")
def work(total: int, i: int) -> int:
    return total + i


@workflow(module="bench_sim")
async def ten_steps() -> int:
    total = 0
    for i in range(10):
        total = await work(total, i)
    return total


@workflow(module="bench_sim")
async def daily(days: int) -> int:
    for _ in range(days):
        await sleep(86_400)
    return days


def runs_per_second(sims: int, per_sim: int) -> float:
    async def script(sim: Sim) -> None:
        runs = [await sim.start(ten_steps) for _ in range(per_sim)]
        idle = await sim.run_until_idle()
        assert idle.status == "idle", idle
        for run in runs:
            assert (await sim.outcome(run.run_id)).value == 45

    started = time.perf_counter()
    for seed in range(sims):
        Sim(seed=seed).run_sync(script)
    return sims * per_sim / (time.perf_counter() - started)


def virtual_per_wall(days: int) -> tuple[float, float]:
    async def script(sim: Sim) -> Any:
        return await sim.run(daily, days)

    sim = Sim(seed=0)
    started = time.perf_counter()
    outcome = sim.run_sync(script)
    wall = time.perf_counter() - started
    assert outcome.value == days
    return sim.clock.elapsed / wall, wall


def main() -> None:
    one = [runs_per_second(40, 1) for _ in range(5)]
    eight = [runs_per_second(10, 8) for _ in range(5)]
    sleeps = [virtual_per_wall(365) for _ in range(5)]
    print(f"10-step workflow, 1 run per Sim:  {statistics.median(one):8.0f} runs/s")
    print(f"10-step workflow, 8 runs per Sim: {statistics.median(eight):8.0f} runs/s (seeded)")
    ratio = statistics.median(s[0] for s in sleeps)
    wall = statistics.median(s[1] for s in sleeps)
    print(
        f"365 daily sleeps (one year):      {ratio:8.3g} virtual s per wall s "
        f"({wall * 1000:.1f} ms wall per simulated year)"
    )


if __name__ == "__main__":
    main()
