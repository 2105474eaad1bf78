"""``durasim inspect``: runs found by status, workflow and time; one run's state; its log.

Payloads (inputs, results, errors, hook payloads) are decoded to JSON values where
they can be (:func:`json_value`); bytes that do not decode are shown as
``{"bytes": <base64>, "encoding": "base64"}`` so a reader can tell them apart.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import attrs

from durasim.checkers import annotated_event_json
from durasim.runtime import get_run
from durasim.runtime.lowlevel import (
    PATCH_ATTR,
    RunPayloads,
    decode_payload,
    seed_source,
    webhook_path,
)
from durasim.runtime.serialization import format_error
from durasim.worlds import DurasimError, Event, RunRecord, RunStatus, World

from ._cli_world import open_world

__all__ = ["cmd_inspect", "json_value", "parse_since", "payload_json", "run_state"]


def json_value(value: Any, _depth: int = 0) -> Any:
    """A decoded payload as a JSON value: containers, scalars, times as ISO text.

    What JSON has no form for is tagged: bytes ``{"bytes": base64, "encoding":
    "base64"}``, an exception ``{"error": type, "message": ..., "traceback": ...}``,
    another object ``{"type": name, "repr": ...}`` (attrs and dataclass instances
    ``{"type": name, "fields": {...}}``).
    """
    if _depth > 100:
        return {"type": type(value).__qualname__, "repr": "..."}
    d = _depth + 1
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": base64.b64encode(bytes(value)).decode(), "encoding": "base64"}
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return {"seconds": value.total_seconds()}
    if isinstance(value, enum.Enum):
        return json_value(value.value, d)
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: json_value(v, d) for k, v in value.items()}
        return {"items": [[json_value(k, d), json_value(v, d)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return [json_value(v, d) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((json_value(v, d) for v in value), key=repr)
    if isinstance(value, BaseException):
        return _error_json(value)
    if attrs.has(type(value)):
        fields = {
            a.name: json_value(getattr(value, a.name, None), d) for a in attrs.fields(type(value))
        }
        return {"type": _type_name(value), "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: json_value(getattr(value, f.name), d) for f in dataclasses.fields(value)}
        return {"type": _type_name(value), "fields": fields}
    return {"type": _type_name(value), "repr": repr(value)}


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def _error_json(error: BaseException) -> dict[str, Any]:
    type_name = getattr(error, "type_name", None)
    body: dict[str, Any] = {
        "error": type_name if isinstance(type_name, str) else _type_name(error),
        "message": str(error),
        "traceback": format_error(error),
    }
    if error.__cause__ is not None:
        body["cause"] = _error_json(error.__cause__)
    return body


def payload_json(data: bytes | None, payloads: RunPayloads | None = None) -> Any:
    """Stored payload bytes decoded to a JSON value, or marked bytes if they do not decode."""
    if data is None:
        return None
    try:
        value = decode_payload(data, payloads)
    except (DurasimError, ValueError, TypeError, KeyError):
        return {"bytes": base64.b64encode(data).decode(), "encoding": "base64"}
    return json_value(value)


def _decoded(value: Any, payloads: RunPayloads | None) -> Any:
    if isinstance(value, bytes):
        return payload_json(value, payloads)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_decoded(v, payloads) for v in value]
    return json_value(value)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: an ISO time (UTC if it names no zone) or an age (``90s``, ``2h``, ``3d``)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text and text[-1] in units:
        try:
            return now - timedelta(seconds=float(text[:-1]) * units[text[-1]])
        except ValueError:
            pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise DurasimError(
            f"--since {text!r} is neither an ISO time (2026-12-01T12:00) nor an age "
            "(90s, 15m, 2h, 3d)"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _status(text: str) -> RunStatus:
    try:
        return RunStatus(text)
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise DurasimError(f"--status {text!r} is not a run status: use one of {known}") from None


async def list_runs(
    world: World,
    *,
    statuses: Sequence[str] = (),
    workflow: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[RunRecord]:
    """Runs newest first, filtered by status, workflow (id or its last part) and age."""
    wanted = [_status(s) for s in statuses] or None
    exact = workflow if workflow is None or workflow.startswith("workflow//") else None
    rows: list[RunRecord] = []
    cursor = None
    while True:
        page = await world.runs.list(
            workflow_name=exact, status=wanted, cursor=cursor, limit=min(limit or 100, 100)
        )
        for run in page.runs:
            if since is not None and run.created_at < since:
                return rows  # newest first: every later one is older
            if workflow is not None and exact is None and not _names(run, workflow):
                continue
            rows.append(run)
            if limit is not None and len(rows) >= limit:
                return rows
        cursor = page.cursor
        if cursor is None:
            return rows


def _names(run: RunRecord, workflow: str) -> bool:
    """``--workflow checkout`` matches ``workflow//shop//checkout`` (and ``shop//checkout``)."""
    name = run.workflow_name
    return name.endswith(("//" + workflow, "." + workflow)) or workflow in name.split("//")


def _run_row(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "status": run.status.value,
        "workflow": run.workflow_name,
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
    }


async def run_state(world: World, run_id: str, *, webhook_base: str = "") -> dict[str, Any]:
    """One run: its record, steps, hooks, waits, what it waits on, its failure decoded."""
    run = await world.runs.get(run_id)
    events = await get_run(run_id, world=world).events()
    payloads = RunPayloads.from_log(events)
    steps = await world.steps.list(run_id)
    hooks = await world.hooks.list(run_id)
    waits = await world.waits.list(run_id)
    step_rows = []
    for s in steps:
        row: dict[str, Any] = {
            "step_id": s.step_id,
            "step_name": s.step_name,
            "status": s.status.value,
            "attempt": s.attempt,
            "created_at": s.created_at.isoformat(),
            "started_at": _iso(s.started_at),
            "completed_at": _iso(s.completed_at),
            "retry_after": _iso(s.retry_after),
        }
        if s.error is not None:
            row["error"] = payload_json(s.error, payloads)
        step_rows.append(row)
    hook_rows = []
    for h in hooks:
        hook: dict[str, Any] = {
            "hook_id": h.hook_id,
            "token": h.token,
            "status": h.status.value,
            "is_webhook": h.is_webhook,
            "received": h.received_count,
            "created_at": h.created_at.isoformat(),
        }
        if h.is_webhook:
            hook["url"] = webhook_base.rstrip("/") + webhook_path(h.token)
        hook_rows.append(hook)
    wait_rows = [
        {
            "wait_id": w.wait_id,
            "status": w.status.value,
            "resume_at": w.resume_at.isoformat(),
            "completed_at": _iso(w.completed_at),
        }
        for w in waits
    ]
    waiting_on: dict[str, Any] = {}
    if run.status.value in ("pending", "running"):
        waiting_on = {
            "running_steps": [r for r in step_rows if r["status"] == "running"],
            "retrying_steps": [
                r for r in step_rows if r["status"] == "pending" and r["retry_after"]
            ],
            "pending_steps": [
                r for r in step_rows if r["status"] == "pending" and not r["retry_after"]
            ],
            "active_hooks": [h for h in hook_rows if h["status"] == "active"],
            "waits": [w for w in wait_rows if w["status"] == "waiting"],
        }
    body: dict[str, Any] = {
        "run_id": run.run_id,
        "workflow": run.workflow_name,
        "status": run.status.value,
        "created_at": run.created_at.isoformat(),
        "updated_at": run.updated_at.isoformat(),
        "started_at": _iso(run.started_at),
        "completed_at": _iso(run.completed_at),
        "input": payload_json(run.input, payloads),
        "output": payload_json(run.output, payloads),
        "error": payload_json(run.error, payloads),
        "error_code": run.error_code,
        "cancel_reason": run.cancel_reason,
        "seeded_from": seed_source(run.execution_context),
        "deployment_id": run.deployment_id,
        "patches": sorted(k[len(PATCH_ATTR) :] for k in run.attributes if k.startswith(PATCH_ATTR)),
        "steps": step_rows,
        "hooks": hook_rows,
        "waits": wait_rows,
        "waiting_on": waiting_on,
        "failed_step": failed_step(step_rows) if run.status is RunStatus.FAILED else None,
    }
    return body


def failed_step(step_rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The step whose failure ended the run: the last one recorded as failed."""
    failed = [r for r in step_rows if r["status"] == "failed"]
    return max(failed, key=lambda r: r["completed_at"] or "") if failed else None


def error_text(error: Any) -> str:
    """A decoded error (:func:`json_value` of an exception) as Python prints it."""
    if isinstance(error, dict) and "traceback" in error:
        return str(error["traceback"]).rstrip()
    return json.dumps(error)


def render_run(body: dict[str, Any]) -> list[str]:
    """``inspect run``'s text: header, times, what it waits on, steps, failure with traceback."""
    lines = [
        f"{body['run_id']}  {body['status']}  {body['workflow']}",
        f"  created {body['created_at']}  updated {body['updated_at']}"
        + (f"  completed {body['completed_at']}" if body["completed_at"] else ""),
        f"  input: {json.dumps(body['input'])}",
    ]
    if body.get("deployment_id"):
        lines.append(f"  version: {body['deployment_id']}")
    if body.get("patches"):
        lines.append(f"  patches: {', '.join(body['patches'])}")
    seeded = body.get("seeded_from")
    if seeded:
        how = "resume" if "resume" in seeded else "fork"
        lines.append(
            f"  a {how} of run {seeded[how]}: reuses its first {seeded['from_step']} step results"
        )
    waiting = body["waiting_on"]
    if waiting:
        lines.append("  waiting on:")
        for s in waiting["running_steps"]:
            lines.append(
                f"    step {s['step_id']} running (attempt {s['attempt']}, since {s['started_at']})"
            )
        for s in waiting["retrying_steps"]:
            lines.append(
                f"    step {s['step_id']} retry (attempt {s['attempt'] + 1}) at {s['retry_after']}"
            )
        for s in waiting["pending_steps"]:
            lines.append(f"    step {s['step_id']} queued")
        for h in waiting["active_hooks"]:
            where = f" at {h['url']}" if "url" in h else ""
            kind = "webhook" if h["is_webhook"] else "hook"
            lines.append(f"    {kind} {h['hook_id']} token {h['token']!r}{where}")
        for w in waiting["waits"]:
            lines.append(f"    wait {w['wait_id']} resumes at {w['resume_at']}")
        if not any(waiting.values()):
            lines.append("    nothing recorded yet (a delivery is due)")
    lines.append("  steps:")
    for step in body["steps"]:
        lines.append(f"    {step['step_id']:<58} {step['status']:<10} attempt {step['attempt']}")
    if body["output"] is not None:
        lines.append(f"  output: {json.dumps(body['output'])}")
    if body["cancel_reason"]:
        lines.append(f"  cancelled: {body['cancel_reason']}")
    if body["error"] is not None:
        failed = body["failed_step"]
        where = (
            f" in step {failed['step_name']} ({failed['step_id']}), attempt {failed['attempt']}"
            if failed
            else ""
        )
        lines.append(f"  failed ({body['error_code']}){where}:")
        lines += ["    " + line for line in error_text(body["error"]).splitlines()]
    return lines


def _event_row(event: Event, payloads: RunPayloads) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type.value,
        "correlation_id": event.correlation_id,
        "in_band": event.in_band,
        "created_at": event.created_at.isoformat(),
        "data": {k: _decoded(v, payloads) for k, v in event.data.items()},
    }


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


async def cmd_inspect(
    what: str,
    run_id: str | None,
    *,
    world_path: str | None,
    as_json: bool,
    statuses: Sequence[str] = (),
    workflow: str | None = None,
    since: str | None = None,
    limit: int | None = None,
    webhook_base: str = "",
) -> int:
    """``runs``, ``run ID`` or ``events ID``: what the World holds."""
    if limit is not None and limit < 1:
        raise DurasimError(f"--limit {limit}: give a positive number of runs")
    world = await open_world(world_path, must_exist=True)
    try:
        if what == "runs":
            cutoff = parse_since(since, datetime.now(UTC)) if since else None
            runs = await list_runs(
                world, statuses=statuses, workflow=workflow, since=cutoff, limit=limit
            )
            rows = [_run_row(r) for r in runs]
            if as_json:
                print(json.dumps(rows, indent=2))
            for row in [] if as_json else rows:
                print(
                    f"{row['run_id']}  {row['status']:<10} {row['created_at']}  "
                    f"{row['updated_at']}  {row['workflow']}"
                )
            return 0
        if run_id is None:
            raise DurasimError(f"durasim inspect {what} needs a run id")
        if what == "run":
            body = await run_state(world, run_id, webhook_base=webhook_base)
            if as_json:
                print(json.dumps(body, indent=2))
            else:
                print("\n".join(render_run(body)))
            return 0
        raws = await get_run(run_id, world=world).events()
        payloads = RunPayloads.from_log(raws)
        if as_json:
            # JSON lines, lossless (`durasim check-log` reads them back), each with
            # its payloads decoded beside them under "decoded".
            for raw in raws:
                print(annotated_event_json(raw, _event_row(raw, payloads)["data"]))
            return 0
        for raw in raws:
            row = _event_row(raw, payloads)
            band = "in-band" if row["in_band"] else "       "
            subject = row["correlation_id"] or ""
            detail = " ".join(f"{k}={_short(v)}" for k, v in row["data"].items())
            print(
                f"#{row['seq']:<5} {row['type']:<15} {band} {row['created_at']}  {subject}"
                + (f"  {detail}" if detail else "")
            )
        return 0
    finally:
        await world.close()
