"""Leases and step errors across real ``durasim worker`` processes on one SQLite file.

* An async step that blocks its event loop for 3x the lease runs once, though a
  second worker waits for the message the whole time: the heartbeat thread
  renews the lease while the loop is stuck, and the worker logs the step.
* A step raising ``SystemExit`` or ``KeyboardInterrupt`` fails that attempt
  (retried while attempts remain); the worker stays up and serves on.
* SIGINT while a step blocks the loop stops the worker gracefully: the step
  ends, its outcome is recorded, and the worker exits 0.

The tests wait for processes (bounded), never assert a duration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import leaseflows
import pytest

from durasim.runtime import start
from durasim.worlds import EventType, SQLiteWorld

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses POSIX signals")

HERE = Path(__file__).parent
LEASE = 1.0
DEADLINE = 60.0


def _worker(world: Path, log: Path, *options: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return _spawn(world, err, *options)


def _spawn(world: Path, err: Any, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durasim.scenarios",
            "worker",
            "leaseflows",
            "--world",
            str(world),
            *list(options),
        ],
        stderr=err,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        },
    )


async def _start(world_path: Path, flow: Any, *args: Any) -> str:
    world = SQLiteWorld(world_path)
    try:
        return (await start(flow, *args, world=world)).run_id
    finally:
        await world.close()


async def _ended(world_path: Path, run_ids: list[str]) -> dict[str, Any]:
    """Wait (bounded) until every run ended; their runs by id."""
    world = SQLiteWorld(world_path)
    try:
        give_up = time.monotonic() + DEADLINE
        while True:
            runs = {r: await world.runs.get(r) for r in run_ids}
            if all(run.status.terminal for run in runs.values()):
                return runs
            assert time.monotonic() < give_up, f"runs did not end: {runs}"
            await asyncio.sleep(0.05)  # a real process is working: poll its progress
    finally:
        await world.close()


async def _events(world_path: Path, run_id: str) -> list[Any]:
    world = SQLiteWorld(world_path)
    try:
        return list((await world.events.list(run_id)).events)
    finally:
        await world.close()


def _stop(*workers: subprocess.Popen[bytes]) -> None:
    for worker in workers:
        assert worker.poll() is None, "a worker died"
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(timeout=30) == 0


def test_a_step_blocking_its_loop_for_three_leases_runs_once(tmp_path: Path) -> None:
    world, marks = tmp_path / "w.db", tmp_path / "marks"
    run_id = asyncio.run(_start(world, leaseflows.busy, str(marks), 3 * LEASE))
    options = ("--lease-seconds", str(LEASE), "--renew-every", str(LEASE / 5))
    logs = [tmp_path / "a.err", tmp_path / "b.err"]
    workers = [_worker(world, log, *options) for log in logs]
    try:
        runs = asyncio.run(_ended(world, [run_id]))
    finally:
        _stop(*workers)
    assert runs[run_id].status.value == "completed"
    lines = marks.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["start", "end"]  # one body, not 4
    started = [e for e in asyncio.run(_events(world, run_id)) if e.type is EventType.STEP_STARTED]
    assert len(started) == 1
    # The worker that ran it says which step blocked its loop.
    ran = lines[0].split()[1]
    stderr = logs[[str(w.pid) for w in workers].index(ran)].read_text()
    assert "blocked the worker's event loop" in stderr
    assert "blocker" in stderr


def test_system_exit_and_keyboard_interrupt_in_steps_fail_the_attempt(tmp_path: Path) -> None:
    world = tmp_path / "w.db"
    marks = {name: tmp_path / name for name in ("once", "forgood", "kbd")}
    run_ids = [
        asyncio.run(_start(world, leaseflows.exits_for_good, str(marks["forgood"]))),
        asyncio.run(_start(world, leaseflows.exiting, str(marks["once"]))),
        asyncio.run(_start(world, leaseflows.interrupting, str(marks["kbd"]))),
    ]
    worker = _worker(world, tmp_path / "w.err")
    try:
        runs = asyncio.run(_ended(world, run_ids))
        assert worker.poll() is None  # the worker survived all of it
    finally:
        _stop(worker)
    forgood, once, kbd = (runs[r] for r in run_ids)
    assert forgood.status.value == "failed"
    assert (once.status.value, kbd.status.value) == ("completed", "completed")
    assert len(marks["once"].read_text().splitlines()) == 2  # failed once, retried once
    assert len(marks["kbd"].read_text().splitlines()) == 2
    failed = [e for e in asyncio.run(_events(world, run_ids[0])) if e.type is EventType.STEP_FAILED]
    assert len(failed) == 1
    assert b"SystemExit" in failed[0].data["error"]
    assert b"usage: tool" in failed[0].data["error"]
    retried = [
        e for e in asyncio.run(_events(world, run_ids[1])) if e.type is EventType.STEP_RETRYING
    ]
    assert len(retried) == 1
    assert b"SystemExit" in retried[0].data["error"]


def test_sigint_while_a_step_blocks_the_loop_stops_the_worker_gracefully(tmp_path: Path) -> None:
    world, marks = tmp_path / "w.db", tmp_path / "marks"
    run_id = asyncio.run(_start(world, leaseflows.busy, str(marks), 1.0))
    log = tmp_path / "w.err"
    worker = _worker(world, log)
    give_up = time.monotonic() + DEADLINE
    while not (marks.exists() and marks.read_text()):  # the step body has begun
        assert time.monotonic() < give_up
        assert worker.poll() is None
        time.sleep(0.01)
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=30) == 0
    assert "stopped" in log.read_text()
    assert "KeyboardInterrupt" not in log.read_text()
    types = [e.type for e in asyncio.run(_events(world, run_id))]
    assert EventType.STEP_COMPLETED in types
    assert EventType.STEP_FAILED not in types
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["start", "end"]
