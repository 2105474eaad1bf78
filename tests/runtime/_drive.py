"""Driving runs to their end in virtual time (no wall-clock sleeps)."""

from __future__ import annotations

from durasim.runtime._client import Run
from durasim.runtime._worker import Worker
from durasim.worlds import FixedClock, World


async def run_to_end(world: World, clock: FixedClock, run: Run, *, max_rounds: int = 200) -> Worker:
    """Serve ``run`` until it ends, jumping the clock to each next due message."""
    worker = Worker(world)
    for _ in range(max_rounds):
        await worker.drain()
        if (await run.status()).terminal:
            return worker
        due = await world.queue.next_due()
        assert due is not None, f"run {run.run_id} is stuck: nothing is queued"
        clock.current = max(clock.current, due)
    raise AssertionError(f"run {run.run_id} did not end in {max_rounds} rounds")
