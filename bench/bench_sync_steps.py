"""Sync step bodies in a thread (the default) or on the worker's loop, side by side.

    .venv/bin/python bench/bench_sync_steps.py [--n 1000] [--repeat 5]

A 1,000-step sequential workflow of a sync ``add`` step, one ``Worker.drain()``
per run, median steps/s of ``--repeat`` runs; both modes measured in this one
process, alternating, so their ratio is a same-run figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from durasim.runtime import Limits, Worker, start, step, workflow
from durasim.worlds import MemoryWorld, SQLiteWorld, World


@step
def add(a: int, b: int) -> int:
    return a + b


@workflow
async def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


async def steps_per_second(kind: str, n: int, mode: str) -> float:
    world: World
    if kind == "memory":
        world = MemoryWorld()
    else:
        path = Path(tempfile.mkdtemp()) / "w.db"
        world = SQLiteWorld(path, durability=kind)  # type: ignore[arg-type]
    run = await start(sequential, n, world=world)
    began = time.perf_counter()
    await Worker(world, limits=Limits(sync_steps=mode)).drain()
    elapsed = time.perf_counter() - began
    assert await run.result() == n * (n - 1) // 2
    await world.close()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for kind in ("memory", "process", "power"):
        runs: dict[str, list[float]] = {"thread": [], "inline": []}
        for _ in range(args.repeat):
            for mode, figures in runs.items():
                figures.append(asyncio.run(steps_per_second(kind, args.n, mode)))
        thread, inline = (statistics.median(runs[m]) for m in ("thread", "inline"))
        print(
            f"{kind:8s} thread {thread:7,.0f} steps/s   inline {inline:7,.0f} steps/s   "
            f"inline/thread {inline / thread:.2f}x"
        )


if __name__ == "__main__":
    main()
