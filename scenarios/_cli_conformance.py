"""``durasim conformance`` and ``durasim demo`` (the README's first command)."""

from __future__ import annotations

import asyncio
import importlib
import sys
import tempfile
import time
from typing import Any

from durasim.scenarios.conformance import LAYERS, load_factory, run_conformance
from durasim.worlds import FactoryError, SQLiteWorld, World, WorldSetup

__all__ = ["cmd_conformance", "cmd_demo", "sqlite_world"]


def _progress(line: str) -> None:
    print(f"  ... {line}", file=sys.stderr, flush=True)


def cmd_conformance(
    ref: str,
    *,
    capabilities: str | None,
    layers: str | None,
    examples: int,
    seed: int,
    only: str | None,
) -> int:
    """Run the conformance suite over the factory ``ref``; print the report; 0 only if it passed."""
    try:
        factory = load_factory(ref)
        chosen = tuple(layers.split(",")) if layers else LAYERS
        caps = None if capabilities is None else [c for c in capabilities.split(",") if c]
        report = run_conformance(
            factory,
            target=ref,
            capabilities=caps,
            layers=chosen,
            examples=examples,
            seed=seed,
            only=only,
            progress=_progress,
        )
    except (FactoryError, ValueError) as exc:
        print(f"durasim conformance: {exc}", file=sys.stderr)
        return 2
    print(report.render())
    return 0 if report.ok else 1


def sqlite_world(setup: WorldSetup) -> World:
    """The embedded default, as a conformance factory (``durasim demo`` checks it)."""
    return SQLiteWorld(
        setup.directory / "world.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


def cmd_demo(*, examples: int) -> int:
    """Run a workflow, explore it under faults, then check the SQLite World's conformance."""
    from durasim.scenarios.conformance.examples import checkout  # noqa: PLC0415

    from ._cli_runs import cmd_run  # noqa: PLC0415

    started = time.perf_counter()
    print("== 1. run: examples checkout(3) on the embedded SQLite World (.durasim/)")
    code = asyncio.run(
        cmd_run(
            "durasim.scenarios.conformance.examples:checkout", ["3"], world_path=None, run_id=None
        )
    )
    if code:
        return code
    print(f"\n== 2. explore: checkout(3) under faults, {examples} schedules")
    try:
        # Imported by name: explore() ships separately and may be absent.
        explore: Any = importlib.import_module("durasim.scenarios._explore").explore
    except ImportError:
        explored = True
        print("explore() is not installed: skipped")
    else:
        result = explore(checkout, 3, max_examples=examples, seed=0)
        explored = result.ok
        print(result.render())
    print("\n== 3. conformance: the SQLite World against the contract")
    ref = "durasim.scenarios._cli_conformance:sqlite_world"
    with tempfile.TemporaryDirectory(prefix="durasim-demo-"):
        report = run_conformance(sqlite_world, target=ref, examples=examples, seed=0)
    print(report.render())
    ok = explored and report.ok
    elapsed = time.perf_counter() - started
    print(f"\ndurasim demo: {'all green' if ok else 'FAILED'} in {elapsed:.0f} s")
    return 0 if ok else 1
