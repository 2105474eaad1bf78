"""bench_step_cpu's run for callgrind, without what makes its count depend on the machine's load.

Run by hand (never in CI), two step counts, the difference divided by the steps:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/bench_step_quiet.py --steps 30 [--no-gc]

* The lease heartbeat ticks every 15 minutes here (the default: every 0.5 s of wall
  time).  Under valgrind a 1,000-step run lasts tens of seconds, and each tick's
  instructions are counted: the default's count grows with the machine's load.
* ``--no-gc``: the cyclic collector off.  With it on, where a full collection lands
  (every ~25% growth of the live objects) moves with the objects allocated, a few
  thousand instructions per step either way over 1,000 steps.
"""

from __future__ import annotations

import argparse
import asyncio
import gc

from bench_step_cpu import sequential

from durasim.runtime import Worker, start
from durasim.worlds import FixedClock, MemoryWorld


async def _run(n: int, kind: str) -> None:
    world = MemoryWorld(clock=FixedClock())
    run = await start(sequential, n, kind, world=world)
    worker = Worker(world, lease_seconds=3600, renew_every=1800, warn_blocked_after=1800)
    result = await worker.run_until_complete(run)
    assert result == sum(range(n)), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--kind", choices=("async", "sync"), default="async")
    parser.add_argument("--no-gc", action="store_true")
    args = parser.parse_args()
    if args.no_gc:
        gc.disable()
    asyncio.run(_run(args.steps, args.kind))


if __name__ == "__main__":
    main()
