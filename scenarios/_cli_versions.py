"""``durasim replay-test`` and ``durasim migrate``: shipping workflow code changes safely.

``replay-test`` replays recorded histories (``durasim inspect events ID --json``
exports, directories of them, or runs straight from a World) on the workflow
code the given modules define, and prints each divergence with both sides
(docs/versioning.md).  Exit status: 0 when every history replays, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from pathlib import Path

from durasim.checkers import HistoryVerdict, migrate_run, replay_histories, replay_world
from durasim.worlds import DurasimError

from ._cli_runs import import_module
from ._cli_world import open_world

__all__ = [
    "add_migrate_arguments",
    "add_replay_test_arguments",
    "cmd_migrate",
    "cmd_replay_test",
]

WORLD_HELP = "a SQLite World file or a postgresql:// URL to read runs from"


def add_replay_test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="exported histories: .jsonl files (inspect events ID --json) or directories",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first: the workflow code to test (repeatable)",
    )
    parser.add_argument("--world", default=None, help=WORLD_HELP)
    parser.add_argument(
        "--run", dest="runs", action="append", default=[], metavar="RUN_ID", help="with --world"
    )
    parser.add_argument(
        "--in-flight",
        action="store_true",
        help="with --world: only the runs that have not ended (what a deployment meets)",
    )


async def _collect(args: argparse.Namespace) -> list[HistoryVerdict]:
    verdicts = await replay_histories(args.paths) if args.paths else []
    if args.world is not None:
        world = await open_world(args.world, must_exist=True)
        try:
            verdicts += await replay_world(world, args.runs, unfinished_only=args.in_flight)
        finally:
            await world.close()
    return verdicts


def cmd_replay_test(args: argparse.Namespace) -> int:
    """Replay the histories; print one line per run and the divergences in full."""
    if not args.paths and args.world is None:
        raise DurasimError("durasim replay-test needs history files, a directory or --world")
    for module in args.imports:
        import_module(module)
    verdicts: Sequence[HistoryVerdict] = asyncio.run(_collect(args))
    for verdict in verdicts:
        print(verdict.render())
    broken = [v for v in verdicts if not v.ok]
    print(
        f"durasim replay-test: {len(verdicts) - len(broken)} of {len(verdicts)} histories "
        f"replay on this code{'' if not broken else f'; {len(broken)} do not'}"
    )
    return 1 if broken else 0


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", help="the run to move")
    parser.add_argument("--to", required=True, metavar="VERSION", help="the version to pin it to")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first: the code of VERSION, replayed on the run's log (repeatable)",
    )
    parser.add_argument("--world", default=None, help="a SQLite World file or a postgresql:// URL")


async def _migrate(args: argparse.Namespace) -> HistoryVerdict:
    world = await open_world(args.world, must_exist=True)
    try:
        return await migrate_run(world, args.run_id, args.to)
    finally:
        await world.close()


def cmd_migrate(args: argparse.Namespace) -> int:
    """Move a live run to another code version after a clean replay of its log on it."""
    for module in args.imports:
        import_module(module)
    asyncio.run(_migrate(args))
    print(f"run {args.run_id}: replays on version {args.to}; pinned to it from now on")
    return 0
