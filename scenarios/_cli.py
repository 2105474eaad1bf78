"""The ``durasim`` command.

* ``durasim run MODULE:WORKFLOW [ARGS...]`` (or ``path/to/file.py:WORKFLOW``): start a
  workflow on the embedded SQLite World in ``.durasim/`` (or ``--world FILE``, or
  ``--world postgresql://...?schema=NAME``), serve it until it ends and print its
  result (arguments are JSON where they parse, else strings).  A file below the
  current directory is imported under its dotted name (``pkg/mod.py`` -> ``pkg.mod``),
  the name a worker imports, so both give its workflows one id;
* ``durasim start MODULE:WORKFLOW [ARGS...]``: start a run and print its id at once;
* ``durasim resume RUN`` / ``durasim fork RUN --from-step N`` (``--wait`` to serve it
  here): a new run of the same workflow and input that reuses the recorded step
  results (all of them / the first N) and runs the rest anew (docs/runtime.md);
* ``durasim worker [MODULE...]``: import the modules (dotted names, from the current
  directory first, or files as above) and serve the World until SIGTERM/SIGINT
  (graceful: in-flight deliveries finish);
* ``durasim inspect runs [--status S] [--workflow W] [--since T] [--limit N] | run ID |
  events ID [--json]``: what the World holds, with times, payloads decoded;
  ``durasim inspect run ID --html FILE`` writes the run's timeline page
  (docs/timeline.md);

* ``durasim demo``: the main job end to end: run an example workflow on the
  embedded SQLite World, explore it under faults, check the SQLite World's
  conformance; ``durasim demo --db PATH`` journals one run's whole lifecycle
  (steps, a retry, a hook with a duplicate resume, a durable sleep) and prints its log;
* ``durasim conformance MODULE:FACTORY [--capabilities ...] [--layers ...]
  [--budget SECONDS] [--examples N] [--seed S] [--only NAME] [--strict] [-x]
  [--report FILE.json|FILE.xml]``: the conformance suite over a World factory
  (docs/conformance.md);
* ``durasim log PATH [RUN_ID]``: list the runs of a SQLite World, or print one
  run's log;
* ``durasim manifest PATH``: import the modules under PATH and print the JSON
  manifest of their workflows, steps and serializable classes;
* ``durasim reproduce SEED [--import MODULE]``: replay the execution an
  exploration's seed encodes; print its verdict and trace (``--html FILE``:
  and write its timeline page).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from durasim.runtime import LeaseOptionsError, LeasePolicy
from durasim.runtime.lowlevel import (
    DEPLOYMENT_ENV,
    DeploymentError,
    build_manifest,
    check_deployment_id,
)
from durasim.worlds import (
    DurasimError,
    Event,
    EventRequest,
    FixedClock,
    SQLiteWorld,
    World,
)

from . import _cli_args as arg
from ._cli_conformance import add_conformance_arguments, cmd_conformance, cmd_demo
from ._cli_inspect import cmd_inspect
from ._cli_runs import cmd_cancel, cmd_check_log, cmd_drive, cmd_run, cmd_start, cmd_worker
from ._cli_versions import (
    add_migrate_arguments,
    add_replay_test_arguments,
    cmd_migrate,
    cmd_replay_test,
)
from ._reproduce import cmd_reproduce
from ._timeline_run import cmd_inspect_html

__all__ = ["main"]

WORLD_HELP = (
    "a SQLite World file, or postgresql://user@host/db?schema=NAME (default: .durasim/world.db)"
)


def _render(event: Event) -> str:
    fields = []
    for name, value in event.data.items():
        if isinstance(value, bytes):
            shown = f"<{len(value)} bytes>"
        elif isinstance(value, datetime):
            shown = value.isoformat()
        else:
            shown = repr(value)
        fields.append(f"{name}={shown}")
    band = "in-band " if event.in_band else "        "
    return f"{event.label:<40} {band}{' '.join(fields)}"


async def _print_log(world: World, run_id: str) -> None:
    after = 0
    while True:
        page = await world.events.list(run_id, after_seq=after)
        for event in page.events:
            print(_render(event))
        after = page.next_after
        if not page.has_more:
            break
    run = await world.runs.get(run_id)
    print(f"run {run.run_id}: {run.status.value}, {page.snapshot.seq} events")


async def _demo(path: Path) -> None:
    # A clock the demo moves itself: the retry back-off and the hour-long nap
    # pass at once, as they will under the simulator.
    clock = FixedClock(datetime.now(UTC))
    world = SQLiteWorld(path, clock=clock)
    try:
        e = EventRequest.of
        created = await world.events.create(
            None, e("run_created", workflow_name="workflow//demo//checkout", input=b'{"order":1}')
        )
        run_id = created.run.run_id
        band = 1

        async def orchestrate(request: EventRequest) -> None:
            nonlocal band
            result = await world.events.create(
                run_id, request, in_band=True, expected_seq_in_band=band
            )
            band += result.allocated

        await orchestrate(e("run_started"))
        await orchestrate(e("step_created", "charge#1", step_name="step//demo//charge", input=b"1"))
        await orchestrate(e("step_started", "charge#1"))
        retry_at = clock.now() + timedelta(seconds=30)
        await world.events.create(
            run_id, e("step_retrying", "charge#1", error=b"card declined", retry_after=retry_at)
        )
        clock.advance(30)
        await orchestrate(e("step_started", "charge#1"))
        await world.events.create(run_id, e("step_completed", "charge#1", result=b'"ok"'))
        await orchestrate(e("hook_created", "approval#1", token=f"approve-{run_id}"))
        for _ in range(2):  # a retried HTTP call: the second resume collapses onto the first
            await world.events.create(
                run_id, e("hook_received", "approval#1", payload=b"true", resume_id="http-1")
            )
        await orchestrate(e("wait_created", "nap#1", resume_at=clock.now() + timedelta(hours=1)))
        clock.advance(3600)
        await world.events.create(run_id, e("wait_completed", "nap#1"))
        await orchestrate(e("run_completed", output=b'"shipped"'))
        print(f"durasim demo: one run journaled in {path}\n")
        await _print_log(world, run_id)
    finally:
        await world.close()


async def _log(path: Path, run_id: str | None) -> None:
    if not path.exists():  # noqa: ASYNC240 -- one stat before any I/O of the World
        raise SystemExit(f"durasim log: no World at {path}: pass the path of a SQLite World file")
    world = SQLiteWorld(path)
    try:
        if run_id is not None:
            await _print_log(world, run_id)
            return
        cursor = None
        while True:
            page = await world.runs.list(cursor=cursor)
            for run in page.runs:
                print(f"{run.run_id}  {run.status.value:<10} {run.workflow_name}")
            cursor = page.cursor
            if cursor is None:
                break
    finally:
        await world.close()


def _manifest(path: Path) -> int:
    try:
        manifest = build_manifest(path)
    except DurasimError as exc:
        print(f"durasim manifest: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(manifest, indent=2, sort_keys=True))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``durasim`` console script."""
    parser = arg.Parser(prog="durasim", description="durasim command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run, explore and check conformance: the main job")
    demo.add_argument(
        "--db", type=arg.path, default=None, help="journal one run in this World file"
    )
    demo.add_argument(
        "--examples",
        type=arg.count(1, 1_000_000, "a number of schedules"),
        default=50,
        help="schedules per search",
    )
    add_conformance_arguments(
        sub.add_parser("conformance", help="check a World factory against the contract")
    )
    log = sub.add_parser("log", help="list runs, or print one run's log")
    log.add_argument("path", type=arg.path, help="SQLite World file")
    log.add_argument("run_id", nargs="?", type=arg.run_id, help="the run whose log to print")
    manifest = sub.add_parser(
        "manifest", help="print the workflows, steps and serializable classes under PATH"
    )
    manifest.add_argument("path", type=arg.path, help="a .py file, a package or a folder")
    runp = sub.add_parser("run", help="run a workflow to its end and print its result")
    runp.add_argument(
        "target",
        type=arg.text,
        help="module:workflow or path/to/file.py:workflow (a file below the current "
        "directory is imported as pkg.mod, the name a worker imports)",
    )
    runp.add_argument(
        "args", nargs="*", type=arg.text, help="workflow arguments (JSON, else strings)"
    )
    runp.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
    runp.add_argument(
        "--run-id", type=arg.run_id, default=None, help="a run id (makes the start idempotent)"
    )
    startp = sub.add_parser("start", help="start a workflow, print its run id at once")
    startp.add_argument("target", type=arg.text, help="module:workflow or path/to/file.py:workflow")
    startp.add_argument(
        "args", nargs="*", type=arg.text, help="workflow arguments (JSON, else strings)"
    )
    startp.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
    startp.add_argument(
        "--run-id", type=arg.run_id, default=None, help="a run id (makes the start idempotent)"
    )
    drives = {}
    for how, text in (
        ("resume", "continue a failed or cancelled run in a new run from its last recorded step"),
        ("fork", "a new run of the same workflow and input reusing the first N step results"),
    ):
        drivep = sub.add_parser(how, help=text)
        drivep.add_argument("run_id", type=arg.run_id, help="the source run")
        if how == "fork":
            drivep.add_argument(
                "--from-step",
                type=arg.count(0, 10**9, "a number of steps"),
                required=True,
                help="reuse this many step results",
            )
        drivep.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
        drivep.add_argument(
            "--run-id", type=arg.run_id, dest="new_run_id", default=None, help="the new run's id"
        )
        drivep.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="import MODULE first (the workflow's, to decode its results; repeatable)",
        )
        drivep.add_argument(
            "--wait", action="store_true", help="serve the new run here until it ends"
        )
        drives[how] = drivep
    workerp = sub.add_parser("worker", help="serve a World until SIGTERM")
    workerp.add_argument(
        "modules",
        nargs="*",
        type=arg.text,
        help="modules that define the workflows (pkg.mod or pkg/mod.py)",
    )
    workerp.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
    workerp.add_argument(
        "--concurrency",
        type=arg.count(1, arg.MAX_CONCURRENCY, "a number of deliveries"),
        default=4,
        help=f"deliveries at once (1..{arg.MAX_CONCURRENCY})",
    )
    workerp.add_argument(
        "--lease-seconds",
        type=arg.seconds,
        default=None,
        help="a dead worker's runs move to another worker after this long (default 5)",
    )
    workerp.add_argument(
        "--renew-every",
        type=arg.seconds,
        default=None,
        help="seconds between lease renewals, less than the lease (default 1, or lease/3)",
    )
    workerp.add_argument(
        "--deployment",
        type=arg.text,
        default=None,
        metavar="VERSION",
        help="serve only runs of this code version (default: $DURASIM_DEPLOYMENT, else each "
        "workflow module's source hash); see docs/versioning.md",
    )
    workerp.add_argument(
        "--serve-all", action="store_true", help="serve every run, whatever its version"
    )
    workerp.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="stderr as text lines or JSON objects with run_id, step, attempt fields",
    )
    inspectp = sub.add_parser("inspect", help="show runs, one run, or one run's events")
    inspectp.add_argument("what", choices=["runs", "run", "events"])
    inspectp.add_argument("run_id", nargs="?", type=arg.run_id, help="the run (for run and events)")
    inspectp.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
    inspectp.add_argument(
        "--json", action="store_true", help="machine-readable output, payloads decoded"
    )
    inspectp.add_argument(
        "--status",
        action="append",
        default=[],
        help="runs: only this status (repeatable: pending running completed failed cancelled)",
    )
    inspectp.add_argument(
        "--workflow",
        type=arg.text,
        default=None,
        help="runs: only this workflow (its id or its name)",
    )
    inspectp.add_argument(
        "--since",
        type=arg.text,
        default=None,
        help="runs: created since an ISO time or an age (15m, 2h, 3d)",
    )
    inspectp.add_argument(
        "--limit",
        type=arg.count(1, 10**9, "a number of runs"),
        default=None,
        help="runs: at most this many",
    )
    inspectp.add_argument(
        "--webhook-base",
        type=arg.text,
        default="",
        help="run: the URL the webhook app is mounted at, to show each webhook's full URL",
    )
    inspectp.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="inspect run ID: write the run's timeline as one self-contained HTML page",
    )
    checkp = sub.add_parser(
        "check-log", help="check exported logs (inspect events ID --json) against every invariant"
    )
    checkp.add_argument("path", type=arg.path, help="a .jsonl file or a directory of them")
    cancelp = sub.add_parser("cancel", help="cancel a pending or running run (and its children)")
    cancelp.add_argument("run_id", type=arg.run_id, help="the run to cancel")
    cancelp.add_argument(
        "--reason", type=arg.reason, default=None, help="why (recorded in the log)"
    )
    cancelp.add_argument("--world", type=arg.world, default=None, help=WORLD_HELP)
    add_replay_test_arguments(
        sub.add_parser(
            "replay-test", help="replay recorded histories on the current code (upgrade test)"
        )
    )
    add_migrate_arguments(
        sub.add_parser(
            "migrate", help="move a live run to another code version (after a replay check)"
        )
    )
    reprop = sub.add_parser("reproduce", help="replay an exploration's seed; verdict and trace")
    reprop.add_argument("seed", type=arg.text, help="the durasim:v1:... seed explore() printed")
    reprop.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        type=arg.text,
        help="import MODULE first (repeatable)",
    )
    reprop.add_argument("--no-trace", action="store_true", help="print the verdict only")
    reprop.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the execution's timeline as one self-contained HTML page",
    )
    args = parser.parse_args(argv)
    if args.command == "worker":
        try:
            LeasePolicy.of(args.lease_seconds, args.renew_every)
        except LeaseOptionsError as exc:
            workerp.error(str(exc))
        if args.deployment is not None:
            try:
                check_deployment_id(args.deployment, where="--deployment")
            except DeploymentError as exc:
                workerp.error(str(exc))
    if args.command == "reproduce":
        return cmd_reproduce(
            args.seed, imports=args.imports, trace=not args.no_trace, html=args.html
        )
    if args.command == "manifest":
        return _manifest(args.path)
    if args.command == "conformance":
        return cmd_conformance(args)
    if args.command == "demo" and args.db is None:
        return cmd_demo(examples=args.examples)
    try:
        if args.command == "run":
            return asyncio.run(
                cmd_run(args.target, args.args, world_path=args.world, run_id=args.run_id)
            )
        if args.command == "start":
            return asyncio.run(
                cmd_start(args.target, args.args, world_path=args.world, run_id=args.run_id)
            )
        if args.command in ("resume", "fork"):
            return asyncio.run(
                cmd_drive(
                    args.command,
                    args.run_id,
                    world_path=args.world,
                    new_run_id=args.new_run_id,
                    from_step=getattr(args, "from_step", None),
                    imports=args.imports,
                    wait=args.wait,
                )
            )
        if args.command == "worker":
            return asyncio.run(
                cmd_worker(
                    args.modules,
                    world_path=args.world,
                    concurrency=args.concurrency,
                    lease_seconds=args.lease_seconds,
                    renew_every=args.renew_every,
                    deployment=args.deployment or os.environ.get(DEPLOYMENT_ENV) or None,
                    serve_all=args.serve_all,
                    log_format=args.log_format,
                )
            )
        if args.command == "inspect" and args.html is not None:
            if args.what != "run":
                inspectp.error("--html draws one run: durasim inspect run ID --html FILE")
            return asyncio.run(cmd_inspect_html(args.run_id, world_path=args.world, html=args.html))
        if args.command == "inspect":
            return asyncio.run(
                cmd_inspect(
                    args.what,
                    args.run_id,
                    world_path=args.world,
                    as_json=args.json,
                    statuses=args.status,
                    workflow=args.workflow,
                    since=args.since,
                    limit=args.limit,
                    webhook_base=args.webhook_base,
                )
            )
        if args.command == "migrate":
            return cmd_migrate(args)
        if args.command == "replay-test":
            return cmd_replay_test(args)
        if args.command == "check-log":
            return cmd_check_log(args.path)
        if args.command == "cancel":
            return asyncio.run(cmd_cancel(args.run_id, reason=args.reason, world_path=args.world))
        if args.command == "demo":
            asyncio.run(_demo(args.db))
        else:
            asyncio.run(_log(args.path, args.run_id))
    except DurasimError as exc:
        print(f"durasim {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
