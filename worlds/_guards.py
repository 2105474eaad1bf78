"""The reference guards: is a write legal, and what does it change?

:func:`plan_write` / :func:`plan_batch` decide a request against the current
state (read through a :class:`StateView`) and, if it is legal, produce the events
to append and every entity row they change, as a :class:`Plan`.  Otherwise they
raise the typed refusal, in the order docs/protocol.md §5 lists.

A World supplies the view (dicts for the in-memory World, ``SELECT``s inside the
write transaction for SQLite) and persists the plan; the rules live here once,
so every World refuses the same things with the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final, Protocol

import attrs

from ._build import builder
from ._entities import (
    EventResult,
    HookRecord,
    HookStatuses,
    RunRecord,
    RunStatus,
    RunStatuses,
    Snapshot,
    StepRecord,
    StepStatus,
    StepStatuses,
    WaitRecord,
    WaitStatuses,
    twin_builder,
)
from ._errors import (
    EntityConflict,
    HookNotFound,
    InBandSuperseded,
    InvalidRequest,
    RunExpired,
    RunNotFound,
    StaleView,
    StepNotFound,
    TooEarly,
    WaitNotFound,
)
from ._events import (
    RUN_TERMINAL_TYPES,
    STEP_TYPES,
    WAIT_TYPES,
    Event,
    EventRequest,
    EventType,
    Payload,
    Types,
    _owned,
)
from ._fold import STEP_CHANGES, apply, created_step, running_step

__all__ = [
    "BATCH_FORBIDDEN",
    "Plan",
    "StateView",
    "plan_batch",
    "plan_create_run",
    "plan_write",
]

T = Types

# Events are built through their twin (see ``_entities.twin``), as attrs would build them
# (frozen: each field set once, before the event is seen): every value is already of its
# field's type, so the ``data`` converter has nothing to do.
_event = twin_builder(Event, converted=True)
#: The same by position (every field, in order): what the hot planners call.
_event_at = twin_builder(Event, converted=True, positional=True)
_snapshot = builder(Snapshot)
_event_result = builder(EventResult)

# The members the hot planners test, as module globals: on 3.11 an attribute of a
# class (``T.STEP_CREATED``) is looked up through the type on every read, about
# 120 instructions; a module global is read from a cache.
_STEP_CREATED: Final = T.STEP_CREATED
_STEP_STARTED: Final = T.STEP_STARTED
_RUN_PENDING: Final = RunStatuses.PENDING
_STEP_RUNNING: Final = StepStatuses.RUNNING

# Sets, not tuples: ``kind in (A, B)`` falls back to str.__eq__ per member.
_CREATIONS = frozenset({T.STEP_CREATED, T.HOOK_CREATED, T.WAIT_CREATED})
_RUN_ENDS = frozenset({T.RUN_COMPLETED, T.RUN_FAILED})
_STEP_ENDS = frozenset({T.STEP_COMPLETED, T.STEP_FAILED})
_HOOK_CHANGES = frozenset({T.HOOK_RECEIVED, T.HOOK_DISPOSED})
_HOOK_TOUCHES = frozenset({T.HOOK_CREATED, T.HOOK_RECEIVED, T.HOOK_DISPOSED})
#: The terminal statuses (``status.terminal`` is a property: a Python call per test).
_RUN_ENDED = frozenset(s for s in RunStatus if s.terminal)
_STEP_ENDED = frozenset(s for s in StepStatus if s.terminal)

#: Event types a batch may not carry (each may turn into something else or
#: appends nothing: their outcome must be seen alone).
BATCH_FORBIDDEN = frozenset(
    {
        T.RUN_CREATED,
        T.RUN_STARTED,
        T.RUN_CANCELLED,
        T.HOOK_CREATED,
        T.HOOK_DISPOSED,
        T.ATTR_SET,
    }
)


class StateView(Protocol):
    """What the guards read while deciding a write for one run.

    A World answers from its current, committed state (inside the transaction
    that will persist the plan).  Hooks and waits are keyed by their
    correlation id within the run; tokens are global across runs.
    """

    def head(self) -> tuple[RunRecord | None, int, int]:
        """The run (``None`` if it does not exist), its ``seq`` and its ``seq_in_band``.

        The counters are 0, 0 before creation.  One call, plain ints: the guards read
        all three for every write, and a :class:`Snapshot` is built only when asked for.
        """
        ...

    def step(self, step_id: str) -> StepRecord | None:
        """The run's step with this id."""
        ...

    def has_step(self, step_id: str) -> bool:
        """Whether the run has a step with this id (cheaper than :meth:`step`)."""
        ...

    def hook(self, hook_id: str) -> HookRecord | None:
        """The run's hook with this id, in any status."""
        ...

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        """The active hook holding ``token`` in ANY run, if one does."""
        ...

    def wait(self, wait_id: str) -> WaitRecord | None:
        """The run's wait with this id."""
        ...

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        """The run's ``hook_received`` event carrying ``resume_id``, if any."""
        ...

    def active_hooks(self) -> Sequence[HookRecord]:
        """The run's hooks with status active."""
        ...

    def waiting_waits(self) -> Sequence[WaitRecord]:
        """The run's waits with status waiting."""
        ...


@attrs.define
class Plan:
    """What a legal write does: events to append and entity rows to upsert.

    ``canonical`` is set (and ``events`` empty) when the request collapsed onto
    an earlier event (a duplicate resume); ``events`` is empty and
    ``canonical`` ``None`` when it appends nothing at all (a second
    ``run_started``, a repeated ``run_cancelled``).

    The run's counters before and after the plan are plain ints (``seq``,
    ``seq_in_band``; ``seq_after``, ``seq_in_band_after``); :attr:`before` and
    :attr:`after` give them as a :class:`Snapshot`, built when asked for.
    """

    run: RunRecord
    seq: int
    seq_in_band: int
    seq_after: int
    seq_in_band_after: int
    events: list[Event] = attrs.field(factory=list)
    steps: dict[str, StepRecord] = attrs.field(factory=dict)
    hooks: dict[str, HookRecord] = attrs.field(factory=dict)
    waits: dict[str, WaitRecord] = attrs.field(factory=dict)
    canonical: Event | None = None
    touched: StepRecord | HookRecord | WaitRecord | None = None

    @property
    def before(self) -> Snapshot:
        """The run's counters before the plan."""
        return _snapshot(seq=self.seq, seq_in_band=self.seq_in_band)

    @property
    def after(self) -> Snapshot:
        """The run's counters once the plan's events are appended."""
        return _snapshot(seq=self.seq_after, seq_in_band=self.seq_in_band_after)

    def result(self, unseen: tuple[Event, ...]) -> EventResult:
        """The answer to the single write this plan decided."""
        touched = self.touched
        # EventResult(...) without attrs' __init__ (a frozen set per field): once a write
        return _event_result(
            event=self.events[0] if self.events else self.canonical,
            run=self.run,
            step=touched if isinstance(touched, StepRecord) else None,
            hook=touched if isinstance(touched, HookRecord) else None,
            wait=touched if isinstance(touched, WaitRecord) else None,
            unseen=unseen,
            allocated=len(self.events),
        )


class _Overlay:
    """A view plus the changes a plan has made so far (so a batch sees its own writes)."""

    def __init__(self, base: StateView, plan: Plan) -> None:
        self.base = base
        self.plan = plan
        self._steps = plan.steps

    def step(self, step_id: str) -> StepRecord | None:
        return self._steps.get(step_id) or self.base.step(step_id)

    def has_step(self, step_id: str) -> bool:
        return step_id in self._steps or self.base.has_step(step_id)

    def hook(self, hook_id: str) -> HookRecord | None:
        return self.plan.hooks.get(hook_id) or self.base.hook(hook_id)

    def wait(self, wait_id: str) -> WaitRecord | None:
        return self.plan.waits.get(wait_id) or self.base.wait(wait_id)

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        for h in self.plan.hooks.values():
            if h.token == token:
                return h if h.status is HookStatuses.ACTIVE else None
        return self.base.live_hook_by_token(token)

    def active_hooks(self) -> list[HookRecord]:
        merged = {h.hook_id: h for h in self.base.active_hooks()}
        merged.update(self.plan.hooks)
        return [h for h in merged.values() if h.status is HookStatuses.ACTIVE]

    def waiting_waits(self) -> list[WaitRecord]:
        merged = {w.wait_id: w for w in self.base.waiting_waits()}
        merged.update(self.plan.waits)
        return [w for w in merged.values() if w.status is WaitStatuses.WAITING]


def _check_fence(
    run_id: str, seq: int, seq_in_band: int, *, in_band: bool, expected_seq_in_band: int | None
) -> None:
    if in_band:
        if expected_seq_in_band is None:
            raise InvalidRequest(
                f"in-band write to run {run_id!r} has no expected_seq_in_band: an orchestrator "
                "must send the seq_in_band of the snapshot it loaded",
                run_id=run_id,
            )
        # A malformed count is the caller's bug, not a lost race: say so, don't supersede.
        if type(expected_seq_in_band) is not int or expected_seq_in_band < 0:
            raise InvalidRequest(
                f"in-band write to run {run_id!r}: expected_seq_in_band must be a "
                f"non-negative int, got {expected_seq_in_band!r}",
                run_id=run_id,
            )
        if expected_seq_in_band != seq_in_band:
            raise InBandSuperseded(
                f"run {run_id!r}: in-band write expected seq_in_band={expected_seq_in_band} "
                f"but the log is at {seq_in_band} (seq={seq}); another "
                "orchestrator invocation owns the run: stop writing and let the queue redeliver",
                run_id=run_id,
                seq=seq,
                seq_in_band=seq_in_band,
            )
    elif expected_seq_in_band is not None:
        raise InvalidRequest(
            f"write to run {run_id!r} carries expected_seq_in_band but in_band=False: "
            "pass in_band=True for orchestrator writes",
            run_id=run_id,
        )


def _refuse_on_terminal_run(run: RunRecord, request: EventRequest) -> None:
    kind = request.type
    label = f"run {run.run_id!r} is {run.status.value}"
    if kind is T.RUN_STARTED:
        raise RunExpired(f"{label}: it cannot start again", run_id=run.run_id)
    if kind in RUN_TERMINAL_TYPES:
        raise EntityConflict(
            f"{label}: {kind.value} cannot move a terminal run to another terminal state",
            run_id=run.run_id,
        )
    if kind in _CREATIONS:
        raise EntityConflict(
            f"{label}: {kind.value} {request.correlation_id!r} cannot add an entity to it",
            run_id=run.run_id,
        )
    if kind is T.ATTR_SET:
        raise EntityConflict(f"{label}: its attributes are final", run_id=run.run_id)


def _new_event(
    run_id: str,
    seq: int,
    request: EventRequest,
    at: datetime,
    *,
    in_band: bool,
    data: Payload | None = None,
    type_: EventType | None = None,
) -> Event:
    # ``data`` is in schema order already: the request's is (validated), and the
    # guards place each field they add where the schema has it.
    event = _event(
        run_id=run_id,
        seq=seq,
        type=type_ or request.type,
        created_at=at,
        correlation_id=request.correlation_id,
        in_band=in_band,
        data=request.data if data is None else data,
    )
    return event


def _attempt_first(data: Payload, attempt: int) -> Payload:
    """``data.first("attempt", attempt)``: an empty request's is just the attempt."""
    if data._items:  # not ``if data``: Payload's __len__ is a Python call
        return data.first("attempt", attempt)
    return _FIRST_ATTEMPT if attempt == 1 else _owned({"attempt": attempt})


#: The data of every first ``step_started`` without fields of its own (immutable: shared).
_FIRST_ATTEMPT: Final = _owned({"attempt": 1})


def _plan_step_created(
    view: StateView,
    plan: Plan,
    request: EventRequest,
    at: datetime,
    in_band: bool,
    *,
    started: EventRequest | None = None,
) -> None:
    """:func:`_plan_one` for ``step_created``: the same checks in the same order.

    With ``started`` (the ``step_started`` that follows it in a batch), plans both:
    a step just created is pending, at attempt 0, with no ``retry_after``, in a run
    that is running, so no check of :func:`_plan_step_change` can refuse the start.
    ``view`` is the World's (the plan's own steps are looked up first).
    """
    run = plan.run
    run_id = run.run_id
    status = run.status
    cid = request.correlation_id
    assert cid is not None
    if status in _RUN_ENDED:
        _refuse_on_terminal_run(run, request)
    if status is _RUN_PENDING:
        raise EntityConflict(
            f"run {run_id!r} is pending: write run_started before step_created {cid!r}",
            run_id=run_id,
        )
    steps = plan.steps
    if cid in steps or view.has_step(cid):
        raise EntityConflict(f"run {run_id!r}: step {cid!r} already exists", run_id=run_id)
    events = plan.events
    seq = plan.seq + len(events) + 1
    data = request.data
    # _event(run_id=, seq=, type=, created_at=, correlation_id=, in_band=, data=)
    event = _event_at(run_id, seq, _STEP_CREATED, at, cid, in_band, data)
    events.append(event)
    if started is None:
        step = created_step(event, run_id)
    else:
        extra = started.data
        events.append(
            _event_at(
                run_id,
                seq + 1,
                _STEP_STARTED,
                at,
                cid,
                in_band,
                # _attempt_first(extra, 1), its common case inlined
                extra.first("attempt", 1) if extra._items else _FIRST_ATTEMPT,
            )
        )
        # created_running(event, start) without the events: both are created ``at``.
        step = running_step(run_id, cid, data._items, at, at)
    steps[cid] = step
    plan.touched = step


def _plan_step_change(
    view: StateView, plan: Plan, request: EventRequest, at: datetime, in_band: bool
) -> None:
    """:func:`_plan_one` for an event that changes a step: the same checks in the same order.

    ``view`` is the World's (the plan's own steps are looked up first).
    """
    run = plan.run
    run_id = run.run_id
    kind = request.type
    cid = request.correlation_id
    assert cid is not None
    steps = plan.steps
    step = steps.get(cid) or view.step(cid)
    if step is None:
        raise StepNotFound(
            f"run {run_id!r} has no step {cid!r}: write step_created first", run_id=run_id
        )
    step_status = step.status
    if step_status in _STEP_ENDED:
        raise EntityConflict(
            f"run {run_id!r}: step {cid!r} is {step_status.value}; a terminal step "
            f"accepts no {kind.value}",
            run_id=run_id,
        )
    if run.status in _RUN_ENDED and (step_status is not _STEP_RUNNING or kind not in _STEP_ENDS):
        raise RunExpired(
            f"run {run_id!r} is {run.status.value}: only a step that was running when it "
            f"ended may still report its outcome; step {cid!r} ({step_status.value}) "
            f"accepts no {kind.value}",
            run_id=run_id,
        )
    data = request.data
    if kind is _STEP_STARTED:
        if step.retry_after is not None and at < step.retry_after:
            raise TooEarly(
                f"run {run_id!r}: step {cid!r} may not start before "
                f"{step.retry_after.isoformat()}; retry after that",
                run_id=run_id,
                retry_after=step.retry_after,
            )
        data = _attempt_first(data, step.attempt + 1)
    elif step_status is not _STEP_RUNNING:
        raise EntityConflict(
            f"run {run_id!r}: step {cid!r} is {step_status.value}; write step_started "
            f"before {kind.value}",
            run_id=run_id,
        )
    events = plan.events
    event = _event_at(run_id, plan.seq + len(events) + 1, kind, at, cid, in_band, data)
    changed = STEP_CHANGES[kind](step, event)
    steps[cid] = changed
    events.append(event)
    plan.touched = changed


#: The outcomes :func:`plan_batch` plans ahead of a new running step without its loop.
_OUTCOMES = frozenset({T.STEP_COMPLETED, T.STEP_FAILED, T.STEP_RETRYING})


#: The hot event types, each planned by a function of its own (no dispatch on the
#: type inside); every other type goes through :func:`_plan_one`.
_PLANNERS = {
    T.STEP_CREATED: _plan_step_created,
    T.STEP_STARTED: _plan_step_change,
    T.STEP_RETRYING: _plan_step_change,
    T.STEP_COMPLETED: _plan_step_change,
    T.STEP_FAILED: _plan_step_change,
}


def _plan_one(
    view: _Overlay,
    plan: Plan,
    request: EventRequest,
    at: datetime,
    *,
    in_band: bool,
    in_batch: bool,
) -> None:
    """Check one request against ``view`` and add its effect to ``plan``."""
    planner = _PLANNERS.get(request.type)
    if planner is not None:
        planner(view.base, plan, request, at, in_band)
        return
    run = plan.run
    kind = request.type
    cid = request.correlation_id
    run_id = run.run_id

    # Duplicate resume: collapse onto the canonical event (idempotent, even
    # after the hook was disposed or the run ended).
    if kind is T.HOOK_RECEIVED and (resume_id := request.data.get("resume_id")) is not None:
        earlier = next(
            (e for e in plan.events if e.data.get("resume_id") == resume_id), None
        ) or view.base.received_by_resume_id(resume_id)
        if earlier is not None:
            if in_batch:
                raise EntityConflict(
                    f"run {run_id!r}: resume_id {resume_id!r} is already recorded at "
                    f"#{earlier.seq}; a batch cannot carry a duplicate resume",
                    run_id=run_id,
                )
            plan.canonical = earlier
            plan.touched = view.hook(cid) if cid else None
            return

    if run.status in _RUN_ENDED:
        if kind is T.RUN_CANCELLED and run.status is RunStatuses.CANCELLED:
            return  # tolerated: cancelling a cancelled run appends nothing
        _refuse_on_terminal_run(run, request)

    seq = plan.seq + len(plan.events) + 1
    data: Payload | None = None
    type_: EventType | None = None
    step = hook = wait = None

    if kind is T.RUN_STARTED:
        if run.status is RunStatuses.RUNNING:
            return  # tolerated: a second run_started appends nothing
    elif kind in _RUN_ENDS:
        if run.status is RunStatuses.PENDING:
            raise EntityConflict(
                f"run {run_id!r} is pending: write run_started before {kind.value}",
                run_id=run_id,
            )
    elif kind in _CREATIONS and run.status is RunStatuses.PENDING:
        raise EntityConflict(
            f"run {run_id!r} is pending: write run_started before {kind.value} {cid!r}",
            run_id=run_id,
        )

    # Step events never get here: _PLANNERS plans each of them.
    if kind is T.HOOK_CREATED:
        assert cid is not None
        if view.hook(cid) is not None:
            raise EntityConflict(f"run {run_id!r}: hook {cid!r} already exists", run_id=run_id)
        holder = view.live_hook_by_token(request.data["token"])
        if holder is not None:
            # Journaled, not raised: the workflow learns of the conflict by replay.
            type_ = T.HOOK_CONFLICT
            data = Payload(
                {
                    "token": request.data["token"],
                    "conflicting_run_id": holder.run_id,
                    "conflicting_hook_id": holder.hook_id,
                    **{k: v for k, v in request.data.items() if k in ("metadata", "is_webhook")},
                }
            )
    elif kind in _HOOK_CHANGES:
        assert cid is not None
        hook = view.hook(cid)
        if hook is None or (kind is T.HOOK_RECEIVED and hook.status is not HookStatuses.ACTIVE):
            state = "does not exist" if hook is None else f"is {hook.status.value}"
            raise HookNotFound(
                f"run {run_id!r}: hook {cid!r} {state}; it accepts no {kind.value}",
                run_id=run_id,
            )
        if hook.status is not HookStatuses.ACTIVE:
            raise EntityConflict(
                f"run {run_id!r}: hook {cid!r} is already {hook.status.value}", run_id=run_id
            )
        if kind is T.HOOK_RECEIVED:
            data = request.data.last("token", hook.token)
    elif kind is T.WAIT_CREATED:
        assert cid is not None
        if view.wait(cid) is not None:
            raise EntityConflict(f"run {run_id!r}: wait {cid!r} already exists", run_id=run_id)
    elif kind is T.WAIT_COMPLETED:
        assert cid is not None
        wait = view.wait(cid)
        if wait is None:
            raise WaitNotFound(f"run {run_id!r} has no wait {cid!r}", run_id=run_id)
        if wait.status is not WaitStatuses.WAITING:
            raise EntityConflict(
                f"run {run_id!r}: wait {cid!r} is already {wait.status.value}", run_id=run_id
            )
        if at < wait.resume_at and not request.data.get("early", False):
            raise TooEarly(
                f"run {run_id!r}: wait {cid!r} is due at {wait.resume_at.isoformat()}; "
                "complete it then, or pass early=True to wake the run up now",
                run_id=run_id,
                retry_after=wait.resume_at,
            )
        data = request.data.first("resume_at", wait.resume_at)

    event = _new_event(run_id, seq, request, at, in_band=in_band, data=data, type_=type_)
    new_run, steps, hooks, waits = apply(
        event,
        run=run,
        step=step,
        hook=hook,
        wait=wait,
        active_hooks=view.active_hooks() if kind in RUN_TERMINAL_TYPES else (),
        waiting_waits=view.waiting_waits() if kind in RUN_TERMINAL_TYPES else (),
    )
    assert new_run is not None
    plan.run = new_run
    for s in steps:
        plan.steps[s.step_id] = s
    for h in hooks:
        plan.hooks[h.hook_id] = h
    for w in waits:
        plan.waits[w.wait_id] = w
    plan.events.append(event)
    if steps and kind in STEP_TYPES:
        plan.touched = steps[0]
    elif hooks and kind in _HOOK_TOUCHES:
        plan.touched = hooks[0]
    elif waits and kind in WAIT_TYPES:
        plan.touched = waits[0]


def plan_create_run(
    run_id: str, request: EventRequest, at: datetime, existing: RunRecord | None
) -> Plan:
    """Plan a ``run_created``: refused if the run exists; position 1, in-band."""
    if existing is not None:
        raise EntityConflict(
            f"run {run_id!r} already exists (created at {existing.created_at.isoformat()}); "
            "start it under a new run id, or read the existing one",
            run_id=run_id,
        )
    event = _new_event(run_id, 1, request, at, in_band=True)
    run, _, _, _ = apply(event, run=None)
    assert run is not None
    return Plan(run=run, seq=0, seq_in_band=0, seq_after=1, seq_in_band_after=1, events=[event])


_new_plan = builder(Plan)


def _start_plan(view: StateView, run_id: str) -> Plan:
    run, seq, seq_in_band = view.head()
    if run is None:
        raise RunNotFound(
            f"run {run_id!r} does not exist: create it with run_created first", run_id=run_id
        )
    # ``Plan(run=run, seq=seq, ...)`` without attrs' __init__ (its factories are
    # calls): the builder takes every field, so a new one cannot be missed.
    return _new_plan(
        run=run,
        seq=seq,
        seq_in_band=seq_in_band,
        seq_after=seq,
        seq_in_band_after=seq_in_band,
        events=[],
        steps={},
        hooks={},
        waits={},
    )


def _check_expected_seq(run_id: str, seq: int, expected_seq: int | None) -> None:
    if expected_seq is None:
        return
    if type(expected_seq) is not int or expected_seq < 0:
        raise InvalidRequest(
            f"expected_seq must be a non-negative int, got {expected_seq!r}", run_id=run_id
        )
    if expected_seq != seq:
        raise StaleView(
            f"run {run_id!r}: the write expected the log at #{expected_seq} but it is at "
            f"#{seq}; reload the log and decide again",
            run_id=run_id,
            seq=seq,
        )


def plan_write(
    view: StateView,
    run_id: str,
    request: EventRequest,
    at: datetime,
    *,
    in_band: bool,
    expected_seq_in_band: int | None,
    expected_seq: int | None = None,
) -> Plan:
    """Decide one write to an existing run (not ``run_created``)."""
    plan = _start_plan(view, run_id)
    _check_fence(
        run_id,
        plan.seq,
        plan.seq_in_band,
        in_band=in_band,
        expected_seq_in_band=expected_seq_in_band,
    )
    _check_expected_seq(run_id, plan.seq, expected_seq)
    _plan_one(_Overlay(view, plan), plan, request, at, in_band=in_band, in_batch=False)
    _close(plan, in_band=in_band)
    return plan


def plan_batch(
    view: StateView,
    run_id: str,
    requests: Sequence[EventRequest],
    at: datetime,
    *,
    in_band: bool,
    expected_seq_in_band: int | None,
    expected_seq: int | None = None,
) -> Plan:
    """Decide a batch: every request legal in order, one event each, or nothing."""
    if not requests:
        raise InvalidRequest(f"batch for run {run_id!r} is empty: send at least one event")
    # The runtime's batch every step: a step's outcome, then another step born running.
    # None of the three is forbidden and no entity is named twice: the loop below passes.
    common = False
    if len(requests) == 3:
        outcome, created, started = requests
        common = (
            outcome.type in _OUTCOMES
            and created.type is _STEP_CREATED
            and started.type is _STEP_STARTED
            and started.correlation_id == created.correlation_id
            and created.correlation_id != outcome.correlation_id
        )
    if not common:
        entities: dict[str, EventType] = {}
        for request in requests:
            if request.type in BATCH_FORBIDDEN:
                raise InvalidRequest(
                    f"{request.type.value} cannot be part of a batch: write it alone "
                    "(its outcome may differ from the request)",
                    run_id=run_id,
                )
            cid = request.correlation_id
            if cid is None:
                continue
            previous = entities.get(cid)
            if previous is not None and not (
                previous is T.STEP_CREATED and request.type is T.STEP_STARTED
            ):
                raise InvalidRequest(
                    f"batch for run {run_id!r} names {cid!r} twice ({previous.value}, "
                    f"{request.type.value}); only step_created + step_started may share an entity",
                    run_id=run_id,
                )
            entities[cid] = request.type
    plan = _start_plan(view, run_id)
    seq = plan.seq
    seq_in_band = plan.seq_in_band
    # An in-band write at the very count it expects passes both checks (an int equal
    # to a count is a non-negative int): only any other one is checked in full.
    if not (in_band and type(expected_seq_in_band) is int and expected_seq_in_band == seq_in_band):
        _check_fence(
            run_id, seq, seq_in_band, in_band=in_band, expected_seq_in_band=expected_seq_in_band
        )
    if expected_seq is not None and not (type(expected_seq) is int and expected_seq == seq):
        _check_expected_seq(run_id, seq, expected_seq)
    if common:
        # The runtime's batch every step: _plan_step_change for the outcome, then
        # _plan_step_created of the new step with its step_started (the checks above
        # made sure the outcome is a step's completion, failure or retry and that the
        # new step is another one).  Each refusal lives in the planner it belongs to, once.
        _plan_step_change(view, plan, outcome, at, in_band)
        _plan_step_created(view, plan, created, at, in_band, started=started)
        # _close(plan, in_band=in_band), inlined: three events added
        plan.seq_after = seq + 3
        plan.seq_in_band_after = seq_in_band + 3 if in_band else seq_in_band
        return plan
    overlay = _Overlay(view, plan)
    events = plan.events
    planners = _PLANNERS
    last = len(requests) - 1
    skip = False
    for i, request in enumerate(requests):
        if skip:
            skip = False
            continue
        count = len(events)
        kind = request.type
        if kind is T.STEP_CREATED and i < last:
            following = requests[i + 1]
            if (
                following.type is T.STEP_STARTED
                and following.correlation_id == request.correlation_id
            ):
                _plan_step_created(view, plan, request, at, in_band, started=following)
                skip = True
                continue
        planner = planners.get(kind)
        if planner is not None:
            planner(view, plan, request, at, in_band)
        else:
            _plan_one(overlay, plan, request, at, in_band=in_band, in_batch=True)
        if len(events) != count + 1:
            raise InvalidRequest(
                f"{kind.value} in a batch for run {run_id!r} would append nothing; write it alone",
                run_id=run_id,
            )
    _close(plan, in_band=in_band)
    return plan


def _close(plan: Plan, *, in_band: bool) -> None:
    """Set ``plan.seq_after`` and ``plan.seq_in_band_after``: the counters once the
    plan's events are appended."""
    added = len(plan.events)
    plan.seq_after = plan.seq + added
    plan.seq_in_band_after = plan.seq_in_band + (added if in_band else 0)
