"""Leases in the simulator: the runtime's own lease keeper, renewed in virtual time.

Each simulated delivery's lease is held by a ``LeaseKeeper`` with a worker's
``LeasePolicy`` and renewed as the clock moves; it lapses only when renewal
stops (a crash, a stalled heartbeat) or fails, and then another delivery may
take the run over while the first one's step still runs.
"""

from __future__ import annotations

from typing import Any

import pytest
import simflows

from durasim.checkers import check_invariants, verify_replay
from durasim.runtime import LeaseOptionsError, LeasePolicy, Worker
from durasim.runtime.lowlevel import LeaseKeeper
from durasim.sim import Match, Sim
from durasim.worlds import MemoryWorld


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    simflows.CALLS.clear()


def _rounds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """Every renewal round the keeper ran: (virtual seconds, leases renewed)."""
    seen: list[tuple[float, int]] = []
    renew_due = LeaseKeeper.renew_due

    async def spy(self: LeaseKeeper, extend: Any, **options: Any) -> int:
        renewed = await renew_due(self, extend, **options)
        seen.append((self._clock(), renewed))
        return renewed

    monkeypatch.setattr(LeaseKeeper, "renew_due", spy)
    return seen


async def _checked(sim: Sim, run_id: str) -> None:
    assert (await check_invariants(sim.store)).ok
    assert (await verify_replay(sim.store, run_id)).ok


def _policy(**options: Any) -> LeasePolicy:
    sim = Sim(**options)

    async def nothing(sim: Sim) -> None:
        return None

    sim.run_sync(nothing)  # (closes the simulation's loop)
    return sim.lease_policy


def test_a_simulation_holds_leases_as_a_worker_does() -> None:
    assert _policy() == LeasePolicy() == Worker(MemoryWorld()).leases.policy
    assert _policy(lease_seconds=30.0) == LeasePolicy.of(30.0, None)
    assert _policy(lease_seconds=2.0, renew_every=0.5).renew_every == 0.5
    with pytest.raises(LeaseOptionsError, match="lease_seconds=0"):
        Sim(lease_seconds=0)
    with pytest.raises(LeaseOptionsError, match="renew_every=5"):
        Sim(lease_seconds=5.0, renew_every=5.0)


def test_a_healthy_lease_is_renewed_by_the_keeper_and_never_lapses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds = _rounds(monkeypatch)

    async def script(sim: Sim) -> Any:
        return await sim.run(simflows.naps_then_charge, 3.0, 600.0)

    sim = Sim()
    outcome = sim.run_sync(script)
    assert outcome.value == [603.0, "charged 1"]
    assert sim.deliveries == 1  # the step ran 603 s on a 5 s lease: nobody took it over
    assert sim.takeovers == []
    # The clock moved twice while the step ran (to +3 s and +603 s); the keeper
    # renewed the lease each time (the clock never stops just to renew).
    assert rounds == [(3.0, 1), (603.0, 1)]


def test_a_crashed_deliverys_lease_lapses_after_its_last_renewal() -> None:
    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step="two_naps"))
        return await sim.run(simflows.naps_then_charge, 3.0, 0.5)

    sim = Sim()
    outcome = sim.run_sync(script)
    assert outcome.value == [3.5, "charged 1"]
    text = sim.trace_text
    # Renewed at +3 s (due: claimed at 0, renewed every 1 s), not at +3.5 s (not due
    # yet); crashed at +3.5 s: the message is claimable 5 s after the last renewal.
    assert "+3.500000s crash" in text
    assert "+8.000000s d2 deliver msg_000001" in text


def test_a_stalled_heartbeat_lets_another_delivery_take_the_run_over_mid_step() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.step_sleeps, 12.0)
        await sim.until(Match(event_type="step_started"))
        assert sim.stall_heartbeat(run.run_id, seconds=30.0) == 1
        assert sim.stall_heartbeat(run.run_id, seconds=30.0) == 0  # not renewed on time now
        idle = await sim.run_until_idle()
        await _checked(sim, run.run_id)
        return idle, await sim.outcome(run.run_id)

    sim = Sim()
    idle, outcome = sim.run_sync(script)
    assert idle.status == "idle"
    assert outcome.value == 12.0
    assert sim.takeovers == [(1, 2)]
    text = sim.trace_text
    assert "xx           +0.000000s heartbeat of d1 stalls for 30 s" in text
    assert "+5.000000s d2 takes over msg_000001 from d1, which still runs" in text
    assert "+12.000000s step:slow d1 events.create_batch (step_completed" in text
    assert "InBandSuperseded" in text
    assert "+12.000000s d1 could not settle msg_000001" in text
    assert "+17.000000s wrun_000001 step:slow d2" in text


def test_failing_renewals_are_retried_at_every_beat_until_the_lease_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rounds = _rounds(monkeypatch)

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.step_sleeps, 12.0)
        await sim.until(Match(event_type="step_started"))
        assert sim.fail_renewals(run.run_id, seconds=7.5) == 1
        await sim.run_until_idle()
        await _checked(sim, run.run_id)

    sim = Sim()
    sim.run_sync(script)
    assert sim.takeovers == [(1, 2)]
    # d1's keeper tried at +1..+7 s (a World error each time: nothing renewed) and
    # at +8 s, when the renewer worked again but d2 held the message (LeaseLost);
    # d2's keeper renewed its lease on its own beat.
    d1 = [(at, renewed) for at, renewed in rounds if at <= 8.0 and renewed == 0]
    assert d1 == [(float(t), 0) for t in range(1, 9)]
    assert "+8.000000s d1 lost its lease of msg_000001 (d2 holds it)" in sim.trace_text


def test_a_renewal_reporting_the_lease_lost_stops_the_keeper() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.step_sleeps, 12.0)
        await sim.until(Match(event_type="step_started"))
        assert sim.fail_renewals(run.run_id, lost=True) == 1
        await sim.run_until_idle()
        await _checked(sim, run.run_id)

    sim = Sim()
    sim.run_sync(script)
    assert sim.takeovers == [(1, 2)]
    assert "+1.000000s d1 lost its lease of msg_000001: no longer renewed" in sim.trace_text
    assert "+5.000000s d2 takes over" in sim.trace_text


def test_a_script_jump_renews_the_running_leases() -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.step_sleeps, 120.0)
        await sim.until(Match(event_type="step_started"))
        sim.advance_time(60.0)  # far past a lease: a healthy heartbeat kept renewing
        await sim.run_until_idle()
        return await sim.outcome(run.run_id)

    sim = Sim()
    assert sim.run_sync(script).value == 120.0
    assert sim.takeovers == []


@pytest.mark.parametrize("seed", range(4))
def test_lease_faults_are_choices_too_same_seed_same_trace(seed: int) -> None:
    def once() -> tuple[str, list[tuple[int, int]]]:
        sim = Sim(seed=seed, faults=("stall_heartbeat", "fail_renewal"), fault_odds=3)
        sim.run_sync(lambda s: s.run(simflows.naps_then_charge, 4.0, 8.0))
        return sim.trace_hash, sim.takeovers

    first = once()
    assert all(once() == first for _ in range(4))
