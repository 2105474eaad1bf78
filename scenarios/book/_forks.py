"""Hook against timer: every order, branches of different sizes, stale reads, sleeps."""

from __future__ import annotations

from durasim.sim import Match, Sim

from . import _workflows as wf
from ._check import events, expect, expect_order, expect_outcome, finish, short_log
from ._registry import scenario

_HOUR = 3600.0


async def _suspended_on_timer(sim: Sim, workflow: object, token: str) -> str:
    """Start ``workflow(token, 1 h)`` and let its first delivery write wait_created."""
    run = await sim.start(workflow, token, _HOUR)  # type: ignore[arg-type]
    await sim.until(Match(event_type="wait_created"))
    return run.run_id


@scenario("deadline-hook-wins")
async def deadline_hook_wins(sim: Sim) -> None:
    """The payload is delivered while wait_created is held: the hook beats the deadline.

    Log: hook_created, wait_created, hook_received, then the run's end (the
    timer is never completed); value "approved yes".
    """
    run = await sim.start(wf.deadline, "doc-2", _HOUR)
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("wait_created")
    await sim.deliver_hook("doc-2", "yes")
    orchestrator.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "hook_created hook#1", "hook_received hook#1", "run_completed")
    expect(not any(line.startswith("wait_completed") for line in log), f"the timer fired: {log}")
    await expect_outcome(sim, run.run_id, "completed", "approved yes")
    await finish(sim, run.run_id)


@scenario("deadline-expires")
async def deadline_expires(sim: Sim) -> None:
    """No payload: the one-hour timer fires in virtual time and the run expires.

    Log: hook_created, wait_created, wait_completed (one hour later), run_completed;
    value "expired".
    """
    run = await sim.start(wf.deadline, "doc-3", _HOUR)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(
        [line.split(" ")[0] for line in log]
        == [
            "run_created",
            "run_started",
            "hook_created",
            "wait_created",
            "wait_completed",
            "run_completed",
        ],
        f"log: {log}",
    )
    log_events = await events(sim, run.run_id)
    elapsed = (log_events[4].created_at - log_events[3].created_at).total_seconds()
    expect(elapsed == _HOUR, f"the timer fired after {elapsed} s")
    await expect_outcome(sim, run.run_id, "completed", "expired")
    await finish(sim, run.run_id)


async def _fork_with_hook_at(sim: Sim, workflow: object, token: str, phase: str) -> str:
    """Hold the wake-up's wait_completed at ``phase``; deliver the payload there."""
    run_id = await _suspended_on_timer(sim, workflow, token)
    waker = sim.orchestrator()
    failed = False if phase == "after" else None
    await waker.run_to(Match(phase=phase, event_type="wait_completed", failed=failed))
    await sim.deliver_hook(token, "late" if phase == "after" else "early")
    waker.release()
    await sim.run_until_idle()
    return run_id


@scenario("fork-hook-before-timeout")
async def fork_hook_before_timeout(sim: Sim) -> None:
    """The payload commits just before the wake-up's wait_completed: the hook branch.

    Log: wait_created, hook_received, wait_completed, branch#1 ("hook early"),
    run_completed.
    """
    run_id = await _fork_with_hook_at(sim, wf.fork, "doc-20", "before")
    log = await short_log(sim, run_id)
    expect_order(log, "wait_created sleep#1", "hook_received hook#1", "step_created branch#1")
    await expect_outcome(sim, run_id, "completed", "hook early")
    await finish(sim, run_id)


@scenario("fork-hook-after-timeout")
async def fork_hook_after_timeout(sim: Sim) -> None:
    """The payload commits right after the wake-up's commit: timeout branch.

    The wake-up runs ahead: wait_completed commits in one batch with what the
    timeout branch does next, so no payload can land between the timer and the
    branch it decides. The branch step's own commit then meets the payload
    (StaleView) and is written alone. Log: wait_completed, branch#1 ("timeout"),
    hook_received, run_completed.
    """
    run_id = await _fork_with_hook_at(sim, wf.fork, "doc-17", "after")
    log = await short_log(sim, run_id)
    expect_order(log, "wait_completed sleep#1", "step_created branch#1", "hook_received hook#1")
    await expect_outcome(sim, run_id, "completed", "timeout")
    await finish(sim, run_id)


@scenario("fork-hook-wins")
async def fork_hook_wins(sim: Sim) -> None:
    """The payload is delivered inside the wait_created commit: the hook branch.

    Log: wait_created, hook_received, branch#1 ("hook now"), run_completed; no wait_completed.
    """
    run = await sim.start(wf.fork, "doc-18", _HOUR)
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("wait_created")
    await sim.deliver_hook("doc-18", "now")
    orchestrator.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "wait_created sleep#1", "hook_received hook#1", "step_created branch#1")
    expect("wait_completed sleep#1" not in log, f"the timer fired: {log}")
    await expect_outcome(sim, run.run_id, "completed", "hook now")
    await finish(sim, run.run_id)


@scenario("fork-timeout-wins")
async def fork_timeout_wins(sim: Sim) -> None:
    """No payload: the timer's branch.

    Log: wait_created, wait_completed, branch#1 ("timeout"), run_completed.
    """
    run = await sim.start(wf.fork, "doc-19", _HOUR)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "wait_created sleep#1", "wait_completed sleep#1", "step_created branch#1")
    await expect_outcome(sim, run.run_id, "completed", "timeout")
    await finish(sim, run.run_id)


@scenario("count-hook-before-timeout")
async def count_hook_before_timeout(sim: Sim) -> None:
    """Branches of different step counts; the payload lands before wait_completed.

    The hook branch writes one step (tally#1 of 10): a replay that took the
    other branch would meet three. Log: hook_received, wait_completed, tally#1,
    run_completed; value [100].
    """
    run_id = await _fork_with_hook_at(sim, wf.count_fork, "doc-22", "before")
    log = await short_log(sim, run_id)
    expect(log.count("step_created tally#1") == 1 and "step_created tally#2" not in log, f"{log}")
    await expect_outcome(sim, run_id, "completed", [100])
    await finish(sim, run_id)


@scenario("count-hook-after-timeout")
async def count_hook_after_timeout(sim: Sim) -> None:
    """Mirror of count-hook-before-timeout: the timeout branch writes three steps.

    The payload lands right after the wake-up's batch (wait_completed and
    tally#1). Log: wait_completed, tally#1, hook_received, tally#2, tally#3,
    run_completed; value [1, 4, 9].
    """
    run_id = await _fork_with_hook_at(sim, wf.count_fork, "doc-21", "after")
    log = await short_log(sim, run_id)
    expect_order(
        log,
        "wait_completed sleep#1",
        "step_created tally#1",
        "hook_received hook#1",
        "step_created tally#2",
        "step_created tally#3",
        "run_completed",
    )
    await expect_outcome(sim, run_id, "completed", [1, 4, 9])
    await finish(sim, run_id)


async def _stale_deciding_read(sim: Sim, workflow: object, token: str) -> str:
    """The timer is due and a payload lands, hidden from the wake-up's deciding read."""
    run = await sim.start(workflow, token, _HOUR)  # type: ignore[arg-type]
    first = sim.orchestrator()
    await first.run_to_event_committed("wait_created")
    sim.advance_time(_HOUR + 1)
    sim.withhold_next_event(reads=1, run_id=run.run_id)
    await sim.deliver_hook(token, "hidden")
    first.release()
    await sim.run_until_idle()
    return run.run_id


@scenario("stale-read-step-count-fork")
async def stale_read_step_count_fork(sim: Sim) -> None:
    """The timer is due and the payload committed, but the deciding read does not see it.

    The wake-up decides "timeout" on a stale page and writes wait_completed
    after the payload; the World reports the payload it missed and the runtime
    must follow the log (hook first), never the stale decision. Log:
    hook_received, wait_completed, one tally step; value [100].
    """
    run_id = await _stale_deciding_read(sim, wf.count_fork, "doc-23")
    log = await short_log(sim, run_id)
    expect_order(log, "hook_received hook#1", "step_created tally#1", "run_completed")
    await expect_outcome(sim, run_id, "completed", [100])
    await finish(sim, run_id)


@scenario("stale-read-equal-step-counts")
async def stale_read_equal_step_counts(sim: Sim) -> None:
    """The same stale deciding read with branches of equal size (fast vs slow).

    Equal counts do not hide a wrong branch: the log's order (hook first) must
    pick ``fast``. Log: hook_received, ..., step_created fast#1, run_completed.
    """
    run_id = await _stale_deciding_read(sim, wf.equal_count_fork, "doc-25")
    log = await short_log(sim, run_id)
    expect_order(log, "hook_received hook#1", "step_created fast#1", "run_completed")
    expect("step_created slow#1" not in log, f"the timeout branch ran: {log}")
    await expect_outcome(sim, run_id, "completed", "fast")
    await finish(sim, run_id)


@scenario("late-append-fork")
async def late_append_fork(sim: Sim) -> None:
    """The timer wins; the payload lands while the run waits after its branch (after the decision).

    It takes the tail of the log and the next delivery follows it. Log:
    wait_completed, branch#1 ("timeout"), hook_received, run_completed; value
    ["timeout", "late"].
    """
    run = await sim.start(wf.late_append_fork, "doc-31", _HOUR)
    await sim.run_until_idle()  # the timer fires, the branch runs, the run waits for the payload
    await sim.deliver_hook("doc-31", "late")
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "wait_completed sleep#1",
        "step_completed branch#1",
        "hook_received hook#1",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", ["timeout", "late"])
    await finish(sim, run.run_id)


async def _payload_timer_and_step(sim: Sim, workflow: object, token: str, **kwargs: object) -> str:
    """A payload, then the timer's wake-up, then the held step's outcome: one resume."""
    run = await sim.start(workflow, token, 60.0, **kwargs)  # type: ignore[arg-type]
    body = sim.step("charge")
    await body.run_to_event_produced("step_completed", step="charge")
    sim.advance_time(61)
    await sim.deliver_hook(token, "unread")
    sim.expire_lease(run.run_id, redeliver=False)  # the wake-ups may be delivered meanwhile
    # The successor has caught up (and completed the timer, if the workflow
    # still awaits it) once it starts the step again.
    await sim.until(Match(event_type="step_started"))
    body.release()
    await sim.run_until_idle()
    refused = [r.writer for r in (await sim.snapshot()).rejections if r.error == "InBandSuperseded"]
    expect(refused == ["step:charge d1"], f"refused writers: {refused}")
    expect(wf.CALLS.count("charge 1") == 2, f"step bodies: {wf.CALLS}")
    return run.run_id


@scenario("timer-due-at-cold-replay")
async def timer_due_at_cold_replay(sim: Sim) -> None:
    """A run ends while a timer it never cancelled is due; its cold replay must write the same end.

    The step wins the race against a 60 s timer that the workflow leaves
    pending; the step's outcome lands at t=61 s, after a payload, so the
    delivery's run-ahead is refused (StaleView), the outcome is written alone
    and the log replayed. The timer is still awaited and due: it is completed
    after the step's outcome, which stays first in log order. Log:
    wait_created, hook_received, step_completed charge#1, wait_completed
    sleep#1, branch#1 ("step"), run_completed; verify_replay must agree (it
    used to write a wait_completed the live run never wrote: the runtime now
    settles due waits after catching up, only for timers still awaited).
    """
    run = await sim.start(wf.unclaimed_payload, "doc-34", 60.0, False)
    body = sim.step("charge")
    await body.run_to_event_produced("step_completed", step="charge")
    sim.advance_time(61)
    await sim.deliver_hook("doc-34", "unread")
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "hook_received hook#1",
        "step_completed charge#1",
        "wait_completed sleep#1",
        "step_created branch#1",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", ["step", "step"])
    await finish(sim, run.run_id)


@scenario("unclaimed-payload-under-fork")
async def unclaimed_payload_under_fork(sim: Sim) -> None:
    """An unread payload, the timer's wait_completed and a step's outcome land for one resume.

    Nobody awaits the hook. While the step body is held, the payload commits
    and a second delivery (the first lost its lease) completes the timer; the
    held outcome is then refused by the fence and the successor runs the step
    again (attempt 2). The branch first in log order (the timer) must win, on
    every replay. Log: hook_received, wait_completed, step_started charge#1
    (attempt 2), step_completed charge#1, branch#1 ("timer"), run_completed.
    """
    run_id = await _payload_timer_and_step(sim, wf.unclaimed_payload, "doc-32")
    log = await short_log(sim, run_id)
    expect_order(
        log,
        "hook_received hook#1",
        "wait_completed sleep#1",
        "step_completed charge#1",
        "step_created branch#1",
    )
    await expect_outcome(sim, run_id, "completed", ["timer", "timer"])
    await finish(sim, run_id)


@scenario("claimed-payload-under-fork")
async def claimed_payload_under_fork(sim: Sim) -> None:
    """Control of unclaimed-payload-under-fork: a branch awaits the payload, and it is first.

    The hook is now first in log order and wins; the workflow cancels the
    timer, so the successor, which catches up before it settles due waits,
    leaves it alone although it is due. Log: hook_received, step_completed
    charge#1 (attempt 2), branch#1 ("hook"), run_completed, no wait_completed.
    """
    run_id = await _payload_timer_and_step(sim, wf.claimed_payload, "doc-33")
    log = await short_log(sim, run_id)
    expect_order(log, "hook_received hook#1", "step_completed charge#1", "step_created branch#1")
    expect("wait_completed sleep#1" not in log, f"a cancelled timer was completed: {log}")
    await expect_outcome(sim, run_id, "completed", ["hook", "hook"])
    await finish(sim, run_id)


@scenario("sleep-resume-at-stable")
async def sleep_resume_at_stable(sim: Sim) -> None:
    """Three payloads land during a one-hour sleep, ten minutes apart: four passes.

    Each payload wakes the run; every pass replays the sleep, and none may move
    its resume_at (no drift by the retry gap). Log: wait_created once,
    three hook_received, wait_completed exactly one hour after wait_created.
    """
    run = await sim.start(wf.bystander_sleep, "bystander", _HOUR)
    await sim.until(Match(event_type="wait_created"))
    for n in range(3):
        sim.advance_time(600)
        await sim.deliver_hook("bystander", f"p{n}")
    await sim.run_until_idle()
    log_events = await events(sim, run.run_id)
    kinds = [e.type.value for e in log_events]
    expect(
        kinds.count("wait_created") == 1,
        f"the sleep was created {kinds.count('wait_created')} times",
    )
    expect(kinds.count("hook_received") == 3, f"payloads: {kinds}")
    created = next(e for e in log_events if e.type.value == "wait_created")
    fired = next(e for e in log_events if e.type.value == "wait_completed")
    elapsed = (fired.created_at - created.created_at).total_seconds()
    expect(elapsed == _HOUR, f"the wait fired after {elapsed} s, not at its resume_at (1 h)")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "p0"])
    await finish(sim, run.run_id)


@scenario("sleep-replay-inherits-resume-at")
async def sleep_replay_inherits_resume_at(sim: Sim) -> None:
    """The delivery crashes right after wait_created; the redelivery (5 s later) replays.

    The replay reuses the recorded resume_at: the wait fires one hour after the
    original wait_created, not after the redelivery. Log: wait_created once,
    wait_completed at +1 h.
    """
    run = await sim.start(wf.long_sleep, 1 / 24)
    sim.crash_at(Match(event_type="wait_created"))
    await sim.run_until_idle()
    log_events = await events(sim, run.run_id)
    kinds = [e.type.value for e in log_events]
    expect(kinds.count("wait_created") == 1, f"log: {kinds}")
    created = next(e for e in log_events if e.type.value == "wait_created")
    fired = next(e for e in log_events if e.type.value == "wait_completed")
    elapsed = (fired.created_at - created.created_at).total_seconds()
    expect(elapsed == _HOUR, f"the wait fired after {elapsed} s, expected 3600")
    expect(sim.deliveries >= 2, "the crash was not redelivered")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario(
    "sleep-wait-created-unseen",
)
async def sleep_wait_created_unseen(sim: Sim) -> None:
    """A pass that cannot see its own wait_created: a crash after it, then a stale first read.

    The redelivery asks for the wait again; the World refuses the duplicate and
    the runtime must recover to the recorded wait, not strand the run. Found by
    this book: the refused delivery acked its message as if a rival owned the
    run; a superseded delivery now queues a wake-up that must read at least as
    far as the refusal saw. Log:
    wait_created once, wait_completed at +1 h, charge#2, run_completed.
    """
    run = await sim.start(wf.long_sleep, 1 / 24)
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_produced("wait_created")
    sim.withhold_next_event(reads=1, run_id=run.run_id)
    sim.crash_at(Match(event_type="wait_created"))
    orchestrator.release()
    idle = await sim.run_until_idle()
    expect(idle.status == "idle", f"the run stalled: {idle.stall}")
    log_events = await events(sim, run.run_id)
    kinds = [e.type.value for e in log_events]
    expect(kinds.count("wait_created") == 1, f"log: {kinds}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("clock-after-race")
async def clock_after_race(sim: Sim) -> None:
    """The clock read after a hook/timer race, with a late payload landing between passes.

    time.time() in the workflow is the last consumed event's time: the timer's
    wait_completed. The branch's input records it, and the cold replay (after
    the late payload moved the log on) must read the same. Value: [label, t]
    where t is wait_completed's time.
    """
    run_id = await _fork_with_hook_at(sim, wf.clock_after_race, "clock", "after")
    log_events = await events(sim, run_id)
    fired = next(e for e in log_events if e.type.value == "wait_completed")
    outcome = await sim.outcome(run_id)
    seen = outcome.value[1]
    expect(
        seen == fired.created_at.timestamp(), f"the workflow read {seen}, not wait_completed's time"
    )
    expect(outcome.value[0] == f"timer at {seen:.0f}", f"value {outcome.value}")
    await finish(sim, run_id)


@scenario("wake-up-during-timer-delivery")
async def wake_up_during_timer_delivery(sim: Sim) -> None:
    """``Run.wake_up()`` completes a due sleep while a delivery is completing it too.

    The sleep of one day is due; the delivery that completes it is held at the
    ``before`` point of its batch (``wait_completed`` with the step the workflow
    asks for next) while ``wake_up()`` writes ``wait_completed`` out of band.
    The batch is refused (StaleView), the delivery's own ``wait_completed`` alone
    is refused too (the wait is completed); it must read the log again and go
    on from it (it used to replay the same stale prefix forever without
    yielding). Log: wait_created, wait_completed (once, out of band),
    charge#2, run_completed; value ["charged 1", "charged 2"].
    """
    run = await sim.start(wf.long_sleep, 1)
    await sim.until(Match(event_type="wait_created", phase="after"))
    sim.advance_time(86400)
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_produced("wait_completed")
    woken = await sim.wake_up(run.run_id)
    expect(woken == 1, f"wake_up() completed {woken} sleeps")
    orchestrator.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(log.count("wait_completed sleep#1") == 1, f"the sleep completed twice: {log}")
    expect_order(log, "wait_created sleep#1", "wait_completed sleep#1", "step_created charge#2")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)
