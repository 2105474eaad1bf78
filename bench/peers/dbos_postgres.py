"""Steps per second of an n-step sequential workflow on DBOS Transact, PostgreSQL system database.

Run with the peers' venv, never the project's (bench_postgres.py does this):

    /tmp/bench-peers/bin/python bench/peers/dbos_postgres.py \
        --url postgresql://postgres@127.0.0.1:5432/dbos_bench --n 1000 --repeat 3

DBOS is configured with ``system_database_url`` (a database of its own on the
same server, created by DBOS if missing) and nothing else changed.  Each
workflow is called directly (``sequential(n)``), so it runs in this thread;
steps are ``@DBOS.step()`` functions.  Prints one JSON object: per n, the median
seconds and steps/s over ``--repeat`` runs; from one extra run, the server's
commits per step (``pg_stat_database.xact_commit`` of DBOS's database, read
before and after) and the server's ``synchronous_commit``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from importlib.metadata import version

import sqlalchemy as sa
from dbos import DBOS


@DBOS.step()
def add(a: int, b: int) -> int:
    return a + b


@DBOS.workflow()
def sequential(n: int) -> int:
    total = 0
    for i in range(n):
        total = add(total, i)
    return total


def _server_commits(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
        value = conn.execute(
            sa.text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        ).scalar_one()
    return int(value)


def main(url: str, sizes: list[int], repeat: int) -> None:
    DBOS(
        config={
            "name": "durasim-bench",
            "system_database_url": url,
            "run_admin_server": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        sequential(10)  # warm up: connections, prepared state
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
                {
                    "n": n,
                    "seconds": seconds,
                    "steps_per_s": n / seconds,
                    "runs": len(times),
                    "all_steps_per_s": [n / t for t in times],
                }
            )
        counted = min(sizes)
        before = _server_commits(engine)
        sequential(counted)
        time.sleep(0.6)  # the statistics collector reports with a short delay
        commits_per_step = (_server_commits(engine) - before) / counted
        with engine.connect() as conn:
            sync = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
    finally:
        DBOS.destroy()
        engine.dispose()
    print(
        json.dumps(
            {
                "peer": "dbos",
                "version": version("dbos"),
                "synchronous_commit": sync,
                "commits_per_step": commits_per_step,
                "commits_counted_at_n": counted,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True, help="DBOS system database URL")
    parser.add_argument("--n", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    main(args.url, args.n, args.repeat)
