"""Histories recorded by an older durasim keep replaying: one per event type of the contract.

The files in histories/ were written once by ``golden_flows.py`` and are never
regenerated for a change of the runtime: a runtime that no longer replays them
would break every run in flight at an upgrade.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import golden_flows

from durasim.checkers import assert_histories_replay, load_logs, replay_histories
from durasim.worlds import EventType

HISTORIES = Path(__file__).parent / "histories"


def test_every_event_type_of_the_contract_has_a_golden_history() -> None:
    seen = {e.type for events in load_logs(HISTORIES).values() for e in events}
    assert seen == set(EventType)


def test_every_golden_history_replays_on_this_code() -> None:
    verdicts = assert_histories_replay(HISTORIES)
    assert len(verdicts) == len(list(HISTORIES.glob("*.jsonl")))
    assert all(v.kind == "ok" or v.run_id == "golden-cancelled" for v in verdicts)


def test_an_edit_without_a_patch_is_named_with_both_sides(monkeypatch: object) -> None:
    from durasim.runtime import step
    from durasim.runtime.lowlevel import find_workflow

    definition = find_workflow("workflow//durasim.golden//steps")
    original = definition.fn

    @step(module="durasim.golden", name="subtract")
    def subtract(a: int, b: int) -> int:
        return a - b

    async def edited(n: int) -> int:  # the second call of add became subtract
        return await subtract(n, await golden_flows.add(n, 1))

    object.__setattr__(definition, "fn", edited)
    try:
        verdicts = asyncio.run(replay_histories([HISTORIES / "steps.jsonl"]))
    finally:
        object.__setattr__(definition, "fn", original)
    [verdict] = verdicts
    assert verdict.kind == "diverged"
    assert "step//durasim.golden//add#2" in verdict.detail  # the log's side
    assert "subtract" in verdict.detail  # the code's side
