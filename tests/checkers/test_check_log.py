"""Logs exported as JSON lines, read back losslessly, and checked offline by `durasim check-log`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))

import wf_hooks

from durasim.checkers import LogFileError, event_from_json, event_to_json, load_logs
from durasim.runtime import Worker, resume_hook, start
from durasim.scenarios._cli import main
from durasim.worlds import SQLiteWorld


def _finished_world(path: Path) -> str:
    async def go() -> str:
        world = SQLiteWorld(path)
        try:
            run = await start(wf_hooks.three_payloads, world=world)
            await Worker(world).drain()
            token = (await world.hooks.list(run.run_id))[0].token
            for n in range(3):
                await resume_hook(token, n, world=world, resume_id=f"r{n}")
            await Worker(world).drain()
            assert await run.result() == [0, 1, 2]
            for event in await run.events():  # every event survives the round trip
                assert event_from_json(event_to_json(event)) == event
            return run.run_id
        finally:
            await world.close()

    return asyncio.run(go())


def test_an_exported_log_checks_clean_and_a_doctored_one_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "w.db"
    run_id = _finished_world(db)
    assert main(["inspect", "events", run_id, "--json", "--world", str(db)]) == 0
    exported = capsys.readouterr().out
    good = tmp_path / "good.jsonl"
    good.write_text(exported)
    assert main(["check-log", str(good)]) == 0
    assert capsys.readouterr().out.startswith("OK: 1 run(s)")

    lines = exported.splitlines()
    disposed = next(i for i, line in enumerate(lines) if '"hook_disposed"' in line)
    extra = json.loads(lines[disposed])
    extra["seq"] = len(lines) + 1
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    (bad_dir / "run.jsonl").write_text("\n".join([*lines, json.dumps(extra)]) + "\n")
    assert main(["check-log", str(bad_dir)]) == 1
    out = capsys.readouterr().out
    assert "[run.after_terminal]" in out
    assert f"#{len(lines) + 1} hook_disposed" in out


def test_a_file_that_is_not_an_exported_log_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.jsonl"
    first = {
        "run_id": "r",
        "seq": 1,
        "type": "run_created",
        "created_at": "2024-01-01T00:00:00+00:00",
    }
    bad.write_text(json.dumps(first) + "\nnot json\n")
    assert main(["check-log", str(bad)]) == 1
    assert f"{bad}:2: not an exported event" in capsys.readouterr().err
    with pytest.raises(LogFileError, match="does not exist"):
        load_logs(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LogFileError, match="holds no"):
        load_logs(empty)
