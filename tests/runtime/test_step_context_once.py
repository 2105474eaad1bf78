"""Issue 22: what a delivery sets once instead of once a step, and the loop's own handle runs.

* the World and the workflow's metadata are set for the whole drive: every step
  body (async, sync inline, sync in a thread) reads its run's, and the caller of
  ``Worker.drain()`` sees neither afterwards (nor a body's step metadata);
* the workflow loop runs each handle's callback itself (``Handle._run``'s work):
  callbacks run in order, a cancelled one is skipped, an error is reported to the
  loop's handler and the next callback still runs;
* the loop installs the run's determinism while workflow code runs, and only then;
* a task running asyncio's own coroutine is still named by where it was made
  (the site walk stops at ``run_ready`` as it stopped at ``Handle._run``);
* a record decodes through the plain fast path as through the general one
  (value, type, and the keys indexed).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import Limits, Worker, _loop, start, step, workflow
from durasim.runtime._guards import RUNNING
from durasim.runtime._metadata import STEP_METADATA, STEP_WORLD, WORKFLOW_METADATA
from durasim.runtime._payloads import RunPayloads
from durasim.runtime.serialization import serialize
from durasim.worlds import FixedClock, MemoryWorld

_seen: list[tuple[str, str | None, str | None, bool]] = []


def _note(kind: str) -> None:
    workflow_meta, step_meta = WORKFLOW_METADATA.get(), STEP_METADATA.get()
    _seen.append(
        (
            kind,
            None if workflow_meta is None else workflow_meta.run_id,
            None if step_meta is None else step_meta.run_id,
            STEP_WORLD.get() is not None,
        )
    )


@step
def _sync_body(i: int) -> int:
    _note("sync")
    return i


@step
async def _async_body(i: int) -> int:
    _note("async")
    return i


@workflow
async def _both(n: int) -> int:
    total = 0
    for i in range(n):
        total += await _sync_body(i)
        total += await _async_body(i)
    return total


@pytest.mark.parametrize("sync_steps", ["auto", "thread", "inline"])
def test_every_body_reads_its_run_and_the_caller_reads_nothing_after(sync_steps: str) -> None:
    _seen.clear()

    async def go() -> tuple[str, int]:
        world = MemoryWorld(clock=FixedClock())
        first = await start(_both, 12, world=world)
        second = await start(_both, 3, world=world)
        worker = Worker(world, limits=Limits(sync_steps=sync_steps))
        await worker.drain()
        assert WORKFLOW_METADATA.get() is None
        assert STEP_WORLD.get() is None
        assert STEP_METADATA.get() is None
        assert await second.result() == 2 * sum(range(3))
        return first.run_id, await first.result()

    run_id, result = asyncio.run(go())
    assert result == 2 * sum(range(12))
    assert len(_seen) == 2 * 12 + 2 * 3
    for kind, workflow_run, step_run, has_world in _seen:
        assert kind in ("sync", "async")
        assert workflow_run == step_run  # each body reads its own run's metadata
        assert has_world
    assert sum(1 for _, run, _, _ in _seen if run == run_id) == 2 * 12


def _loop_here() -> _loop.WorkflowLoop:
    return _loop.WorkflowLoop(on_timer=lambda h: None, on_timer_cancelled=lambda h: None, now=0.0)


def test_the_loop_runs_callbacks_in_order_and_reports_errors() -> None:
    loop = _loop_here()
    seen: list[Any] = []

    def fails() -> None:
        seen.append("fails")
        raise ValueError("boom")

    loop.call_soon(seen.append, 1)
    loop.call_soon(fails)
    loop.call_soon(seen.append, 2).cancel()
    loop.call_soon(seen.append, 3)
    loop.run_ready()
    assert seen == [1, "fails", 3]
    assert len(loop.exceptions) == 1
    assert isinstance(loop.exceptions[0]["exception"], ValueError)
    assert "Exception in callback" in loop.exceptions[0]["message"]
    assert not loop.is_running()
    loop.close()


def test_the_loop_installs_the_run_only_while_running() -> None:
    loop = _loop_here()
    marker = object()
    seen: list[object] = []
    loop.call_soon(lambda: seen.append(RUNNING.run))
    assert RUNNING.run is None
    loop.run_ready(marker)
    assert seen == [marker]
    assert RUNNING.run is None
    loop.call_soon(lambda: seen.append(RUNNING.run))
    loop.run_ready()  # none given: the thread's stays as it is
    assert seen == [marker, None]
    loop.close()


@workflow
async def _sleeps_in_a_task() -> float:
    began = time.time()
    await asyncio.ensure_future(asyncio.sleep(5))
    return time.time() - began


def test_a_task_of_asyncio_s_own_coroutine_is_named_by_its_maker() -> None:
    async def go() -> list[str]:
        world = MemoryWorld(clock=FixedClock())
        run = await start(_sleeps_in_a_task, world=world)
        worker = Worker(world)
        await worker.drain()
        world.clock.advance(6)
        assert await worker.run_until_complete(run) >= 5.0
        events = (await world.events.list(run.run_id)).events
        return [e.correlation_id or "" for e in events if e.type.value == "wait_created"]

    (timer,) = asyncio.run(go())
    assert timer.startswith("sleep/_sleeps_in_a_task:"), timer


_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(value=_values)
def test_a_record_decodes_as_the_general_path_decodes_it(value: object) -> None:
    data = serialize(value)
    fast, general = RunPayloads(), RunPayloads()
    got = fast.decode_record("@7", data)
    general._indexed.add("@7")
    expected = general._writer.deserialize(data, record="@7")
    assert repr(got) == repr(expected)
    assert type(got) is type(expected)
    assert fast._indexed == general._indexed
    assert fast._writer._loaded == general._writer._loaded
