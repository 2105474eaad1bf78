"""A replay freed by the cyclic collector closes its waiting workflow without an error.

A replay dropped while its workflow waits closes the workflow's coroutines, whose
``finally`` blocks and ``with`` exits run then (a hook's disposal).  Freed by reference
counting, the replay still answers them.  Freed by the collector (the replay caught in
a reference cycle: on Python 3.12+ a finished frame keeps its caller), the weak
references to it are cleared first, so a hook's disposal found the replay gone and
raised ``ReferenceError`` from a coroutine's finalizer: an "Exception ignored" report
in the process, and a failed test wherever warnings are errors.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Any

from durasim.runtime import Worker, create_hook, create_webhook, start, workflow
from durasim.runtime.lowlevel import engine_for
from durasim.worlds import FixedClock, MemoryWorld


@workflow(module="test_replay_collected")
async def holds_a_hook() -> list[Any]:
    got = []
    with create_hook() as hook:
        async for payload in hook:
            got.append(payload)
    return got


@workflow(module="test_replay_collected")
async def holds_a_webhook() -> str:
    with create_webhook() as hook:
        await hook
    return "done"


def _collected_while_waiting(wf: Any) -> list[str]:
    reports: list[str] = []

    async def scenario() -> None:
        world = MemoryWorld(clock=FixedClock())
        run = await start(wf, world=world)
        await Worker(world).drain()  # waiting on its hook; the engine keeps its replay
        kept = engine_for(world).take_kept(run.run_id)
        assert kept is not None
        replay: Any = kept.replay
        replay.itself = replay  # a reference cycle: only the collector frees it now
        del kept, replay

    previous = sys.unraisablehook
    sys.unraisablehook = lambda report: reports.append(
        f"{report.exc_type.__name__}: {report.exc_value} in {report.object!r}"
    )
    gc.disable()
    try:
        asyncio.run(scenario())
        gc.collect()
    finally:
        gc.enable()
        sys.unraisablehook = previous
    return reports


def test_a_hook_held_by_a_collected_replay_is_closed_quietly() -> None:
    assert _collected_while_waiting(holds_a_hook) == []


def test_a_webhook_held_by_a_collected_replay_is_closed_quietly() -> None:
    assert _collected_while_waiting(holds_a_webhook) == []
