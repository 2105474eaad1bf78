"""``durasim run/worker/inspect/cancel --world postgresql://...``: the CLI on PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _postgres_support import new_schema, require_postgres

from durasim.scenarios import main
from durasim.scenarios._cli_world import split_schema

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "examples" / "quickstart.py")
CLI = [sys.executable, "-m", "durasim.scenarios"]


@pytest.fixture
def url() -> str:
    dsn = require_postgres()
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={new_schema()}"


def test_the_schema_comes_out_of_the_url() -> None:
    assert split_schema("postgresql://u@h/db?schema=orders&sslmode=disable") == (
        "postgresql://u@h/db?sslmode=disable",
        "orders",
    )
    assert split_schema("postgres://u@h:5433/db") == ("postgres://u@h:5433/db", "durasim")


def test_run_inspect_and_cancel_on_postgres(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", f"{QUICKSTART}:checkout", "2", "--world", url, "--run-id", "pg1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["payment"] == {"charged": 20, "currency": "EUR"}
    assert not (tmp_path / ".durasim").exists(), "the SQLite World was used"
    assert main(["inspect", "runs", "--json", "--world", url]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["run_id"], row["status"]) == ("pg1", "completed")
    assert main(["inspect", "run", "pg1", "--json", "--world", url]) == 0
    assert [s["status"] for s in json.loads(capsys.readouterr().out)["steps"]] == ["completed"] * 3
    assert main(["inspect", "events", "pg1", "--world", url]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[:2][1] == "run_completed"
    assert main(["cancel", "pg1", "--world", url]) == 1  # a completed run cannot be cancelled
    assert "pg1" in capsys.readouterr().err


def test_an_unreachable_server_is_a_clear_error_at_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://someone:secret@127.0.0.1:1/nowhere?schema=orders"
    assert main(["worker", "--world", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("durasim worker: cannot reach PostgreSQL at")
    assert "127.0.0.1" in err
    assert "secret" not in err
    assert main(["inspect", "runs", "--world", url]) == 1
    assert "cannot reach PostgreSQL" in capsys.readouterr().err


def test_a_worker_process_serves_a_run_started_by_another(url: str, tmp_path: Path) -> None:
    """``durasim worker`` in a subprocess; ``durasim run`` is not needed to start runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), *sys.path])}
    worker = subprocess.Popen(
        [*CLI, "worker", "quickstart", "--world", url],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert worker.stderr is not None
    try:
        assert "serving PostgresWorld(" in worker.stderr.readline()
        started = subprocess.run(
            [*CLI, "run", "quickstart:checkout", "3", "--world", url, "--run-id", "pgsub"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["payment"]["charged"] == 30
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        worker.stderr.close()
