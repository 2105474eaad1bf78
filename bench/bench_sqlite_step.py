"""Cost per step of a sequential workflow on SQLiteWorld (``process`` durability).

Run by hand (never in CI).  One run of ``--steps`` async steps on a fresh file,
served to its end by a Worker; under callgrind the per-step cost is the
difference of two runs (1000 and 30 steps) over 970:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/bench_sqlite_step.py --steps 1000

``--trace`` prints the SQL statements the run executed, grouped and counted.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import pickle
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from durasim.runtime import Worker, start, step, workflow
from durasim.worlds import FixedClock, SQLiteWorld


@step(module="bench")
async def add_async(a: int, b: int) -> int:
    return a + b


@step(module="bench")
def add(a: int, b: int) -> int:
    return a + b


@workflow(module="bench")
async def sequential(n: int, kind: str) -> int:
    total = 0
    for i in range(n):
        total = await (add_async(total, i) if kind == "async" else add(total, i))
    return total


def _shape(statement: str) -> str:
    """The statement without its bound values (the trace expands them)."""
    text = " ".join(statement.split())
    text = re.sub(r"'[^']*'|x'[0-9a-f]*'|\b\d+\b", "?", text)
    return text[:150]


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def new_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n:026d}"


async def _record(path: Path, n: int) -> list[tuple[str, Any, Any, dict[str, Any]]]:
    """The World event writes of one ``n``-step run, in order (run on a scratch file)."""
    world = SQLiteWorld(path, durability="process", clock=FixedClock(), ids=_Ids())
    calls: list[tuple[str, Any, Any, dict[str, Any]]] = []
    events = world.events
    create, create_batch = events.create, events.create_batch

    async def recording_create(run_id: Any, request: Any, **kw: Any) -> Any:
        calls.append(("create", run_id, request, kw))
        return await create(run_id, request, **kw)

    async def recording_batch(run_id: Any, requests: Any, **kw: Any) -> Any:
        calls.append(("create_batch", run_id, list(requests), kw))
        return await create_batch(run_id, requests, **kw)

    events.create = recording_create  # type: ignore[method-assign]
    events.create_batch = recording_batch  # type: ignore[method-assign]
    run = await start(sequential, n, "async", world=world)
    assert await Worker(world).run_until_complete(run) == sum(range(n))
    await world.close()
    return calls


async def _replay_writes(path: Path, calls: list[tuple[str, Any, Any, dict[str, Any]]]) -> None:
    """The recorded writes alone, on a fresh World: the World's own cost."""
    world = SQLiteWorld(path, durability="process", clock=FixedClock(), ids=_Ids())
    for method, run_id, request, kw in calls:
        await getattr(world.events, method)(run_id, request, **kw)
    await world.close()


async def _run(path: Path, n: int, kind: str, durability: Any, trace: bool) -> None:
    world = SQLiteWorld(path, durability=durability, clock=FixedClock(), ids=_Ids())
    counts: collections.Counter[str] = collections.Counter()
    if trace:
        world._db.set_trace_callback(lambda s: counts.update([_shape(s)]))
    run = await start(sequential, n, kind, world=world)
    result = await Worker(world).run_until_complete(run)
    assert result == sum(range(n)), result
    await world.close()
    if trace:
        for statement, count in counts.most_common():
            print(f"{count:7d}  {statement}")
        print(f"{sum(counts.values()):7d}  total ({sum(counts.values()) / n:.2f} per step)")


def _bare(path: Path, n: int, synchronous: str) -> None:
    """bench_runtime.bare_commits' loop: BEGIN, one INSERT, COMMIT, ``n`` times."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, body BLOB)")
    for k in range(n):
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?, ?)", (k, b"x" * 64))
        db.execute("COMMIT")
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--kind", choices=("async", "sync"), default="async")
    parser.add_argument("--durability", choices=("process", "power"), default="process")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--load-only", action="store_true", help="--world-only's load, no writes")
    parser.add_argument("--bare", action="store_true", help="the bare INSERT+COMMIT loop instead")
    parser.add_argument(
        "--record", metavar="FILE", help="save the run's World event writes (pickle) to FILE"
    )
    parser.add_argument(
        "--world-only",
        metavar="FILE",
        help="replay the World writes saved by --record alone: the World's own cost",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="durasim-sqlite-step-") as directory:
        if args.bare:
            began = time.process_time()
            _bare(
                Path(directory) / "bare.db",
                args.steps,
                "NORMAL" if args.durability == "process" else "FULL",
            )
            print(f"{(time.process_time() - began) / args.steps * 1e6:.1f} us/commit CPU (bare)")
            return
        if args.record:
            calls = asyncio.run(_record(Path(directory) / "scratch.db", args.steps))
            Path(args.record).write_bytes(pickle.dumps(calls))
            return
        if args.world_only:
            calls = pickle.loads(Path(args.world_only).read_bytes())
            args.steps = len(calls)
            if args.load_only:
                return
            began = time.process_time()
            asyncio.run(_replay_writes(Path(directory) / "w.db", calls))
        else:
            began = time.process_time()
            asyncio.run(
                _run(Path(directory) / "w.db", args.steps, args.kind, args.durability, args.trace)
            )
        cpu = (time.process_time() - began) / args.steps * 1e6
    what = "World writes" if args.world_only else f"{args.kind} steps"
    print(f"{args.steps} {what} on SQLite {args.durability}: {cpu:.1f} us/step CPU")


if __name__ == "__main__":
    sys.exit(main())
