"""Cancellation (runs, running steps, sleeps, hook waits, workflow-made tokens) and child runs."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import wf_hooks
from _drive import check_cold_replay, run_to_end

from durasim.runtime import (
    HookNotFoundError,
    RunCancelledError,
    Worker,
    resume_hook,
    start,
)
from durasim.worlds import EntityConflict, EventType, FixedClock, RunStatus, World


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    wf_hooks.SEEN.clear()


async def test_cancel_during_a_sleep(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.sleeper, world=world)
    await Worker(world).drain()
    assert await run.cancel("not needed") is True
    assert await run.cancel("again") is False  # already cancelled: tolerated, nothing written
    assert await run.status() is RunStatus.CANCELLED
    waits = await world.waits.list(run.run_id)
    assert [w.status for w in waits] == ["released"]
    clock.current += dt.timedelta(hours=2)
    await Worker(world).drain()  # the wake-up finds the run ended and writes nothing
    events = await run.events()
    assert events[-1].type is EventType.RUN_CANCELLED
    assert events[-1].data["reason"] == "not needed"
    with pytest.raises(RunCancelledError, match="not needed"):
        await run.result()


async def test_cancel_during_a_hook_wait(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.one_payload, "cancelled-hook", world=world)
    await Worker(world).drain()
    await run.cancel()
    with pytest.raises(HookNotFoundError):
        await resume_hook("cancelled-hook", 1, world=world)
    assert (await world.hooks.list(run.run_id))[0].status == "released"


async def test_a_finished_run_cannot_be_cancelled(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.child, 1, world=world)
    await run_to_end(world, clock, run)
    before = len(await run.events())
    with pytest.raises(EntityConflict, match="already completed; only pending or running"):
        await run.cancel()
    assert len(await run.events()) == before


async def test_cancel_during_a_running_step(world: World, clock: FixedClock) -> None:
    """The step observes the signal; the run stops at the step boundary."""
    run = await start(wf_hooks.long_step, world=world)
    worker = Worker(world)
    serving = asyncio.ensure_future(worker.drain())
    for _ in range(200):  # until the step body is running
        await asyncio.sleep(0)
        steps = await world.steps.list(run.run_id)
        if steps and steps[0].status == "running":
            break
    await run.cancel("operator")
    await asyncio.wait_for(serving, timeout=10)
    assert wf_hooks.SEEN == [("step saw cancel", "operator", True)]
    events = await run.events()
    assert [e.type for e in events].count(EventType.STEP_CREATED) == 1  # no step after it
    assert await run.status() is RunStatus.CANCELLED


async def test_a_workflow_made_token_reaches_a_step(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.token_cancel, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == [True, "enough"]
    assert wf_hooks.SEEN == [("token", "enough", True)]
    attr = [e for e in await run.events() if e.type is EventType.ATTR_SET]
    assert len(attr) == 1
    assert attr[0].correlation_id == "cancel#1"
    assert (await world.runs.get(run.run_id)).attributes["durasim.cancel.cancel#1"] == "enough"


async def test_children_run_and_the_parent_waits_durably(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.parent, 2, world=world)
    await run_to_end(world, clock, run)
    child_id, a, b = await run.result()
    assert (a, b) == (20, 30)
    child = await world.runs.get(child_id)
    assert child.attributes["durasim.parent_run_id"] == run.run_id
    assert child.attributes["durasim.root_run_id"] == run.run_id
    check_cold_replay(await run.events())
    # The parent suspended on each child instead of polling: few deliveries.
    hooks = await world.hooks.list(run.run_id)
    assert [h.token for h in hooks] == [
        f"durasim.child:{child_id}",
        f"durasim.child:{run.run_id}-c2",
    ]


async def test_a_failing_child_raises_in_the_parent(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.parent_of_failing, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == "WorkflowFailed: ValueError('child broke')"


async def test_cancelling_a_parent_cancels_its_children(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.parent_of_sleeper, world=world)
    worker = Worker(world)
    for _ in range(5):
        await worker.drain()
    steps = await world.steps.list(run.run_id)
    child_id = f"{run.run_id}-c1"
    assert (await world.runs.get(child_id)).status is RunStatus.RUNNING, steps
    await run.cancel("parent gone")
    child = await world.runs.get(child_id)
    assert child.status is RunStatus.CANCELLED
    assert child.cancel_reason == f"parent run {run.run_id} cancelled: parent gone"


async def test_cancelling_a_child_raises_in_the_parent(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.parent_of_sleeper, world=world)
    worker = Worker(world)
    for _ in range(5):
        await worker.drain()
    from durasim.runtime import get_run

    await get_run(f"{run.run_id}-c1", world=world).cancel("child only")
    await run_to_end(world, clock, run)
    with pytest.raises(Exception, match="child only"):
        await run.result()
    assert await run.status() is RunStatus.FAILED


def test_durasim_cancel_from_the_command_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from durasim.scenarios._cli import main
    from durasim.worlds import SQLiteWorld

    path = tmp_path / "world.db"

    async def begin() -> str:
        world = SQLiteWorld(path)
        try:
            run = await start(wf_hooks.sleeper, world=world)
            await Worker(world).drain()
            return run.run_id
        finally:
            await world.close()

    run_id = asyncio.run(begin())
    assert main(["cancel", run_id, "--reason", "from the shell", "--world", str(path)]) == 0
    assert main(["cancel", run_id, "--world", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{run_id}: cancelled" in out
    assert f"{run_id}: was already cancelled" in out

    async def status() -> tuple[str, str | None]:
        world = SQLiteWorld(path)
        try:
            row = await world.runs.get(run_id)
            return row.status.value, row.cancel_reason
        finally:
            await world.close()

    assert asyncio.run(status()) == ("cancelled", "from the shell")
    assert main(["cancel", "nope", "--world", str(path)]) == 1
    assert "nope" in capsys.readouterr().err


async def test_a_cancelled_runs_kept_replay_is_dropped(world: World, clock: FixedClock) -> None:
    from durasim.runtime.lowlevel import engine_for

    run = await start(wf_hooks.sleeper, world=world)
    await Worker(world).drain()
    # Suspended: its replay is kept for the next delivery.
    assert engine_for(world).keeps(run.run_id)
    await run.cancel()
    await Worker(world).drain()  # the wake-up queued by the cancel
    assert not engine_for(world).keeps(run.run_id)


async def test_only_a_child_is_read_again_when_it_ends(
    world: World, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery reads its run once; a child's last delivery reads it again to tell its
    parent, a run that is no child is not read again (its parent attribute is set at
    creation only)."""
    reads: list[str] = []
    get = world.runs.get

    async def counted(run_id: str) -> object:
        reads.append(run_id)
        return await get(run_id)

    monkeypatch.setattr(world.runs, "get", counted)
    alone = await start(wf_hooks.child, 1, world=world)
    worker = Worker(world)
    delivered = await worker.drain()
    assert delivered >= 1
    assert reads.count(alone.run_id) == delivered  # its one message: one read each
    assert [r.parent for r in worker.reports] == [""] * delivered  # read: no parent
    assert await alone.result() == 10
    reads.clear()
    run = await start(wf_hooks.parent, 2, world=world)
    await run_to_end(world, clock, run)
    child_id, a, b = await run.result()
    assert (a, b) == (20, 30)
    # Each child's end was handed to the parent: a read past its deliveries' own.
    for child in (child_id, f"{run.run_id}-c2"):
        assert reads.count(child) >= 2, (child, reads)
        assert (await world.runs.get(child)).attributes["durasim.parent_run_id"] == run.run_id
