"""Steps per second of an n-step sequential workflow on DBOS Transact, SQLite system database.

Run with the peers' venv, never the project's (bench_runtime.py does this):

    /tmp/bench-peers/bin/python bench/peers/dbos_steps.py --n 100 1000 --repeat 3

DBOS is configured with ``system_database_url="sqlite:///<tmp>/dbos.sqlite"`` and
nothing else changed: its SQLite engine keeps SQLite's defaults, which this
script reads back and prints (``journal_mode=delete``, ``synchronous=2`` = FULL:
every commit is fsynced).  Each workflow is called directly (``seq(n)``), so it
runs in this thread; steps are ``@DBOS.step()`` functions.  Prints one JSON
object: per n, the median seconds and steps/s over ``--repeat`` runs, and, from
one extra run with a SQLAlchemy ``commit`` listener, the commits per step.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import statistics
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import sqlalchemy as sa
from dbos import DBOS

COMMITS = [0]


@DBOS.step()
def add(a: int, b: int) -> int:
    return a + b


@DBOS.workflow()
def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = add(total, i)
    return total


def _count_commit(_conn: object) -> None:
    COMMITS[0] += 1


def main(sizes: list[int], repeat: int) -> None:
    path = Path(tempfile.mkdtemp(prefix="dbos-bench-")) / "dbos.sqlite"
    DBOS(
        config={
            "name": "durasim-bench",
            "system_database_url": f"sqlite:///{path}",
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    try:
        results = []
        for n in sizes:
            times = []
            for _ in range(repeat):
                begin = time.perf_counter()
                value = sequential(n)
                times.append(time.perf_counter() - begin)
                assert value == n * (n - 1) // 2, value
            seconds = statistics.median(times)
            results.append(
                {"n": n, "seconds": seconds, "steps_per_s": n / seconds, "runs": len(times)}
            )
        counted = min(sizes)
        sa.event.listen(sa.engine.Engine, "commit", _count_commit)
        COMMITS[0] = 0
        sequential(counted)
        sa.event.remove(sa.engine.Engine, "commit", _count_commit)
        commits_per_step = COMMITS[0] / counted
    finally:
        DBOS.destroy()
    db = sqlite3.connect(path)
    pragmas = {
        "journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0],
        "synchronous": db.execute("PRAGMA synchronous").fetchone()[0],
    }
    db.close()
    print(
        json.dumps(
            {
                "peer": "dbos",
                "version": version("dbos"),
                "sqlite": pragmas,
                "commits_per_step": commits_per_step,
                "commits_counted_at_n": counted,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    main(args.n, args.repeat)
