"""``durasim run``, ``durasim worker`` and ``durasim inspect``: the runtime from a shell."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from durasim.checkers import LogFileError, check_logs, load_logs
from durasim.runtime import (
    DeliveryReport,
    Run,
    Worker,
    WorkflowFailed,
    fork_run,
    get_run,
    resume_run,
    start,
)
from durasim.runtime.lowlevel import DeliveryStatus, importable_name, workflow_definition
from durasim.worlds import DurasimError, World

from ._cli_inspect import error_text, run_state
from ._cli_logging import cli_logging
from ._cli_world import open_world

__all__ = ["cmd_drive", "cmd_run", "cmd_start", "cmd_worker", "load_target", "parse_args"]


def load_target(spec: str) -> Any:
    """``module:name`` or ``path/to/file.py:name`` -> the object (the module is imported)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise DurasimError(
            f"{spec!r} does not name a workflow: write module:workflow or path/to/file.py:workflow"
        )
    module = import_module(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise DurasimError(f"{where} has no attribute {name!r}") from None


def import_module(where: str) -> Any:
    """Import a module by dotted name or by file path, the current directory first.

    A file below the current directory (or a ``sys.path`` entry) is imported
    under the dotted name ``durasim worker`` would import it by
    (``pkg/mod.py`` -> ``pkg.mod``), so both name its workflows alike; a file
    below neither is loaded from its folder under its stem, and says so.
    """
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if not (where.endswith(".py") or "/" in where):
        try:
            return importlib.import_module(where)
        except ImportError as exc:
            raise DurasimError(f"cannot import {where}: {exc}") from exc
    path = Path(where).resolve()
    if not path.is_file():
        raise DurasimError(f"no such file: {where}")
    name = importable_name(path)
    if name is None:
        return _load_outside(where, path)
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise DurasimError(f"cannot import {where} as module {name!r}: {exc}") from exc
    found = getattr(module, "__file__", None)
    if found is None or Path(found).resolve() != path:
        raise DurasimError(
            f"{where} is module {name!r} by its path, but importing {name!r} gives "
            f"{found or 'a module without a file'}: another module of that name comes "
            "first on sys.path; rename one of them"
        )
    return module


def _load_outside(where: str, path: Path) -> Any:
    """Load a file below no import root: from its folder, under its stem (and say so)."""
    name = path.stem
    print(
        f"durasim: {where} is not below the current directory or a sys.path entry: "
        f"loaded it as module {name!r} from {path.parent} (added to sys.path). Its "
        f"workflow ids name module {name!r}: a worker finds them only if it imports "
        f"{name!r} too (cd {path.parent} && durasim worker {name})",
        file=sys.stderr,
    )
    sys.path.insert(0, str(path.parent))
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def parse_args(values: Sequence[str]) -> list[Any]:
    """Workflow arguments from the command line: JSON where it parses, else strings."""
    parsed: list[Any] = []
    for number, value in enumerate(values, 1):
        try:
            parsed.append(json.loads(value))
        except ValueError:
            parsed.append(value)
        except RecursionError:
            raise DurasimError(
                f"workflow argument {number} nests too deeply to be read as JSON: pass a "
                "flatter value"
            ) from None
    return parsed


async def cmd_run(
    spec: str, values: Sequence[str], *, world_path: str | None, run_id: str | None
) -> int:
    """Start a workflow and serve it here until it ends; print its result as JSON.

    Each failed attempt of a step is logged on one line (run, step, attempt, delay);
    a failed run is reported with the step that failed it and its traceback.
    """
    target = load_target(spec)
    workflow_definition(target)  # a clear error if it is not a @workflow
    world = await open_world(world_path)
    try:
        run = await start(target, *parse_args(values), world=world, run_id=run_id)
        print(f"run {run.run_id} started", file=sys.stderr)
        try:
            with cli_logging(summary=True):
                result = await Worker(world).run_until_complete(run)
        except WorkflowFailed:
            print(await failure_text(world, run.run_id), file=sys.stderr)
            return 1
        print(json.dumps(result, default=repr, indent=2, sort_keys=True))
        return 0
    finally:
        await world.close()


async def cmd_start(
    spec: str, values: Sequence[str], *, world_path: str | None, run_id: str | None
) -> int:
    """Start a workflow and return at once: print the run id (a worker serves it)."""
    target = load_target(spec)
    workflow_definition(target)
    world = await open_world(world_path)
    try:
        run = await start(target, *parse_args(values), world=world, run_id=run_id)
    finally:
        await world.close()
    print(run.run_id)
    return 0


async def cmd_drive(
    how: str,
    run_id: str,
    *,
    world_path: str | None,
    new_run_id: str | None,
    from_step: int | None = None,
    imports: Sequence[str] = (),
    wait: bool = False,
) -> int:
    """``resume RUN`` / ``fork RUN --from-step N``: a new run reusing recorded results.

    Prints the new run's id; with ``wait`` serves it here until it ends (like
    ``durasim run``) and prints its result.
    """
    for module in imports:
        import_module(module)
    world = await open_world(world_path, must_exist=True)
    try:
        _import_workflow_module((await world.runs.get(run_id)).workflow_name)
        made: Run[Any]
        if how == "resume":
            made = await resume_run(world, run_id, new_run_id=new_run_id)
        else:
            assert from_step is not None
            made = await fork_run(world, run_id, from_step=from_step, new_run_id=new_run_id)
        print(made.run_id)
        if not wait:
            return 0
        try:
            with cli_logging(summary=True):
                result = await Worker(world).run_until_complete(made)
        except WorkflowFailed:
            print(await failure_text(world, made.run_id), file=sys.stderr)
            return 1
        print(json.dumps(result, default=repr, indent=2, sort_keys=True))
        return 0
    finally:
        await world.close()


def _import_workflow_module(workflow_id: str) -> None:
    """Import the module a workflow id names (``workflow//<module>//<name>``), if it can be.

    Its result types decode, and ``--wait`` can run its steps; a module that does not
    import here (a pinned ``module='shop@2'``) is left to ``--import``.
    """
    parts = workflow_id.split("//")
    if len(parts) == 3 and parts[1].replace(".", "").replace("_", "").isalnum():
        with contextlib.suppress(DurasimError):
            import_module(parts[1])


async def failure_text(world: World, run_id: str) -> str:
    """``run X failed (CODE) in step S (id), attempt N:`` and the error's traceback."""
    body = await run_state(world, run_id)
    failed = body["failed_step"]
    where = (
        f" in step {failed['step_name']} ({failed['step_id']}), attempt {failed['attempt']}"
        if failed
        else ""
    )
    return f"run {run_id} failed ({body['error_code']}){where}:\n{error_text(body['error'])}"


async def cmd_worker(
    modules: Sequence[str],
    *,
    world_path: str | None,
    concurrency: int,
    lease_seconds: float | None = None,
    renew_every: float | None = None,
    deployment: str | None = None,
    serve_all: bool = False,
    log_format: str = "text",
) -> int:
    """Serve a World until SIGTERM/SIGINT; in-flight deliveries finish first.

    The runtime's records (each failed attempt with its traceback, each run's end)
    go to stderr as text or, with ``log_format="json"``, as JSON lines.
    """
    for module in modules:
        import_module(module)
    world = await open_world(world_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    say = _sayer(log_format)
    ended: set[asyncio.Task[None]] = set()

    async def report_end(run_id: str) -> None:
        with contextlib.suppress(DurasimError):
            status = (await world.runs.get(run_id)).status.value
            say(f"durasim worker: run {run_id} {status}", run_id=run_id, outcome=status)

    def on_report(report: DeliveryReport) -> None:
        if report.status is DeliveryStatus.FINISHED and report.run_id != "?":
            task = loop.create_task(report_end(report.run_id))
            ended.add(task)
            task.add_done_callback(ended.discard)

    try:
        with cli_logging(log_format):
            worker = Worker(
                world,
                deployment=deployment,
                serve_all=serve_all,
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                renew_every=renew_every,
                on_report=on_report,
            )
            versions = "every version" if serve_all else ", ".join(worker.versions.served())
            say(
                f"durasim worker: serving {getattr(world, 'path', world)} "
                f"(versions: {versions or 'unversioned runs only'})"
            )
            await worker.serve(stop=stop)
            if ended:
                await asyncio.gather(*ended, return_exceptions=True)
    finally:
        await world.close()
    say("durasim worker: stopped")
    return 0


def _sayer(log_format: str) -> Callable[..., None]:
    """The worker's own lines on stderr: text, or JSON objects beside the log's."""

    def say(message: str, **fields: Any) -> None:
        if log_format == "json":
            line = {
                "time": datetime.now(UTC).isoformat(),
                "level": "info",
                "logger": "durasim.worker",
            }
            print(json.dumps({**line, "message": message, **fields}), file=sys.stderr, flush=True)
        else:
            print(message, file=sys.stderr, flush=True)

    return say


async def cmd_cancel(run_id: str, *, reason: str | None, world_path: str | None) -> int:
    """Cancel a pending or running run (``run_cancelled``); its children too."""
    world = await open_world(world_path, must_exist=True)
    try:
        cancelled = await get_run(run_id, world=world).cancel(reason)
    finally:
        await world.close()
    print(f"{run_id}: {'cancelled' if cancelled else 'was already cancelled'}")
    return 0


_EXPORT_HINT = "export logs with `durasim inspect events RUN_ID --json > FILE.jsonl`"


def cmd_check_log(path: Path) -> int:
    """Check exported logs offline: 0 when every rule holds, 1 when one is broken."""
    try:
        logs = load_logs(path)
    except LogFileError as exc:
        for line in exc.problems or (str(exc),):
            print(line, file=sys.stderr)
        if exc.problems:
            print(
                f"durasim check-log: {len(exc.problems)} bad line(s); {_EXPORT_HINT}",
                file=sys.stderr,
            )
        return 1
    report = check_logs(logs)
    print(report.render())
    return 0 if report.ok else 1
