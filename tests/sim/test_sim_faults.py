"""Every fault kind on a small workflow, with its effect on the log."""

from __future__ import annotations

from typing import Any

import pytest
import simflows

from durasim.runtime import HookNotFoundError
from durasim.sim import FAULT_KINDS, Match, Sim, simulate
from durasim.worlds import RunStatus


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    simflows.CALLS.clear()


def _types(log: list[tuple[str, str | None]]) -> list[str]:
    return [t for t, _ in log]


def test_a_crashed_delivery_is_redelivered_with_the_same_message_id() -> None:
    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step="charge"))
        outcome = await sim.run(simflows.one_step, 5)
        return outcome, (await sim.snapshot()).log(outcome.run_id)

    sim = Sim()
    outcome, log = sim.run_sync(script)
    assert outcome.value == "charged 5"
    assert simflows.CALLS == ["charge 5", "charge 5"]  # run at least once: the body ran again
    assert _types(log) == [
        "run_created",
        "run_started",
        "step_created",
        "step_started",
        "step_started",  # attempt 2, by the redelivery
        "step_completed",
        "run_completed",
    ]
    text = sim.trace_text
    assert "crash orch d1" in text or "crash step:charge d1" in text
    assert "d2 deliver msg_000001 durasim.run run=wrun_000001 attempt=2" in text
    assert "+5.000000s d2 deliver" in text  # after the lease lapsed (a worker's 5 s default)


def test_a_dropped_message_stalls_the_run() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.one_step, 1)
        dropped = sim.drop_queued()
        idle = await sim.run_until_idle()
        return run.run_id, dropped, idle

    run_id, dropped, idle = simulate(script)
    assert [m.run_id for m in dropped] == [run_id]
    assert idle.status == "stalled"
    assert "no delivery of the run is pending" in str(idle.stall)


def test_a_delayed_message_moves_the_run_later() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.one_step, 1)
        sim.delay_queued(None, 3600)
        await sim.run_until_idle()
        return (await sim.outcome(run.run_id)).status, sim.clock.elapsed

    assert simulate(script) == (RunStatus.COMPLETED, 3600.0)


def test_a_transient_world_failure_is_retried_by_a_new_delivery() -> None:
    async def script(sim: Sim) -> Any:
        sim.fail_next(Match(call="events.create_batch"))
        return await sim.run(simflows.one_step, 2)

    sim = Sim()
    outcome = sim.run_sync(script)
    assert outcome.value == "charged 2"
    text = sim.trace_text
    assert "events.create_batch (step_created, step_started) InjectedFault" in text
    assert "d1 ended: failed (InjectedFault)" in text
    assert "+2.000000s d2 deliver" in text  # released with the worker's back-off


def test_a_deferred_commit_lands_when_the_script_says() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.approval, "later")
        await sim.run_until_idle()
        pending = sim.begin_hook_delivery("later", "ok")
        idle = await sim.run_until_idle()  # the sender is held before its write
        event = await pending.commit()
        await sim.run_until_idle()
        return idle.status, event.seq, (await sim.outcome(run.run_id)).value

    assert simulate(script) == ("stalled", 7, ["charged 1", "ok"])


def test_a_deferred_hook_delivery_after_a_cancel_is_refused() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.approval, "cancelled")
        await sim.run_until_idle()
        pending = sim.begin_hook_delivery("cancelled", "too late")
        await sim.run_until_idle()
        await sim.cancel_run(run.run_id, "operator")
        with pytest.raises(HookNotFoundError):
            await pending.commit()
        await sim.run_until_idle()
        return (await sim.snapshot()).log(run.run_id)

    log = simulate(script)
    assert _types(log)[-1] == "run_cancelled"
    assert "hook_received" not in _types(log)


def test_a_withheld_event_truncates_the_next_read() -> None:
    """A stale read hides the hook payload from the delivery its own wake-up started.

    Regression (found by this simulator): that delivery used to see nothing new,
    suspend and ack the wake-up, so the run stalled with its payload committed.
    The wake-up now names the position it is for; a read that ends before it
    gives the message back, and the redelivery sees the payload.
    """

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.approval, "stale")
        await sim.run_until_idle()
        sim.withhold_next_event(reads=1, run_id=run.run_id)
        await sim.deliver_hook("stale", "first")
        idle = await sim.run_until_idle()
        return idle.status, (await sim.outcome(run.run_id)).value

    sim = Sim()
    status, value = sim.run_sync(script)
    assert status == "idle"
    assert value == ["charged 1", "first"]
    assert "stale read by orch d2: wrun_000001 #7 withheld (1 event(s) hidden)" in sim.trace_text
    assert "d2 ended: unavailable" in sim.trace_text  # given back, not acked


@pytest.mark.parametrize("seed", range(12))
def test_faults_chosen_by_the_choice_source_keep_the_log_sound(seed: int) -> None:
    async def script(sim: Sim) -> Any:
        first = await sim.start(simflows.chain, 3)
        second = await sim.start(simflows.two_steps)
        idle = await sim.run_until_idle()
        snapshot = await sim.snapshot()
        return idle, [snapshot.log(r.run_id) for r in (first, second)]

    def once() -> tuple[str, Any]:
        sim = Sim(seed=seed, faults=FAULT_KINDS, fault_odds=4, max_faults=3)
        idle, logs = sim.run_sync(script)
        return sim.trace_hash, (idle.status, logs)

    first_hash, (status, logs) = once()
    assert once()[0] == first_hash  # faults are choices too: reproducible
    assert status in ("idle", "stalled")  # a dropped message may stall a run
    for log in logs:
        terminal = [t for t in _types(log) if t.startswith("run_") and t != "run_created"]
        assert terminal.count("run_completed") <= 1
        assert _types(log)[0] == "run_created"


def test_a_message_gated_by_a_crashed_lease_lets_the_clock_move() -> None:
    # Found by explore(): a duplicate delivery re-queues a wake message while
    # the crashed delivery's lease still gates the run; the message was "due"
    # but unclaimable, so the clock stood still and the wall budget ran out.
    from durasim.sim import SequenceChoices

    choices = [19] + [0] * 40 + [19]
    sim = Sim(
        choices=SequenceChoices(choices),
        faults=("crash", "duplicate"),
        max_wall_seconds=5,
        lease_seconds=30.0,  # the lease it was found with
    )
    outcome = sim.run_sync(lambda s: s.run(simflows.chain, 10))
    assert outcome.idle.status == "idle"
    assert outcome.value == 45
    assert "+30.000000s d3 deliver" in sim.trace_text  # after the crashed lease expired


def test_two_leased_messages_of_one_run_let_the_clock_move() -> None:
    # Found by explore(): a message whose lease has just expired is due now, but
    # another message of its run still holds an orchestrator lease for 30 s.
    from durasim.sim import SequenceChoices

    choices = [18, 14, 3, 19, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 8, 1, 1, 1, 9, 0, 15, 1, 13, 0, 16]
    choices += [1, 5, 0, 2, 0, 5, 1, 14, 0, 16, 1, 15, 0, 9, 1, 12, 1, 3, 1, 13, 0, 7, 0, 18, 0]
    choices += [15, 19, 0, 0, 0, 15, 19]
    sim = Sim(
        choices=SequenceChoices(choices),
        faults=("crash", "expire_lease", "delay"),
        max_wall_seconds=5,
        lease_seconds=30.0,  # the lease it was found with
    )
    outcome = sim.run_sync(lambda s: s.run(simflows.chain, 10))
    assert outcome.idle.status == "idle"
    assert outcome.value == 45
