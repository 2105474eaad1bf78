"""The invariant checker: every entity re-derived from the log, and the log's own rules.

:func:`check_log` is pure: it walks one run's events in order with its own fold
(deliberately not the Worlds' ``_fold``, so a bug there is not shared), checks
each event against the lifecycle rules, and, given the rows a World stores,
compares them with what it derived.  :func:`check_invariants` reads a World
through its public API only (runs, events, steps, hooks, waits) and adds the
rules that span runs (one live hook per token).  Rule ids and descriptions are
in :data:`RULES` and docs/invariants.md; a violation names positions as ``#12``
and entities by where they were created (``hook#1@7``).

The fold and the per-event rules are :mod:`._walk`; the verdict types are
:mod:`._report`.  This module compares stored rows with the fold, checks the
rules across runs and reads a World.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from durasim.worlds import (
    CorruptedLog,
    Event,
    HookNotFound,
    RunNotFound,
    RunRecord,
    Snapshot,
    World,
)

from ._report import HookInterval, Report, StoredRun, Violation
from ._walk import _Walk, _walk

__all__ = [
    "HookInterval",
    "Report",
    "StoredRun",
    "Violation",
    "check_invariants",
    "check_log",
    "check_logs",
]


def check_log(
    events: Sequence[Event], *, run_id: str | None = None, stored: StoredRun | None = None
) -> Report:
    """Check one run's log (and, given ``stored``, the World's rows against its fold)."""
    walk = _walk(events, run_id or (events[0].run_id if events else "?"))
    if stored is not None:
        _compare(walk, stored, events)
    return Report(tuple(walk.violations), runs=1, events=len(events))


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


def _compare_run(walk: _Walk, row: RunRecord) -> None:
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
