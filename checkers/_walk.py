"""The checker's own fold of one run's log, and the lifecycle rules checked on the way.

Deliberately not the Worlds' ``_fold``, so a bug there is not shared.
:func:`_walk` feeds each event to its handler, which updates the fold and flags
every rule the event breaks (:data:`RULES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from durasim.worlds import RUN_TERMINAL_TYPES, Event, EventType

from ._report import Violation
from ._rules import RULES

__all__: list[str] = []

T = EventType
_STEP_OUTCOMES = frozenset({T.STEP_COMPLETED, T.STEP_FAILED})


# -- the checker's own fold ----------------------------------------------------------------


@attrs.define
class _StepF:
    name: str
    created: int
    status: str = "pending"
    attempt: int = 0
    retry_after: datetime | None = None
    output: bytes | None = None
    error: bytes | None = None
    terminal: int = 0


@attrs.define
class _HookF:
    token: str
    created: int
    created_at: datetime
    status: str = "active"
    received: int = 0
    ended_at: datetime | None = None


@attrs.define
class _WaitF:
    resume_at: datetime
    created: int
    status: str = "waiting"


@attrs.define
class _Walk:
    run_id: str
    violations: list[Violation] = attrs.field(factory=list)
    status: str | None = None
    terminal: Event | None = None
    running_at_end: set[str] = attrs.field(factory=set)
    output: bytes | None = None
    error: bytes | None = None
    error_code: str | None = None
    cancel_reason: str | None = None
    attributes: dict[str, Any] = attrs.field(factory=dict)
    steps: dict[str, _StepF] = attrs.field(factory=dict)
    hooks: dict[str, _HookF] = attrs.field(factory=dict)
    waits: dict[str, _WaitF] = attrs.field(factory=dict)
    resume_ids: dict[str, int] = attrs.field(factory=dict)
    conflicts: list[tuple[Event, str, str, str]] = attrs.field(factory=list)

    def flag(self, rule: str, message: str, seq: int | None = None) -> None:
        assert rule in RULES, rule
        self.violations.append(Violation(rule, self.run_id, message, seq))


def _at(event: Event) -> str:
    return f"#{event.seq} {event.type.value}"


def _entity(walk: _Walk, cid: str) -> str:
    for table in (walk.steps, walk.hooks, walk.waits):
        found = table.get(cid)
        if found is not None:
            return f"{cid}@{found.created}"
    return cid


def _walk(events: Sequence[Event], run_id: str) -> _Walk:
    walk = _Walk(run_id)
    seen: set[int] = set()
    for index, event in enumerate(events):
        if event.seq in seen:
            walk.flag("log.unique", f"position #{event.seq} appears twice", event.seq)
        seen.add(event.seq)
        if event.seq != index + 1:
            walk.flag(
                "log.dense",
                f"the event at index {index} is #{event.seq}, where #{index + 1} was due",
                event.seq,
            )
        if event.run_id != run_id:
            walk.flag("log.run", f"{_at(event)} names run {event.run_id}", event.seq)
        if index == 0 and event.type is not T.RUN_CREATED:
            walk.flag("run.created_first", f"the log starts with {_at(event)}", event.seq)
        if (
            walk.terminal is not None
            and event.type not in RUN_TERMINAL_TYPES
            and not _late_outcome(walk, event)
        ):
            walk.flag(
                "run.after_terminal",
                f"{_at(event)} {event.correlation_id or ''} after the run ended at "
                f"#{walk.terminal.seq}".replace("  ", " "),
                event.seq,
            )
            if event.type is T.RUN_CREATED:
                continue
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(walk, event)
    return walk


def _late_outcome(walk: _Walk, event: Event) -> bool:
    return event.type in _STEP_OUTCOMES and (event.correlation_id or "") in walk.running_at_end


# -- run events ------------------------------------------------------------------------


def _run_created(walk: _Walk, event: Event) -> None:
    if walk.status is not None:
        walk.flag("run.created_first", f"a second run_created at #{event.seq}", event.seq)
        return
    walk.status = "pending"
    for key, value in event.data.get("attributes") or ():
        if value is not None:
            walk.attributes[key] = value


def _run_started(walk: _Walk, event: Event) -> None:
    if walk.status != "pending":
        walk.flag(
            "run.started_once",
            f"run_started at #{event.seq} while the run is {walk.status or 'not created'}",
            event.seq,
        )
    walk.status = "running" if walk.status in ("pending", "running") else walk.status


def _run_terminal(walk: _Walk, event: Event) -> None:
    if walk.terminal is not None:
        walk.flag(
            "run.terminal_once",
            f"{_at(event)} after the terminal #{walk.terminal.seq}",
            event.seq,
        )
        return
    allowed = ("pending", "running") if event.type is T.RUN_CANCELLED else ("running",)
    if walk.status not in allowed:
        walk.flag(
            "run.terminal_from",
            f"{_at(event)} while the run is {walk.status or 'not created'}",
            event.seq,
        )
    walk.terminal = event
    walk.status = {
        T.RUN_COMPLETED: "completed",
        T.RUN_FAILED: "failed",
        T.RUN_CANCELLED: "cancelled",
    }[event.type]
    walk.output = event.data.get("output")
    walk.error = event.data.get("error")
    walk.error_code = event.data.get("error_code")
    walk.cancel_reason = event.data.get("reason")
    walk.running_at_end = {cid for cid, s in walk.steps.items() if s.status == "running"}
    for hook in walk.hooks.values():
        if hook.status == "active":
            hook.status = "released"
            hook.ended_at = event.created_at
    for wait in walk.waits.values():
        if wait.status == "waiting":
            wait.status = "released"


def _attr_set(walk: _Walk, event: Event) -> None:
    for key, value in event.data.get("changes") or ():
        if value is None:
            walk.attributes.pop(key, None)
        else:
            walk.attributes[key] = value


def _noop(walk: _Walk, event: Event) -> None:
    if event.correlation_id or len(event.data):
        walk.flag("log.noop", f"the noop at #{event.seq} carries an entity or a payload", event.seq)


def _child_created(walk: _Walk, event: Event) -> None:
    if walk.status == "pending":
        walk.flag(
            "run.started_once",
            f"{_at(event)} {event.correlation_id} before run_started",
            event.seq,
        )


# -- steps ------------------------------------------------------------------------------


def _step_created(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    _child_created(walk, event)
    if cid in walk.steps:
        walk.flag(
            "step.created_once",
            f"step {_entity(walk, cid)} created again at #{event.seq}",
            event.seq,
        )
        return
    walk.steps[cid] = _StepF(name=str(event.data.get("step_name")), created=event.seq)


def _step(walk: _Walk, event: Event) -> _StepF | None:
    cid = event.correlation_id or ""
    state = walk.steps.get(cid)
    if state is None:
        walk.flag("step.order", f"{_at(event)} of step {cid}, never created before it", event.seq)
    return state


def _step_started(walk: _Walk, event: Event) -> None:
    state = _step(walk, event)
    if state is None:
        return
    cid = event.correlation_id or ""
    if state.terminal:
        walk.flag(
            "step.no_start_after_terminal",
            f"{_at(event)} of step {_entity(walk, cid)}, which ended at #{state.terminal}",
            event.seq,
        )
    if state.retry_after is not None and event.created_at < state.retry_after:
        walk.flag(
            "step.retry_after",
            f"{_at(event)} of step {_entity(walk, cid)} at {event.created_at.isoformat()}, before "
            f"its retry_after {state.retry_after.isoformat()}",
            event.seq,
        )
    state.attempt += 1
    recorded = event.data.get("attempt")
    if recorded is not None and recorded != state.attempt:
        walk.flag(
            "step.attempt",
            f"{_at(event)} of step {_entity(walk, cid)} says attempt {recorded}; it is start "
            f"number {state.attempt}",
            event.seq,
        )
    if not state.terminal:
        state.status = "running"
        state.retry_after = None


def _step_retrying(walk: _Walk, event: Event) -> None:
    state = _step(walk, event)
    if state is None:
        return
    if not _running(walk, event, state):
        return
    state.status = "pending"
    state.retry_after = event.data.get("retry_after")
    state.error = event.data.get("error")


def _running(walk: _Walk, event: Event, state: _StepF) -> bool:
    cid = event.correlation_id or ""
    if state.terminal:
        walk.flag(
            "step.one_terminal",
            f"{_at(event)} of step {_entity(walk, cid)}, which already ended at #{state.terminal}",
            event.seq,
        )
        return False
    if state.status != "running":
        walk.flag(
            "step.outcome_running",
            f"{_at(event)} of step {_entity(walk, cid)} while it is {state.status}",
            event.seq,
        )
        return False
    return True


def _step_outcome(walk: _Walk, event: Event) -> None:
    state = _step(walk, event)
    if state is None or not _running(walk, event, state):
        return
    state.terminal = event.seq
    if event.type is T.STEP_COMPLETED:
        state.status, state.output = "completed", event.data.get("result")
    else:
        state.status, state.error = "failed", event.data.get("error")
    walk.running_at_end.discard(event.correlation_id or "")


# -- hooks --------------------------------------------------------------------------------


def _hook_created(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    _child_created(walk, event)
    if cid in walk.hooks:
        walk.flag(
            "hook.created_once",
            f"hook {_entity(walk, cid)} created again at #{event.seq}",
            event.seq,
        )
        return
    walk.hooks[cid] = _HookF(
        token=str(event.data["token"]), created=event.seq, created_at=event.created_at
    )


def _hook_conflict(walk: _Walk, event: Event) -> None:
    walk.conflicts.append(
        (
            event,
            str(event.data["token"]),
            str(event.data["conflicting_run_id"]),
            str(event.data["conflicting_hook_id"]),
        )
    )


def _hook_received(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    resume_id = event.data.get("resume_id")
    if resume_id is not None:
        first = walk.resume_ids.setdefault(resume_id, event.seq)
        if first != event.seq:
            walk.flag(
                "hook.resume_dedup",
                f"resume_id {resume_id!r} at #{event.seq} was already recorded at #{first}",
                event.seq,
            )
    hook = walk.hooks.get(cid)
    if hook is None or hook.status != "active":
        state = "never created" if hook is None else hook.status
        walk.flag(
            "hook.received_window",
            f"{_at(event)} of hook {_entity(walk, cid)}, which is {state}",
            event.seq,
        )
        return
    hook.received += 1
    token = event.data.get("token")
    if token is not None and token != hook.token:
        walk.flag(
            "hook.token_field",
            f"{_at(event)} carries token {token!r}; hook {_entity(walk, cid)} holds {hook.token!r}",
            event.seq,
        )


def _hook_disposed(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    hook = walk.hooks.get(cid)
    if hook is None or hook.status != "active":
        state = "never created" if hook is None else hook.status
        walk.flag(
            "hook.disposed_once",
            f"{_at(event)} of hook {_entity(walk, cid)}, which is {state}",
            event.seq,
        )
        return
    hook.status = "disposed"
    hook.ended_at = event.created_at


# -- waits --------------------------------------------------------------------------------


def _wait_created(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    _child_created(walk, event)
    if cid in walk.waits:
        walk.flag(
            "wait.created_once",
            f"wait {_entity(walk, cid)} created again at #{event.seq}",
            event.seq,
        )
        return
    walk.waits[cid] = _WaitF(resume_at=event.data["resume_at"], created=event.seq)


def _wait_completed(walk: _Walk, event: Event) -> None:
    cid = event.correlation_id or ""
    wait = walk.waits.get(cid)
    if wait is None or wait.status != "waiting":
        state = "never created" if wait is None else wait.status
        walk.flag(
            "wait.completed_once",
            f"{_at(event)} of wait {_entity(walk, cid)}, which is {state}",
            event.seq,
        )
        return
    wait.status = "completed"
    recorded = event.data.get("resume_at")
    if recorded is not None and recorded != wait.resume_at:
        walk.flag(
            "wait.resume_at_stable",
            f"{_at(event)} of wait {_entity(walk, cid)} says resume_at {recorded.isoformat()}; "
            f"it was created with {wait.resume_at.isoformat()}",
            event.seq,
        )
    if not event.data.get("early") and event.created_at < wait.resume_at:
        walk.flag(
            "wait.not_early",
            f"{_at(event)} of wait {_entity(walk, cid)} at {event.created_at.isoformat()}, before "
            f"its resume_at {wait.resume_at.isoformat()} (and not early)",
            event.seq,
        )


_HANDLERS = {
    T.RUN_CREATED: _run_created,
    T.RUN_STARTED: _run_started,
    T.RUN_COMPLETED: _run_terminal,
    T.RUN_FAILED: _run_terminal,
    T.RUN_CANCELLED: _run_terminal,
    T.ATTR_SET: _attr_set,
    T.NOOP: _noop,
    T.STEP_CREATED: _step_created,
    T.STEP_STARTED: _step_started,
    T.STEP_RETRYING: _step_retrying,
    T.STEP_COMPLETED: _step_outcome,
    T.STEP_FAILED: _step_outcome,
    T.HOOK_CREATED: _hook_created,
    T.HOOK_CONFLICT: _hook_conflict,
    T.HOOK_RECEIVED: _hook_received,
    T.HOOK_DISPOSED: _hook_disposed,
    T.WAIT_CREATED: _wait_created,
    T.WAIT_COMPLETED: _wait_completed,
}
