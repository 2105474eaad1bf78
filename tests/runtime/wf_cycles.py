"""Workflows of every kind of path, run end to end by test_no_cycles.py."""

from __future__ import annotations

import asyncio
from typing import Any

from durasim.runtime import (
    RetryableError,
    create_hook,
    get_writable,
    start,
    step,
    workflow,
)

ATTEMPTS: dict[str, int] = {}  # flaky()'s attempts so far, per key (tests clear it)


@step(module="wf_cycles")
def add(a: int, b: int) -> int:
    return a + b


@step(module="wf_cycles")
async def add_async(a: int, b: int) -> int:
    return a + b


@step(module="wf_cycles")
def flaky(key: str) -> str:
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    if ATTEMPTS[key] == 1:
        raise RetryableError("not yet", retry_after=1.0)
    return "ok"


@step(module="wf_cycles")
def broken() -> None:
    raise ValueError("broken for good")


@step(module="wf_cycles")
async def emit(writable: Any) -> None:
    await writable.write(b"chunk")
    await writable.close()


@workflow(module="wf_cycles")
async def sequential(n: int, kind: str) -> int:
    total = 0
    for i in range(n):
        total = await (add_async(total, i) if kind == "async" else add(total, i))
    return total


@workflow(module="wf_cycles")
async def child(n: int) -> int:
    return await add(n, 1)


@workflow(module="wf_cycles")
async def everything(token: str) -> list[Any]:
    """A hook, a sleep, a child run, a retried step, a stream and a gather."""
    got: list[Any] = []
    with create_hook(token=token) as hook:
        await add(0, 0)  # the hook is in the log before the test resumes it
        got.append(await hook)
    await asyncio.sleep(60)
    kid = await start(child, 4)
    got.append(await kid.result())
    got.append(await flaky(token))
    got.append(sum(await asyncio.gather(add(1, 2), add_async(3, 4))))
    await emit(get_writable("out"))
    return got


@workflow(module="wf_cycles")
async def fails() -> None:
    try:
        await broken()
    except ValueError as exc:
        raise RuntimeError("the workflow gives up") from exc


@workflow(module="wf_cycles")
async def sleeps_long() -> str:
    await asyncio.sleep(3600)
    return "woke"
