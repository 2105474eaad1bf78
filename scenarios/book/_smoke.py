"""The smallest logs: no step, one step, retries, fan-out, run-ahead, long sleeps."""

from __future__ import annotations

import itertools

from durasim.sim import Sim

from . import _workflows as wf
from ._check import expect, expect_log, expect_outcome, finish, short_log
from ._registry import scenario


@scenario("smoke-no-steps")
async def smoke_no_steps(sim: Sim) -> None:
    """A workflow with no step: the smallest log, and the replay oracle on it.

    Log: run_created, run_started, run_completed.
    """
    run = await sim.start(wf.nothing)
    await sim.run_until_idle()
    await expect_log(sim, run.run_id, ["run_created", "run_started", "run_completed"])
    await expect_outcome(sim, run.run_id, "completed", "nothing")
    await finish(sim, run.run_id)


@scenario("smoke-one-step")
async def smoke_one_step(sim: Sim) -> None:
    """One step: born running in one batch, its outcome run ahead into the run's end.

    Log: run_created, run_started, step_created charge#1, step_started charge#1,
    step_completed charge#1, run_completed; the body ran once.
    """
    run = await sim.start(wf.one_step)
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created charge#1",
            "step_started charge#1",
            "step_completed charge#1",
            "run_completed",
        ],
    )
    expect(wf.CALLS == ["charge 1"], f"the body ran {wf.CALLS}")
    await expect_outcome(sim, run.run_id, "completed", "charged 1")
    await finish(sim, run.run_id)


@scenario("step-retries-twice")
async def step_retries_twice(sim: Sim) -> None:
    """A step raises RetryableError(retry_after=5) twice, then succeeds, in virtual time.

    Log: step_created/started flaky#1, step_retrying, step_started (attempt 2),
    step_retrying, step_started (attempt 3), step_completed, run_completed; the
    retries are 5 virtual seconds apart.
    """
    run = await sim.start(wf.retried)
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created flaky#1",
            "step_started flaky#1",
            "step_retrying flaky#1",
            "step_started flaky#1",
            "step_retrying flaky#1",
            "step_started flaky#1",
            "step_completed flaky#1",
            "run_completed",
        ],
    )
    snapshot = await sim.snapshot()
    starts = [e for e in snapshot.events[run.run_id] if e.type.value == "step_started"]
    gaps = [(b.created_at - a.created_at).total_seconds() for a, b in itertools.pairwise(starts)]
    expect(gaps == [5.0, 5.0], f"retries were {gaps} s apart, expected 5 s each")
    expect([e.data.get("attempt") for e in starts] == [1, 2, 3], "attempts are not 1, 2, 3")
    await expect_outcome(sim, run.run_id, "completed", "twice ok")
    await finish(sim, run.run_id)


@scenario("parallel-steps")
async def parallel_steps(sim: Sim) -> None:
    """Three steps gathered at once: created together, outcomes in completion order.

    Log: the three step_created/step_started pairs first (tally#1..#3), then
    their three step_completed, then run_completed; the value keeps call order.
    """
    run = await sim.start(wf.fan_out, 3)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    created = [line for line in log if line.startswith("step_created")]
    completed = [line for line in log if line.startswith("step_completed")]
    expect(
        created == ["step_created tally#1", "step_created tally#2", "step_created tally#3"],
        f"steps created: {created}",
    )
    expect(len(completed) == 3, f"outcomes: {completed}")
    expect(
        max(log.index(c) for c in created) < min(log.index(c) for c in completed),
        f"an outcome landed before every step was created: {log}",
    )
    expect(log[-1] == "run_completed", f"the log ends with {log[-1]}")
    await expect_outcome(sim, run.run_id, "completed", [0, 1, 4])
    await finish(sim, run.run_id)


@scenario("run-ahead-loop")
async def run_ahead_loop(sim: Sim) -> None:
    """Five steps in a loop, one delivery: each outcome commits with the next step.

    Log: for each tick#n: step_created, step_started, step_completed; then
    run_completed; one delivery did it all.
    """
    run = await sim.start(wf.run_ahead_loop, 5)
    idle = await sim.run_until_idle()
    expected = ["run_created", "run_started"]
    for n in range(1, 6):
        expected += [f"step_created tick#{n}", f"step_started tick#{n}", f"step_completed tick#{n}"]
    await expect_log(sim, run.run_id, [*expected, "run_completed"])
    expect(idle.deliveries == 1, f"{idle.deliveries} deliveries, expected 1")
    await expect_outcome(sim, run.run_id, "completed", 5)
    await finish(sim, run.run_id)


@scenario("long-sleep")
async def long_sleep(sim: Sim) -> None:
    """A 30-day sleep between two steps costs no wall time; the wait fires on time.

    Log: charge#1, wait_created, wait_completed (30 days later, at resume_at),
    charge#2, run_completed.
    """
    run = await sim.start(wf.long_sleep, 30)
    await sim.run_until_idle()
    snapshot = await sim.snapshot()
    log = await short_log(sim, run.run_id)
    expect(
        [line.split(" ")[0] for line in log[5:8]]
        == ["wait_created", "wait_completed", "step_created"],
        f"the sleep is not between the steps: {log}",
    )
    created = next(e for e in snapshot.events[run.run_id] if e.type.value == "wait_created")
    fired = next(e for e in snapshot.events[run.run_id] if e.type.value == "wait_completed")
    days = (fired.created_at - created.created_at).total_seconds() / 86400
    expect(days == 30, f"the wait fired after {days} days, expected 30")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("fatal-step-caught")
async def fatal_step_caught(sim: Sim) -> None:
    """A step raises FatalError (max_retries=0); the workflow catches it and completes.

    Log: step_created/started _boom#1, step_failed _boom#1, run_completed.
    """
    run = await sim.start(wf.fatal)
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created _boom#1",
            "step_started _boom#1",
            "step_failed _boom#1",
            "run_completed",
        ],
    )
    await expect_outcome(sim, run.run_id, "completed", "caught boom")
    await finish(sim, run.run_id)
