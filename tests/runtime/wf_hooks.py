"""Workflows using hooks, cancellation and child runs (imported by tests and by hooks_proc.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from durasim.runtime import (
    HookConflictError,
    cancellation_token,
    create_hook,
    get_step_metadata,
    start,
    step,
    workflow,
)

SEEN: list[Any] = []  # what steps of this process saw (tests clear it)


@step(module="wf_hooks")
def tell(value: Any) -> Any:
    SEEN.append(value)
    return value


@workflow(module="wf_hooks")
async def one_payload(token: str | None = None) -> Any:
    hook = create_hook(token=token, metadata={"purpose": "test"})
    await tell(hook.token)
    return await hook


@workflow(module="wf_hooks")
async def three_payloads() -> list[Any]:
    got = []
    with create_hook() as hook:
        await tell(hook.token)
        async for payload in hook:
            got.append(payload)
            if len(got) == 3:
                break
    await tell("disposed")  # the disposal is journaled before this step
    return got


@workflow(module="wf_hooks")
async def conflicted(token: str) -> Any:
    hook = create_hook(token=token)
    conflict = await hook.conflict()
    try:
        await hook
    except HookConflictError as exc:
        return {
            "conflict_run": conflict.conflicting_run_id if conflict else None,
            "error": str(exc),
        }
    return "no conflict"


@workflow(module="wf_hooks")
async def hook_or_timeout(seconds: float) -> str:
    hook = create_hook(token="race")
    payload = asyncio.ensure_future(_next(hook))
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    done, _ = await asyncio.wait({payload, timer}, return_when=asyncio.FIRST_COMPLETED)
    if payload in done:
        timer.cancel()
        return f"payload {payload.result()}"
    payload.cancel()
    return "timeout"


async def _next(hook: Any) -> Any:
    return await hook


@step(module="wf_hooks")
async def wait_for_cancel() -> str:
    meta = get_step_metadata()
    reason = await meta.cancellation(poll=3600)
    SEEN.append(("step saw cancel", reason, meta.cancelled))
    return reason


@workflow(module="wf_hooks")
async def long_step() -> str:
    await wait_for_cancel()
    await tell("after the cancelled step")  # never runs: the run stops at the boundary
    return "finished"


@workflow(module="wf_hooks")
async def sleeper() -> str:
    await asyncio.sleep(3600)
    return "woke"


@step(module="wf_hooks")
async def watch_token(token: Any) -> str:
    reason = await token.wait(poll=3600)
    SEEN.append(("token", reason, token.cancelled))
    return reason


@step(module="wf_hooks")
def first() -> str:
    return "first"


@workflow(module="wf_hooks")
async def token_cancel() -> list[Any]:
    token = cancellation_token()
    watcher = asyncio.ensure_future(watch_token(token))
    await first()
    token.cancel("enough")
    reason = await watcher
    return [token.cancelled, reason]


@workflow(module="wf_hooks")
async def child(n: int) -> int:
    return await tell(n * 10)


@workflow(module="wf_hooks")
async def failing_child() -> int:
    raise ValueError("child broke")


@workflow(module="wf_hooks")
async def parent(n: int) -> list[Any]:
    a = await start(child, n)
    b = await start(child, n + 1)
    return [a.run_id, await a.result(), await b.result()]


@workflow(module="wf_hooks")
async def parent_of_failing() -> str:
    kid = await start(failing_child)
    try:
        await kid.result()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc.__cause__!r}"
    return "no error"


@workflow(module="wf_hooks")
async def parent_of_sleeper() -> str:
    kid = await start(sleeper)
    return await kid.result()


@workflow(module="wf_hooks")
async def token_then_payload() -> list[Any]:
    hook = create_hook()
    token = hook.token  # read before the log's hook_created reaches a replay
    await tell(token)
    return [token, await hook]
