"""The simulator's own cost: bench_sim.py's 10-step run with and without the Sim.

Workloads (``python bench_sim_overhead.py MODE N``; count instructions at two sizes
with callgrind and divide the difference, as bench_sim.py's ``--instructions``):

* ``plain``: the same run on a MemoryWorld on a SimClock, delivered by hand (start,
  claim, ``engine.handle_message``, ack, result): the runtime and World alone;
* ``sim``: one run per ``Sim`` (bench_sim.py's ``ten1``);
* ``empty``: a ``Sim`` whose script does nothing (construction and teardown).

``sim - plain`` is what the simulator adds per run (session 16: 4.18 M - 3.15 M,
of which ``empty`` 0.30 M).  ``--no-gc`` turns the cyclic collector off: at a few
thousand instructions a change's count moves with where collections fall.
"""

from __future__ import annotations

import asyncio
import gc
import sys

import bench_sim

from durasim.runtime import Run, start
from durasim.runtime.lowlevel import engine_for, parse_message
from durasim.sim import Sim, SimClock
from durasim.sim._sim import _LIMITS
from durasim.worlds import MemoryWorld
from durasim.worlds._time import CountingIds


async def _plain_run() -> None:
    world = MemoryWorld(clock=SimClock(), ids=CountingIds())
    run = await start(bench_sim.ten_steps, world=world)
    delivery = await world.queue.claim(lease_seconds=5)
    assert delivery is not None
    message = parse_message(delivery.message.queue_name, delivery.message.payload)
    await engine_for(world).handle_message(
        message,
        attempt=delivery.message.attempt,
        limits=_LIMITS,
        sync_in_thread=False,
        log_failures=False,
    )
    await world.queue.ack(delivery)
    assert await Run(run_id=run.run_id, world=world).result() == 45
    await world.close()


async def _plain(n: int) -> None:
    for _ in range(n):
        await _plain_run()


async def _nothing(sim: Sim) -> None:
    return None


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-gc"]
    if "--no-gc" in sys.argv:
        gc.disable()
    mode, n = args[0], int(args[1])
    if mode == "plain":
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_plain(n))
        loop.close()
    elif mode == "sim":
        bench_sim.runs_per_second(n, 1)
    elif mode == "empty":
        for seed in range(n):
            Sim(seed=seed).run_sync(_nothing)
    else:
        raise SystemExit(f"unknown mode {mode!r}: plain, sim or empty")


if __name__ == "__main__":
    main()
