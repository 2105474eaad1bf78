"""Append and read throughput of the Worlds, beside a bare sqlite3 loop.

Run by hand (never in CI):

    .venv/bin/python bench/bench_worlds.py [--repeat 5] [--events 2000]

Every figure is the median of ``--repeat`` runs made in this one process; bare
and World runs alternate and each ratio is the median of per-pair ratios, so the
ratios compare numbers measured side by side on the same (noisy, shared)
machine.  Results go into docs/benchmarks.md by hand, with the command and the
machine.

``--step-writes N --world sqlite|postgres`` (``--dsn``) only writes, with no
runtime, the batches a sequential workflow writes per step (the previous step's
``step_completed``, the next one's ``step_created`` and ``step_started``), N
times on SQLite (``durability="process"``) or PostgreSQL, and prints SQLite's
statements per step.  The World's own cost per step, for callgrind (``--cpu``:
no statement count, requests built before the writes): the difference in
instructions between two sizes over their difference in steps,

    valgrind --tool=callgrind .venv/bin/python bench/bench_worlds.py --step-writes 300 --cpu
    valgrind --tool=callgrind .venv/bin/python bench/bench_worlds.py --step-writes 1300 --cpu
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path
from typing import Any

from durasim.worlds import EventRequest, FixedClock, MemoryWorld, SQLiteWorld, World

SYNC = {"power": "FULL", "process": "NORMAL"}


def bare_loop(path: Path, sync: str, commits: int, rows_per_commit: int) -> float:
    """Commits per second of a bare INSERT (+COMMIT) loop in WAL mode."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {sync}")
    db.execute("CREATE TABLE t (run_id TEXT, seq INTEGER, body BLOB, PRIMARY KEY (run_id, seq))")
    body = b"x" * 64
    start = time.perf_counter()
    seq = 0
    for _ in range(commits):
        db.execute("BEGIN")
        for _ in range(rows_per_commit):
            seq += 1
            db.execute("INSERT INTO t VALUES (?, ?, ?)", ("run", seq, body))
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return commits / elapsed


async def _new_run(world: World) -> str:
    created = await world.events.create(
        None, EventRequest.of("run_created", workflow_name="bench", input=b"{}")
    )
    run_id = created.run.run_id
    await world.events.create(run_id, EventRequest.of("run_started"))
    return run_id


async def single_appends(world: World, count: int) -> float:
    """Events per second, one ``events.create`` (one commit) each."""
    run_id = await _new_run(world)
    requests = [
        EventRequest.of("step_created", f"s{i}", step_name="step//bench//s", input=b"x" * 64)
        for i in range(count)
    ]
    start = time.perf_counter()
    for request in requests:
        await world.events.create(run_id, request)
    return count / (time.perf_counter() - start)


async def batch_appends(world: World, batches: int, size: int) -> float:
    """Batches per second, ``size`` events per ``create_batch`` (one commit)."""
    run_id = await _new_run(world)
    groups = [
        [
            EventRequest.of(
                "step_created", f"b{b}-{i}", step_name="step//bench//s", input=b"x" * 64
            )
            for i in range(size)
        ]
        for b in range(batches)
    ]
    start = time.perf_counter()
    for group in groups:
        await world.events.create_batch(run_id, group)
    return batches / (time.perf_counter() - start)


async def read_log(world: World, length: int) -> float:
    """Seconds to read a ``length``-event log from the start, page by page."""
    run_id = await _new_run(world)
    size = 500
    for b in range(0, length - 2, size):
        group = [
            EventRequest.of("step_created", f"r{i}", step_name="step//bench//s", input=b"x" * 64)
            for i in range(b, min(b + size, length - 2))
        ]
        await world.events.create_batch(run_id, group)
    start = time.perf_counter()
    after, total = 0, 0
    while True:
        page = await world.events.list(run_id, after_seq=after, limit=5000)
        total += len(page.events)
        after = page.next_after
        if not page.has_more:
            break
    elapsed = time.perf_counter() - start
    assert total == length, (total, length)
    return elapsed


async def step_writes(world: World, steps: int, *, cpu: bool = False) -> Counter[str]:
    """The batches of a ``steps``-step sequential run; SQLite statements run per kind.

    ``cpu``: no statement count (its trace callback costs instructions) and
    every request built before the first write, so callgrind sees the World's
    own work (plus a list walk) per step.
    """
    counts: Counter[str] = Counter()
    if isinstance(world, SQLiteWorld) and not cpu:
        world._db.set_trace_callback(lambda sql: counts.update((" ".join(sql.split()[:3]),)))
    e = EventRequest.of
    created = await world.events.create(None, e("run_created", workflow_name="wf", input=b"[]"))
    run_id = created.run.run_id
    await world.events.create(run_id, e("run_started"))
    first = [e("step_created", "s#0", step_name="add", input=b"[0]"), e("step_started", "s#0")]
    await world.events.create_batch(run_id, first)
    counts.clear()

    def batch(k: int) -> list[EventRequest]:
        return [
            e("step_completed", f"s#{k - 1}", result=b"%d" % k),
            e("step_created", f"s#{k}", step_name="add", input=b"[%d]" % k),
            e("step_started", f"s#{k}"),
        ]

    batches = [batch(k) for k in range(1, steps + 1)] if cpu else None
    for k in range(1, steps + 1):
        await world.events.create_batch(run_id, batches[k - 1] if batches else batch(k))
    if isinstance(world, SQLiteWorld):
        world._db.set_trace_callback(None)
    return counts


def run_step_writes(kind: str, steps: int, dsn: str, directory: Path, *, cpu: bool) -> None:
    async def go() -> None:
        world: World
        if kind == "sqlite":
            world = SQLiteWorld(directory / "steps.db", durability="process", clock=FixedClock())
        else:
            from durasim.worlds import PostgresWorld

            schema = f"bench_steps_{os.getpid()}"
            world = await PostgresWorld(dsn, schema=schema, clock=FixedClock()).open()
        try:
            counts = await step_writes(world, steps, cpu=cpu)
        finally:
            if kind != "sqlite":
                async with (await world._ready()).connection() as conn:  # type: ignore[attr-defined]
                    await conn.execute(f"DROP SCHEMA {schema} CASCADE")
            await world.close()
        if counts:
            print(f"SQLite statements per step: {sum(counts.values()) / steps:.2f}")
            for what, count in counts.most_common():
                print(f"  {count / steps:5.2f} {what}")

    asyncio.run(go())


def median_of(repeat: int, run: Callable[[], float]) -> float:
    """The median of ``repeat`` calls of ``run``."""
    return statistics.median(run() for _ in range(repeat))


def _on(factory: Callable[[], World], job: Callable[[World], Coroutine[Any, Any, float]]) -> float:
    """Run ``job`` on a fresh World from ``factory`` and close it."""

    async def go() -> float:
        world = factory()
        try:
            return await job(world)
        finally:
            await world.close()

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--log", type=int, default=25_000)
    parser.add_argument("--step-writes", type=int, metavar="N", help="only N steps' batches")
    parser.add_argument("--world", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument(
        "--cpu", action="store_true", help="with --step-writes: requests built first, no count"
    )
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="durasim-bench-"))
    if args.step_writes:
        run_step_writes(args.world, args.step_writes, args.dsn, tmp, cpu=args.cpu)
        return
    counter = iter(range(1_000_000))
    repeat = args.repeat

    def fresh(name: str) -> Path:
        return tmp / f"{name}-{next(counter)}.db"

    def bare(sync: str, commits: int, rows_per_commit: int) -> float:
        return bare_loop(fresh("bare"), sync, commits, rows_per_commit)

    def sqlite(durability: str) -> Callable[[], World]:
        return lambda: SQLiteWorld(fresh("w"), durability=durability)  # type: ignore[arg-type]

    def single(world: World) -> Coroutine[Any, Any, float]:
        return single_appends(world, args.events)

    def batch(world: World) -> Coroutine[Any, Any, float]:
        return batch_appends(world, args.batches, 100)

    def read(world: World) -> Coroutine[Any, Any, float]:
        return read_log(world, args.log)

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; median of {repeat}"
    )
    rows: list[tuple[str, str, str]] = []
    for durability, sync in SYNC.items():
        # Interleave bare and World runs and take the median of per-pair ratios,
        # so a slow spell of the shared disk hits both sides of a ratio alike.
        runs: dict[str, list[float]] = {"bare1": [], "one": [], "bare100": [], "many": []}
        for _ in range(repeat):
            runs["bare1"].append(bare(sync, args.events, 1))
            runs["one"].append(_on(sqlite(durability), single))
            runs["bare100"].append(bare(sync, args.batches, 100))
            runs["many"].append(_on(sqlite(durability), batch))
        bare1, one = statistics.median(runs["bare1"]), statistics.median(runs["one"])
        bare100, many = statistics.median(runs["bare100"]), statistics.median(runs["many"])
        single_ratio = statistics.median(
            b / w for b, w in zip(runs["bare1"], runs["one"], strict=True)
        )
        batch_ratio = statistics.median(
            b / w for b, w in zip(runs["bare100"], runs["many"], strict=True)
        )
        rows += [
            (f"bare sqlite3 INSERT+COMMIT, {sync}", f"{bare1:,.0f} commits/s", "1.00"),
            (
                f"SQLiteWorld single append, {sync}",
                f"{one:,.0f} events/s",
                f"{single_ratio:.2f}x per commit",
            ),
            (f"bare sqlite3 100 INSERTs+COMMIT, {sync}", f"{bare100:,.0f} commits/s", "1.00"),
            (
                f"SQLiteWorld batch of 100, {sync}",
                f"{many:,.0f} batches/s ({many * 100:,.0f} events/s)",
                f"{batch_ratio:.2f}x per commit",
            ),
        ]
    mem_one = median_of(repeat, partial(_on, MemoryWorld, single))
    mem_batch = median_of(repeat, partial(_on, MemoryWorld, batch))
    rows += [
        ("MemoryWorld single append", f"{mem_one:,.0f} events/s", ""),
        (
            "MemoryWorld batch of 100",
            f"{mem_batch:,.0f} batches/s ({mem_batch * 100:,.0f} events/s)",
            "",
        ),
    ]
    for name, factory in (("SQLiteWorld", sqlite("power")), ("MemoryWorld", MemoryWorld)):
        seconds = median_of(repeat, partial(_on, factory, read))
        rows.append((f"{name} read of a {args.log:,}-event log", f"{seconds:.3f} s", ""))
    width = max(len(r[0]) for r in rows)
    for name, figure, ratio in rows:
        print(f"{name:<{width}}  {figure:<36} {ratio}")


if __name__ == "__main__":
    main()
