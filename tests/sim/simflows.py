"""Workflows the simulator tests run (module ``simtests``)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from durasim.runtime import FatalError, create_hook, get_step_metadata, sleep, step, workflow

#: Side effects of step bodies, for tests that count executions.
CALLS: list[str] = []


@step(module="simtests")
def add(a: int, b: int) -> int:
    CALLS.append(f"add {a} {b}")
    return a + b


@step(module="simtests")
async def charge(amount: int) -> str:
    CALLS.append(f"charge {amount}")
    return f"charged {amount}"


@step(module="simtests")
async def slow(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@step(module="simtests")
def branch(label: str) -> str:
    return label


@step(module="simtests", max_retries=0)
def boom() -> None:
    raise FatalError("boom")


@step(module="simtests")
async def cancellable() -> str:
    meta = get_step_metadata()
    return "cancelled" if meta.cancelled else "done"


@workflow(module="simtests")
async def one_step(amount: int) -> str:
    return await charge(amount)


@workflow(module="simtests")
async def chain(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


@workflow(module="simtests")
async def fan_out(n: int) -> list[int]:
    return list(await asyncio.gather(*(add(i, i) for i in range(n))))


@workflow(module="simtests")
async def sleepy(days: float) -> str:
    await sleep(timedelta(days=days))
    return "awake"


@workflow(module="simtests")
async def sleep_loop(times: int, seconds: float) -> int:
    for _ in range(times):
        await asyncio.sleep(seconds)
    return times


@workflow(module="simtests")
async def step_sleeps(seconds: float) -> float:
    return await slow(seconds)


@step(module="simtests")
async def two_naps(first: float, second: float) -> float:
    await asyncio.sleep(first)
    await asyncio.sleep(second)
    return first + second


@workflow(module="simtests")
async def naps_then_charge(first: float, second: float) -> list[Any]:
    return [await two_naps(first, second), await charge(1)]


@workflow(module="simtests")
async def approval(token: str) -> Any:
    hook = create_hook(token=token)
    first = await charge(1)
    payload = await hook
    return [first, payload]


@workflow(module="simtests")
async def hook_or_timeout(token: str, seconds: float) -> str:
    hook = create_hook(token=token)
    payload = asyncio.ensure_future(_next(hook))
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    done, _ = await asyncio.wait([payload, timer], return_when=asyncio.FIRST_COMPLETED)
    if payload in done:
        timer.cancel()
        return await branch(f"hook {payload.result()}")
    payload.cancel()
    return await branch("timeout")


async def _next(hook: Any) -> Any:
    return await hook


@workflow(module="simtests")
async def waits_forever(token: str) -> Any:
    return await create_hook(token=token)


@workflow(module="simtests")
async def two_steps() -> list[str]:
    a = await charge(1)
    b = await charge(2)
    return [a, b]


@step(module="simtests")
async def flaky_fraction() -> int:
    """Fails its first attempt, asking for a retry 0.25 s later."""
    from durasim.runtime import RetryableError

    meta = get_step_metadata()
    if meta.attempt == 1:
        raise RetryableError("not yet", retry_after=timedelta(seconds=0.25))
    return meta.attempt


@workflow(module="simtests")
async def retry_fractional() -> int:
    return await flaky_fraction()
