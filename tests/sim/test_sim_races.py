"""Scripted races from the original's scenario book, each asserting the log it must produce."""

from __future__ import annotations

from typing import Any

import pytest
import simflows

from durasim.sim import Match, Sim, simulate


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    simflows.CALLS.clear()


def _types(log: list[tuple[str, str | None]]) -> list[str]:
    return [t for t, _ in log]


def test_duplicate_delivery_of_a_step() -> None:
    """Two orchestrators run the same message; the fence lets exactly one write on."""

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.two_steps)
        first = sim.orchestrator()
        await first.run_to_event_committed("step_started", step="charge")
        sim.duplicate_delivery(run.run_id)
        first.release()
        await sim.run_until_idle()
        snapshot = await sim.snapshot()
        return (await sim.outcome(run.run_id)).value, snapshot

    sim = Sim()
    value, snapshot = sim.run_sync(script)
    assert value == ["charged 1", "charged 2"]
    log = _types(snapshot.log("wrun_000001"))
    assert log.count("run_completed") == 1
    assert log.count("step_completed") == 2  # each step's outcome is recorded once
    assert any(r.error == "InBandSuperseded" for r in snapshot.rejections)
    assert "d2 duplicate delivery msg_000001" in sim.trace_text


def test_lease_expiry_with_two_orchestrators_the_fence_refuses_the_stale_one() -> None:
    """The first orchestrator stalls with its step produced; a successor finishes the run."""

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.two_steps)
        stalled = sim.orchestrator()
        await stalled.run_to_event_produced("step_created", step="charge")
        assert sim.expire_lease(run.run_id) == 1
        await sim.until(Match(event_type="run_completed"))
        stalled.release()
        await sim.run_until_idle()
        return await sim.snapshot()

    sim = Sim()
    snapshot = sim.run_sync(script)
    log = _types(snapshot.log("wrun_000001"))
    assert log == [
        "run_created",
        "run_started",
        "step_created",
        "step_started",
        "step_completed",
        "step_created",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    refused = [r for r in snapshot.rejections if r.error == "InBandSuperseded"]
    assert [r.writer for r in refused] == ["orch d1"]
    assert "d1 ended: superseded" in sim.trace_text
    assert simflows.CALLS == ["charge 1", "charge 2"]  # the stale delivery ran nothing


def test_cancel_mid_step() -> None:
    """The run is cancelled inside the step_started commit; the body's outcome still lands."""

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.two_steps)
        orchestrator = sim.orchestrator()
        await orchestrator.run_to_event_committed("step_started", step="charge")
        await sim.cancel_run(run.run_id, "operator")
        orchestrator.release()
        await sim.run_until_idle()
        return (await sim.snapshot()).log(run.run_id)

    log = _types(simulate(script))
    assert log == [
        "run_created",
        "run_started",
        "step_created",
        "step_started",
        "run_cancelled",
        "step_completed",  # a running step may report its outcome after the run ended
    ]


@pytest.mark.parametrize(("phase", "expected"), [("before", "hook early"), ("after", "timeout")])
def test_hook_versus_timeout_both_orders(phase: str, expected: str) -> None:
    """The wake-up's wait_completed is held: a hook landing before its commit wins, after loses."""

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.hook_or_timeout, "race", 60.0)
        waker = sim.orchestrator()
        match = Match(phase=phase, event_type="wait_completed", failed=None)
        if phase == "after":
            match = Match(phase=phase, event_type="wait_completed", failed=False)
        await waker.run_to(match)
        await sim.deliver_hook("race", "early")
        waker.release()
        await sim.run_until_idle()
        return (await sim.outcome(run.run_id)).value, (await sim.snapshot()).log(run.run_id)

    value, log = simulate(script)
    assert value == f"{expected}"
    hook_at = _types(log).index("hook_received")
    wait_at = _types(log).index("wait_completed")
    assert (hook_at < wait_at) == (phase == "before")


def test_a_hook_lands_inside_the_step_started_commit() -> None:
    """hook_received commits while the orchestrator is held after step_started (doc-1)."""

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.approval, "doc1")
        orchestrator = sim.orchestrator()
        await orchestrator.run_to_event_committed("step_started", step="charge")
        await sim.deliver_hook("doc1", "inside")
        orchestrator.release()
        await sim.run_until_idle()
        return (await sim.outcome(run.run_id)).value, (await sim.snapshot()).log(run.run_id)

    value, log = simulate(script)
    assert value == ["charged 1", "inside"]
    assert _types(log)[4:6] == ["step_started", "hook_received"]
