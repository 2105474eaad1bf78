"""CPU per finished run with many other asyncio tasks alive in the process.

Run by hand (never in CI):

    .venv/bin/python bench/bench_foreign_tasks.py --foreign 10000

A finished run's replay cancels its own pending workflow tasks; it must not walk
every task of the process (an application's own tasks, a Worker's kept replays)
to find them. The figure should not grow with ``--foreign``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from bench_step_cpu import _run


async def measure(foreign: int, runs: int) -> float:
    """Process-CPU microseconds per 1-step run, with ``foreign`` idle tasks alive."""
    stop = asyncio.Event()
    idle = [asyncio.ensure_future(stop.wait()) for _ in range(foreign)]
    await asyncio.sleep(0)
    began = time.process_time()
    for _ in range(runs):
        await _run(1, "async")
    per = (time.process_time() - began) / runs * 1e6
    stop.set()
    await asyncio.gather(*idle)
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--foreign", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    for foreign in (0, args.foreign):
        per = asyncio.run(measure(foreign, args.runs))
        print(f"{foreign:6d} other tasks: {per:7.0f} us CPU per 1-step run")


if __name__ == "__main__":
    sys.exit(main())
