"""The invariant checker: every entity re-derived from the log, and the log's own rules.

:func:`check_log` is pure: it walks one run's events in order with its own fold
(deliberately not the Worlds' ``_fold``, so a bug there is not shared), checks
each event against the lifecycle rules, and, given the rows a World stores,
compares them with what it derived.  :func:`check_invariants` reads a World
through its public API only (runs, events, steps, hooks, waits) and adds the
rules that span runs (one live hook per token).  Rule ids and descriptions are
in :data:`RULES` and docs/invariants.md; a violation names positions as ``#12``
and entities by where they were created (``hook#1@7``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from durasim.worlds import (
    CorruptedLog,
    Event,
    EventType,
    Hook,
    HookNotFound,
    Run,
    RunNotFound,
    Snapshot,
    Step,
    Wait,
    World,
)

from ._rules import RULES

__all__ = [
    "HookInterval",
    "Report",
    "StoredRun",
    "Violation",
    "check_invariants",
    "check_log",
    "check_logs",
]

T = EventType
_TERMINAL = frozenset({T.RUN_COMPLETED, T.RUN_FAILED, T.RUN_CANCELLED})
_STEP_OUTCOMES = frozenset({T.STEP_COMPLETED, T.STEP_FAILED})


@attrs.frozen
class Violation:
    """One broken rule, where it broke."""

    rule: str
    run_id: str | None
    message: str
    seq: int | None = None

    def render(self) -> str:
        """One line: ``[rule] run: message``."""
        where = f"run {self.run_id}: " if self.run_id else ""
        return f"[{self.rule}] {where}{self.message}"


@attrs.frozen
class Report:
    """The verdict of a check: ``ok`` when no rule is broken."""

    violations: tuple[Violation, ...] = ()
    runs: int = 0
    events: int = 0

    @property
    def ok(self) -> bool:
        """Whether every rule held."""
        return not self.violations

    def rules_broken(self) -> Counter[str]:
        """How often each rule was broken."""
        return Counter(v.rule for v in self.violations)

    def render(self) -> str:
        """A plain-text report: a summary line, then one line per violation."""
        head = (
            f"{'OK' if self.ok else 'VIOLATED'}: {self.runs} run(s), {self.events} event(s), "
            f"{len(RULES)} rules, {len(self.violations)} violation(s)"
        )
        return "\n".join([head, *(v.render() for v in self.violations)])

    def __add__(self, other: Report) -> Report:
        return Report(
            self.violations + other.violations, self.runs + other.runs, self.events + other.events
        )


@attrs.frozen
class StoredRun:
    """What a World stores about one run, to compare with the fold of its log."""

    run: Run | None = None
    steps: tuple[Step, ...] = ()
    hooks: tuple[Hook, ...] = ()
    waits: tuple[Wait, ...] = ()
    snapshot: Snapshot | None = None


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
class HookInterval:
    """When a hook held its token (``end`` is ``None`` while it still does)."""

    run_id: str
    hook_id: str
    token: str
    start: datetime
    end: datetime | None


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


def check_log(
    events: Sequence[Event], *, run_id: str | None = None, stored: StoredRun | None = None
) -> Report:
    """Check one run's log (and, given ``stored``, the World's rows against its fold)."""
    walk = _walk(events, run_id or (events[0].run_id if events else "?"))
    if stored is not None:
        _compare(walk, stored, events)
    return Report(tuple(walk.violations), runs=1, events=len(events))


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
            and event.type not in _TERMINAL
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


# -- stored rows against the fold ---------------------------------------------------------


def _compare(walk: _Walk, stored: StoredRun, events: Sequence[Event]) -> None:
    if stored.snapshot is not None:
        in_band = sum(1 for e in events if e.in_band)
        if (stored.snapshot.seq, stored.snapshot.seq_in_band) != (len(events), in_band):
            walk.flag(
                "log.snapshot",
                f"the snapshot says ({stored.snapshot.seq} events, {stored.snapshot.seq_in_band} "
                f"in-band); the log read holds ({len(events)}, {in_band})",
            )
    if stored.run is not None:
        _compare_run(walk, stored.run)
    _compare_rows(
        walk,
        "step",
        {s.step_id: s for s in stored.steps},
        walk.steps,
        lambda row, fold: _diff(
            ("status", row.status.value, fold.status),
            ("attempt", row.attempt, fold.attempt),
            ("output", row.output, fold.output if fold.status == "completed" else row.output),
            ("step_name", row.step_name, fold.name),
        ),
    )
    _compare_rows(
        walk,
        "hook",
        {h.hook_id: h for h in stored.hooks},
        walk.hooks,
        lambda row, fold: _diff(
            ("token", row.token, fold.token),
            ("status", row.status.value, fold.status),
            ("received_count", row.received_count, fold.received),
        ),
    )
    _compare_rows(
        walk,
        "wait",
        {w.wait_id: w for w in stored.waits},
        walk.waits,
        lambda row, fold: _diff(
            ("status", row.status.value, fold.status),
            ("resume_at", row.resume_at, fold.resume_at),
        ),
    )
    if walk.terminal is not None:
        for hook in stored.hooks:
            if hook.status.value == "active":
                walk.flag(
                    "run.released",
                    f"hook {hook.hook_id} is still active after the run ended at "
                    f"#{walk.terminal.seq}",
                )
        for wait in stored.waits:
            if wait.status.value == "waiting":
                walk.flag(
                    "run.released",
                    f"wait {wait.wait_id} is still waiting after the run ended at "
                    f"#{walk.terminal.seq}",
                )


def _diff(*fields: tuple[str, Any, Any]) -> list[str]:
    return [
        f"{name} is {row!r} where the log says {fold!r}"
        for name, row, fold in fields
        if row != fold
    ]


def _compare_run(walk: _Walk, row: Run) -> None:
    differences = _diff(
        ("status", row.status.value, walk.status),
        ("output", row.output, walk.output),
        ("error_code", row.error_code, walk.error_code),
        ("cancel_reason", row.cancel_reason, walk.cancel_reason),
        ("attributes", dict(row.attributes.items()), walk.attributes),
    )
    if walk.status == "failed" and row.error != walk.error:
        differences.append("error differs from the run_failed event")
    for difference in differences:
        walk.flag("run.row", f"the run row's {difference}")


def _compare_rows(
    walk: _Walk,
    kind: str,
    rows: dict[str, Any],
    folded: dict[str, Any],
    differ: Any,
) -> None:
    for entity_id, row in rows.items():
        fold = folded.get(entity_id)
        if fold is None:
            walk.flag(f"{kind}.row_has_event", f"{kind} row {entity_id} has no {kind}_created")
            continue
        for difference in differ(row, fold):
            walk.flag(f"{kind}.row", f"{kind} {entity_id}@{fold.created}: the row's {difference}")
    for entity_id, fold in folded.items():
        if entity_id not in rows:
            walk.flag(
                f"{kind}.row",
                f"{kind} {entity_id}@{fold.created} is in the log but the World has no row",
            )


# -- across runs: hook tokens -------------------------------------------------------------


def _until(interval: HookInterval) -> datetime:
    return interval.end if interval.end is not None else datetime.max.replace(tzinfo=UTC)


def _check_tokens(
    intervals: list[HookInterval], conflicts: list[tuple[str, Event, str, str, str]]
) -> list[Violation]:
    violations: list[Violation] = []
    by_token: dict[str, list[HookInterval]] = {}
    for interval in intervals:
        by_token.setdefault(interval.token, []).append(interval)
    for token, held in by_token.items():
        held.sort(key=lambda i: (i.start, i.run_id, i.hook_id))
        for a, b in itertools.combinations(held, 2):
            # Only a certain overlap counts: Worlds stamp time coarsely, and two
            # events of one instant in different runs have no order to read.
            if max(a.start, b.start) < min(_until(a), _until(b)):
                violations.append(
                    Violation(
                        "hook.token_unique",
                        b.run_id,
                        f"hook {b.hook_id} held token {token!r} from {b.start.isoformat()} while "
                        f"hook {a.hook_id} of run {a.run_id} held it "
                        f"({'still live' if a.end is None else 'until ' + a.end.isoformat()})",
                    )
                )
    index = {(i.run_id, i.hook_id): i for i in intervals}
    for run_id, event, token, other_run, other_hook in conflicts:
        holder = index.get((other_run, other_hook))
        live = (
            holder is not None
            and holder.token == token
            and holder.start <= event.created_at <= _until(holder)
        )
        if not live:
            violations.append(
                Violation(
                    "hook.conflict_live",
                    run_id,
                    f"hook_conflict at #{event.seq} names hook {other_hook} of run {other_run}, "
                    f"which did not hold token {token!r} then",
                    event.seq,
                )
            )
    return violations


def check_logs(logs: Mapping[str, Sequence[Event]]) -> Report:
    """Check several runs' logs (no World): each log's rules, and hook tokens across them."""
    report = Report()
    intervals: list[HookInterval] = []
    conflicts: list[tuple[str, Event, str, str, str]] = []
    for run_id, events in logs.items():
        walk = _walk(events, run_id)
        report += Report(tuple(walk.violations), runs=1, events=len(events))
        intervals += _intervals(walk)
        conflicts += [(run_id, *c) for c in walk.conflicts]
    return report + Report(tuple(_check_tokens(intervals, conflicts)))


def _intervals(walk: _Walk) -> list[HookInterval]:
    return [
        HookInterval(walk.run_id, hook_id, hook.token, hook.created_at, hook.ended_at)
        for hook_id, hook in walk.hooks.items()
    ]


# -- reading a World ----------------------------------------------------------------------


async def _read_log(world: World, run_id: str) -> tuple[list[Event], Snapshot]:
    # The first page's snapshot counts the whole log as it was then: on a quiet
    # World (the checker's setting) it matches every event read.
    page = await world.events.list(run_id, limit=10_000)
    events, snapshot = list(page.events), page.snapshot
    while page.has_more:
        page = await world.events.list(run_id, after_seq=events[-1].seq, limit=10_000)
        events.extend(page.events)
    return events, snapshot


async def _all_run_ids(world: World) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = await world.runs.list(cursor=cursor, limit=1000)
        ids += [r.run_id for r in page.runs]
        cursor = page.cursor
        if cursor is None:
            return ids


async def check_invariants(world: World, run_id: str | None = None) -> Report:
    """Check every run of ``world`` (or one) through its public read API.

    Per run: the log's own rules, the lifecycle rules, and the World's rows
    against the checker's fold of the log.  Across runs: one live hook per
    token at any time, and every ``hook_conflict`` names a live holder.
    """
    run_ids = [run_id] if run_id is not None else await _all_run_ids(world)
    report = Report()
    intervals: list[HookInterval] = []
    conflicts: list[tuple[str, Event, str, str, str]] = []
    for rid in run_ids:
        try:
            events, snapshot = await _read_log(world, rid)
            stored = StoredRun(
                run=await world.runs.get(rid),
                steps=await world.steps.list(rid),
                hooks=await world.hooks.list(rid),
                waits=await world.waits.list(rid),
                snapshot=snapshot,
            )
        except RunNotFound:
            report += Report(
                (Violation("run.created_first", rid, "the World lists it but has no log"),)
            )
            continue
        except CorruptedLog as exc:
            report += Report((Violation("log.dense", rid, f"the World cannot read it: {exc}"),))
            continue
        walk = _walk(events, rid)
        _compare(walk, stored, events)
        report += Report(tuple(walk.violations), runs=1, events=len(events))
        intervals += _intervals(walk)
        conflicts += [(rid, *c) for c in walk.conflicts]
        for hook in stored.hooks:
            if hook.status.value == "active":
                try:
                    holder = await world.hooks.get_by_token(hook.token)
                except HookNotFound:
                    holder = None
                if holder is None or (holder.run_id, holder.hook_id) != (rid, hook.hook_id):
                    report += Report(
                        (
                            Violation(
                                "hook.by_token",
                                rid,
                                f"hook {hook.hook_id} is active with token {hook.token!r}, but "
                                "get_by_token answers "
                                + (
                                    "nothing"
                                    if holder is None
                                    else f"{holder.run_id}/{holder.hook_id}"
                                ),
                            ),
                        )
                    )
    if run_id is None:
        report += Report(tuple(_check_tokens(intervals, conflicts)))
    return report
