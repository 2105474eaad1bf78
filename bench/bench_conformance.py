"""Time of each conformance layer against MemoryWorld, SQLiteWorld and (if reachable) PostgresWorld.

    .venv/bin/python bench/bench_conformance.py [--budget SECONDS] [--examples N]
        [--worlds memory,sqlite,postgres] [--dsn postgresql://...]

With no option the suite runs with its defaults (each searching layer on its own
time budget), as ``durasim conformance`` does: contract, book, concurrency, crash
(durable Worlds), world model, explore, cheapest first.  The table gives each
layer's wall time (a layer that does not apply shows ``n/a``) and, for the
searching layers, how many examples ran in it.  PostgreSQL is
left out, with the reason, when the server cannot be reached.  Results go into
docs/benchmarks.md by hand, with the command and the machine.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import sys
import time
from collections.abc import Callable

from durasim.scenarios.conformance import run_conformance
from durasim.worlds import MemoryWorld, SQLiteWorld, World, WorldSetup

DSN = os.environ.get("DURASIM_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def memory_world(setup: WorldSetup) -> World:
    return MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)


def sqlite_world(setup: WorldSetup) -> World:
    return SQLiteWorld(
        setup.directory / "w.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


def postgres_world(setup: WorldSetup) -> World:
    from durasim.worlds import PostgresWorld

    schema = "bench_conf_" + hashlib.sha1(str(setup.directory).encode()).hexdigest()[:12]
    return PostgresWorld(
        DSN,
        schema=schema,
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        pool_size=2,
    )


def _postgres_problem() -> str | None:
    try:
        import psycopg

        with psycopg.connect(DSN, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # ImportError, OperationalError ...
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


def _drop_bench_schemas() -> None:
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_conf_%'"
            )
        ]
        for name in names:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


WORLDS: dict[str, Callable[[WorldSetup], World]] = {
    "memory": memory_world,
    "sqlite": sqlite_world,
    "postgres": postgres_world,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=None, help="seconds per searching layer")
    parser.add_argument("--examples", type=int, default=None, help="examples per search")
    parser.add_argument("--worlds", default="memory,sqlite,postgres")
    options = parser.parse_args()
    print(
        f"# {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"# {' '.join(sys.argv)}")
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    header = None
    for name in options.worlds.split(","):
        if name == "postgres":
            problem = _postgres_problem()
            if problem is not None:
                print(f"{name:<9} skipped: PostgreSQL at {DSN} is not reachable ({problem})")
                continue
        started = time.perf_counter()
        report = run_conformance(WORLDS[name], budget=options.budget, examples=options.examples)
        total = time.perf_counter() - started
        if name == "postgres":
            _drop_bench_schemas()
        if header is None:
            header = " | ".join(f"{layer.name:<18}" for layer in report.layers)
            print(f"{'World':<9} | {'total':>7} | ok    | {header}")
        cells = []
        for layer in report.layers:
            if layer.not_applicable:
                cells.append(f"{f'{layer.name} n/a':<18}")
                continue
            ran = f", {layer.examples} ex" if layer.examples else ""
            cells.append(f"{f'{layer.seconds:.1f} s{ran}':<18}")
        print(f"{name:<9} | {total:5.1f} s | {report.ok!s:<5} | {' | '.join(cells)}")
        for layer in report.layers:
            print(f"#   {name} {layer.name}: {layer.note or layer.not_applicable}")


if __name__ == "__main__":
    main()
