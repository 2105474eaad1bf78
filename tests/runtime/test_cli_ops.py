"""Failures you can read and runs you can find: ``durasim run``, ``worker``, ``inspect``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durasim.runtime import Worker, start
from durasim.scenarios import main
from durasim.worlds import FixedClock, SQLiteWorld

FLOWS = textwrap.dedent(
    """
    from datetime import timedelta

    from durasim.runtime import RetryableError, get_step_metadata, step, workflow

    @step(max_retries=1)
    def lookup(key):
        if get_step_metadata().attempt == 1:
            raise RetryableError("busy", retry_after=timedelta(milliseconds=10))
        table = {"a": 1}
        return table[key]  # the line the traceback must show

    @workflow
    async def fails(key):
        return await lookup(key)

    @step
    def double(x):
        return 2 * x

    @workflow
    async def fine(x):
        return await double(x)
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durasim.scenarios", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
        check=False,
    )


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    (tmp_path / "opsflows.py").write_text(FLOWS)
    return tmp_path


def test_durasim_run_names_the_step_the_attempt_and_shows_the_traceback(flows: Path) -> None:
    done = _cli(flows, "run", "opsflows.py:fails", "missing", "--world", "w.db")
    assert done.returncode == 1
    err = done.stderr
    # each retry on one line, with its attempt and delay
    assert "step lookup (step//opsflows//lookup#1) attempt 1 failed (RetryableError: busy)" in err
    assert "retry 2 in 0.01 s" in err
    # the end: the run, the step, the attempt, the traceback of the step's own code
    assert "failed (USER_ERROR) in step step//opsflows//lookup (step//opsflows//lookup#1), " in err
    assert "attempt 2:" in err
    assert "Traceback (most recent call last):" in err
    assert "return table[key]  # the line the traceback must show" in err
    assert "KeyError: 'missing'" in err
    assert "_step_threads.py" not in err  # the runtime's own frames are left out
    run_id = err.split()[1]
    shown = _cli(flows, "inspect", "run", run_id, "--world", "w.db")
    assert shown.returncode == 0, shown.stderr
    assert "failed (USER_ERROR) in step step//opsflows//lookup" in shown.stdout
    assert "return table[key]" in shown.stdout
    assert "KeyError: 'missing'" in shown.stdout
    as_json = json.loads(_cli(flows, "inspect", "run", run_id, "--world", "w.db", "--json").stdout)
    assert as_json["error"]["error"] == "builtins.KeyError"
    assert "return table[key]" in as_json["error"]["traceback"]
    assert as_json["failed_step"]["attempt"] == 2
    assert as_json["input"] == {"args": ["missing"], "kwargs": {}}


def _start_in_subprocess(tmp_path: Path, world: Path, target: str, arg: str, run_id: str) -> None:
    starter = textwrap.dedent(
        f"""
        import asyncio
        import opsflows
        from durasim.runtime import start
        from durasim.worlds import SQLiteWorld
        async def go():
            w = SQLiteWorld({str(world)!r})
            await start(opsflows.{target}, {arg!r}, world=w, run_id={run_id!r})
            await w.close()
        asyncio.run(go())
        """
    )
    subprocess.run(
        [sys.executable, "-c", starter], check=True, cwd=tmp_path, env=_env(tmp_path), timeout=60
    )


def _serve_until(tmp_path: Path, world: Path, marker: str, *extra: str) -> list[str]:
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durasim.scenarios",
            "worker",
            "opsflows",
            "--world",
            str(world),
            *list(extra),
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert worker.stderr is not None
    lines = []
    watchdog = threading.Timer(90, worker.kill)  # a missing line fails the test, not CI
    watchdog.start()
    try:
        for line in worker.stderr:
            lines.append(line)
            if marker in line:
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
        lines += worker.stderr.read().splitlines(keepends=True)
        worker.stderr.close()
        watchdog.cancel()
    return lines


def test_the_workers_log_shows_each_attempt_and_the_runs_failure(flows: Path) -> None:
    world = flows / "w.db"
    _start_in_subprocess(flows, world, "fails", "missing", "bad")
    text = "".join(_serve_until(flows, world, "durasim worker: run bad failed"))
    assert "run bad: step lookup (step//opsflows//lookup#1) attempt 1 failed" in text
    assert "retry 2 in 0.01 s" in text
    assert "failed on attempt 2; no retry left" in text
    assert "run bad failed (USER_ERROR): KeyError: 'missing'" in text
    assert "return table[key]" in text
    assert "durasim worker: run bad failed" in text  # not "finished"


def test_the_workers_json_log_has_the_run_the_step_and_the_attempt_as_fields(flows: Path) -> None:
    world = flows / "w.db"
    _start_in_subprocess(flows, world, "fails", "missing", "bad")
    lines = _serve_until(flows, world, "durasim worker: run bad failed", "--log-format", "json")
    records = [json.loads(line) for line in lines if line.strip()]
    retry = next(r for r in records if r.get("outcome") == "retrying")
    assert retry["run_id"] == "bad"
    assert retry["step"] == "lookup"
    assert retry["step_id"] == "step//opsflows//lookup#1"
    assert retry["attempt"] == 1
    assert retry["retry_in"] == pytest.approx(0.01)
    assert retry["level"] == "warning"
    failed = next(r for r in records if r.get("outcome") == "failed" and "step" in r)
    assert failed["attempt"] == 2
    assert "return table[key]" in failed["message"]
    run_end = next(r for r in records if r.get("error_code") == "USER_ERROR")
    assert run_end["run_id"] == "bad"


def test_inspect_runs_filters_by_status_workflow_age_and_count(
    flows: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(flows)
    monkeypatch.syspath_prepend(str(flows))
    import opsflows  # type: ignore[import-not-found]

    async def make() -> None:
        # A clock the test moves: the retry of "other" is due once it is advanced.
        clock = FixedClock(current=datetime.now(UTC))
        world = SQLiteWorld(flows / "w.db", clock=clock)
        try:
            for i in range(3):
                await start(opsflows.fine, i, world=world, run_id=f"ok{i}")
            await start(opsflows.fails, "a", world=world, run_id="other")
            worker = Worker(world)
            await worker.drain()
            clock.advance(1)
            await worker.drain()
        finally:
            await world.close()

    asyncio.run(make())
    capsys.readouterr()

    def runs(*args: str) -> list[dict[str, str]]:
        assert main(["inspect", "runs", "--world", "w.db", "--json", *args]) == 0
        rows: list[dict[str, str]] = json.loads(capsys.readouterr().out)
        return rows

    every = runs()
    assert {r["run_id"] for r in every} == {"ok0", "ok1", "ok2", "other"}
    assert all(r["created_at"] and r["updated_at"] for r in every)
    assert {r["run_id"] for r in runs("--workflow", "fine")} == {"ok0", "ok1", "ok2"}
    assert {r["run_id"] for r in runs("--workflow", "workflow//opsflows//fails")} == {"other"}
    assert {r["run_id"] for r in runs("--status", "completed")} == {"ok0", "ok1", "ok2", "other"}
    assert runs("--status", "failed") == []
    assert len(runs("--limit", "2")) == 2
    assert len(runs("--since", "1h")) == 4
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert runs("--since", future) == []
    assert main(["inspect", "runs", "--world", "w.db", "--status", "done"]) == 1
    assert "not a run status" in capsys.readouterr().err
    assert main(["inspect", "runs", "--world", "w.db", "--since", "yesterday"]) == 1
    assert "--since 'yesterday'" in capsys.readouterr().err
    assert main(["inspect", "runs", "--world", "w.db"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert len(text) == 4
    assert text[0].split()[1] == "completed"
    datetime.fromisoformat(text[0].split()[2])  # the created time, then the updated time


WAITING = textwrap.dedent(
    """
    import asyncio

    from durasim.runtime import create_hook, create_webhook, step, workflow

    @step
    def ping():
        return "pong"

    @workflow
    async def waits():
        await ping()
        hook = create_hook(token="approve-1")
        webhook = create_webhook()
        nap = asyncio.ensure_future(asyncio.sleep(3600))
        done, _ = await asyncio.wait([hook, webhook, nap], return_when=asyncio.FIRST_COMPLETED)
        return "woke"
    """
)


def test_inspect_run_shows_what_a_run_waits_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "opswaits.py").write_text(WAITING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import opswaits  # type: ignore[import-not-found]

    async def make() -> None:
        world = SQLiteWorld(tmp_path / "w.db")
        try:
            await start(opswaits.waits, world=world, run_id="w1")
            await Worker(world).drain()
        finally:
            await world.close()

    asyncio.run(make())
    capsys.readouterr()
    assert main(["inspect", "run", "w1", "--world", "w.db", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["status"] == "running"
    waiting = body["waiting_on"]
    tokens = {h["token"]: h for h in waiting["active_hooks"]}
    assert "approve-1" in tokens
    assert "url" not in tokens["approve-1"]
    (webhook,) = [h for h in waiting["active_hooks"] if h["is_webhook"]]
    assert webhook["url"] == f"/webhooks/{webhook['token']}"
    (wait,) = waiting["waits"]
    resume_at = datetime.fromisoformat(wait["resume_at"])
    created = datetime.fromisoformat(body["created_at"])
    assert timedelta(minutes=59) < resume_at - created < timedelta(minutes=61)
    args = ["inspect", "run", "w1", "--world", "w.db", "--webhook-base", "https://app.example/"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "waiting on:" in text
    assert "hook " in text
    assert "token 'approve-1'" in text
    assert f"at https://app.example/webhooks/{webhook['token']}" in text
    assert f"resumes at {wait['resume_at']}" in text


def test_inspect_events_shows_times_and_decoded_payloads(
    flows: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(flows)
    monkeypatch.syspath_prepend(str(flows))
    import opsflows

    async def make() -> None:
        world = SQLiteWorld(flows / "w.db")
        try:
            await start(opsflows.fine, 21, world=world, run_id="f1")
            await Worker(world).drain()
        finally:
            await world.close()

    asyncio.run(make())
    capsys.readouterr()
    assert main(["inspect", "events", "f1", "--world", "w.db"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["#1", "run_created"]
    datetime.fromisoformat(lines[0].split()[3])
    assert 'input={"args": [21], "kwargs": {}}' in lines[0]
    assert "output=42" in lines[-1]
    assert main(["inspect", "events", "f1", "--world", "w.db", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records[0]["decoded"]["input"] == {"args": [21], "kwargs": {}}
    assert records[-1]["decoded"]["output"] == 42
    assert "$bytes" in json.dumps(records[0]["data"])  # the lossless form is kept beside it


def test_payloads_that_do_not_decode_are_marked_bytes() -> None:
    from durasim.scenarios._cli_inspect import json_value, payload_json

    assert payload_json(b"card declined") == {"bytes": "Y2FyZCBkZWNsaW5lZA==", "encoding": "base64"}
    assert json_value({1: b"\x00"}) == {"items": [[1, {"bytes": "AA==", "encoding": "base64"}]]}
    assert json_value(float("nan")) == {"float": "nan"}
    assert json_value({"when": datetime(2026, 1, 2, tzinfo=UTC)}) == {
        "when": "2026-01-02T00:00:00+00:00"
    }


def test_log_records_carry_the_run_the_step_and_the_attempt_as_fields(
    flows: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(flows)
    monkeypatch.syspath_prepend(str(flows))
    import opsflows

    async def make() -> None:
        world = SQLiteWorld(flows / "w.db")
        try:
            await start(opsflows.fails, "missing", world=world, run_id="lr")
            await Worker(world).drain()  # attempt 1: a retry is recorded and logged
        finally:
            await world.close()

    with caplog.at_level("INFO", logger="durasim.runtime"):
        asyncio.run(make())
    retry = next(r for r in caplog.records if getattr(r, "outcome", None) == "retrying")
    assert (retry.run_id, retry.step, retry.attempt) == ("lr", "lookup", 1)  # type: ignore[attr-defined]
    assert retry.step_id == "step//opsflows//lookup#1"  # type: ignore[attr-defined]
    assert retry.retry_in == pytest.approx(0.01)  # type: ignore[attr-defined]
    assert "return table[key]" not in retry.getMessage()  # attempt 1 raised RetryableError
    assert "RetryableError: busy" in retry.getMessage()
