"""explore() reaches a lease takeover during a running step, and judges it clean.

The simulator renews every delivery's lease with the runtime's own lease keeper;
the ``stall_heartbeat`` and ``fail_renewal`` faults stop or break that renewal
while a slow step runs, so its lease lapses and another delivery claims the
message and runs the step again.  The invariants, the replay oracle and the
determinism check must find the outcome correct: one recorded result, the run
complete.
"""

from __future__ import annotations

import exploreflows as flows
import pytest

from durasim.scenarios import LEASE_TAKEOVER, explore, reproduce

OVERLAP = "slow_work: two executions overlap"


@pytest.fixture(autouse=True)
def _reset() -> None:
    flows.reset()


def test_an_exploration_with_faults_takes_a_lease_over_mid_step() -> None:
    result = explore(
        flows.slow,
        10.0,
        faults=("crash", "stall_heartbeat", "fail_renewal"),
        max_examples=30,
        seed=0,
        setup=flows.reset,
        require=[LEASE_TAKEOVER, OVERLAP, "fault: stall_heartbeat", "fault: fail_renewal"],
    )
    assert result.ok, result.render()
    assert result.stats.verdicts == {"ok": 30}
    assert result.stats.statuses == {"completed": 30}
    # The first example in which two executions of the slow step overlapped:
    # replayed from its seed, its trace shows the takeover, and it is judged clean.
    report = reproduce(result.stats.witnesses[OVERLAP])
    assert report.ok, report.render_verdict()
    assert set(report.faults) & {"stall_heartbeat", "fail_renewal"}
    lines = report.trace.splitlines()
    taken = [n for n, line in enumerate(lines) if " takes over msg_" in line]
    assert taken, report.trace
    old = lines[taken[0]].split(" from ")[1].split(",")[0]  # "d1"
    after = lines[taken[0] :]
    # The old holder was inside the slow step and finished it after the takeover:
    # its outcome was refused by the fence, and one outcome is recorded.
    assert any(f"step:slow_work {old} " in line and "InBandSuperseded" in line for line in after)
    completed = [line for line in lines if "step_completed" in line and "slow_work#1" in line]
    assert len(completed) == 1, completed
    assert report.outcome is not None
    assert report.outcome.value == ["worked", 3]


@pytest.mark.slow
def test_a_long_exploration_of_a_slow_step_under_every_fault() -> None:
    result = explore(
        flows.slow,
        10.0,
        max_examples=1000,
        seed=5,
        setup=flows.reset,
        require=[LEASE_TAKEOVER, OVERLAP],
    )
    assert result.ok, result.render()
