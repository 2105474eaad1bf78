"""Leases that lapse while a step runs: stalled heartbeats, failing renewals, takeovers.

Every delivery's lease is kept by the runtime's own lease keeper, renewed as
virtual time moves (5 s leases renewed every second, a worker's defaults).
Here the renewal stops or fails while a slow step (10 s) runs: the lease lapses,
another delivery claims the message and runs the step again, and the log's
fence decides whose outcome is recorded.
"""

from __future__ import annotations

from durasim.sim import Match, Sim

from . import _workflows as wf
from ._check import expect, expect_log, expect_outcome, finish
from ._registry import scenario

#: How long ``slow_charge`` runs: twice a worker's lease.
_SLOW = 10.0

#: The log of every takeover below: slow_charge#1 started by both deliveries,
#: its outcome recorded once (the second's), then the quick step and the end.
_TAKEN_OVER = [
    "run_created",
    "run_started",
    "step_created slow_charge#1",
    "step_started slow_charge#1",
    "step_started slow_charge#1",
    "step_completed slow_charge#1",
    "step_created charge#1",
    "step_started charge#1",
    "step_completed charge#1",
    "run_completed",
]

#: What the step bodies did: both executions of slow_charge ran to their end.
_BOTH_RAN = [
    "slow_charge 1 begins",
    "slow_charge 1 begins",
    "slow_charge 1 ends",
    "slow_charge 1 ends",
    "charge 2",
]


async def _mid_step(sim: Sim) -> str:
    """Start the run and wait until d1 has started slow_charge#1 (its body runs next)."""
    run = await sim.start(wf.slow_then_fast, _SLOW)
    await sim.until(Match(event_type="step_started", step="slow_charge"))
    return run.run_id


async def _taken_over(sim: Sim, run_id: str) -> None:
    """The takeover's end: one outcome (d2's), d1's refused, the run complete."""
    await sim.run_until_idle()
    await expect_log(sim, run_id, _TAKEN_OVER)
    expect(sim.takeovers == [(1, 2)], f"takeovers: {sim.takeovers}")
    expect(wf.CALLS == _BOTH_RAN, f"bodies: {wf.CALLS}")
    refused = [r.writer for r in (await sim.snapshot()).rejections]
    expect(refused == ["step:slow_charge d1"], f"refused: {refused}")
    expect("d1 could not settle msg_000001" in sim.trace_text, "d1's settle was not refused")
    await expect_outcome(sim, run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run_id)


@scenario("lease-lapses-mid-step")
async def lease_lapses_mid_step(sim: Sim) -> None:
    """d1's heartbeat stops while slow_charge#1 runs (10 s); at +5 s d2 takes the run over.

    The lease lapses 5 s after its last renewal; d2 claims the message, starts
    slow_charge#1 again (attempt 2) and runs its body while d1's still runs.
    d1's body ends at +10 s and its outcome is refused by the fence
    (InBandSuperseded, "step:slow_charge d1"); d2's ends at +15 s and is the one
    recorded. Both executions end; the run completes. Log: step_started
    slow_charge#1 twice, step_completed once, charge#1, run_completed.
    """
    run_id = await _mid_step(sim)
    expect(sim.stall_heartbeat(run_id, seconds=60.0) == 1, "no heartbeat stalled")
    await _taken_over(sim, run_id)


@scenario("stalled-heartbeat-resumes-after-takeover")
async def stalled_heartbeat_resumes_after_takeover(sim: Sim) -> None:
    """d1's heartbeat stalls for 7 s mid-step; d2 takes over at +5 s; d1's resumes at +7 s.

    The resumed heartbeat's lease keeper tries to renew and learns the lease is
    lost (LeaseLost: d2 holds it), and stops renewing. d1's step ends at +10 s:
    its outcome is refused (InBandSuperseded) and its settle too (LeaseLost),
    which it ignores. d2 completes the run. Log: as lease-lapses-mid-step.
    """
    run_id = await _mid_step(sim)
    expect(sim.stall_heartbeat(run_id, seconds=7.0) == 1, "no heartbeat stalled")
    await _taken_over(sim, run_id)
    lost = "+7.000000s d1 lost its lease of msg_000001 (d2 holds it)"
    expect(lost in sim.trace_text, "the resumed heartbeat did not learn the lease was lost")


@scenario("stalled-heartbeat-resumes-in-time")
async def stalled_heartbeat_resumes_in_time(sim: Sim) -> None:
    """Control: d1's heartbeat stalls for 4 s mid-step, less than the lease (5 s).

    The keeper renews the lease when the heartbeat resumes, before it lapses:
    nobody takes the run over, slow_charge#1 runs once. Log: the clean log.
    """
    run_id = await _mid_step(sim)
    expect(sim.stall_heartbeat(run_id, seconds=4.0) == 1, "no heartbeat stalled")
    await sim.run_until_idle()
    await expect_log(
        sim,
        run_id,
        [
            "run_created",
            "run_started",
            "step_created slow_charge#1",
            "step_started slow_charge#1",
            "step_completed slow_charge#1",
            "step_created charge#1",
            "step_started charge#1",
            "step_completed charge#1",
            "run_completed",
        ],
    )
    expect(sim.takeovers == [], f"takeovers: {sim.takeovers}")
    expect(wf.CALLS == ["slow_charge 1 begins", "slow_charge 1 ends", "charge 2"], str(wf.CALLS))
    await expect_outcome(sim, run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run_id)


@scenario("renewal-fails-mid-step")
async def renewal_fails_mid_step(sim: Sim) -> None:
    """The World's lease renewer fails (a WorldError) for 8 s while slow_charge#1 runs.

    d1's lease keeper retries at every beat, in vain; the lease lapses at +5 s
    and d2 takes the run over. At +8 s the renewer works again, and the keeper
    learns the lease is lost (LeaseLost). d1's outcome and settle are refused;
    d2 completes the run. Log: as lease-lapses-mid-step.
    """
    run_id = await _mid_step(sim)
    expect(sim.fail_renewals(run_id, seconds=8.0) == 1, "no renewal failed")
    await _taken_over(sim, run_id)
    lost = "+8.000000s d1 lost its lease of msg_000001 (d2 holds it)"
    expect(lost in sim.trace_text, "the keeper did not learn the lease was lost")


@scenario("renewal-reports-lease-lost")
async def renewal_reports_lease_lost(sim: Sim) -> None:
    """d1's first renewal mid-step reports its lease lost (LeaseLost), though nobody took it.

    The keeper gives the lease up at +1 s and renews it no more; it lapses at
    +5 s (its claim plus 5 s) and d2 takes the run over. d1's outcome and
    settle are refused; d2 completes the run. Log: as lease-lapses-mid-step.
    """
    run_id = await _mid_step(sim)
    expect(sim.fail_renewals(run_id, lost=True) == 1, "no renewal failed")
    await _taken_over(sim, run_id)
    lost = "+1.000000s d1 lost its lease of msg_000001: no longer renewed"
    expect(lost in sim.trace_text, "the keeper did not give the lease up")
