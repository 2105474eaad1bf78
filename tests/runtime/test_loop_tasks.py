"""A workflow loop knows its own pending tasks without walking every task of the process.

A replay dropped while its workflow waits cancels its loop's pending tasks; it used to
find them with ``asyncio.all_tasks(loop)``, which walks every task of the process (a
Worker's 256 kept replays, an application's own tasks) each time a replay is dropped.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from durasim.runtime import Worker, sleep, start, workflow
from durasim.runtime._loop import WorkflowLoop
from durasim.worlds import FixedClock, MemoryWorld


def _loop() -> Any:
    return WorkflowLoop(on_timer=lambda _: None, on_timer_cancelled=lambda _: None, now=0.0)  # type: ignore[abstract]


def test_pending_tasks_is_all_tasks_of_the_loop_in_creation_order() -> None:
    loop = _loop()
    never: list[asyncio.Future[Any]] = []
    finished: list[str] = []

    async def waits(index: int) -> None:
        future = loop.create_future()
        never.append(future)
        await future

    async def ends(index: int) -> None:
        finished.append(f"ends-{index}")

    async def parent() -> None:
        # 200 tasks: past the pruning of freed references, some done, some waiting.
        for index in range(200):
            loop.create_task(waits(index) if index % 3 else ends(index))
        await asyncio.gather(*(ends(1000 + i) for i in range(5)), waits(2000))

    main = loop.create_task(parent())
    loop.run_ready()
    try:
        expected = sorted(asyncio.all_tasks(loop), key=hash)
        assert loop.pending_tasks() == expected
        assert main in expected
        assert len(expected) == 1 + 133 + 1  # the parent, the waiting children, gather's waiter
        assert len(finished) == 67 + 5
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_ready()
        loop.close()
    assert loop.pending_tasks() == []


def test_references_to_freed_tasks_do_not_pile_up() -> None:
    loop = _loop()

    async def nothing() -> None:
        return None

    for _ in range(1000):
        loop.create_task(nothing())
        loop.run_ready()
    gc.collect()
    assert len(loop._tasks) <= 64  # the freed ones are dropped now and then
    loop.close()


def test_a_dropped_waiting_replay_does_not_walk_the_process_tasks(monkeypatch: Any) -> None:
    @workflow
    async def naps() -> str:
        await sleep(3600)
        return "awake"

    async def scenario() -> list[object]:
        world = MemoryWorld(clock=FixedClock())
        await start(naps, world=world)
        await Worker(world).drain()  # suspended on its sleep; its replay kept by the engine
        walked: list[object] = []

        def all_tasks(loop: object = None) -> set[asyncio.Task[Any]]:
            walked.append(loop)
            return set()

        monkeypatch.setattr(asyncio, "all_tasks", all_tasks)
        kept = weakref.ref(world)
        del world  # the World, its engine and the kept, waiting replay go
        gc.collect()
        assert kept() is None
        return walked

    assert asyncio.run(scenario()) == []
