"""patched() / deprecate_patch(): edit a workflow with runs in flight, on every World."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import wf_versions
from _drive import check_cold_replay, run_to_end
from wf_versions import versioned

from durasim.checkers import export_history, replay_histories, replay_world
from durasim.runtime import PatchError, Run, Worker, WorkflowFailed, patched, start
from durasim.runtime.lowlevel import engine_for
from durasim.worlds import EventType, FixedClock, RunStatus, World


@pytest.fixture(autouse=True)
def _code_a() -> Iterator[None]:
    wf_versions.CODE["version"] = "A"
    yield
    wf_versions.CODE["version"] = "A"


async def _suspend(world: World, version: str, run_id: str) -> Run:
    """Start a run on ``version`` and serve it until it sleeps."""
    wf_versions.CODE["version"] = version
    run = await start(versioned, world=world, run_id=run_id)
    await Worker(world).drain()
    assert (await run.status()) is RunStatus.RUNNING
    return run


def _deploy(world: World, clock: FixedClock, version: str) -> None:
    """New code: no live replay survives a deployment."""
    wf_versions.CODE["version"] = version
    engine_for(world).forget_kept_replays()
    clock.advance(11)


def _steps(events: list) -> list[str]:  # type: ignore[type-arg]
    return [
        e.data["step_name"].rsplit("//", 1)[1] for e in events if e.type is EventType.STEP_CREATED
    ]


def _markers(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.correlation_id for e in events if e.type is EventType.ATTR_SET]


async def test_old_runs_keep_the_old_branch_new_runs_take_the_new(
    world: World, clock: FixedClock
) -> None:
    old = await _suspend(world, "A", "old")
    _deploy(world, clock, "B")
    new = await start(versioned, world=world, run_id="new")
    await run_to_end(world, clock, old)  # cold replay + the replay oracle, inside
    await run_to_end(world, clock, new)
    assert await old.result() == 3
    assert await new.result() == 4
    old_events, new_events = await old.events(), await new.events()
    assert _steps(old_events) == ["one", "two"]
    assert _markers(old_events) == []
    assert _steps(new_events) == ["one", "three"]
    assert _markers(new_events) == ["patch/use-three"]
    marker = next(e for e in new_events if e.type is EventType.ATTR_SET)
    assert marker.data["changes"] == (("durasim.patch.use-three", "patched"),)
    assert (await world.runs.get("new")).attributes["durasim.patch.use-three"] == "patched"
    # the marker precedes what the new branch did
    three = next(
        e for e in new_events if e.type is EventType.STEP_CREATED and "three" in e.data["step_name"]
    )
    assert marker.seq < three.seq


async def test_a_run_suspended_before_the_patch_point_takes_the_new_branch(
    world: World, clock: FixedClock
) -> None:
    # A run that has not reached patched() yet (it has only begun) is new code's.
    wf_versions.CODE["version"] = "A"
    run = await start(versioned, world=world, run_id="fresh")
    _deploy(world, clock, "B")
    await run_to_end(world, clock, run)
    assert await run.result() == 4


async def test_deprecate_patch_replays_both_kinds_of_logs(world: World, clock: FixedClock) -> None:
    patched_run = await _suspend(world, "B", "on-b")
    _deploy(world, clock, "C")
    fresh = await start(versioned, world=world, run_id="on-c")
    await run_to_end(world, clock, patched_run)
    await run_to_end(world, clock, fresh)
    assert (await patched_run.result(), await fresh.result()) == (4, 4)
    # a run started on C still writes the marker (a B worker could replay it)
    assert _markers(await fresh.events()) == ["patch/use-three"]
    wf_versions.CODE["version"] = "B"
    check_cold_replay(await fresh.events())


async def test_deprecating_too_early_names_the_patch(world: World, clock: FixedClock) -> None:
    old = await _suspend(world, "A", "too-early")
    _deploy(world, clock, "C")
    await run_to_end(world, clock, old, replay=False)
    with pytest.raises(WorkflowFailed) as caught:
        await old.result()
    message = str(caught.value.__cause__)
    assert "deprecate_patch('use-three')" in message
    assert "recorded before patch" in message


async def test_removing_a_patch_runs_recorded_names_it(world: World, clock: FixedClock) -> None:
    run = await _suspend(world, "B", "removed")
    _deploy(world, clock, "D")
    await run_to_end(world, clock, run, replay=False)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert "the log records patch 'use-three'" in str(caught.value.__cause__)


async def test_an_unpatched_edit_fails_old_runs(world: World, clock: FixedClock) -> None:
    run = await _suspend(world, "A", "unpatched")
    _deploy(world, clock, "B-unpatched")
    await run_to_end(world, clock, run, replay=False)
    assert (await run.status()) is RunStatus.FAILED


def test_patched_outside_a_workflow_and_bad_ids_are_refused() -> None:
    with pytest.raises(PatchError, match="workflow code"):
        patched("x")
    with pytest.raises(PatchError, match="not valid"):
        patched("has space")


async def test_the_replay_test_names_an_unpatched_edit_before_it_ships(
    world: World, tmp_path: Path
) -> None:
    await _suspend(world, "A", "in-flight")
    done = await start(versioned, world=world, run_id="done")
    engine_for(world).forget_kept_replays()
    histories = tmp_path / "histories"
    histories.mkdir()
    await export_history(world, "in-flight", histories / "in-flight.jsonl")
    await export_history(world, "done", histories / "done.jsonl")
    del done
    wf_versions.CODE["version"] = "B-unpatched"
    verdicts = {v.run_id: v for v in await replay_histories([histories])}
    assert verdicts["in-flight"].kind == "diverged"
    detail = verdicts["in-flight"].detail
    assert "step//wf_versions//two#1" in detail  # the log's side
    assert "step three" in detail  # the code's side
    live = {v.run_id: v for v in await replay_world(world, ["in-flight"])}
    assert live["in-flight"].kind == "diverged"
    wf_versions.CODE["version"] = "B"
    assert all(v.ok for v in await replay_histories([histories]))


def test_the_replay_test_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from durasim.scenarios._cli import main
    from durasim.worlds import SQLiteWorld

    async def record() -> None:
        world = SQLiteWorld(tmp_path / "w.db")
        try:
            await _suspend(world, "A", "cli")
            await export_history(world, "cli", tmp_path / "cli.jsonl")
        finally:
            await world.close()

    asyncio.run(record())
    wf_versions.CODE["version"] = "B-unpatched"
    assert main(["replay-test", str(tmp_path / "cli.jsonl"), "--import", "wf_versions"]) == 1
    out = capsys.readouterr().out
    assert "diverged: run cli" in out
    assert "0 of 1 histories replay" in out
    assert main(["replay-test", "--world", str(tmp_path / "w.db"), "--in-flight"]) == 1
    wf_versions.CODE["version"] = "B"
    assert main(["replay-test", "--world", str(tmp_path / "w.db")]) == 0
    assert "1 of 1 histories replay on this code" in capsys.readouterr().out


def test_inspect_shows_the_version_and_the_patches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import json

    from durasim.scenarios._cli import main
    from durasim.worlds import SQLiteWorld

    monkeypatch.setenv("DURASIM_DEPLOYMENT", "v2")

    async def record() -> None:
        world = SQLiteWorld(tmp_path / "w.db")
        try:
            await _suspend(world, "B", "shown")
        finally:
            await world.close()

    asyncio.run(record())
    db = str(tmp_path / "w.db")
    assert main(["inspect", "run", "shown", "--world", db]) == 0
    out = capsys.readouterr().out
    assert "  version: v2" in out
    assert "  patches: use-three" in out
    assert main(["inspect", "run", "shown", "--json", "--world", db]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["deployment_id"], body["patches"]) == ("v2", ["use-three"])
    assert main(["migrate", "shown", "--to", "v3", "--world", db]) == 1
    assert "the code imported here is version 'v2', not 'v3'" in capsys.readouterr().err
    wf_versions.CODE["version"] = "B-unpatched"
    monkeypatch.setenv("DURASIM_DEPLOYMENT", "v3")
    assert main(["migrate", "shown", "--to", "v3", "--world", db]) == 1
    assert "cannot move to version 'v3'" in capsys.readouterr().err
    wf_versions.CODE["version"] = "C"
    assert main(["migrate", "shown", "--to", "v3", "--world", db]) == 0
    assert "pinned to it from now on" in capsys.readouterr().out
