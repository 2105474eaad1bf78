"""What the replay checks cost: input comparison per step, and a wide fan-out per step.

Run by hand (never in CI):

    .venv/bin/python bench/bench_replay_checks.py [--rounds 7]

- input comparison: a sequential workflow of 1,000 async steps whose input is a
  small dict, run to the end by one Worker on MemoryWorld, then replayed cold
  (``Replay.begin`` + ``deliver`` of every event); the same workflow twice, once
  with ``@step`` (inputs compared on replay) and once with
  ``@step(check_input=False)``, in turns, median of per-round ratios;
- fan-out: ``asyncio.gather`` of 1,000 and of 8,000 async steps run to the end on
  MemoryWorld (``inline_steps=64``), time per step, in turns, median of per-round
  ratios (8,000 over 1,000).

Virtual time (FixedClock) throughout: nothing here sleeps.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import time
from typing import Any

from durasim.runtime import Limits, Worker, start, step, workflow
from durasim.runtime._orchestrator import load_log
from durasim.runtime._replay import Replay
from durasim.runtime.lowlevel import find_workflow
from durasim.worlds import CountingIds, EventType, FixedClock, MemoryWorld


@step(module="bench_checks")
async def checked(total: int, item: dict[str, Any]) -> int:
    return total + item["n"]


@step(module="bench_checks", check_input=False)
async def unchecked(total: int, item: dict[str, Any]) -> int:
    return total + item["n"]


@workflow(module="bench_checks")
async def sequence(n: int, compare: bool) -> int:
    fn = checked if compare else unchecked
    total = 0
    for i in range(n):
        total = await fn(total, {"n": i, "sku": f"sku-{i}", "tags": ["a", "b"]})
    return total


@step(module="bench_checks")
async def leaf(i: int) -> int:
    return i


@workflow(module="bench_checks")
async def fan_out(n: int) -> int:
    return sum(await asyncio.gather(*(leaf(i) for i in range(n))))


async def _run(wf: Any, *args: Any, limits: Limits) -> tuple[float, MemoryWorld, str]:
    world = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    run = await start(wf, *args, world=world)
    gc.collect()
    began = time.perf_counter()
    worker = Worker(world, limits=limits)
    while not (await run.status()).terminal:
        await worker.drain()
    return time.perf_counter() - began, world, run.run_id


async def _cold_replay(world: MemoryWorld, run_id: str) -> float:
    events, _ = await load_log(world, run_id)
    created = events[0]
    started = next(e for e in events if e.type is EventType.RUN_STARTED)
    terminal = (EventType.RUN_COMPLETED, EventType.RUN_FAILED)
    began = time.perf_counter()
    replay = Replay(
        find_workflow(created.data["workflow_name"]),
        run_id=run_id,
        input=created.data["input"],
        started_at=started.created_at,
    )
    replay.preload(events)
    replay.begin()
    for event in events:
        if event.type in terminal:
            break
        replay.deliver(event)
    seconds = time.perf_counter() - began
    assert replay.done
    return seconds


async def compare_rounds(rounds: int, n: int) -> dict[str, Any]:
    limits = Limits(max_events=40_000)
    rows = []
    for number in range(rounds):
        row: dict[str, float] = {}
        for compare in (True, False) if number % 2 else (False, True):  # who goes first alternates
            seconds, world, run_id = await _run(sequence, n, compare, limits=limits)
            key = "on" if compare else "off"
            row[f"run_{key}_us_per_step"] = seconds / n * 1e6
            row[f"replay_{key}_us_per_step"] = await _cold_replay(world, run_id) / n * 1e6
        row["run_ratio"] = row["run_on_us_per_step"] / row["run_off_us_per_step"]
        row["replay_ratio"] = row["replay_on_us_per_step"] / row["replay_off_us_per_step"]
        print("  ", json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
        rows.append(row)
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


async def fan_out_rounds(rounds: int, sizes: tuple[int, int]) -> dict[str, Any]:
    limits = Limits(max_events=40_000, inline_steps=64)
    rows = []
    small, large = sizes
    for number in range(rounds):
        row: dict[str, float] = {}
        for n in (small, large) if number % 2 else (large, small):
            seconds, _, _ = await _run(fan_out, n, limits=limits)
            row[f"us_per_step_{n}"] = seconds / n * 1e6
        row["ratio"] = row[f"us_per_step_{large}"] / row[f"us_per_step_{small}"]
        print("  ", json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
        rows.append(row)
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


async def main(args: argparse.Namespace) -> None:
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cpus, load {os.getloadavg()}",
        flush=True,
    )
    print(f"input comparison, {args.n} sequential async steps (on / off in turns):", flush=True)
    compare = await compare_rounds(args.rounds, args.n)
    print("median:", json.dumps({k: round(v, 3) for k, v in compare.items()}), flush=True)
    print("fan-out, per step (1,000 / 8,000 in turns):", flush=True)
    fan = await fan_out_rounds(args.rounds, (1_000, 8_000))
    print("median:", json.dumps({k: round(v, 3) for k, v in fan.items()}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=1_000)
    asyncio.run(main(parser.parse_args()))
