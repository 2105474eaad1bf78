"""Driving runs to their end in virtual time (no wall-clock sleeps), then replaying them cold."""

from __future__ import annotations

from durasim.checkers import check_invariants, verify_replay
from durasim.runtime import Run, Worker
from durasim.runtime._replay import Replay
from durasim.runtime.lowlevel import find_workflow
from durasim.runtime.serialization import serialize
from durasim.worlds import RUN_TERMINAL_TYPES, Event, EventType, FixedClock, World


async def run_to_end(
    world: World,
    clock: FixedClock,
    run: Run,
    *,
    max_rounds: int = 200,
    replay: bool = True,
    invariants: bool = True,
) -> Worker:
    """Serve ``run`` until it ends, jumping the clock to each next due message.

    Then, unless ``replay=False``, replay the finished log cold and require the
    same outcome (the determinism every engine test gets for free), and unless
    ``invariants=False``, require every invariant of the World to hold.
    """
    worker = Worker(world)
    for _ in range(max_rounds):
        await worker.drain()
        if (await run.status()).terminal:
            if replay:
                check_cold_replay(await run.events())
            if invariants:
                report = await check_invariants(world)
                assert report.ok, report.render()
            if replay:
                verdict = await verify_replay(world, run.run_id)
                assert verdict.ok, verdict.render()
            return worker
        due = await world.queue.next_due()
        assert due is not None, f"run {run.run_id} is stuck: nothing is queued"
        clock.current = max(clock.current, due)
    raise AssertionError(f"run {run.run_id} did not end in {max_rounds} rounds")


def replay_cold(events: list[Event]) -> Replay:
    """A fresh replay fed the log up to (not including) its terminal event."""
    created = events[0]
    started = next(e for e in events if e.type is EventType.RUN_STARTED)
    replay = Replay(
        find_workflow(created.data["workflow_name"]),
        run_id=created.run_id,
        input=created.data["input"],
        started_at=started.created_at,
    )
    replay.preload(events)
    replay.begin()
    for event in events:
        if event.type in RUN_TERMINAL_TYPES:
            break
        replay.deliver(event)
    return replay


def check_cold_replay(events: list[Event]) -> None:
    """Replay a finished log (all but its terminal event) and compare the outcome."""
    terminal = next(e for e in events if e.type in RUN_TERMINAL_TYPES)
    if terminal.type is EventType.RUN_CANCELLED or terminal.data.get("error_code") not in (
        None,
        "USER_ERROR",
    ):
        return  # not the workflow's own outcome: nothing to reproduce
    replay = replay_cold(events)
    assert replay.done, f"cold replay of {terminal.run_id} is still waiting at the end of its log"
    ok, value = replay.outcome()
    if terminal.type is EventType.RUN_COMPLETED:
        assert ok, f"cold replay raised {value!r} where the run completed"
        assert serialize(value) == terminal.data["output"], "cold replay returned another value"
    else:
        assert not ok, f"cold replay returned {value!r} where the run failed"
