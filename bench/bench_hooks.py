"""Hook latency and throughput on the SQLite World (issue 5, "Numbers").

Run by hand (never in CI):

    .venv/bin/python bench/bench_hooks.py [--resumes 1000] [--durability power]

Measures, in one run, on a fresh SQLiteWorld file each:

- **latency**: a workflow iterates one hook; 1,000 times the benchmark calls
  ``resume_hook`` and then lets one Worker serve the run.  Two figures per
  payload: ``resume`` (``resume_hook`` returns: the payload is durable and the
  run's wake-up is queued) and ``observed`` (the delivery that hands the
  payload to the workflow has finished: the workflow has consumed it and the
  run is suspended again).  The worker claims at once (``run_one``), so no
  idle-poll interval is in these figures: they are what the runtime costs.
  Medians and p99 over all resumes.
- **idle wake-up**: the same with ``Worker.serve(poll=...)`` running in the
  background, which is what an idle worker adds (the SQLite World has no
  notifications; PostgreSQL will use LISTEN/NOTIFY).
- **throughput**: payloads per second into one iterating workflow when the
  payloads are all sent first and one delivery consumes them, and when each is
  consumed by its own delivery (time per payload at 100 / 1,000 / n to show
  whether a growing log slows deliveries down).

Latency and throughput are measured twice: with ``Limits(keep_replays=True)``
(the default: a suspended run's replay stays in the worker, and its next
delivery reads only the new events) and ``False`` (every delivery replays the
whole log from the top).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from durasim.runtime import Limits, Worker, create_hook, resume_hook, start, workflow
from durasim.worlds import SQLiteWorld


@workflow(module="bench_hooks")
async def consume(n: int) -> int:
    total = 0
    with create_hook(token="bench") as hook:
        async for payload in hook:
            total += payload
            n -= 1
            if n == 0:
                break
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latency(path: Path, resumes: int, durability: str, *, keep: bool) -> dict[str, Any]:
    world = SQLiteWorld(path, durability=durability)
    try:
        run = await start(consume, resumes + 1, world=world)
        worker = Worker(world, limits=Limits(keep_replays=keep))
        await worker.drain()
        resumed: list[float] = []
        observed: list[float] = []
        per_delivery: list[float] = []
        for i in range(resumes):
            began = time.perf_counter()
            await resume_hook("bench", i, world=world)
            after_resume = time.perf_counter()
            assert await worker.run_one()
            done = time.perf_counter()
            resumed.append(after_resume - began)
            observed.append(done - began)
            per_delivery.append(done - after_resume)
        return {
            "keep_replays": keep,
            "resumes": resumes,
            "resume_ms_median": statistics.median(resumed) * 1e3,
            "resume_ms_p99": pct(resumed, 0.99) * 1e3,
            "observed_ms_median": statistics.median(observed) * 1e3,
            "observed_ms_p99": pct(observed, 0.99) * 1e3,
            "first_100_observed_ms_median": statistics.median(observed[:100]) * 1e3,
            "last_100_observed_ms_median": statistics.median(observed[-100:]) * 1e3,
            "log_events_at_end": len(await run.events()),
        }
    finally:
        await world.close()


async def idle_wakeup(path: Path, resumes: int, poll: float) -> dict[str, Any]:
    world = SQLiteWorld(path, durability="process")
    try:
        await start(consume, resumes + 1, world=world)
        delivered = asyncio.Event()
        worker = Worker(world, on_report=lambda report: delivered.set())
        await worker.drain()
        stop = asyncio.Event()
        serving = asyncio.ensure_future(worker.serve(stop=stop, poll=poll))
        observed: list[float] = []
        for i in range(resumes):
            delivered.clear()
            began = time.perf_counter()
            await resume_hook("bench", i, world=world)
            await delivered.wait()
            observed.append(time.perf_counter() - began)
        stop.set()
        await serving
        return {
            "resumes": resumes,
            "poll_s": poll,
            "observed_ms_median": statistics.median(observed) * 1e3,
            "observed_ms_p99": pct(observed, 0.99) * 1e3,
        }
    finally:
        await world.close()


async def batch_throughput(
    path: Path, payloads: int, durability: str, *, keep: bool
) -> dict[str, Any]:
    world = SQLiteWorld(path, durability=durability)
    try:
        run = await start(consume, payloads, world=world)
        worker = Worker(world, limits=Limits(keep_replays=keep))
        await worker.drain()
        began = time.perf_counter()
        for i in range(payloads):
            await resume_hook("bench", i, world=world)
        sent = time.perf_counter()
        await worker.drain()
        done = time.perf_counter()
        assert await run.result() == payloads * (payloads - 1) // 2
        return {
            "keep_replays": keep,
            "payloads": payloads,
            "send_per_s": payloads / (sent - began),
            "consume_per_s": payloads / (done - sent),
            "end_to_end_per_s": payloads / (done - began),
        }
    finally:
        await world.close()


async def main(args: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp(prefix="durasim-bench-hooks-"))
    mode = args.durability
    for keep in (True, False):
        print(
            "latency",
            mode,
            await latency(directory / f"lat{keep}.db", args.resumes, mode, keep=keep),
        )
    print("idle", await idle_wakeup(directory / "idle.db", min(args.resumes, 300), args.poll))
    for keep in (True, False):
        for n in (100, 1000):
            result = await batch_throughput(directory / f"b{n}{keep}.db", n, mode, keep=keep)
            print("batch", mode, result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resumes", type=int, default=1000)
    parser.add_argument("--durability", default="power", choices=["power", "process"])
    parser.add_argument("--poll", type=float, default=0.01)
    asyncio.run(main(parser.parse_args()))
