"""The SQLite World across real processes: kill -9 mid-write, shared files, the fence.

These tests start child processes (``sqlite_writer.py``) and kill them with
SIGKILL at arbitrary moments.  They wait on pipes, never on the wall clock.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from durasim.worlds import EventRequest, SQLiteWorld

WRITER = Path(__file__).with_name("sqlite_writer.py")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL")


def _spawn(path: Path, mode: str, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(path), mode, run_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _new_run(path: Path) -> str:
    world = SQLiteWorld(path)
    try:
        created = await world.events.create(
            None, EventRequest.of("run_created", workflow_name="crash", input=b"")
        )
        await world.events.create(created.run.run_id, EventRequest.of("run_started"))
        return created.run.run_id
    finally:
        await world.close()


def _read_promises(child: subprocess.Popen[str], count: int) -> int:
    """Read ``count`` committed positions from the child; return the last one."""
    assert child.stdout is not None
    last = 0
    for _ in range(count):
        line = child.stdout.readline()
        assert line, "writer exited early"
        last = int(line)
    return last


async def _verify(path: Path, run_id: str) -> int:
    world = SQLiteWorld(path)
    try:
        world._check()  # every row equals the fold of its log; positions dense from 1
        events = []
        page = await world.events.list(run_id, limit=5000)
        last = page.snapshot.seq
        events += page.events
        while page.has_more:
            page = await world.events.list(run_id, after_seq=page.next_after, limit=5000)
            events += page.events
        assert [e.seq for e in events] == list(range(1, last + 1))
        for event in events[2:]:
            # every stored event is whole: its payload has the length it was written with
            assert len(event.data["input"]) >= 64
        return last
    finally:
        await world.close()


def test_kill_9_mid_write_loses_no_committed_event(tmp_path: Path) -> None:
    """A writer killed at random moments: every position it was told of survives."""
    path = tmp_path / "crash.db"
    run_id = asyncio.run(_new_run(path))
    rng = random.Random(20261129)
    for _ in range(6):
        child = _spawn(path, "append", run_id)
        promised = _read_promises(child, rng.randint(5, 120))
        # Kill while it is inside its next write, without waiting for a line.
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL
        assert child.stdout is not None
        child.stdout.close()
        assert child.stdin is not None
        child.stdin.close()
        stored = asyncio.run(_verify(path, run_id))
        assert stored >= promised, f"committed #{promised} but only #{stored} survived"


def test_several_processes_share_one_file(tmp_path: Path) -> None:
    """Three processes append to one run at once: one dense log, nothing lost."""
    path = tmp_path / "shared.db"
    run_id = asyncio.run(_new_run(path))
    children = [_spawn(path, "append", run_id) for _ in range(3)]
    promised = [_read_promises(child, 60) for child in children]
    for child in children:
        child.kill()
        child.wait()
        for stream in (child.stdout, child.stdin):
            assert stream is not None
            stream.close()
    stored = asyncio.run(_verify(path, run_id))
    assert stored >= max(promised)
    # 2 run events + at least 60 writes (single or batch of 5) from each process
    assert stored >= 2 + 3 * 60


def test_in_band_fence_across_processes(tmp_path: Path) -> None:
    """Of four processes holding the same in-band count, exactly one write lands."""
    path = tmp_path / "fence.db"
    run_id = asyncio.run(_new_run(path))
    children = [_spawn(path, "in-band", run_id) for _ in range(4)]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outcomes = []
    for child in children:
        out, _ = child.communicate()
        assert child.returncode == 0
        outcomes.append(out.strip())
    assert sorted(outcomes) == ["superseded", "superseded", "superseded", "won"]
    stored = asyncio.run(_verify_fenced(path, run_id))
    assert stored == 3


async def _verify_fenced(path: Path, run_id: str) -> int:
    world = SQLiteWorld(path)
    try:
        world._check()
        page = await world.events.list(run_id)
        assert page.snapshot.seq_in_band == 2  # run_created + the one winner
        return page.snapshot.seq
    finally:
        await world.close()
