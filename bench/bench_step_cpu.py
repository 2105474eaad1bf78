"""CPU time per step of a sequential workflow run to the end by a Worker (MemoryWorld).

Run by hand (never in CI). One measurement:

    .venv/bin/python bench/bench_step_cpu.py --steps 3000 --kind async

Two checkouts in turns (alternating rounds in the same minutes; the median of the
per-round ratios is what to quote, since wall and even CPU time drift on shared VMs):

    .venv/bin/python bench/bench_step_cpu.py --compare OLD/.venv/bin/python .venv/bin/python

The figure is the process's CPU time (every thread: the step-thread hop and the
lease heartbeat included) over the whole run, divided by the steps: the runtime's
own cost per step on the in-memory World, on virtual time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

from durasim.runtime import Worker, start, step, workflow
from durasim.worlds import FixedClock, MemoryWorld


@step
def add(a: int, b: int) -> int:
    return a + b


@step
async def add_async(a: int, b: int) -> int:
    return a + b


@workflow
async def sequential(n: int, kind: str) -> int:
    total = 0
    for i in range(n):
        total = await (add_async(total, i) if kind == "async" else add(total, i))
    return total


async def _run(n: int, kind: str) -> None:
    world = MemoryWorld(clock=FixedClock())
    run = await start(sequential, n, kind, world=world)
    result = await Worker(world).run_until_complete(run)
    assert result == sum(range(n)), result


def measure(n: int, kind: str) -> tuple[float, float]:
    """CPU and wall microseconds per step of one run of ``n`` steps."""
    began, wall = time.process_time(), time.perf_counter()
    asyncio.run(_run(n, kind))
    return (
        (time.process_time() - began) / n * 1e6,
        (time.perf_counter() - wall) / n * 1e6,
    )


def compare(pythons: list[str], n: int, rounds: int) -> None:
    here = Path(__file__).resolve()
    for kind in ("async", "sync"):
        per: dict[str, list[float]] = {p: [] for p in pythons}
        walls: dict[str, list[float]] = {p: [] for p in pythons}
        for _ in range(rounds):
            for python in pythons:
                out = subprocess.run(
                    [python, str(here), "--steps", str(n), "--kind", kind],
                    capture_output=True,
                    text=True,
                    check=True,
                    cwd=here.parent,
                )
                words = out.stdout.split()
                per[python].append(float(words[-6]))
                walls[python].append(float(words[-3]))
        for what, table in (("CPU", per), ("wall", walls)):
            base, other = table[pythons[0]], table[pythons[1]]
            ratios = [b / a for a, b in zip(base, other, strict=True)]
            print(
                f"{kind} {what}: {statistics.median(base):.1f} vs {statistics.median(other):.1f} "
                f"us/step (medians); median per-round ratio {statistics.median(ratios):.3f} "
                f"({', '.join(f'{r:.2f}' for r in ratios)})",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--kind", choices=("async", "sync"), default="async")
    parser.add_argument("--compare", nargs=2, metavar="PYTHON", help="two interpreters, in turns")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args.steps, args.rounds)
    else:
        cpu, wall = measure(args.steps, args.kind)
        print(f"{args.kind} {args.steps} steps: {cpu:.1f} us/step CPU, {wall:.1f} us/step wall")


if __name__ == "__main__":
    sys.exit(main())
