"""kill -9 a worker process at the worst moments; a new worker finishes the run.

The first worker runs in a child process on the real clock; the recovering
worker runs here with a clock set past the dead worker's lease (virtual time: no
waiting for the lease to expire).  Every time, the run ends with the result of an
uninterrupted run, every step's outcome is recorded exactly once, and the World's
rows still equal the fold of its log.
"""

from __future__ import annotations

import asyncio
import importlib
import random
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _drive import run_to_end

from durasim.runtime import get_run
from durasim.worlds import FixedClock, SQLiteWorld

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL")

N_STEPS = 12
FLOWS = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from durasim.runtime import get_step_metadata, step, workflow

    HERE = Path(__file__).parent

    @step
    def work(i):
        with open(HERE / "effects.txt", "a") as out:
            out.write(f"{i}\\n")
        print(f"step {i}", flush=True)
        marker = HERE / f"die-after-{i}"
        if marker.exists():
            marker.unlink()
            os.kill(os.getpid(), signal.SIGKILL)  # the body ran; its outcome is not recorded
        hang = HERE / f"hang-in-{i}"
        if hang.exists():
            hang.unlink()
            print("hanging", flush=True)
            sys.stdin.readline()  # blocks until the parent kills us
        return i * i

    @workflow
    async def crashy(n):
        total = 0
        for i in range(n):
            total += await work(i)
        return total
    """
)
WORKER = textwrap.dedent(
    """
    import asyncio, importlib, sys
    sys.path.insert(0, sys.argv[1])
    flows = importlib.import_module(sys.argv[4])
    from durasim.runtime import Worker, get_run, start
    from durasim.worlds import SQLiteWorld

    async def go():
        world = SQLiteWorld(sys.argv[2])
        run = await start(flows.crashy, int(sys.argv[3]), world=world, run_id="crashy")
        # A short lease: a restarted worker takes over a dead one's message quickly.
        await Worker(world, lease_seconds=1).run_until_complete(run, poll=0.2)

    asyncio.run(go())
    """
)
EXPECTED = sum(i * i for i in range(N_STEPS))


def _module(tmp_path: Path) -> str:
    return next(p.stem for p in tmp_path.glob("crashflows_*.py"))


def _spawn(tmp_path: Path) -> subprocess.Popen[str]:
    args = [str(tmp_path), str(tmp_path / "w.db"), str(N_STEPS), _module(tmp_path)]
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _reap(child: subprocess.Popen[str]) -> None:
    child.wait()
    for stream in (child.stdin, child.stdout):
        assert stream is not None
        stream.close()


async def _recover(tmp_path: Path) -> tuple[int, Counter[str]]:
    importlib.import_module(_module(tmp_path))  # this worker serves the same code
    # Past any lease the dead worker held: the queue hands its message over at once.
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5))
    world = SQLiteWorld(tmp_path / "w.db", clock=clock)
    try:
        run = get_run("crashy", world=world)
        await run_to_end(world, clock, run)
        result = await run.result()
        outcomes = Counter(
            e.correlation_id
            for e in await run.events()
            if e.type.value in ("step_completed", "step_failed")
        )
        world._check()
        return result, outcomes
    finally:
        await world.close()


def _effects(tmp_path: Path) -> Counter[int]:
    return Counter(int(line) for line in (tmp_path / "effects.txt").read_text().split())


@pytest.fixture
def flows_dir(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    # One module name per test: step ids include it, and the registry refuses one
    # id defined in two files.
    name = f"crashflows_{request.node.name.removeprefix('test_')}"
    (tmp_path / f"{name}.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def _check(tmp_path: Path) -> Counter[int]:
    result, outcomes = asyncio.run(_recover(tmp_path))
    assert result == EXPECTED
    assert len(outcomes) == N_STEPS
    assert set(outcomes.values()) == {1}, f"an outcome recorded twice: {outcomes}"
    return _effects(tmp_path)


def test_kill_during_a_step_body(flows_dir: Path) -> None:
    (flows_dir / "hang-in-5").touch()
    child = _spawn(flows_dir)
    assert child.stdout is not None
    for line in child.stdout:
        if line.strip() == "hanging":
            break
    child.send_signal(signal.SIGKILL)
    _reap(child)
    effects = _check(flows_dir)
    assert effects[5] == 2  # the interrupted attempt, then the one that was recorded
    assert all(effects[i] == 1 for i in range(N_STEPS) if i != 5)


def test_kill_between_a_step_body_and_its_record(flows_dir: Path) -> None:
    (flows_dir / "die-after-7").touch()
    child = _spawn(flows_dir)
    _reap(child)
    assert child.returncode == -signal.SIGKILL
    effects = _check(flows_dir)
    assert effects[7] == 2  # at least once: the body ran again, its outcome is recorded once
    assert all(effects[i] == 1 for i in range(N_STEPS) if i != 7)


def test_kill_at_random_moments(flows_dir: Path) -> None:
    """Kill the worker after a random number of step bodies, three times, then recover."""
    rng = random.Random(20261129)
    for _ in range(3):
        child = _spawn(flows_dir)
        assert child.stdout is not None
        target = rng.randint(1, 4)
        seen = 0
        for line in child.stdout:
            seen += line.startswith("step")
            if seen >= target:
                break
        child.send_signal(signal.SIGKILL)  # lands in a write, a body or the replay
        _reap(child)
    effects = _check(flows_dir)
    assert set(effects) == set(range(N_STEPS))
