"""Hook payloads landing at every point of a step's life, peeks, probes and duplicates."""

from __future__ import annotations

from durasim.sim import Sim

from . import _workflows as wf
from ._check import expect, expect_log, expect_order, expect_outcome, finish, short_log
from ._registry import scenario

_START = ["run_created", "run_started", "hook_created hook#1"]


@scenario("hook-at-step-started")
async def hook_at_step_started(sim: Sim) -> None:
    """hook_received commits inside the step_started commit, before the orchestrator resumes.

    The step's outcome then cannot run ahead (the log moved): it is written
    alone, after the payload. Log: hook_created, step_created/started charge#1,
    hook_received (out of band), step_completed charge#1, run_completed.
    Value: ["charged 1", "inside"].
    """
    run = await sim.start(wf.approval, "doc-1")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("step_started", step="charge")
    await sim.deliver_hook("doc-1", "inside")
    orchestrator.release()
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            *_START,
            "step_created charge#1",
            "step_started charge#1",
            "hook_received hook#1",
            "step_completed charge#1",
            "run_completed",
        ],
    )
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "inside"])
    await finish(sim, run.run_id)


@scenario("hook-at-step-completed")
async def hook_at_step_completed(sim: Sim) -> None:
    """The same workflow, the payload lands inside the step_completed commit.

    The run had run ahead past the step (its end needs the payload, so it
    suspends); the payload's wake-up finishes it. Log: charge#1 created,
    started, completed, hook_received, run_completed. Same value as
    hook-at-step-started: a different log, the same output.
    """
    run = await sim.start(wf.approval, "doc-1b")
    body = sim.step("charge")
    await body.run_to_event_committed("step_completed", step="charge")
    await sim.deliver_hook("doc-1b", "after")
    body.release()
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            *_START,
            "step_created charge#1",
            "step_started charge#1",
            "step_completed charge#1",
            "hook_received hook#1",
            "run_completed",
        ],
    )
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "after"])
    await finish(sim, run.run_id)


@scenario("hook-at-hook-created")
async def hook_at_hook_created(sim: Sim) -> None:
    """The earliest payload: delivered inside the hook_created commit, before the step exists.

    Log: hook_created, hook_received, step_created/started/completed charge#1,
    run_completed: the payload waits, buffered, until the workflow awaits it.
    """
    run = await sim.start(wf.approval, "doc-hc")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("hook_created")
    await sim.deliver_hook("doc-hc", "earliest")
    orchestrator.release()
    await sim.run_until_idle()
    await expect_log(
        sim,
        run.run_id,
        [
            *_START,
            "hook_received hook#1",
            "step_created charge#1",
            "step_started charge#1",
            "step_completed charge#1",
            "run_completed",
        ],
    )
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "earliest"])
    await finish(sim, run.run_id)


@scenario("hook-never-arrives")
async def hook_never_arrives(sim: Sim) -> None:
    """Nobody resumes the hook: the simulation stalls and the report names the token.

    Log: run_created, run_started, hook_created, step charge#1 created, started,
    completed; the run stays running; the stall report says ``token 'doc-4'``.
    """
    run = await sim.start(wf.approval, "doc-4")
    idle = await sim.run_until_idle()
    expect(idle.status == "stalled", f"the simulation ended {idle.status}, expected stalled")
    expect(
        idle.stall is not None and "token 'doc-4' never resumed" in str(idle.stall),
        f"the stall report does not name the token: {idle.stall}",
    )
    await expect_log(
        sim,
        run.run_id,
        [*_START, "step_created charge#1", "step_started charge#1", "step_completed charge#1"],
    )
    await expect_outcome(sim, run.run_id, "running")
    await finish(sim)


@scenario("peek-hook-before-branch")
async def peek_hook_before_branch(sim: Sim) -> None:
    """A "not yet?" peek after a step: the payload lands before the step's outcome.

    The step body is held before its step_completed commit while the payload
    commits, so in log order the payload comes first and the peek sees it.
    Log: ..., step_started charge#1, hook_received, step_completed charge#1,
    branch#1 ("early"), run_completed.
    """
    run = await sim.start(wf.peek, "doc-8")
    body = sim.step("charge")
    await body.run_to_event_produced("step_completed", step="charge")
    await sim.deliver_hook("doc-8", "p")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_started charge#1",
        "hook_received hook#1",
        "step_completed charge#1",
        "step_created branch#1",
    )
    await expect_outcome(sim, run.run_id, "completed", ["early", "p"])
    await finish(sim, run.run_id)


@scenario("peek-hook-after-branch")
async def peek_hook_after_branch(sim: Sim) -> None:
    """Control of peek-hook-before-branch: the payload lands after the branch step commits.

    Log: step_completed charge#1, branch#1 created/started ("late"),
    hook_received, ..., run_completed; the peek said "late".
    """
    run = await sim.start(wf.peek, "doc-9")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("step_started", step="branch")
    await sim.deliver_hook("doc-9", "p")
    orchestrator.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "step_completed charge#1", "step_started branch#1", "hook_received hook#1")
    await expect_outcome(sim, run.run_id, "completed", ["late", "p"])
    await finish(sim, run.run_id)


@scenario("peek-hook-at-registration")
async def peek_hook_at_registration(sim: Sim) -> None:
    """The earliest payload for the peek: inside the hook_created commit; the peek sees it.

    Log: hook_created, hook_received, charge#1, branch#1 ("early"), run_completed.
    """
    run = await sim.start(wf.peek, "doc-10")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("hook_created")
    await sim.deliver_hook("doc-10", "p")
    orchestrator.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "hook_created hook#1", "hook_received hook#1", "step_created charge#1")
    await expect_outcome(sim, run.run_id, "completed", ["early", "p"])
    await finish(sim, run.run_id)


@scenario("race-hook-before-probe")
async def race_hook_before_probe(sim: Sim) -> None:
    """The payload races a probe step; the probe's body is held before its outcome commits.

    Log: probe#1 started, hook_received, step_completed probe#1, run_completed;
    value "hook first, then p".
    """
    run = await sim.start(wf.race, "doc-11")
    body = sim.step("probe")
    await body.run_to_event_produced("step_completed", step="probe")
    await sim.deliver_hook("doc-11", "p")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "step_started probe#1", "hook_received hook#1", "step_completed probe#1")
    await expect_outcome(sim, run.run_id, "completed", "hook first, then p")
    await finish(sim, run.run_id)


@scenario("race-hook-after-probe")
async def race_hook_after_probe(sim: Sim) -> None:
    """Mirror of race-hook-before-probe: the payload lands after the probe's outcome.

    Log: step_completed probe#1, hook_received, run_completed; value
    "probe first, then p".
    """
    run = await sim.start(wf.race, "doc-12")
    body = sim.step("probe")
    await body.run_to_event_committed("step_completed", step="probe")
    await sim.deliver_hook("doc-12", "p")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "step_completed probe#1", "hook_received hook#1", "run_completed")
    await expect_outcome(sim, run.run_id, "completed", "probe first, then p")
    await finish(sim, run.run_id)


@scenario("race-duplicate-delivery")
async def race_duplicate_delivery(sim: Sim) -> None:
    """The same payload is sent twice (no resume id), straddling the probe's outcome.

    Both land (two hook_received); the race takes the first, the second has no
    consumer and changes nothing. Log: hook_received, step_completed probe#1,
    hook_received, run_completed; value "hook first, then p".
    """
    run = await sim.start(wf.race, "doc-13")
    body = sim.step("probe")
    await body.run_to_event_produced("step_completed", step="probe")
    await sim.deliver_hook("doc-13", "p")
    await body.run_to_event_committed("step_completed", step="probe")
    await sim.deliver_hook("doc-13", "p")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "hook_received hook#1",
        "step_completed probe#1",
        "hook_received hook#1",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", "hook first, then p")
    await finish(sim, run.run_id)


@scenario("duplicate-hook-resume", requires=["hook_resume_dedup"])
async def duplicate_hook_resume(sim: Sim) -> None:
    """One payload resumed twice with one resume_id (a retried HTTP request) lands once.

    The second resume returns the recorded event; the workflow's second await
    takes the next, distinct payload. Log: hook_created, hook_received (one, for
    "a"), charge#1, hook_received ("b"), run_completed; value ["a", "charged 1", "b"].
    """
    run = await sim.start(wf.double_payload, "dup")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("hook_created")
    first = await sim.deliver_hook("dup", "a", resume_id="req-1")
    again = await sim.deliver_hook("dup", "a", resume_id="req-1")
    expect(first.seq == again.seq, f"the duplicate resume landed at #{again.seq}, not #{first.seq}")
    orchestrator.release()
    await sim.run_until_idle()
    await sim.deliver_hook("dup", "b", resume_id="req-2")
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(log.count("hook_received hook#1") == 2, f"payloads recorded: {log}")
    await expect_outcome(sim, run.run_id, "completed", ["a", "charged 1", "b"])
    await finish(sim, run.run_id)


@scenario("token-conflict-across-runs")
async def token_conflict_across_runs(sim: Sim) -> None:
    """Two runs ask for one token; the second is journaled hook_conflict, not hook_created.

    Run A: hook_created, hook_received, run_completed (value "mine"). Run B:
    hook_conflict, run_completed, value "conflict with <A>". After A ends the
    token is free again: a third run holds it (hook_created).
    """
    a = await sim.start(wf.holder, "shared")
    await sim.run_until_idle()
    b = await sim.start(wf.holder, "shared")
    await sim.run_until_idle()
    await sim.deliver_hook("shared", "mine")
    await sim.run_until_idle()
    await expect_log(sim, a.run_id, [*_START, "hook_received hook#1", "run_completed"])
    log_b = await short_log(sim, b.run_id)
    expect(
        [line.split(" ")[0] for line in log_b]
        == ["run_created", "run_started", "hook_conflict", "run_completed"],
        f"run B's log: {log_b}",
    )
    await expect_outcome(sim, a.run_id, "completed", "mine")
    await expect_outcome(sim, b.run_id, "completed", f"conflict with {a.run_id}")
    c = await sim.start(wf.holder, "shared")
    await sim.run_until_idle()
    await sim.deliver_hook("shared", "third")
    await sim.run_until_idle()
    await expect_outcome(sim, c.run_id, "completed", "third")
    await finish(sim, a.run_id, b.run_id, c.run_id)


@scenario("attr-hook-before-step")
async def attr_hook_before_step(sim: Sim) -> None:
    """A payload makes the workflow cancel its own token (attr_set) while a step runs.

    The step body is held before its outcome commits; the payload lands first,
    so the workflow decides "before" (the attr_set is journaled with the
    workflow's next write). Log: step_started charge#1, hook_received,
    step_completed charge#1, attr_set, step_created branch#1, run_completed;
    value ["charged 1", "before", True].
    """
    run = await sim.start(wf.attribute, "doc-14")
    body = sim.step("charge")
    await body.run_to_event_produced("step_completed", step="charge")
    await sim.deliver_hook("doc-14", "stop")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_started charge#1",
        "hook_received hook#1",
        "step_completed charge#1",
        "step_created branch#1",
        "run_completed",
    )
    expect(sum(line.startswith("attr_set") for line in log) == 1, f"attr_set not once: {log}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "before", True])
    await finish(sim, run.run_id)


@scenario("attr-hook-after-step")
async def attr_hook_after_step(sim: Sim) -> None:
    """Mirror of attr-hook-before-step: the payload lands after the step's outcome.

    Log: step_completed charge#1, hook_received, attr_set, branch#1,
    run_completed; value ["charged 1", "after", True].
    """
    run = await sim.start(wf.attribute, "doc-15")
    body = sim.step("charge")
    await body.run_to_event_committed("step_completed", step="charge")
    await sim.deliver_hook("doc-15", "stop")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_completed charge#1",
        "hook_received hook#1",
        "step_created branch#1",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "after", True])
    await finish(sim, run.run_id)
