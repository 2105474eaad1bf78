"""Time of the conformance suite (every layer) against MemoryWorld and SQLiteWorld.

.venv/bin/python bench/bench_conformance.py [--examples N]
"""

from __future__ import annotations

import argparse
import time

from durasim.scenarios.conformance import run_conformance
from durasim.worlds import MemoryWorld, SQLiteWorld, World, WorldSetup


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=50)
    examples = parser.parse_args().examples
    for name, factory in (("memory", memory_world), ("sqlite", sqlite_world)):
        started = time.perf_counter()
        report = run_conformance(factory, examples=examples)
        total = time.perf_counter() - started
        layers = ", ".join(f"{layer.name} {layer.seconds:.1f} s" for layer in report.layers)
        print(f"{name:<7} {total:6.1f} s  ok={report.ok}  ({layers})")


if __name__ == "__main__":
    main()
