"""The reference fold: every entity of a run, derived from its log alone.

:func:`apply` folds one committed event into the entities it changes.  The fold
is total: an event whose subject is missing changes nothing, so seeding an
already-accepted log never re-litigates it.  :func:`fold_log` folds a whole log.
The guards that decide whether a new event is legal live in :mod:`._guards`;
both are pure, and every World reuses them (docs/protocol.md §3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Final

import attrs

from ._entities import (
    HookRecord,
    HookStatuses,
    RunRecord,
    RunStatuses,
    StepRecord,
    StepStatuses,
    WaitRecord,
    WaitStatuses,
    evolve,
    frozen_attributes,
    twin_builder,
    twin_copier,
)
from ._events import RUN_TERMINAL_TYPES, Event, EventType, Types

__all__ = [
    "STEP_CHANGES",
    "FoldedRun",
    "apply",
    "created_running",
    "created_step",
    "fold_into",
    "fold_log",
]

T = Types

_TERMINAL_STATUS = {
    T.RUN_COMPLETED: RunStatuses.COMPLETED,
    T.RUN_FAILED: RunStatuses.FAILED,
    T.RUN_CANCELLED: RunStatuses.CANCELLED,
}


@attrs.define
class FoldedRun:
    """Every entity of one run, derived from its log alone."""

    run: RunRecord | None = None
    steps: dict[str, StepRecord] = attrs.field(factory=dict)
    hooks: dict[str, HookRecord] = attrs.field(factory=dict)
    waits: dict[str, WaitRecord] = attrs.field(factory=dict)
    seq: int = 0
    seq_in_band: int = 0
    resume_ids: dict[str, Event] = attrs.field(factory=dict)


def _release(
    hooks: Iterable[HookRecord], waits: Iterable[WaitRecord], at: datetime
) -> tuple[list[HookRecord], list[WaitRecord]]:
    released_hooks = [
        evolve(h, status=HookStatuses.RELEASED, updated_at=at)
        for h in hooks
        if h.status is HookStatuses.ACTIVE
    ]
    released_waits = [
        evolve(w, status=WaitStatuses.RELEASED, updated_at=at)
        for w in waits
        if w.status is WaitStatuses.WAITING
    ]
    return released_hooks, released_waits


#: A step through its twin, every field by position (``_entities.twin_builder``), in
#: StepRecord's order: run_id, step_id, step_name, status, input, attempt, created_at,
#: updated_at, output, error, retry_after, started_at, completed_at, inline.
_step_at = twin_builder(StepRecord, positional=True)

# The statuses the step transitions set, as module globals (a class attribute is
# looked up through the type on every read on 3.11: see ``_guards``).
_PENDING: Final = StepStatuses.PENDING
_RUNNING: Final = StepStatuses.RUNNING
_COMPLETED: Final = StepStatuses.COMPLETED
_FAILED: Final = StepStatuses.FAILED


def created_step(event: Event, run_id: str) -> StepRecord:
    """The step a ``step_created`` event brings into being."""
    at = event.created_at
    data = event.data._items  # a dict's lookups, without Payload's Python-level ones
    assert event.correlation_id is not None
    return _step_at(
        run_id,
        event.correlation_id,
        data["step_name"],
        _PENDING,
        data["input"],
        0,
        at,
        at,
        None,
        None,
        None,
        None,
        None,
        data.get("inline", False),
    )


def created_running(created: Event, started: Event) -> StepRecord:
    """The step a ``step_created`` and its ``step_started`` leave, as one record.

    Equal to folding the two events one after the other (a batch carries this pair
    every time a step is born running); it skips building the pending record between.
    """
    assert created.correlation_id is not None
    return running_step(
        created.run_id,
        created.correlation_id,
        created.data._items,  # a dict's lookups, without Payload's Python-level ones
        created.created_at,
        started.created_at,
    )


def running_step(
    run_id: str, step_id: str, data: dict[str, Any], created_at: datetime, started_at: datetime
) -> StepRecord:
    """A step born running: created at ``created_at`` with ``data`` (the ``step_created``
    event's items), its first attempt started at ``started_at``.

    The fold's :func:`created_running` and the guards' plan of a batch that creates and
    starts a step both build it here.
    """
    return _step_at(
        run_id,
        step_id,
        data["step_name"],
        _RUNNING,
        data["input"],
        1,
        created_at,
        started_at,
        None,
        None,
        None,
        started_at,
        None,
        data.get("inline", False),
    )


#: A run's creation, start and end through its twin: ``RunRecord(...)`` and ``evolve``
#: go through ``__init__`` (a frozen store per field, the converter), about 50k
#: instructions each.  The creation calls the converter of ``attributes`` itself; a
#: copy keeps the converted value (the converter is idempotent: see ``twin_copier``).
_new_run = twin_builder(RunRecord, converted=True)
_run_start = twin_copier(
    RunRecord,
    "status",
    "started_at",
    "output",
    "error",
    "error_code",
    "completed_at",
    "updated_at",
    converted=True,
)
_run_end = twin_copier(
    RunRecord,
    "status",
    "output",
    "error",
    "error_code",
    "cancel_reason",
    "completed_at",
    "updated_at",
    converted=True,
)
_start = twin_copier(StepRecord, "status", "attempt", "retry_after", "started_at", "updated_at")
_retry = twin_copier(StepRecord, "status", "error", "retry_after", "updated_at")
_complete = twin_copier(StepRecord, "status", "output", "completed_at", "updated_at")
_fail = twin_copier(StepRecord, "status", "error", "completed_at", "updated_at")


def _started(step: StepRecord, event: Event) -> StepRecord:
    at = event.created_at
    return _start(step, _RUNNING, step.attempt + 1, None, step.started_at or at, at)


def _retrying(step: StepRecord, event: Event) -> StepRecord:
    data = event.data
    return _retry(step, _PENDING, data["error"], data.get("retry_after"), event.created_at)


def _completed(step: StepRecord, event: Event) -> StepRecord:
    at = event.created_at
    return _complete(step, _COMPLETED, event.data._items["result"], at, at)


def _failed(step: StepRecord, event: Event) -> StepRecord:
    at = event.created_at
    return _fail(step, _FAILED, event.data["error"], at, at)


#: How each event that changes an existing step folds into it (the guards call
#: these directly once they have decided the event is legal).
STEP_CHANGES: dict[EventType, Callable[[StepRecord, Event], StepRecord]] = {
    T.STEP_STARTED: _started,
    T.STEP_RETRYING: _retrying,
    T.STEP_COMPLETED: _completed,
    T.STEP_FAILED: _failed,
}


def apply(
    event: Event,
    *,
    run: RunRecord | None,
    step: StepRecord | None = None,
    hook: HookRecord | None = None,
    wait: WaitRecord | None = None,
    active_hooks: Iterable[HookRecord] = (),
    waiting_waits: Iterable[WaitRecord] = (),
) -> tuple[RunRecord | None, list[StepRecord], list[HookRecord], list[WaitRecord]]:
    """Fold one event into the entities it concerns; return the changed rows.

    ``step``/``hook``/``wait`` is the entity named by the event's correlation id
    (``None`` if it does not exist yet); ``active_hooks``/``waiting_waits`` are
    the run's, needed only by terminal run events, which release them.  Total: a
    missing subject changes nothing.
    """
    at = event.created_at
    data = event.data
    kind = event.type
    if kind is T.RUN_CREATED:
        attributes = {k: v for k, v in data.get("attributes", ()) if v is not None}
        # RunRecord(...) through its twin, the converter of ``attributes`` called here
        created = _new_run(
            run_id=event.run_id,
            workflow_name=data["workflow_name"],
            status=RunStatuses.PENDING,
            input=data["input"],
            deployment_id=data.get("deployment_id"),
            execution_context=data.get("execution_context"),
            attributes=frozen_attributes(attributes),
            created_at=at,
            updated_at=at,
        )
        return created, [], [], []
    if run is None:
        return None, [], [], []
    if kind is T.RUN_STARTED:
        # evolve(run, status=, started_at=, output=, error=, error_code=, completed_at=,
        # updated_at=)
        started = _run_start(
            run, RunStatuses.RUNNING, run.started_at or at, None, None, None, None, at
        )
        return started, [], [], []
    if kind in RUN_TERMINAL_TYPES:
        # evolve(run, status=, output=, error=, error_code=, cancel_reason=,
        # completed_at=, updated_at=)
        get = data.get
        done = _run_end(
            run,
            _TERMINAL_STATUS[kind],
            get("output"),
            get("error"),
            get("error_code"),
            get("reason"),
            at,
            at,
        )
        hooks, waits = _release(active_hooks, waiting_waits, at)
        return done, [], hooks, waits
    if kind is T.ATTR_SET:
        merged = dict(run.attributes)
        for key, value in data["changes"]:
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return evolve(run, attributes=merged, updated_at=at), [], [], []
    cid = event.correlation_id
    assert cid is not None or kind is T.NOOP
    if kind is T.STEP_CREATED:
        if step is not None:
            return run, [], [], []
        return run, [created_step(event, run.run_id)], [], []
    change = STEP_CHANGES.get(kind)
    if change is not None:
        if step is None:
            return run, [], [], []
        return run, [change(step, event)], [], []
    if kind is T.HOOK_CREATED:
        if hook is not None:
            return run, [], [], []
        assert cid is not None
        created_hook = HookRecord(
            run_id=run.run_id,
            hook_id=cid,
            token=data["token"],
            status=HookStatuses.ACTIVE,
            metadata=data.get("metadata"),
            is_webhook=data.get("is_webhook", False),
            created_at=at,
            updated_at=at,
        )
        return run, [], [created_hook], []
    if kind is T.HOOK_RECEIVED:
        if hook is None:
            return run, [], [], []
        return (
            run,
            [],
            [evolve(hook, received_count=hook.received_count + 1, updated_at=at)],
            [],
        )
    if kind is T.HOOK_DISPOSED:
        if hook is None or hook.status is not HookStatuses.ACTIVE:
            return run, [], [], []
        return run, [], [evolve(hook, status=HookStatuses.DISPOSED, updated_at=at)], []
    if kind is T.WAIT_CREATED:
        if wait is not None:
            return run, [], [], []
        assert cid is not None
        created_wait = WaitRecord(
            run_id=run.run_id,
            wait_id=cid,
            status=WaitStatuses.WAITING,
            resume_at=data["resume_at"],
            created_at=at,
            updated_at=at,
        )
        return run, [], [], [created_wait]
    if kind is T.WAIT_COMPLETED:
        if wait is None or wait.status is not WaitStatuses.WAITING:
            return run, [], [], []
        return (
            run,
            [],
            [],
            [evolve(wait, status=WaitStatuses.COMPLETED, completed_at=at, updated_at=at)],
        )
    # hook_conflict and noop change no entity.
    return run, [], [], []


def fold_into(state: FoldedRun, event: Event) -> None:
    """Fold ``event`` into ``state`` in place (used by :func:`fold_log` and the memory World)."""
    cid = event.correlation_id
    run, steps, hooks, waits = apply(
        event,
        run=state.run,
        step=state.steps.get(cid) if cid else None,
        hook=state.hooks.get(cid) if cid else None,
        wait=state.waits.get(cid) if cid else None,
        active_hooks=[h for h in state.hooks.values() if h.status is HookStatuses.ACTIVE],
        waiting_waits=[w for w in state.waits.values() if w.status is WaitStatuses.WAITING],
    )
    state.run = run
    for s in steps:
        state.steps[s.step_id] = s
    for h in hooks:
        state.hooks[h.hook_id] = h
    for w in waits:
        state.waits[w.wait_id] = w
    state.seq = max(state.seq, event.seq)
    if event.in_band:
        state.seq_in_band += 1
    resume_id = event.data.get("resume_id") if event.type is T.HOOK_RECEIVED else None
    if resume_id is not None:
        state.resume_ids.setdefault(resume_id, event)


def fold_log(events: Iterable[Event]) -> FoldedRun:
    """Derive every entity of one run from its log alone (no validation)."""
    state = FoldedRun()
    for event in events:
        fold_into(state, event)
    return state
