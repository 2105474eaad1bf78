"""``Run.result(timeout=)``: wait for a run another worker drives, up to a time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from durasim.runtime import RetryableError, RunNotFinished, Worker, start, step, workflow
from durasim.worlds import FixedClock, SQLiteWorld


@step
def twice(x: int) -> int:
    return 2 * x


@workflow
async def doubled(x: int) -> int:
    return await twice(x)


async def test_result_waits_until_the_run_ends(tmp_path: Path) -> None:
    world = SQLiteWorld(tmp_path / "w.db")
    try:
        run = await start(doubled, 21, world=world, run_id="r1")
        with pytest.raises(RunNotFinished, match="r1 is pending"):
            await run.result()  # timeout=0: does not wait
        polls = 0

        async def a_worker_elsewhere() -> None:
            nonlocal polls
            polls += 1
            await Worker(world).drain()

        assert await run.result(timeout=None, poll=a_worker_elsewhere) == 42
        assert polls == 1
        assert await run.result() == 42
    finally:
        await world.close()


async def test_result_gives_up_after_the_timeout_on_the_worlds_clock(tmp_path: Path) -> None:
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    world = SQLiteWorld(tmp_path / "w.db", clock=clock)
    try:
        run = await start(doubled, 1, world=world, run_id="r2")
        polls = 0

        async def nobody_serves_it() -> None:
            nonlocal polls
            polls += 1
            clock.advance(1)

        with pytest.raises(RunNotFinished, match=r"r2 is pending after 5 s: serve it"):
            await run.result(timeout=5, poll=nobody_serves_it)
        assert polls == 5
    finally:
        await world.close()


def test_error_constructors_take_what_the_docs_show() -> None:
    assert RetryableError(retry_after=1).retry_after == 1
    assert "retry" in str(RetryableError())
    assert RetryableError("slow down", retry_after=2.5).message == "slow down"
