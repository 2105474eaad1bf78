"""Hooks and child runs across fresh processes: each delivery replays the log cold."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from durasim.runtime import resume_hook
from durasim.worlds import SQLiteWorld

HERE = Path(__file__).parent


def _proc(path: Path, *args: str, hash_seed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, str(HERE / "hooks_proc.py"), str(path), *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _resume(path: Path, token: str, payload: Any) -> None:
    async def go() -> None:
        world = SQLiteWorld(path)
        try:
            await resume_hook(token, payload, world=world)
        finally:
            await world.close()

    asyncio.run(go())


def test_a_generated_token_survives_cold_replays(tmp_path: Path) -> None:
    path = tmp_path / "world.db"
    run_id = _proc(path, "start", "three_payloads", hash_seed="1")["run_id"]
    first = _proc(path, "drain", hash_seed="1")
    token = first["seen"][0]  # the step got the generated token
    assert first["runs"][run_id]["status"] == "running"
    for n, seed in zip((1, 2, 3), ("2", "3", "4"), strict=True):
        _resume(path, token, n)
        # A fresh process each time, under another hash seed: the replay must
        # reuse the recorded token, or the first step would see another input.
        out = _proc(path, "drain", hash_seed=seed)
    assert out["runs"][run_id] == {"status": "completed", "result": [1, 2, 3]}


def test_the_token_read_at_creation_is_the_recorded_one(tmp_path: Path) -> None:
    path = tmp_path / "world.db"
    run_id = _proc(path, "start", "token_then_payload", hash_seed="1")["run_id"]
    token = _proc(path, "drain", hash_seed="1")["seen"][0]
    _resume(path, token, "ok")
    out = _proc(path, "drain", hash_seed="2")  # replays cold, then completes
    assert out["runs"][run_id] == {"status": "completed", "result": [token, "ok"]}


def test_children_complete_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "world.db"
    run_id = _proc(path, "start", "parent", "[4]", hash_seed="5")["run_id"]
    for seed in ("6", "7", "8", "9", "10", "11"):
        out = _proc(path, "drain", hash_seed=seed)
        if out["runs"][run_id]["status"] == "completed":
            break
    assert out["runs"][run_id]["result"] == [f"{run_id}-c1", 40, 50]
    assert out["runs"][f"{run_id}-c1"]["status"] == "completed"
