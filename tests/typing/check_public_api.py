"""The public API as the docs show it, checked by ``mypy --strict`` (tests/typing/test_typing.py).

Not collected by pytest (no ``test_`` prefix) and never run: it only has to type-check.
``assert_type`` pins what a type checker infers, so a regression to ``Any`` fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import assert_type

from durasim.runtime import (
    FatalError,
    Hook,
    RetryableError,
    Run,
    Worker,
    create_hook,
    get_run,
    get_step_metadata,
    now,
    run,
    sleep,
    start,
    step,
    workflow,
)
from durasim.worlds import SQLiteWorld


@step
def reserve(item: int) -> str:  # a sync step: awaited in workflow code
    return f"item-{item} reserved"


@step(max_retries=5)
async def charge(total: int) -> dict[str, int]:
    if total < 0:
        raise FatalError("negative total")
    if total == 0:
        raise RetryableError(retry_after=1)
    if total == 1:
        raise RetryableError("rate limited", retry_after=timedelta(seconds=30))
    if total == 2:
        raise RetryableError("later", retry_after=datetime(2030, 1, 1, tzinfo=UTC))
    if total == 3:
        raise RetryableError(retry_after=0.5)
    if total == 4:
        raise RetryableError()
    if total == 5:
        raise FatalError()
    key = f"{get_step_metadata().run_id}:{get_step_metadata().step_id}"
    return {"charged": total, "key": len(key)}


@workflow
async def checkout(items: int) -> dict[str, object]:
    assert_type(reserve(1), Awaitable[str])
    reservations = await asyncio.gather(*(reserve(i) for i in range(items)))
    assert_type(reservations, list[str])
    first: str = await reserve(0)
    await asyncio.sleep(3600)
    await sleep(timedelta(minutes=5))
    payment = await charge(10 * items)
    assert_type(payment, dict[str, int])
    approval: Hook = create_hook()
    decision = await approval
    started: datetime = now()
    return {
        "reservations": reservations,
        "first": first,
        "payment": payment,
        "decision": decision,
        "at": started.isoformat(),
    }


@workflow
async def total(n: int) -> int:
    return n * 2


async def drive() -> None:
    world = SQLiteWorld(":memory:")
    handle = await start(total, 21, world=world)
    assert_type(handle, Run[int])
    value = await handle.result(timeout=30)
    assert_type(value, int)
    value2: int = await Worker(world).run_until_complete(handle)
    at_once = await handle.result()
    assert_type(at_once, int)
    other = get_run(handle.run_id, world=world)
    print(value, value2, await other.result(timeout=None), await other.status())
    await world.close()


def script() -> None:
    result = run(total, 4)
    assert_type(result, int)
    print(result + 1)
