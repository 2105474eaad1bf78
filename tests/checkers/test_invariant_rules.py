"""Every invariant rule: a hand-made log that breaks it (named at the right position), and one
that keeps it; then the rules that compare a World's rows with the fold of its log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from durasim.checkers import RULES, StoredRun, check_invariants, check_log, check_logs
from durasim.worlds import (
    CountingIds,
    Event,
    EventRequest,
    EventType,
    FixedClock,
    HookNotFound,
    HookStatus,
    MemoryWorld,
    RunStatus,
    WaitStatus,
)

T0 = datetime(2024, 1, 1, tzinfo=UTC)
RUN = "r1"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ev(type_: str, cid: str | None = None, *, t: float = 0, run: str = RUN, **data: Any) -> Event:
    """An event without a position yet (``log`` numbers them)."""
    return Event(
        run_id=run, seq=0, type=EventType(type_), created_at=at(t), correlation_id=cid, data=data
    )


def log(*events: Event) -> list[Event]:
    return [attrs.evolve(e, seq=i + 1) for i, e in enumerate(events)]


S, H, W = "step//m//charge#1", "hook#1", "sleep#1"


def good() -> list[Event]:
    """One of everything, by the rules."""
    return log(
        ev("run_created", workflow_name="wf", input=b"i", attributes=(("a", "1"),)),
        ev("run_started"),
        ev("step_created", S, step_name="step//m//charge", input=b"x"),
        ev("step_started", S, attempt=1),
        ev("step_retrying", S, error=b"e", retry_after=at(5)),
        ev("step_started", S, t=5, attempt=2),
        ev("step_completed", S, t=5, result=b"ok"),
        ev("hook_created", H, t=5, token="tok"),
        ev("hook_received", H, t=6, payload=b"p", resume_id="r-1", token="tok"),
        ev("hook_disposed", H, t=6),
        ev("wait_created", W, t=6, resume_at=at(10)),
        ev("wait_completed", W, t=10, resume_at=at(10)),
        ev("attr_set", changes=(("a", None), ("b", "2"))),
        ev("run_completed", t=10, output=b"out"),
    )


def test_the_good_log_keeps_every_rule() -> None:
    report = check_log(good())
    assert report.ok, report.render()
    assert report.render().startswith("OK: 1 run(s), 14 event(s)")


def _replace(index: int, event: Event) -> Callable[[list[Event]], list[Event]]:
    def edit(events: list[Event]) -> list[Event]:
        events = list(events)
        events[index] = attrs.evolve(event, seq=events[index].seq)
        return events

    return edit


def _insert(index: int, event: Event) -> Callable[[list[Event]], list[Event]]:
    def edit(events: list[Event]) -> list[Event]:
        events = list(events)
        events.insert(index, event)
        return log(*events)

    return edit


def _drop(index: int) -> Callable[[list[Event]], list[Event]]:
    def edit(events: list[Event]) -> list[Event]:
        return log(*(e for i, e in enumerate(events) if i != index))

    return edit


def _renumber(index: int, seq: int) -> Callable[[list[Event]], list[Event]]:
    def edit(events: list[Event]) -> list[Event]:
        events = list(events)
        events[index] = attrs.evolve(events[index], seq=seq)
        return events

    return edit


#: rule -> (how to break the good log, a fragment the message must contain)
BREAKS: dict[str, tuple[Callable[[list[Event]], list[Event]], str]] = {
    "log.dense": (_renumber(13, 15), "the event at index 13 is #15, where #14 was due"),
    "log.unique": (_renumber(13, 13), "position #13 appears twice"),
    "log.run": (
        _replace(12, ev("attr_set", run="r2", changes=(("b", "2"),))),
        "#13 attr_set names run r2",
    ),
    "log.noop": (_insert(13, ev("noop", "x")), "the noop at #14"),
    "run.created_first": (_insert(0, ev("run_started")), "the log starts with #1 run_started"),
    "run.started_once": (
        _insert(2, ev("run_started")),
        "run_started at #3 while the run is running",
    ),
    "run.terminal_once": (
        _insert(14, ev("run_failed", error=b"e")),
        "#15 run_failed after the terminal #14",
    ),
    "run.terminal_from": (_drop(1), "#"),
    "run.after_terminal": (
        _insert(14, ev("attr_set", changes=(("c", "3"),))),
        "#15 attr_set after the run ended at #14",
    ),
    "step.created_once": (
        _insert(3, ev("step_created", S, step_name="step//m//charge", input=b"x")),
        f"step {S}@3 created again at #4",
    ),
    "step.order": (
        _insert(2, ev("step_started", "step//m//other#1", attempt=1)),
        "#3 step_started of step step//m//other#1, never created",
    ),
    "step.attempt": (
        _replace(5, ev("step_started", S, t=5, attempt=3)),
        f"#6 step_started of step {S}@3 says attempt 3; it is start number 2",
    ),
    "step.outcome_running": (_drop(3), f"#4 step_retrying of step {S}@3 while it is pending"),
    "step.one_terminal": (
        _insert(7, ev("step_failed", S, t=5, error=b"e")),
        f"#8 step_failed of step {S}@3, which already ended at #7",
    ),
    "step.no_start_after_terminal": (
        _insert(7, ev("step_started", S, t=5, attempt=3)),
        f"#8 step_started of step {S}@3, which ended at #7",
    ),
    "step.retry_after": (
        _replace(5, ev("step_started", S, t=4, attempt=2)),
        "before its retry_after",
    ),
    "hook.created_once": (
        _insert(8, ev("hook_created", H, t=5, token="tok")),
        "hook hook#1@8 created again at #9",
    ),
    "hook.received_window": (
        _insert(10, ev("hook_received", H, t=6, payload=b"q", token="tok")),
        "#11 hook_received of hook hook#1@8, which is disposed",
    ),
    "hook.token_field": (
        _replace(8, ev("hook_received", H, t=6, payload=b"p", token="other")),
        "#9 hook_received carries token 'other'",
    ),
    "hook.resume_dedup": (
        _insert(9, ev("hook_received", H, t=6, payload=b"p", resume_id="r-1", token="tok")),
        "resume_id 'r-1' at #10 was already recorded at #9",
    ),
    "hook.disposed_once": (
        _insert(10, ev("hook_disposed", H, t=6)),
        "#11 hook_disposed of hook hook#1@8, which is disposed",
    ),
    "wait.created_once": (
        _insert(11, ev("wait_created", W, t=6, resume_at=at(10))),
        "wait sleep#1@11 created again at #12",
    ),
    "wait.completed_once": (
        _insert(12, ev("wait_completed", W, t=10, resume_at=at(10))),
        "#13 wait_completed of wait sleep#1@11, which is completed",
    ),
    "wait.resume_at_stable": (
        _replace(11, ev("wait_completed", W, t=10, resume_at=at(11))),
        "#12 wait_completed of wait sleep#1@11 says resume_at",
    ),
    "wait.not_early": (
        _replace(11, ev("wait_completed", W, t=9, resume_at=at(10))),
        "before its resume_at",
    ),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_a_log_that_breaks_the_rule_is_reported_at_its_position(rule: str) -> None:
    edit, fragment = BREAKS[rule]
    report = check_log(edit(good()), run_id=RUN)
    assert rule in report.rules_broken(), report.render()
    messages = [v.message for v in report.violations if v.rule == rule]
    assert any(fragment in m for m in messages), messages


def test_a_late_outcome_of_a_step_running_at_the_end_is_allowed() -> None:
    events = log(
        ev("run_created", workflow_name="wf", input=b"i"),
        ev("run_started"),
        ev("step_created", S, step_name="step//m//charge", input=b"x"),
        ev("step_started", S, attempt=1),
        ev("run_cancelled", reason="stop"),
        ev("step_completed", S, result=b"ok"),
    )
    assert check_log(events).ok
    broken = log(
        *events[:4],
        ev("run_cancelled", reason="stop"),
        ev("step_created", "step//m//x#1", step_name="step//m//x", input=b"x"),
    )
    assert check_log(broken).rules_broken() == {"run.after_terminal": 1}


def _hook_run(run: str, token: str, *, created: float, disposed: float | None) -> list[Event]:
    events = [
        ev("run_created", run=run, workflow_name="wf", input=b"i"),
        ev("run_started", run=run),
        ev("hook_created", H, t=created, run=run, token=token),
    ]
    if disposed is not None:
        events.append(ev("hook_disposed", H, t=disposed, run=run))
    return log(*events)


def test_two_live_hooks_sharing_a_token_across_runs() -> None:
    ok = {
        "a": _hook_run("a", "t", created=0, disposed=5),
        "b": _hook_run("b", "t", created=5, disposed=None),
    }
    assert check_logs(ok).ok
    clash = {
        "a": _hook_run("a", "t", created=0, disposed=None),
        "b": _hook_run("b", "t", created=5, disposed=None),
    }
    report = check_logs(clash)
    assert report.rules_broken() == {"hook.token_unique": 1}
    assert "hook hook#1 of run a held it (still live)" in report.violations[0].message


def test_a_conflict_must_name_a_live_holder() -> None:
    holder = _hook_run("a", "t", created=0, disposed=5)
    conflict = log(
        ev("run_created", run="b", workflow_name="wf", input=b"i"),
        ev("run_started", run="b"),
        ev(
            "hook_conflict",
            H,
            t=3,
            run="b",
            token="t",
            conflicting_run_id="a",
            conflicting_hook_id=H,
        ),
    )
    assert check_logs({"a": holder, "b": conflict}).ok
    late = log(*conflict[:2], attrs.evolve(conflict[2], created_at=at(9)))
    report = check_logs({"a": holder, "b": late})
    assert report.rules_broken() == {"hook.conflict_live": 1}
    assert "hook_conflict at #3 names hook hook#1 of run a" in report.violations[0].message


# -- rows against the fold: a real World, its rows doctored ---------------------------------


async def _world_with_everything() -> tuple[MemoryWorld, list[Event], StoredRun]:
    clock = FixedClock()
    world = MemoryWorld(clock=clock, ids=CountingIds())
    run = (
        await world.events.create(
            None, EventRequest.of("run_created", workflow_name="wf", input=b"i")
        )
    ).run
    rid = run.run_id
    for request in (
        EventRequest.of("run_started"),
        EventRequest.of("step_created", S, step_name="step//m//charge", input=b"x"),
        EventRequest.of("step_started", S),
        EventRequest.of("step_completed", S, result=b"ok"),
        EventRequest.of("hook_created", H, token="tok"),
        EventRequest.of("wait_created", W, resume_at=clock.now() + timedelta(hours=1)),
    ):
        await world.events.create(rid, request)
    page = await world.events.list(rid)
    stored = StoredRun(
        run=await world.runs.get(rid),
        steps=await world.steps.list(rid),
        hooks=await world.hooks.list(rid),
        waits=await world.waits.list(rid),
        snapshot=page.snapshot,
    )
    return world, list(page.events), stored


async def test_a_real_worlds_rows_equal_the_fold() -> None:
    world, events, stored = await _world_with_everything()
    assert check_log(events, stored=stored).ok
    assert (await check_invariants(world)).ok


ROW_BREAKS: dict[str, tuple[Callable[[StoredRun], StoredRun], str]] = {
    "run.row": (
        lambda s: attrs.evolve(s, run=attrs.evolve(s.run, status=RunStatus.COMPLETED)),
        "the run row's status is 'completed' where the log says 'running'",
    ),
    "step.row": (
        lambda s: attrs.evolve(s, steps=(attrs.evolve(s.steps[0], attempt=2),)),
        f"step {S}@3: the row's attempt is 2 where the log says 1",
    ),
    "step.row_has_event": (
        lambda s: attrs.evolve(s, steps=(*s.steps, attrs.evolve(s.steps[0], step_id="ghost#1"))),
        "step row ghost#1 has no step_created",
    ),
    "hook.row": (
        lambda s: attrs.evolve(s, hooks=(attrs.evolve(s.hooks[0], status=HookStatus.DISPOSED),)),
        "hook hook#1@6: the row's status is 'disposed'",
    ),
    "hook.row_has_event": (
        lambda s: attrs.evolve(s, hooks=(*s.hooks, attrs.evolve(s.hooks[0], hook_id="hook#9"))),
        "hook row hook#9 has no hook_created",
    ),
    "wait.row": (
        lambda s: attrs.evolve(s, waits=(attrs.evolve(s.waits[0], status=WaitStatus.COMPLETED),)),
        "wait sleep#1@7: the row's status is 'completed'",
    ),
    "wait.row_has_event": (
        lambda s: attrs.evolve(s, waits=(*s.waits, attrs.evolve(s.waits[0], wait_id="sleep#9"))),
        "wait row sleep#9 has no wait_created",
    ),
    "log.snapshot": (
        lambda s: attrs.evolve(s, snapshot=attrs.evolve(s.snapshot, seq=9)),
        "the snapshot says (9 events",
    ),
}


@pytest.mark.parametrize("rule", sorted(ROW_BREAKS))
async def test_rows_that_differ_from_the_fold_are_reported(rule: str) -> None:
    _, events, stored = await _world_with_everything()
    edit, fragment = ROW_BREAKS[rule]
    report = check_log(events, stored=edit(stored))
    assert rule in report.rules_broken(), report.render()
    assert any(fragment in v.message for v in report.violations if v.rule == rule), report.render()


async def test_hooks_and_waits_left_live_after_the_end_are_reported() -> None:
    world, events, stored = await _world_with_everything()
    await world.events.create(events[0].run_id, EventRequest.of("run_cancelled", reason="x"))
    page = await world.events.list(events[0].run_id)
    # The World released them; pretend it had not.
    doctored = attrs.evolve(
        stored, run=await world.runs.get(events[0].run_id), snapshot=page.snapshot
    )
    report = check_log(list(page.events), stored=doctored)
    assert report.rules_broken()["run.released"] == 2
    assert "hook hook#1 is still active after the run ended at #8" in report.render()


class _LyingTokens:
    """A World (a MemoryWorld underneath) whose get_by_token never finds anything."""

    def __init__(self) -> None:
        self._world = MemoryWorld(clock=FixedClock(), ids=CountingIds())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._world, name)

    @property
    def hooks(self) -> Any:
        real = self._world.hooks

        class Hooks:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            async def get_by_token(self, token: str) -> Any:
                raise HookNotFound("lost it")

        return Hooks()


async def test_get_by_token_must_answer_the_active_holder() -> None:
    world = _LyingTokens()
    rid = (
        await world.events.create(
            None, EventRequest.of("run_created", workflow_name="wf", input=b"i")
        )
    ).run.run_id
    await world.events.create(rid, EventRequest.of("run_started"))
    await world.events.create(rid, EventRequest.of("hook_created", H, token="tok"))
    report = await check_invariants(world)  # type: ignore[arg-type]
    assert report.rules_broken() == {"hook.by_token": 1}
    assert "get_by_token answers nothing" in report.violations[0].message


def test_every_rule_is_tested_and_documented() -> None:
    tested = (
        set(BREAKS)
        | set(ROW_BREAKS)
        | {
            "run.after_terminal",
            "run.released",
            "hook.token_unique",
            "hook.conflict_live",
            "hook.by_token",
        }
    )
    assert tested == set(RULES)
    with open("docs/invariants.md", encoding="utf-8") as doc:
        text = doc.read()
    for rule, description in RULES.items():
        assert f"`{rule}`" in text, f"docs/invariants.md does not list {rule}"
        assert description in text, f"docs/invariants.md describes {rule} differently"
