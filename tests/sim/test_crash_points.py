"""Crash points at event granularity: a match selects one event of a batched write.

The runtime commits a step's outcome in one batch with the next step's creation
and start, so "the commit of step_completed(charge)" and "a commit that mentions
step_completed and charge" are different writes.  The idempotency check below
is the one docs/simulator.md shows.
"""

from __future__ import annotations

from typing import Any

import crashflows
import pytest

from durasim.sim import Match, Point, Sim, Writer
from durasim.worlds import RunStatus


@pytest.fixture(autouse=True)
def _clear_ledger() -> None:
    crashflows.LEDGER.clear()


CHARGE_COMPLETED = Match(phase="after", event_type="step_completed", step="charge")


def test_a_match_selects_the_event_not_a_batch_that_mentions_it() -> None:
    async def script(sim: Sim) -> Any:
        return await sim.run(crashflows.checkout, "o-1")

    sim = Sim()
    sim.run_sync(script)
    writes = [p for p in sim.orchestrator().history() if p.phase == "after" and p.events]
    # #5-#7: reserve's outcome, batched with charge's creation and start.
    batch = next(p for p in writes if [e[2] for e in p.events] == [5, 6, 7])
    assert "step_completed" in batch.types
    assert any(cid.endswith("charge#1") for cid in batch.correlation_ids)
    assert not CHARGE_COMPLETED.matches(batch)
    (hit,) = [p for p in writes if CHARGE_COMPLETED.matches(p)]
    assert CHARGE_COMPLETED.hit(hit) == ("step_completed", "step//crashflows//charge#1", 8)
    assert CHARGE_COMPLETED.describe_hit(hit) == (
        "after the commit containing step_completed(charge#1) at position 8, "
        "in a batch of 3 at #8-#10"
    )


def test_a_crash_after_the_commit_names_the_event_and_its_position() -> None:
    async def script(sim: Sim) -> Any:
        sim.crash_at(CHARGE_COMPLETED)
        outcome = await sim.run(crashflows.checkout, "o-1")
        return outcome, (await sim.snapshot()).log(outcome.run_id)

    sim = Sim()
    outcome, log = sim.run_sync(script)
    assert outcome.status is RunStatus.COMPLETED
    assert (
        "crash orch d1 after the commit containing step_completed(charge#1) at position 8"
        in sim.trace_text
    )
    assert log[7] == ("step_completed", "step//crashflows//charge#1")
    # Charged once: the crash came after the outcome was recorded.
    assert len(crashflows.LEDGER) == 1


def charged_once_despite_a_crash(workflow: Any, step: str) -> None:
    """The idempotency test of docs/simulator.md: ``step`` ran, the process died before
    the commit recording its outcome; the redelivery runs it again.  Charged once?"""

    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step=step))
        return await sim.run(workflow, "o-1")

    sim = Sim()
    outcome = sim.run_sync(script)
    assert outcome.status is RunStatus.COMPLETED
    assert f"before the commit containing step_completed({step}#1)" in sim.trace_text
    charges = [order for order, _ in crashflows.LEDGER]
    assert charges == ["o-1"], f"charged {len(charges)} times: {crashflows.LEDGER}"


def test_the_idempotency_test_fails_for_a_step_that_is_not_idempotent() -> None:
    with pytest.raises(AssertionError, match="charged 2 times"):
        charged_once_despite_a_crash(crashflows.checkout, "charge")


def test_the_idempotency_test_passes_for_an_idempotent_step() -> None:
    charged_once_despite_a_crash(crashflows.checkout_once, "charge_once")


def _point(**fields: Any) -> Point:
    writer = Writer(kind="orchestrator", run_id="r", delivery=1)
    base: dict[str, Any] = {
        "ordinal": 1,
        "seq": 1,
        "call": "events.create_batch",
        "phase": "after",
        "writer": writer,
        "writers": (writer,),
    }
    return Point(**(base | fields))


def test_a_refused_write_is_matched_on_the_events_it_asked_for() -> None:
    refused = _point(
        failed=True,
        error="EntityConflict",
        types=("step_completed", "step_created"),
        correlation_ids=("step//m//reserve#1", "step//m//charge#1"),
        events=(
            ("step_completed", "step//m//reserve#1", 0),
            ("step_created", "step//m//charge#1", 0),
        ),
    )
    assert Match(event_type="step_completed", step="reserve", failed=True).matches(refused)
    assert not Match(event_type="step_completed", step="charge").matches(refused)


def test_a_point_made_without_its_events_is_matched_call_by_call() -> None:
    bare = _point(types=("step_completed",), correlation_ids=("step//m//charge#1",))
    assert Match(event_type="step_completed", step="charge").matches(bare)
    assert not Match(event_type="step_started", step="charge").matches(bare)
