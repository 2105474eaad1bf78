"""Sync step bodies: ``auto`` (the default), always in a thread, or on the loop, side by side.

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
    parser.add_argument("--kinds", nargs="+", default=["memory", "process", "power"])
    args = parser.parse_args()
    for kind in args.kinds:
        runs: dict[str, list[float]] = {"auto": [], "thread": [], "inline": []}
        for _ in range(args.repeat):
            for mode, figures in runs.items():
                figures.append(asyncio.run(steps_per_second(kind, args.n, mode)))
        auto, thread, inline = (statistics.median(runs[m]) for m in ("auto", "thread", "inline"))
        print(
            f"{kind:8s} auto {auto:7,.0f}  thread {thread:7,.0f}  inline {inline:7,.0f} steps/s"
            f"   auto/thread {auto / thread:.2f}x  auto/inline {auto / inline:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
