"""``durasim conformance`` and ``durasim demo`` (the README's first command)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import tempfile
import time
from typing import Any

from durasim.scenarios.conformance import load_factory, run_conformance, write_report
from durasim.worlds import FactoryError, SQLiteWorld, World, WorldSetup

from . import _cli_args as arg

__all__ = [
    "add_conformance_arguments",
    "cmd_conformance",
    "cmd_demo",
    "cmd_vercel",
    "sqlite_world",
]


def add_conformance_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``durasim conformance`` (docs/conformance.md)."""
    parser.add_argument(
        "factory",
        nargs="?",
        type=arg.text,
        default=None,
        help="MODULE:FACTORY, factory(setup) -> World",
    )
    parser.add_argument(
        "--vercel",
        type=arg.text,
        default=None,
        metavar="PACKAGE[@VERSION]",
        help="a Vercel World package (or package directory) through the Node bridge "
        "(docs/vercel.md)",
    )
    parser.add_argument(
        "--database-url",
        type=arg.text,
        default=None,
        metavar="URL",
        help="with --vercel: the PostgreSQL server of a world-postgres (one scratch "
        "database per World)",
    )
    parser.add_argument(
        "--repro",
        type=arg.path,
        default=None,
        metavar="DIR",
        help="with --vercel: write a plain-Node reproduction script per violation to DIR "
        "and run each once in Node (the report says whether it reproduced)",
    )
    parser.add_argument(
        "--capabilities", type=arg.text, default=None, help="test only these (comma-separated)"
    )
    parser.add_argument(
        "--layers",
        type=arg.text,
        default=None,
        help="which layers, comma-separated (default: every layer)",
    )
    parser.add_argument(
        "--budget",
        type=arg.seconds,
        default=None,
        help="seconds for each searching layer (default: the World model 50, the "
        "exploration 30; none with --examples)",
    )
    parser.add_argument(
        "--examples",
        type=arg.count(1, 10_000_000, "a number of examples"),
        default=None,
        help="at most N examples per search (exactly N "
        "without --budget: a run that does not depend on the machine's speed)",
    )
    parser.add_argument(
        "--seed", type=arg.count(0, 2**64 - 1, "a seed"), default=0, help="seed of every search"
    )
    parser.add_argument(
        "--only", type=arg.text, default=None, help="only tests/scenarios/workflows named so"
    )
    parser.add_argument(
        "--strict", action="store_true", help="certify: fail on anything not applicable"
    )
    parser.add_argument(
        "-x", "--exitfirst", action="store_true", help="stop after the first failing layer"
    )
    parser.add_argument(
        "--report",
        type=arg.file_name,
        default=None,
        metavar="FILE",
        help="also write FILE.json or FILE.xml (JUnit)",
    )


class _Progress:
    """One line per layer on a terminal: ``contract ...`` while it runs, its result after."""

    def __init__(self) -> None:
        self.pending = False

    def __call__(self, line: str) -> None:
        if line.endswith(": running"):
            sys.stdout.write(f"  {line.removesuffix(': running'):<12} ...")
            self.pending = True
        else:
            sys.stdout.write(("\r" if self.pending else "") + line + "\n")
            self.pending = False
        sys.stdout.flush()


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run the conformance suite over ``args.factory``; print the report; 0 only if it passed."""
    if args.vercel is not None:
        return cmd_vercel(args)
    if args.factory is None:
        print(
            "durasim conformance: name the World: MODULE:FACTORY, or --vercel PACKAGE",
            file=sys.stderr,
        )
        return 2
    ref: str = args.factory
    if args.report and not args.report.lower().endswith((".json", ".xml")):
        print(
            f"durasim conformance: --report {args.report}: name a .json (JSON) or .xml "
            "(JUnit XML) file",
            file=sys.stderr,
        )
        return 2
    try:
        factory = load_factory(ref)
        layers = [name for name in args.layers.split(",") if name] if args.layers else None
        caps = None
        if args.capabilities is not None:
            caps = [c for c in args.capabilities.split(",") if c]
        progress = _Progress() if sys.stdout.isatty() else None
        report = run_conformance(
            factory,
            target=ref,
            capabilities=caps,
            layers=layers,
            budget=args.budget,
            examples=args.examples,
            seed=args.seed,
            only=args.only,
            strict=args.strict,
            stop_at_first_failure=args.exitfirst,
            progress=progress,
        )
    except (FactoryError, ValueError) as exc:
        print(f"durasim conformance: {exc}", file=sys.stderr)
        return 2
    if progress is not None:
        print()
    print(report.render())
    if args.report:
        try:
            written = write_report(report, args.report)
        except (OSError, ValueError) as exc:
            print(f"durasim conformance: {exc}", file=sys.stderr)
            return 2
        print(f"report written to {written}")
    return 0 if report.ok else 1


def cmd_vercel(args: argparse.Namespace) -> int:
    """``durasim conformance --vercel PACKAGE``: the verdict; 0 only without violations."""
    from pathlib import Path  # noqa: PLC0415

    from durasim.scenarios.conformance import (  # noqa: PLC0415
        check_repros,
        run_vercel_conformance,
    )
    from durasim.worlds import NodeMissing, vercel_factory  # noqa: PLC0415

    if args.factory is not None:
        print("durasim conformance: give MODULE:FACTORY or --vercel, not both", file=sys.stderr)
        return 2
    factory = vercel_factory(args.vercel, database_url=args.database_url)
    try:
        layers = [name for name in args.layers.split(",") if name] if args.layers else None
        progress = _Progress() if sys.stdout.isatty() else None
        verdict = run_vercel_conformance(
            factory,
            layers=layers,
            examples=args.examples,
            seed=args.seed,
            only=args.only,
            progress=progress,
        )
        print(verdict.render())
        if args.repro:
            written = verdict.write_repros(Path(args.repro))
            print(f"{len(written)} plain-Node reproduction(s) written to {args.repro}")
            for script, reproduced, last in check_repros(factory, written):
                verb = "reproduces" if reproduced else "does NOT reproduce"
                print(f"  {script.name}: {verb} in plain Node ({last})")
    except NodeMissing as exc:
        print(f"durasim conformance: {exc}", file=sys.stderr)
        return 2
    except (FactoryError, ValueError) as exc:
        print(f"durasim conformance: {exc}", file=sys.stderr)
        return 2
    finally:
        factory.close()
    if args.report:
        try:
            print(f"report written to {write_report(verdict.report, args.report)}")
        except (OSError, ValueError) as exc:
            print(f"durasim conformance: {exc}", file=sys.stderr)
            return 2
    return 0 if verdict.ok else 1


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
