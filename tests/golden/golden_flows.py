"""The workflows of the golden histories (tests/golden/histories/, one per event type).

Their ids are pinned (``module="durasim.golden"``) so the recorded logs name
them whatever the import path.  Edit these only as a workflow author would
edit code with runs in flight: ``test_golden_histories.py`` replays every
recorded history on them, in CI.  ``python tests/golden/golden_flows.py``
records the histories again (only when a NEW event type or flow is added:
the point of the files is that they were written by an older durasim).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from durasim.runtime import (
    FatalError,
    RetryableError,
    cancellation_token,
    create_hook,
    get_step_metadata,
    patched,
    step,
    workflow,
)

M = "durasim.golden"


@step(module=M)
def add(a: int, b: int) -> int:
    return a + b


@step(module=M)
def flaky(x: int) -> int:
    if get_step_metadata().attempt == 1:
        raise RetryableError("first attempt fails", retry_after=5)
    return x * 2


@step(module=M)
def broken(x: int) -> int:
    raise FatalError(f"cannot handle {x}")


@workflow(module=M)
async def steps(n: int) -> int:
    return await add(n, await add(n, 1))


@workflow(module=M)
async def retries(x: int) -> int:
    return await flaky(x)


@workflow(module=M)
async def fails(x: int) -> int:
    try:
        await broken(x)
    except FatalError as exc:
        raise ValueError(f"gave up: {exc}") from None
    return 0


@workflow(module=M)
async def hooks(token: str) -> object:
    with create_hook(token=token) as hook:
        payload = await hook
    await add(1, 1)  # the disposal is written before this step (hook_disposed)
    return payload


@workflow(module=M)
async def conflicts(token: str) -> bool:
    with create_hook(token=token) as hook:
        return (await hook.conflict()) is not None


@workflow(module=M)
async def sleeps(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "woke"


@workflow(module=M)
async def attrs_and_patches(x: int) -> int:
    token = cancellation_token()
    token.cancel("not needed")
    if patched("golden-add"):
        return await add(x, 100)
    return x


async def _record(directory: Path) -> None:  # pragma: no cover -- run by hand
    from durasim.checkers import export_history
    from durasim.runtime import Worker, resume_hook, start
    from durasim.worlds import CountingIds, Event, EventType, FixedClock, MemoryWorld

    clock = FixedClock()
    world = MemoryWorld(clock=clock, ids=CountingIds())
    worker = Worker(world)

    async def settle() -> None:
        for _ in range(20):
            await worker.drain()
            due = await world.queue.next_due()
            if due is None:
                return
            clock.current = max(clock.current, due)

    await start(steps, 2, world=world, run_id="golden-steps")
    await start(retries, 4, world=world, run_id="golden-retries")
    await start(fails, 5, world=world, run_id="golden-fails")
    await start(hooks, "golden-token", world=world, run_id="golden-hooks")
    await settle()
    await start(conflicts, "golden-token", world=world, run_id="golden-conflicts")
    await settle()
    await resume_hook("golden-token", {"ok": True}, world=world)
    await start(sleeps, 30, world=world, run_id="golden-sleeps")
    await start(attrs_and_patches, 1, world=world, run_id="golden-attrs")
    await settle()
    cancelled = await start(sleeps, 3600, world=world, run_id="golden-cancelled")
    await worker.drain()
    await cancelled.cancel("golden cancel")
    await settle()
    files = {
        "steps": "golden-steps",
        "step_retrying": "golden-retries",
        "step_failed": "golden-fails",
        "hook_received": "golden-hooks",
        "hook_conflict": "golden-conflicts",
        "wait_completed": "golden-sleeps",
        "attr_set": "golden-attrs",
        "run_cancelled": "golden-cancelled",
    }
    for name, run_id in files.items():
        await export_history(world, run_id, directory / f"{name}.jsonl")
    # noop: no World here writes one (protocol.md §2); a log holding one must replay.
    page = await world.events.list("golden-steps", limit=100)
    events = list(page.events)
    from durasim.checkers import event_to_json

    noop = Event(
        run_id="golden-noop",
        seq=3,
        type=EventType.NOOP,
        created_at=events[1].created_at,
        correlation_id=None,
        in_band=True,
        data={},
    )
    import attrs

    shifted = [attrs.evolve(e, run_id="golden-noop", seq=e.seq + (e.seq >= 3)) for e in events]
    shifted.insert(2, noop)
    (directory / "noop.jsonl").write_text("".join(event_to_json(e) + "\n" for e in shifted))


if __name__ == "__main__":  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(_record(Path(__file__).parent / "histories"))
