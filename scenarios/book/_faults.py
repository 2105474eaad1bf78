"""Faults around the fence: lease expiry, duplicate deliveries, crashes, lost messages."""

from __future__ import annotations

from durasim.runtime import Limits
from durasim.sim import Match, Sim, Writer

from . import _workflows as wf
from ._check import events, expect, expect_log, expect_order, expect_outcome, finish, short_log
from ._registry import scenario


def _delivery(number: int) -> Match:
    """The next write of orchestrator delivery ``number``, before it commits."""

    def writer(w: Writer) -> bool:
        return w.kind == "orchestrator" and w.delivery == number

    return Match(phase="before", call=("events.create", "events.create_batch"), writer=writer)


async def _refused(sim: Sim) -> list[str]:
    return [r.writer for r in (await sim.snapshot()).rejections if r.error == "InBandSuperseded"]


@scenario("step-vs-step-fork")
async def step_vs_step_fork(sim: Sim) -> None:
    """Two steps race in one delivery; ``slow`` (1 s) ends before ``fast`` (2 s), in virtual time.

    No out-of-band event: the order of the outcomes in the log alone picks
    the branch. Log: step_completed slow#1, step_completed fast#1, branch#1
    ("slow won"), run_completed.
    """
    run = await sim.start(wf.step_vs_step, 2.0, 1.0)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "step_completed slow#1", "step_completed fast#1", "step_created branch#1")
    await expect_outcome(sim, run.run_id, "completed", ["slow", "slow won"])
    await finish(sim, run.run_id)


@scenario("step-vs-step-crash-before-branch")
async def step_vs_step_crash_before_branch(sim: Sim) -> None:
    """Both racing outcomes are recorded, then the delivery crashes before the branch step.

    The redelivery (5 s later) replays cold and must take the same winner
    from the log, never the order in which it happens to re-read or re-run
    things. Log: step_completed fast#1, step_completed slow#1, branch#1
    ("fast won") created once, run_completed.
    """
    run = await sim.start(wf.step_vs_step, 1.0, 2.0)
    sim.crash_at(Match(phase="before", event_type="step_created", step="branch"))
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "step_completed fast#1", "step_completed slow#1", "step_created branch#1")
    expect(log.count("step_created branch#1") == 1, f"log: {log}")
    await expect_outcome(sim, run.run_id, "completed", ["fast", "fast won"])
    await finish(sim, run.run_id)


@scenario("step-count-race")
async def step_count_race(sim: Sim) -> None:
    """Two steps race and the winner decides how many steps follow (one or two).

    ``slow`` (1 s) beats ``fast`` (2 s): the two-step branch. Log:
    step_completed slow#1, step_completed fast#1, tally#1, tally#2, run_completed.
    """
    run = await sim.start(wf.step_count_race, 2.0, 1.0)
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(
        log,
        "step_completed slow#1",
        "step_completed fast#1",
        "step_created tally#1",
        "step_created tally#2",
        "run_completed",
    )
    await expect_outcome(sim, run.run_id, "completed", ["slow", 1, 4])
    await finish(sim, run.run_id)


@scenario("fenced-overlap-after-lease-expiry")
async def fenced_overlap_after_lease_expiry(sim: Sim) -> None:
    """The orchestrator stalls with its next step produced; a successor runs the whole run.

    The stalled write then carries a stale in-band count and is refused
    (InBandSuperseded, by "orch d1"); nothing it would have run runs. Log: the
    clean two-step log; each body ran once.
    """
    run = await sim.start(wf.two_steps)
    stalled = sim.orchestrator()
    await stalled.run_to_event_produced("step_created", step="charge")
    expect(sim.expire_lease(run.run_id) == 1, "no lease expired")
    await sim.until(Match(event_type="run_completed"))
    stalled.release()
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
            "step_created charge#2",
            "step_started charge#2",
            "step_completed charge#2",
            "run_completed",
        ],
    )
    expect(await _refused(sim) == ["orch d1"], f"refused: {await _refused(sim)}")
    expect(wf.CALLS == ["charge 1", "charge 2"], f"bodies: {wf.CALLS}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("fence-catches-benign-direction")
async def fence_catches_benign_direction(sim: Sim) -> None:
    """The other order of a forced overlap: the predecessor writes first, the successor is refused.

    d1 is held before its first step, its lease expires and d2 reads the same
    log and is held before its own first write; d1 commits, then d2's write is
    refused (its in-band count is stale) and d1 finishes. Log: the clean
    two-step log; refused: "orch d2".
    """
    run = await sim.start(wf.two_steps)
    first = sim.orchestrator()
    await first.run_to_event_produced("step_created", step="charge")
    second = sim.park(_delivery(2), label="d2's first write")
    sim.expire_lease(run.run_id)
    await second
    first.release()
    await sim.until(Match(event_type="step_started", step="charge"))
    second.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(log.count("step_completed charge#1") == 1, f"log: {log}")
    expect(log[-1] == "run_completed", f"log: {log}")
    refused = await _refused(sim)
    expect(refused[:1] == ["orch d2"], f"refused: {refused}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("in-flight-before-decision")
async def in_flight_before_decision(sim: Sim) -> None:
    """The wake-up is held with wait_completed produced; a payload commits; the lease expires.

    The successor reads the payload first (it may still complete the due
    timer, after the payload) and takes the hook branch; the stalled
    wake-up's wait_completed is refused by the fence. Log: hook_received,
    then at most one wait_completed, branch#1 ("hook early"), run_completed.
    """
    run = await sim.start(wf.fork, "doc-29", 3600.0)
    await sim.until(Match(event_type="wait_created"))
    waker = sim.orchestrator()
    await waker.run_to(Match(phase="before", event_type="wait_completed"))
    await sim.deliver_hook("doc-29", "early")
    sim.expire_lease(run.run_id)
    await sim.until(Match(event_type="run_completed"))
    waker.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect_order(log, "hook_received hook#1", "step_created branch#1", "run_completed")
    expect(log.count("wait_completed sleep#1") <= 1, f"the timer completed twice: {log}")
    expect(await _refused(sim) == ["orch d2"], f"refused: {await _refused(sim)}")
    await expect_outcome(sim, run.run_id, "completed", "hook early")
    await finish(sim, run.run_id)


@scenario("run-ahead-fenced-overlap")
async def run_ahead_fenced_overlap(sim: Sim) -> None:
    """A run-ahead batch (tick#1's outcome + tick#2 born running) is held; the lease expires.

    The successor runs the whole loop (tick#1 runs again: at least once); the
    held batch and everything after it are refused. Log: three ticks, each
    created, started (tick#1 twice) and completed once, run_completed.
    """
    run = await sim.start(wf.run_ahead_loop, 3)
    body = sim.step("tick")
    await body.run_to_event_produced("step_completed", step="tick")
    sim.expire_lease(run.run_id)
    await sim.until(Match(event_type="run_completed"))
    body.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    for n in (1, 2, 3):
        expect(log.count(f"step_completed tick#{n}") == 1, f"tick#{n}: {log}")
    expect(log.count("step_started tick#1") == 2, f"log: {log}")
    expect(await _refused(sim) == ["step:tick d1"], f"refused: {await _refused(sim)}")
    await expect_outcome(sim, run.run_id, "completed", 3)
    await finish(sim, run.run_id)


@scenario("duplicate-delivery")
async def duplicate_delivery(sim: Sim) -> None:
    """A second orchestrator runs the in-flight message while the step is running.

    The fence lets exactly one writer on: one outcome per step, one end, at
    least one InBandSuperseded refusal.
    """
    run = await sim.start(wf.two_steps)
    first = sim.orchestrator()
    await first.run_to_event_committed("step_started", step="charge")
    sim.duplicate_delivery(run.run_id)
    first.release()
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(log.count("step_completed charge#1") == 1, f"log: {log}")
    expect(log.count("step_completed charge#2") == 1, f"log: {log}")
    expect(log.count("run_completed") == 1, f"log: {log}")
    expect(len(await _refused(sim)) >= 1, "no write was refused")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("crash-between-step-end-and-record")
async def crash_between_step_end_and_record(sim: Sim) -> None:
    """The body of charge#1 finished, the delivery crashes before its outcome is written.

    The message is redelivered when the lease lapses (5 s, a worker's lease: the
    delivery's heartbeat died with it); the step runs again (attempt 2) and its
    outcome is recorded once. Log: step_started charge#1 twice, step_completed
    charge#1 once, charge#2, run_completed.
    """
    run = await sim.start(wf.two_steps)
    sim.crash_at(Match(phase="before", event_type="step_completed", step="charge"))
    await sim.run_until_idle()
    log = await expect_log(
        sim,
        run.run_id,
        [
            "run_created",
            "run_started",
            "step_created charge#1",
            "step_started charge#1",
            "step_started charge#1",
            "step_completed charge#1",
            "step_created charge#2",
            "step_started charge#2",
            "step_completed charge#2",
            "run_completed",
        ],
    )
    del log
    starts = [e for e in await events(sim, run.run_id) if e.type.value == "step_started"]
    lease = sim.lease_policy.lease_seconds
    apart = (starts[1].created_at - starts[0].created_at).total_seconds()
    expect(apart == lease, f"the redelivery came {apart:g} s later, not {lease:g} s")
    expect(wf.CALLS == ["charge 1", "charge 1", "charge 2"], f"bodies: {wf.CALLS}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario("outcome-write-fails")
async def outcome_write_fails(sim: Sim) -> None:
    """The World fails the write of charge#1's outcome once (a transient error).

    The delivery fails, its message comes back after a back-off, and the step
    runs again; its outcome is recorded once. Log: step_started charge#1
    twice, step_completed once, then charge#2 and the end.
    """
    run = await sim.start(wf.two_steps)
    sim.fail_next(Match(event_type="step_completed", step="charge"))
    await sim.run_until_idle()
    log = await short_log(sim, run.run_id)
    expect(log.count("step_started charge#1") == 2, f"log: {log}")
    expect(log.count("step_completed charge#1") == 1, f"log: {log}")
    expect(log[-1] == "run_completed", f"log: {log}")
    await expect_outcome(sim, run.run_id, "completed", ["charged 1", "charged 2"])
    await finish(sim, run.run_id)


@scenario(
    "lost-step-dispatch",
    limits=Limits(sync_steps="inline", inline_steps=1, queue_steps=True),
)
async def lost_step_dispatch(sim: Sim) -> None:
    """Three steps, one inline slot: two go through the queue, and one of those messages is lost.

    The queue drops the message of a queued step (accepted, never delivered).
    The run must not wait for it forever: a delivery that suspends with a
    queued step never started dispatches it again (same idempotency key, so it
    collapses while the first message lives), and every step's outcome is
    recorded once. Found by this book: the run used to wait forever. Log: tally#2 and #3 created
    inline=False, each completed once, run_completed; value [0, 1, 4].
    """
    sim.auto_deliver = False
    run = await sim.start(wf.fan_out, 3)
    sim.deliver_queued()
    await sim.run_until_idle()
    queued = [m for m in (await sim.snapshot()).pending if m.queue_name == "durasim.step"]
    expect(len(queued) == 2, f"queued step messages: {queued}")
    dropped = sim.drop_queued(queued[0].message_id)
    expect(len(dropped) == 1, f"dropped {dropped}")
    sim.auto_deliver = True
    idle = await sim.run_until_idle()
    expect(idle.status == "idle", f"the run stalled: {idle.stall}")
    log = await short_log(sim, run.run_id)
    for n in (1, 2, 3):
        expect(log.count(f"step_completed tally#{n}") == 1, f"tally#{n}: {log}")
    await expect_outcome(sim, run.run_id, "completed", [0, 1, 4])
    await finish(sim, run.run_id)
