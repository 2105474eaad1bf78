"""A workflow edited after its run started fails with a divergence naming both sides."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _drive import run_to_end

from durasim.checkers import check_invariants
from durasim.runtime import WorkflowFailed, get_run, start, step, workflow
from durasim.runtime.serialization import serialize
from durasim.worlds import EventRequest, FixedClock, RunStatus, SQLiteWorld, World

PREFIX = "step//test_divergence//"


@step
def charge(amount: int) -> int:
    return amount


@step
def refund(amount: int) -> int:
    return -amount


@workflow
async def refund_then_charge() -> int:
    return await refund(1) + await charge(2)


@workflow
async def only_charge() -> int:
    return await charge(2)


async def _old_log(world: World, run_id: str, steps: list[str]) -> None:
    """Write the log an older version of the workflow left: these steps, completed."""
    band = 1
    await world.events.create(
        run_id, EventRequest.of("run_started"), in_band=True, expected_seq_in_band=band
    )
    band += 1
    for name in steps:
        cid = f"{PREFIX}{name}#1"
        for request in (
            EventRequest.of("step_created", cid, step_name=PREFIX + name, input=serialize({})),
            EventRequest.of("step_started", cid),
            EventRequest.of("step_completed", cid, result=serialize(0)),
        ):
            await world.events.create(run_id, request, in_band=True, expected_seq_in_band=band)
            band += 1


@pytest.mark.parametrize(
    ("workflow_fn", "old_steps", "log_side", "code_side"),
    [
        # a step renamed (charge -> refund) or reordered: the first step differs
        (refund_then_charge, ["charge", "refund"], "charge#1", "refund"),
        # a step removed: the log's first step is gone from the code
        (only_charge, ["refund", "charge"], "refund#1", "charge"),
    ],
    ids=["renamed-or-reordered", "removed"],
)
async def test_edited_workflow_fails_naming_both_steps(  # noqa: PLR0917 -- parametrized
    world: World,
    clock: FixedClock,
    workflow_fn: object,
    old_steps: list[str],
    log_side: str,
    code_side: str,
) -> None:
    run = await start(workflow_fn, world=world, run_id="edited")  # type: ignore[arg-type]
    await _old_log(world, run.run_id, old_steps)
    worker = await run_to_end(world, clock, run)
    assert await run.status() is RunStatus.FAILED
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert caught.value.error_code == "CORRUPTED_EVENT_LOG"  # type: ignore[attr-defined]
    # 1 + 3 recovery replays, each a fresh delivery, then the run fails
    assert [r.status for r in worker.reports] == ["retry", "retry", "retry", "finished"]
    last = worker.reports[-1]
    assert last.divergences == 4
    message = str(caught.value.__cause__)
    assert log_side in message
    assert f"step {code_side}" in message
    # nothing of the new code's steps was written into the old log
    kinds = [e.type.value for e in await run.events()]
    assert kinds.count("step_created") == len(old_steps)


async def test_a_hole_in_the_log_fails_the_run_at_once(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    clock = FixedClock()
    world = SQLiteWorld(path, clock=clock)
    run = await start(only_charge, world=world, run_id="holey")
    await _old_log(world, run.run_id, ["charge"])
    await world.close()
    db = sqlite3.connect(path)
    db.execute("DELETE FROM events WHERE run_id = 'holey' AND seq = 3")
    db.commit()
    db.close()
    world = SQLiteWorld(path, clock=clock)
    worker = await run_to_end(
        world, clock, get_run("holey", world=world), replay=False, invariants=False
    )
    assert [r.status for r in worker.reports] == ["finished"]
    report = await check_invariants(world)
    assert report.rules_broken() == {"log.dense": 1}
    failed = await world.runs.get("holey")
    assert failed.status is RunStatus.FAILED
    assert failed.error_code == "CORRUPTED_EVENT_LOG"
    await world.close()
