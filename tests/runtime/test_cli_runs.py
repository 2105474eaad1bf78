"""``durasim run`` / ``inspect`` / ``worker`` from the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from durasim.scenarios import main

ROOT = Path(__file__).resolve().parents[2]


def test_run_prints_the_result_and_inspect_shows_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(ROOT / "examples" / "quickstart.py") + ":checkout", "2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["payment"] == {"charged": 20, "currency": "EUR"}
    assert (tmp_path / ".durasim" / "world.db").is_file()
    assert main(["inspect", "runs", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "completed"
    assert main(["inspect", "run", row["run_id"], "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in body["steps"]] == ["completed"] * 3
    assert main(["inspect", "events", row["run_id"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["#1", "run_created"]
    assert lines[-1].split()[:2] == [f"#{len(lines)}", "run_completed"]


def test_run_of_something_that_is_not_a_workflow_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(ROOT / "examples" / "quickstart.py") + ":reserve"]) == 1
    assert "workflow" in capsys.readouterr().err
    assert main(["run", "no_such_module_xyz:flow"]) == 1
    assert "cannot import no_such_module_xyz" in capsys.readouterr().err


def test_inspect_without_a_world_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "runs"]) == 1
    assert "no World at" in capsys.readouterr().err


def test_worker_serves_until_sigterm(tmp_path: Path) -> None:
    """A worker process runs a queued run, then stops cleanly on SIGTERM."""
    module = tmp_path / "flows.py"
    module.write_text(
        textwrap.dedent(
            """
            from durasim.runtime import step, workflow

            @step
            def square(x):
                return x * x

            @workflow
            async def squares(n):
                return [await square(i) for i in range(n)]
            """
        )
    )
    world = tmp_path / "w.db"
    starter = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import flows
        from durasim.runtime import start
        from durasim.worlds import SQLiteWorld
        async def go():
            w = SQLiteWorld({str(world)!r})
            run = await start(flows.squares, 4, world=w, run_id="sq")
            await w.close()
        asyncio.run(go())
        """
    )
    subprocess.run([sys.executable, "-c", starter], check=True)
    worker = subprocess.Popen(
        [sys.executable, "-m", "durasim.scenarios", "worker", "flows", "--world", str(world)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert worker.stderr is not None
    assert "serving" in worker.stderr.readline()
    # The worker logs each delivery; read until the run is reported finished.
    for line in worker.stderr:
        if line.strip() == "durasim worker: run sq completed":
            break
    reader = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import flows
        from durasim.runtime import get_run
        from durasim.worlds import SQLiteWorld
        async def go():
            w = SQLiteWorld({str(world)!r})
            print(await get_run("sq", world=w).result())
            await w.close()
        asyncio.run(go())
        """
    )
    out = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[0, 1, 4, 9]"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert "stopped" in worker.stderr.read()
    worker.stderr.close()
