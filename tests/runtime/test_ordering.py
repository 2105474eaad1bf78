"""asyncio.wait / as_completed inside workflows replay identically in another process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import wf_ordering
from _drive import run_to_end

from durasim.runtime import WorkflowSandboxError, wait
from durasim.runtime._client import start
from durasim.worlds import CountingIds, FixedClock, SQLiteWorld

HERE = Path(__file__).parent


async def _run_racing(path: Path) -> tuple[str, list[str], list[str | None]]:
    clock = FixedClock()
    world = SQLiteWorld(path, clock=clock, ids=CountingIds())
    run = await start(wf_ordering.racing, world=world)
    await run_to_end(world, clock, run)
    result = await run.result()
    issued = [e.correlation_id for e in await run.events() if e.type.value == "step_created"]
    await world.close()
    return run.run_id, result, issued


def test_fresh_process_replays_the_same_step_order(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    run_id, result, issued = asyncio.run(_run_racing(path))
    assert result[:1] == ["A-1A-2"]
    assert sorted(result[1:4]) == ["B-1B-2", "C-1C-2", "D-1D-2"]
    assert result[4:] == ["X", "Y", "Z"]
    for seed in ("1", "2"):  # different hash seeds: different set orders for plain objects
        out = subprocess.run(
            [sys.executable, str(HERE / "replay_cold.py"), str(path), run_id],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        cold = json.loads(out.stdout)
        assert cold["ok"] is True
        assert cold["value"] == result
        assert cold["issued"] == issued


def test_a_set_of_coroutines_is_refused_with_the_replacement_named() -> None:
    async def body() -> None:
        async def noop() -> None:
            return None

        coroutines = {noop(), noop()}
        try:
            with pytest.raises(WorkflowSandboxError, match="pass a list"):
                await wait(coroutines)
        finally:
            for coroutine in coroutines:
                coroutine.close()

    asyncio.run(body())
