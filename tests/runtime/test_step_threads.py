"""Sync step bodies in step threads: what ``asyncio.to_thread`` promised, cheaper."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from durasim.runtime import Limits, Worker, _step_threads, start, step, workflow
from durasim.runtime._step_threads import run_in_step_thread
from durasim.worlds import FixedClock, MemoryWorld

NAME: contextvars.ContextVar[str] = contextvars.ContextVar("NAME", default="unset")


class Departure(BaseException):
    """A ``BaseException`` that is not an ``Exception`` (like ``SystemExit``)."""


def whoami(prefix: str, *, suffix: str = "") -> tuple[str, str]:
    return f"{prefix}{NAME.get()}{suffix}", threading.current_thread().name


async def test_a_quick_body_runs_in_a_step_thread_with_the_callers_context() -> None:
    NAME.set("ada")
    value, thread = await run_in_step_thread(whoami, "hi ", suffix="!")
    assert value == "hi ada!"
    assert thread == "durasim-step"
    assert thread != threading.current_thread().name


async def test_what_the_body_raises_is_raised_from_the_await() -> None:
    def fails() -> None:
        raise ValueError("boom")

    def leaves() -> None:
        raise Departure

    with pytest.raises(ValueError, match="boom"):
        await run_in_step_thread(fails)
    with pytest.raises(Departure):
        await run_in_step_thread(leaves)


async def test_a_long_body_leaves_the_loop_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_step_threads, "QUICK_WAIT", 0.0)  # never wait synchronously
    release = threading.Event()
    seen: list[str] = []

    def blocks() -> str:
        assert release.wait(timeout=30), "the loop never got to release the body"
        return "done"

    async def meanwhile() -> None:
        seen.append("loop ran")
        release.set()

    body = asyncio.ensure_future(run_in_step_thread(blocks))
    other = asyncio.ensure_future(meanwhile())
    assert await body == "done"
    await other
    assert seen == ["loop ran"]


async def test_concurrent_bodies_run_in_different_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_step_threads, "QUICK_WAIT", 0.0)
    barrier = threading.Barrier(2, timeout=30)

    def meets() -> str:
        barrier.wait()  # only returns once both bodies run at the same time
        return threading.current_thread().name

    names = await asyncio.gather(run_in_step_thread(meets), run_in_step_thread(meets))
    assert names == ["durasim-step", "durasim-step"]


async def test_a_body_started_beside_another_is_not_waited_for_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_step_threads, "QUICK_WAIT", 30.0)  # a wait on the loop would hang
    first_go, second_go = threading.Event(), threading.Event()

    def first() -> str:
        assert first_go.wait(timeout=30)
        return "first"

    def second() -> str:
        assert second_go.wait(timeout=30)
        return "second"

    monkeypatch.setattr(_step_threads, "_slow", {first.__qualname__})  # awaited at once
    one = asyncio.ensure_future(run_in_step_thread(first))
    await asyncio.sleep(0)  # first is out
    two = asyncio.ensure_future(run_in_step_thread(second))
    await asyncio.sleep(0)  # second is out, and the loop still runs
    second_go.set()
    assert await two == "second"
    first_go.set()
    assert await one == "first"


async def test_beyond_the_thread_cap_bodies_go_to_the_default_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_step_threads, "_idle", [])
    monkeypatch.setattr(_step_threads, "_started", _step_threads.MAX_THREADS)
    value, thread = await run_in_step_thread(whoami, "x")
    assert value == "xunset"
    assert thread.startswith("asyncio_")


async def test_a_cancelled_await_lets_the_body_end_in_its_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_step_threads, "QUICK_WAIT", 0.0)
    monkeypatch.setattr(_step_threads, "_idle", [])
    release, ended = threading.Event(), threading.Event()

    def blocks() -> None:
        assert release.wait(timeout=30)
        ended.set()

    task = asyncio.ensure_future(run_in_step_thread(blocks))
    await asyncio.sleep(0)  # let it hand the body over
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(ended.wait, 30)
    assert (await run_in_step_thread(whoami, ""))[1] == "durasim-step"


# -- sync_steps="auto": quick functions run on the loop (issue 22) -------------------


def test_a_function_runs_inline_after_enough_quick_bodies_and_goes_back_after_a_slow_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_step_threads, "_quick", {})

    def body() -> None:
        pass

    for _ in range(_step_threads.INLINE_AFTER - 1):
        _step_threads.ran_inline(body, 0.0)
    assert not _step_threads.runs_inline(body)
    _step_threads.ran_inline(body, 0.0)
    assert _step_threads.runs_inline(body)
    monkeypatch.setattr(_step_threads, "_out", {object()})  # another body is out
    assert not _step_threads.runs_inline(body)
    monkeypatch.setattr(_step_threads, "_out", set())
    _step_threads.ran_inline(body, _step_threads.INLINE_BELOW)  # one slow body
    assert not _step_threads.runs_inline(body)
    # A callable with no code of its own is never inlined.
    assert not _step_threads.runs_inline(print)


@step
def where(i: int) -> str:
    return threading.current_thread().name


@workflow
async def wheres(n: int) -> list[str]:
    return [await where(i) for i in range(n)]


@pytest.mark.parametrize("mode", ["auto", "thread"])
async def test_a_worker_runs_a_quick_sync_step_inline_once_known_unless_told_thread(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr(_step_threads, "_quick", {})
    monkeypatch.setattr(_step_threads, "INLINE_BELOW", 3600.0)  # any body is quick here
    world = MemoryWorld(clock=FixedClock())
    run = await start(wheres, _step_threads.INLINE_AFTER + 3, world=world)
    await Worker(world, limits=Limits(sync_steps=mode)).drain()
    names = await run.result()
    here = threading.current_thread().name
    after = _step_threads.INLINE_AFTER
    assert names[:after] == ["durasim-step"] * after
    assert names[after:] == ([here] * 3 if mode == "auto" else ["durasim-step"] * 3)


async def test_a_step_that_turns_slow_inline_goes_back_to_the_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_step_threads, "_quick", {})
    monkeypatch.setattr(_step_threads, "INLINE_BELOW", -1.0)  # every body counts as slow
    _step_threads._quick[where.definition.fn.__code__] = _step_threads.INLINE_AFTER
    world = MemoryWorld(clock=FixedClock())
    run = await start(wheres, 3, world=world)
    await Worker(world).drain()
    assert await run.result() == [threading.current_thread().name] + ["durasim-step"] * 2
