"""Cancellation (of runs, by workflow-made tokens), child runs, and streams under retries."""

from __future__ import annotations

from durasim.runtime import read_stream
from durasim.sim import Match, Sim

from . import _workflows as wf
from ._check import expect, expect_log, expect_order, expect_outcome, finish, short_log
from ._registry import scenario


@scenario("cancel-mid-step")
async def cancel_mid_step(sim: Sim) -> None:
    """The run is cancelled inside the step_started commit of charge#1.

    The running step's outcome is still the only write accepted after the end;
    charge#2 never starts. Log: step_created/started charge#1, run_cancelled,
    step_completed charge#1.
    """
    run = await sim.start(wf.two_steps)
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("step_started", step="charge")
    await sim.cancel_run(run.run_id, "operator")
    orchestrator.release()
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created charge#1",
            "step_started charge#1",
            "run_cancelled",
            "step_completed charge#1",
        ],
    )
    await expect_outcome(sim, run.run_id, "cancelled", error="operator")
    await finish(sim, run.run_id)


@scenario("cancel-observed-by-step")
async def cancel_observed_by_step(sim: Sim) -> None:
    """A running step waits for its run's cancel; the cancel lands while it runs.

    The step sees the reason, its outcome is recorded after run_cancelled, and
    the step after it never exists. Log: step_started observe_cancel#1,
    run_cancelled, step_completed observe_cancel#1; no charge.
    """
    run = await sim.start(wf.cancel_observed)
    await sim.until(Match(event_type="step_started", step="observe_cancel"))
    await sim.cancel_run(run.run_id, "stop now")
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log, "step_started observe_cancel#1", "run_cancelled", "step_completed observe_cancel#1"
    )
    expect(not any("charge" in line for line in log), f"a step ran after the cancel: {log}")
    expect("observed stop now" in wf.CALLS, f"the step saw: {wf.CALLS}")
    await expect_outcome(sim, run.run_id, "cancelled", error="stop now")
    await finish(sim, run.run_id)


@scenario("workflow-token-cancel")
async def workflow_token_cancel(sim: Sim) -> None:
    """A workflow-made cancellation token, cancelled after a step, reaches a running step.

    The cancel is journaled (attr_set cancel#1) and replays. Log: watch_token#1
    and charge#1 started, charge#1 completed, attr_set cancel#1,
    step_completed watch_token#1, run_completed; value ["token enough", True].
    """
    run = await sim.start(wf.token_cancel)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_completed charge#1",
        "attr_set cancel#1",
        "step_completed watch_token#1",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", ["token enough", True])
    await finish(sim, run.run_id)


async def _runs(sim: Sim) -> list[str]:
    return [r.run_id for r in (await sim.snapshot()).runs]


@scenario("child-runs")
async def child_runs(sim: Sim) -> None:
    """A parent starts two children and awaits them in order.

    The first child ends while the parent waits on its hook (hook_received);
    the second has ended by the time the parent asks, so the child_outcome
    step answers at once. Parent log: start_child#1, start_child#2,
    hook_created hook#1, child_outcome#1, hook_received hook#1, hook_disposed,
    hook_created hook#2, child_outcome#2, run_completed; children <parent>-c1
    and -c2 complete; value [1, 4].
    """
    run = await sim.start(wf.parent, 1)
    await sim.run_until_idle()
    runs = await _runs(sim)
    children = [r for r in runs if r != run.run_id]
    expect(children == [f"{run.run_id}-c1", f"{run.run_id}-c2"], f"runs: {runs}")
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_completed start_child#1",
        "step_completed start_child#2",
        "hook_created hook#1",
        "step_completed child_outcome#1",
        "hook_received hook#1",
        "hook_created hook#2",
        "step_completed child_outcome#2",
        "run_completed",
    )
    for number, child_id in enumerate(children, 1):
        await expect_outcome(sim, child_id, "completed", number * number)
    await expect_outcome(sim, run.run_id, "completed", [1, 4])
    await finish(sim, run.run_id, *children)


@scenario("parent-cancel-cascade")
async def parent_cancel_cascade(sim: Sim) -> None:
    """The parent is cancelled while its child sleeps; the child is cancelled too.

    Child log: wait_created, run_cancelled (reason "parent run <id> cancelled:
    ..."); parent log ends with run_cancelled; no orphan left running.
    """
    run = await sim.start(wf.parent_of_sleeper, 3600.0)
    await sim.until(Match(event_type="wait_created", run_id=f"{run.run_id}-c1"))
    await sim.cancel_run(run.run_id, "shutting down")
    idle = await sim.run_until_idle()
    expect(idle.status == "idle", f"left running: {idle.stall}")
    child_id = f"{run.run_id}-c1"
    await expect_outcome(sim, run.run_id, "cancelled", error="shutting down")
    await expect_outcome(
        sim, child_id, "cancelled", error=f"parent run {run.run_id} cancelled: shutting down"
    )
    child_log = await short_log(sim, child_id)
    expect(child_log[-1] == "run_cancelled", f"child log: {child_log}")
    await finish(sim, run.run_id, child_id)


@scenario("child-cancelled-alone")
async def child_cancelled_alone(sim: Sim) -> None:
    """Only the child is cancelled; the parent's await raises RunCancelledError and it handles it.

    Child log ends run_cancelled; parent: hook_received (the child's outcome),
    run_completed with "child cancelled".
    """
    run = await sim.start(wf.parent_of_sleeper, 3600.0)
    child_id = f"{run.run_id}-c1"
    await sim.until(Match(event_type="wait_created", run_id=child_id))
    await sim.cancel_run(child_id, "not needed")
    await sim.run_until_idle()
    await expect_outcome(sim, child_id, "cancelled", error="not needed")
    await expect_outcome(sim, run.run_id, "completed", "child cancelled")
    await finish(sim, run.run_id, child_id)


@scenario("stream-written-by-retried-step", requires=["streams"])
async def stream_written_by_retried_step(sim: Sim) -> None:
    """A step writes three chunks, fails (RetryableError) and is retried: it writes them again.

    Writes are idempotent by position: readers see each chunk once. Log:
    step_started emit#1, step_retrying, step_started, step_completed,
    run_completed; stream "out": chunk 0, chunk 1, chunk 2.
    """
    run = await sim.start(wf.streamer, 3)
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created emit#1",
            "step_started emit#1",
            "step_retrying emit#1",
            "step_started emit#1",
            "step_completed emit#1",
            "run_completed",
        ],
    )
    page = await sim.store.streams.read(run.run_id, "out", limit=100)
    chunks = [chunk async for chunk in read_stream(sim.store, run.run_id, "out")]
    expect(chunks == ["chunk 0", "chunk 1", "chunk 2"], f"readers see {chunks}")
    expect(len(page.chunks) == 3, f"the stream stores {len(page.chunks)} chunks")
    expect(wf.CALLS == ["emit attempt 1", "emit attempt 2"], f"bodies: {wf.CALLS}")
    await expect_outcome(sim, run.run_id, "completed", 3)
    await finish(sim, run.run_id)
