"""No reference cycle holds a World or a finished run: reference counting frees them (issue 22).

Each test runs workflows end to end with the cyclic garbage collector off, drops
everything, and requires the World, its engine, its worker and the run's log
objects to be gone at once (weak references), without a collection; then that a
full collection finds no durasim object left to free (``gc.DEBUG_SAVEALL``
keeps what it would free in ``gc.garbage``).
"""

from __future__ import annotations

import asyncio
import copy
import gc
import pickle
import sys
import weakref
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import wf_cycles
from _cycles import collector_off, durasim_garbage

from durasim.runtime import Limits, Worker, get_run, resume_hook, start
from durasim.runtime.lowlevel import engine_for
from durasim.worlds import FixedClock, MemoryWorld, SQLiteWorld, World, WorldError

Make = Callable[[FixedClock], World]
Scenario = Callable[[World, FixedClock, list[weakref.ref[Any]]], Coroutine[Any, Any, None]]


@pytest.fixture(autouse=True)
def _clear_attempts() -> None:
    wf_cycles.ATTEMPTS.clear()


async def _serve(
    world: World, clock: FixedClock, run_id: str, *, limits: Limits | None = None
) -> None:
    """Serve the run until it ends, jumping the clock to each next due message."""
    worker = Worker(world, limits=limits)
    run = get_run(run_id, world=world)
    for _ in range(100):
        await worker.drain()
        if (await run.status()).terminal:
            return
        due = await world.queue.next_due()
        assert due is not None, f"run {run_id} is stuck"
        clock.current = max(clock.current, due)
    raise AssertionError(f"run {run_id} did not end")


async def _watch_log(world: World, run_id: str, refs: list[weakref.ref[Any]]) -> None:
    """Weak references to the run's log objects: its events, their payloads, its steps."""
    for event in (await world.events.list(run_id)).events:
        refs.append(weakref.ref(event))
    for record in await world.steps.list(run_id):
        refs.append(weakref.ref(record))


async def _sequential_sync(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    run = await start(wf_cycles.sequential, 30, "sync", world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == sum(range(30))
    await _watch_log(world, run.run_id, refs)


async def _sequential_async(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    run = await start(wf_cycles.sequential, 30, "async", world=world)
    assert await Worker(world).run_until_complete(run) == sum(range(30))
    await _watch_log(world, run.run_id, refs)


async def _everything(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    """A hook, a sleep, a child run, a failure retried, a gather and a stream."""
    run = await start(wf_cycles.everything, "cycles-token", world=world)
    await Worker(world).drain()
    await resume_hook("cycles-token", {"x": 1}, world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == [{"x": 1}, 5, "ok", 10]
    assert wf_cycles.ATTEMPTS == {"cycles-token": 2}
    await _watch_log(world, run.run_id, refs)
    await _watch_log(world, f"{run.run_id}-c1", refs)


async def _queued_in_threads(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    run = await start(wf_cycles.sequential, 6, "sync", world=world)
    limits = Limits(sync_steps="thread", queue_steps=True, inline_steps=1)
    await _serve(world, clock, run.run_id, limits=limits)
    assert await run.result() == sum(range(6))
    await _watch_log(world, run.run_id, refs)


async def _fails(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    run = await start(wf_cycles.fails, world=world)
    await _serve(world, clock, run.run_id)
    assert (await run.status()).value == "failed"
    await _watch_log(world, run.run_id, refs)


async def _suspended(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    """The World is dropped while its engine keeps the live replay of a waiting run."""
    run = await start(wf_cycles.sleeps_long, world=world)
    await Worker(world).drain()
    assert engine_for(world).keeps(run.run_id)
    await _watch_log(world, run.run_id, refs)


async def _cancelled(world: World, clock: FixedClock, refs: list[weakref.ref[Any]]) -> None:
    """Cancelled while it sleeps (its suspended replay kept by the engine till then)."""
    await _suspended(world, clock, refs)
    (run,) = (await world.runs.list()).runs
    await get_run(run.run_id, world=world).cancel("enough")
    await _serve(world, clock, run.run_id)
    assert (await world.runs.get(run.run_id)).status.value == "cancelled"
    await _watch_log(world, run.run_id, refs)


SCENARIOS = [
    _sequential_sync,
    _sequential_async,
    _everything,
    _queued_in_threads,
    _fails,
    _cancelled,
    _suspended,
]


def _memory(clock: FixedClock, tmp_path: Path) -> World:
    return MemoryWorld(clock=clock)


def _sqlite(clock: FixedClock, tmp_path: Path) -> World:
    return SQLiteWorld(tmp_path / "cycles.db", clock=clock)


@pytest.mark.parametrize("make", [_memory, _sqlite], ids=["memory", "sqlite"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__.strip("_"))
def test_a_dropped_world_and_its_runs_are_freed_without_the_collector(
    make: Callable[[FixedClock, Path], World], scenario: Scenario, tmp_path: Path
) -> None:
    refs: list[weakref.ref[Any]] = []

    async def main() -> None:
        clock = FixedClock()
        world = make(clock, tmp_path)
        refs.extend([weakref.ref(world), weakref.ref(engine_for(world))])
        await scenario(world, clock, refs)
        await world.close()

    with collector_off():
        asyncio.run(main())
        if scenario is _fails and sys.version_info >= (3, 12):
            # The workflow's own exception: from Python 3.12 a finished frame keeps its
            # caller (f_back), so the traceback of the error the workflow task ended
            # with reaches back to the replay that ran it, which holds the task.  One
            # collection frees it all (no leak); the step's errors go by refcount.
            gc.collect()
        alive = [r() for r in refs if r() is not None]
        assert not alive, f"{len(alive)} objects outlived their World: {alive[:3]}"
        garbage = durasim_garbage()
        if scenario in (_suspended, _cancelled) and sys.version_info >= (3, 14):
            # A replay dropped while its workflow waits: from Python 3.14 the future
            # the task waited on names the task (asyncio's awaited-by graph) until the
            # task wakes, which it never does.  That loop, task and future are left to
            # the collector; the World, its engine and the run's log are not (above).
            garbage = [name for name in garbage if name not in _DROPPED_WAIT]
        assert garbage == []


#: What a replay dropped mid-wait leaves to the collector on Python 3.14+.
_DROPPED_WAIT = {
    "durasim.runtime._loop.WorkflowLoop",
    "durasim.runtime._loop.WorkflowFuture",
    "durasim.runtime._loop.WorkflowTask",
    "durasim.runtime.WorkflowMetadata",
}


def test_runs_on_a_kept_world_leave_nothing_for_the_collector() -> None:
    """A long-lived World: each finished run's replay, loop and futures go by refcount."""
    world = MemoryWorld(clock=FixedClock())

    async def runs() -> None:
        for kind in ("sync", "async", "sync"):
            run = await start(wf_cycles.sequential, 20, kind, world=world)
            await Worker(world).run_until_complete(run)

    with collector_off():
        asyncio.run(runs())
        assert durasim_garbage() == []


def test_a_facet_of_a_dropped_world_says_so() -> None:
    events = MemoryWorld().events
    with pytest.raises(WorldError, match="belongs to a World that was dropped"):
        asyncio.run(events.list("wrun_x"))


def test_copies_and_pickles_of_a_world_carry_facets_of_their_own() -> None:
    world = MemoryWorld(clock=FixedClock())
    run = asyncio.run(start(wf_cycles.sequential, 2, "sync", world=world))
    for other in (copy.deepcopy(world), pickle.loads(pickle.dumps(world))):
        assert other.events._w is other
        assert other.queue._w is other
        assert other._views[run.run_id]._runs is other._runs
        assert asyncio.run(other.runs.get(run.run_id)) == asyncio.run(world.runs.get(run.run_id))
        assert engine_for(other) is not engine_for(world)
        assert engine_for(other).world is other


def test_one_engine_per_world_held_by_the_world() -> None:
    world = MemoryWorld()
    engine = engine_for(world)
    assert engine_for(world) is engine
    assert engine.world is world
    del world
    with pytest.raises(Exception, match="World was dropped"):
        engine.world  # noqa: B018 -- the property raises
