"""``durasim run``, ``durasim worker`` and ``durasim inspect``: the runtime from a shell."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from durasim.checkers import LogFileError, check_logs, event_to_json, load_logs
from durasim.runtime import Run, Worker, WorkflowFailed, get_run, start
from durasim.runtime.lowlevel import (
    PATCH_ATTR,
    RunPayloads,
    decode_payload,
    importable_name,
    workflow_definition,
)
from durasim.worlds import DurasimError, Event, World

from ._cli_world import open_world

__all__ = ["cmd_inspect", "cmd_run", "cmd_worker", "load_target", "parse_args"]


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
    """Start a workflow and serve it here until it ends; print its result as JSON."""
    target = load_target(spec)
    workflow_definition(target)  # a clear error if it is not a @workflow
    world = await open_world(world_path)
    try:
        run = await start(target, *parse_args(values), world=world, run_id=run_id)
        print(f"run {run.run_id} started", file=sys.stderr)
        try:
            result = await Worker(world).run_until_complete(run)
        except WorkflowFailed as exc:
            print(f"run {run.run_id} failed: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(result, default=repr, indent=2, sort_keys=True))
        return 0
    finally:
        await world.close()


async def cmd_worker(
    modules: Sequence[str],
    *,
    world_path: str | None,
    concurrency: int,
    lease_seconds: float | None = None,
    renew_every: float | None = None,
    deployment: str | None = None,
    serve_all: bool = False,
) -> int:
    """Serve a World until SIGTERM/SIGINT; in-flight deliveries finish first."""
    for module in modules:
        import_module(module)
    world = await open_world(world_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        worker = Worker(
            world,
            deployment=deployment,
            serve_all=serve_all,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            renew_every=renew_every,
            on_report=lambda r: print(
                f"durasim worker: run {r.run_id} {r.status}", file=sys.stderr
            ),
        )
        versions = "every version" if serve_all else ", ".join(worker.versions.served())
        print(
            f"durasim worker: serving {getattr(world, 'path', world)} "
            f"(versions: {versions or 'unversioned runs only'})",
            file=sys.stderr,
        )
        await worker.serve(stop=stop)
    finally:
        await world.close()
    print("durasim worker: stopped", file=sys.stderr)
    return 0


def _json_value(value: Any, payloads: RunPayloads | None = None) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        try:
            # A payload may refer to earlier ones of its run (frozen values).
            return {"decoded": repr(decode_payload(value, payloads))}
        except DurasimError:
            return {"bytes": len(value)}
    if isinstance(value, tuple | list):
        return [_json_value(v, payloads) for v in value]
    return value


def _event_json(event: Event, payloads: RunPayloads | None = None) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type.value,
        "correlation_id": event.correlation_id,
        "in_band": event.in_band,
        "created_at": event.created_at.isoformat(),
        "data": {k: _json_value(v, payloads) for k, v in event.data.items()},
    }


async def _run_json(run: Run, world: World) -> dict[str, Any]:
    row = await world.runs.get(run.run_id)
    steps = await world.steps.list(run.run_id)
    return {
        "run_id": row.run_id,
        "workflow": row.workflow_name,
        "status": row.status.value,
        "created_at": row.created_at.isoformat(),
        "completed_at": row.completed_at.isoformat() if row.completed_at else None,
        "output": _json_value(row.output) if row.output is not None else None,
        "error": _json_value(row.error) if row.error is not None else None,
        "error_code": row.error_code,
        "deployment_id": row.deployment_id,
        "patches": sorted(k[len(PATCH_ATTR) :] for k in row.attributes if k.startswith(PATCH_ATTR)),
        "steps": [
            {"step_id": s.step_id, "status": s.status.value, "attempt": s.attempt} for s in steps
        ],
    }


async def cmd_inspect(
    what: str, run_id: str | None, *, world_path: str | None, as_json: bool
) -> int:
    """``runs``, ``run ID`` or ``events ID``: what the World holds."""
    world = await open_world(world_path, must_exist=True)
    try:
        if what == "runs":
            rows = []
            cursor = None
            while True:
                page = await world.runs.list(cursor=cursor)
                rows += [
                    {"run_id": r.run_id, "status": r.status.value, "workflow": r.workflow_name}
                    for r in page.runs
                ]
                cursor = page.cursor
                if cursor is None:
                    break
            if as_json:
                print(json.dumps(rows, indent=2))
            for row in [] if as_json else rows:
                print(f"{row['run_id']}  {row['status']:<10} {row['workflow']}")
            return 0
        if run_id is None:
            raise DurasimError(f"durasim inspect {what} needs a run id")
        run = get_run(run_id, world=world)
        if what == "run":
            body = await _run_json(run, world)
            if as_json:
                print(json.dumps(body, indent=2))
            else:
                print(f"{body['run_id']}  {body['status']}  {body['workflow']}")
                if body["deployment_id"]:
                    print(f"  version: {body['deployment_id']}")
                if body["patches"]:
                    print(f"  patches: {', '.join(body['patches'])}")
                for step in body["steps"]:
                    print(f"  {step['step_id']:<60} {step['status']:<10} attempt {step['attempt']}")
                if body["output"] is not None:
                    print(f"  output: {body['output']}")
                if body["error"] is not None:
                    print(f"  error ({body['error_code']}): {body['error']}")
            return 0
        if as_json:  # JSON lines, lossless: `durasim check-log` reads them back
            for raw in await run.events():
                print(event_to_json(raw))
            return 0
        raws = await run.events()
        payloads = RunPayloads.from_log(raws)
        events = [_event_json(e, payloads) for e in raws]
        for event in events:
            band = "in-band" if event["in_band"] else "       "
            subject = event["correlation_id"] or ""
            print(f"#{event['seq']:<5} {event['type']:<15} {band} {subject}")
        return 0
    finally:
        await world.close()


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
