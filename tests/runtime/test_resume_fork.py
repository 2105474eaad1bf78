"""``durasim start``, ``resume`` and ``fork``: runs you can drive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from durasim.scenarios import main

FLOWS = textwrap.dedent(
    """
    from pathlib import Path
    from durasim.runtime import step, workflow

    def _count(name):
        path = Path("calls-" + name)
        path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))

    @step
    def first(x):
        _count("first")
        return x + 1

    @step
    def second(x):
        _count("second")
        return x * 2

    @step(max_retries=0)
    def flaky(x):
        _count("flaky")
        if not Path("fixed").exists():
            raise RuntimeError("not fixed yet")
        return x * 10

    @workflow
    async def pipeline(x):
        a = await first(x)
        b = await second(a)
        c = await flaky(b)
        return [a, b, c]
    """
)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durasim.scenarios", *args, "--world", "w.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
        check=False,
    )


def _calls(tmp_path: Path, name: str) -> int:
    return int((tmp_path / f"calls-{name}").read_text())


@pytest.fixture
def failed_run(tmp_path: Path) -> str:
    (tmp_path / "driven.py").write_text(FLOWS)
    done = _cli(tmp_path, "run", "driven.py:pipeline", "1", "--run-id", "src")
    assert done.returncode == 1
    assert "RuntimeError: not fixed yet" in done.stderr
    return "src"


def test_start_returns_the_run_id_at_once_and_a_worker_serves_it(tmp_path: Path) -> None:
    (tmp_path / "driven.py").write_text(FLOWS)
    (tmp_path / "fixed").touch()
    done = _cli(tmp_path, "start", "driven.py:pipeline", "2", "--run-id", "s1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "s1"
    shown = json.loads(_cli(tmp_path, "inspect", "run", "s1", "--json").stdout)
    assert shown["status"] == "pending"  # nothing ran it
    assert not (tmp_path / "calls-first").exists()
    minted = _cli(tmp_path, "start", "driven.py:pipeline", "2")
    assert minted.stdout.strip().startswith("wrun_")


def test_resume_reuses_the_completed_steps_and_retries_the_failed_one(
    tmp_path: Path, failed_run: str
) -> None:
    assert (_calls(tmp_path, "first"), _calls(tmp_path, "flaky")) == (1, 1)
    (tmp_path / "fixed").touch()
    done = _cli(tmp_path, "resume", failed_run, "--run-id", "again", "--wait")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "again"
    assert json.loads("\n".join(lines[1:])) == [2, 4, 40]
    # first and second were not executed again; flaky got a new attempt
    assert (_calls(tmp_path, "first"), _calls(tmp_path, "second")) == (1, 1)
    assert _calls(tmp_path, "flaky") == 2
    shown = _cli(tmp_path, "inspect", "run", "again")
    assert "a resume of run src: reuses its first 2 step results" in shown.stdout
    body = json.loads(_cli(tmp_path, "inspect", "run", "again", "--json").stdout)
    assert body["seeded_from"] == {"resume": "src", "from_step": 2}
    assert [s["attempt"] for s in body["steps"]] == [1, 1, 1]
    source = json.loads(_cli(tmp_path, "inspect", "run", "src", "--json").stdout)
    assert source["status"] == "failed"  # the source's log is left as it was


def test_fork_from_step_n_reuses_the_first_n_results(tmp_path: Path, failed_run: str) -> None:
    (tmp_path / "fixed").touch()
    done = _cli(tmp_path, "fork", failed_run, "--from-step", "1", "--run-id", "f1", "--wait")
    assert done.returncode == 0, done.stderr
    assert json.loads("\n".join(done.stdout.splitlines()[1:])) == [2, 4, 40]
    assert (_calls(tmp_path, "first"), _calls(tmp_path, "second")) == (1, 2)
    zero = _cli(tmp_path, "fork", "f1", "--from-step", "0", "--run-id", "f0", "--wait")
    assert zero.returncode == 0, zero.stderr
    assert _calls(tmp_path, "first") == 2  # nothing reused


def test_resume_and_fork_refuse_what_they_cannot_do(tmp_path: Path, failed_run: str) -> None:
    (tmp_path / "fixed").touch()
    assert _cli(tmp_path, "resume", failed_run, "--run-id", "ok", "--wait").returncode == 0
    done = _cli(tmp_path, "resume", "ok")
    assert done.returncode == 1
    assert "run ok is completed: only a failed or cancelled run can be resumed" in done.stderr
    done = _cli(tmp_path, "fork", failed_run, "--from-step", "3")
    assert done.returncode == 1
    assert "recorded 2 step results; give a number from 0 to 2" in done.stderr
    assert main(["fork", "src", "--world", str(tmp_path / "nope.db"), "--from-step", "1"]) == 1
