"""Runs pinned to the code version that started them; workers of another version leave them."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import wf_versions
from _drive import run_to_end
from _postgres_support import new_schema, require_postgres
from wf_pinned import pinned
from wf_versions import versioned

from durasim.checkers import migrate_run
from durasim.runtime import Worker, get_run, start
from durasim.runtime.lowlevel import (
    DEPLOYMENT_ENV,
    DeploymentError,
    deployment_of,
    enqueue_wake,
    find_workflow,
)
from durasim.scenarios import main
from durasim.worlds import FixedClock, RunStatus, SQLiteWorld, World

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "durasim.scenarios"]


@pytest.fixture(autouse=True)
def _code_a() -> Iterator[None]:
    wf_versions.CODE["version"] = "A"
    yield
    wf_versions.CODE["version"] = "A"


async def test_a_run_records_the_version_that_started_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    derived = await start(pinned, 1, world=world, run_id="derived")
    source = deployment_of(find_workflow((await world.runs.get("derived")).workflow_name))
    assert source is not None
    assert source.startswith("src-")
    assert (await world.runs.get(derived.run_id)).deployment_id == source
    monkeypatch.setenv(DEPLOYMENT_ENV, "v2.0")
    await start(pinned, 1, world=world, run_id="explicit")
    assert (await world.runs.get("explicit")).deployment_id == "v2.0"
    monkeypatch.setenv(DEPLOYMENT_ENV, "bad version!")
    with pytest.raises(DeploymentError, match="DURASIM_DEPLOYMENT"):
        await start(pinned, 1, world=world, run_id="bad")


async def test_a_worker_of_another_version_leaves_the_run_alone(
    world: World,
    clock: FixedClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(DEPLOYMENT_ENV, "A")
    run = await start(pinned, 21, world=world, run_id="pinned-a")
    monkeypatch.delenv(DEPLOYMENT_ENV)
    await enqueue_wake(world, run.run_id)  # unversioned, as resume_hook or a cancel sends
    b = Worker(world, deployment="B")
    with caplog.at_level(logging.WARNING, logger="durasim.runtime"):
        await b.drain()
    assert (await run.status()) is RunStatus.PENDING
    assert "run pinned-a is pinned to version A; this worker serves B" in caplog.text
    queues = {m.queue_name for m in await world.queue.messages()}
    assert queues == {"durasim@A/run"}
    await b.drain()  # nothing of A's is claimed again
    assert (await run.status()) is RunStatus.PENDING
    a = Worker(world, deployment="A")
    await a.drain()
    assert await run.result() == 42
    del clock


async def test_migrate_refuses_code_that_diverges_and_moves_the_run_otherwise(
    world: World, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEPLOYMENT_ENV, "A")
    run = await start(versioned, world=world, run_id="moving")
    await Worker(world, deployment="A").drain()  # suspended in its sleep
    monkeypatch.setenv(DEPLOYMENT_ENV, "B")
    wf_versions.CODE["version"] = "B-unpatched"
    with pytest.raises(DeploymentError, match="cannot move to version 'B'") as caught:
        await migrate_run(world, "moving", "B")
    assert "two#1" in str(caught.value)
    assert "step three" in str(caught.value)
    with pytest.raises(DeploymentError, match="the code imported here is version 'B', not 'C'"):
        await migrate_run(world, "moving", "C")
    wf_versions.CODE["version"] = "B"
    verdict = await migrate_run(world, "moving", "B")
    assert verdict.ok
    assert (await world.runs.get("moving")).attributes["durasim.deployment"] == "B"
    clock.advance(11)
    await Worker(world, deployment="A").drain()
    assert (await run.status()) is RunStatus.RUNNING  # A leaves it now
    await run_to_end(world, clock, run)  # a worker of this code's version (B)
    assert await run.result() == 3  # the old branch, on the new code


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_worker_processes_of_two_versions(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real processes: a B worker leaves the A run alone; an A worker finishes it."""
    import asyncio

    if kind == "postgres":
        dsn = require_postgres()
        url = f"{dsn}{'&' if '?' in dsn else '?'}schema={new_schema()}"
    else:
        url = str(tmp_path / "world.db")

    async def begin() -> None:
        world = await _open(url)
        try:
            monkeypatch.setenv(DEPLOYMENT_ENV, "A")
            run = await start(pinned, 5, world=world, run_id="two-versions")
            monkeypatch.delenv(DEPLOYMENT_ENV)
            await enqueue_wake(world, run.run_id)  # unversioned too: B will see it
        finally:
            await world.close()

    async def status() -> tuple[RunStatus, object]:
        world = await _open(url)
        try:
            run = get_run("two-versions", world=world)
            state = await run.status()
            return state, (await run.result()) if state is RunStatus.COMPLETED else None
        finally:
            await world.close()

    asyncio.run(begin())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    env.pop(DEPLOYMENT_ENV, None)
    b = _worker(["--deployment", "B"], url, tmp_path, env)
    try:
        _read_until(b, "is pinned to version A; this worker serves B")
    finally:
        _stop(b)
    assert asyncio.run(status()) == (RunStatus.PENDING, None)
    a = _worker([], url, tmp_path, {**env, DEPLOYMENT_ENV: "A"})
    try:
        _read_until(a, "run two-versions completed")
    finally:
        _stop(a)
    assert asyncio.run(status()) == (RunStatus.COMPLETED, 10)


async def _open(url: str) -> World:
    if url.startswith("postgresql://"):
        from durasim.scenarios._cli_world import open_world

        return await open_world(url)
    return SQLiteWorld(url)


def _worker(extra: list[str], url: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*CLI, "worker", "wf_pinned", "--world", url, *extra],
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert process.stderr is not None
    return process


def _read_until(process: subprocess.Popen[str], text: str) -> None:
    assert process.stderr is not None
    seen = []
    # The worker's own progress lines, no wall-clock wait; a worker that never says
    # ``text`` is killed by the guard (a hang would otherwise stall the suite).
    guard = threading.Timer(120, process.kill)
    guard.start()
    try:
        for line in process.stderr:
            seen.append(line)
            if text in line:
                return
    finally:
        guard.cancel()
    raise AssertionError(f"the worker ended without saying {text!r}: {''.join(seen)}")


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        assert process.stderr is not None
        process.stderr.close()


def test_the_worker_command_refuses_a_bad_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--deployment", "no spaces", "--world", "/nonexistent/x.db"])
    assert exited.value.code == 2
    assert "--deployment 'no spaces' is not valid" in capsys.readouterr().err
