"""The workflows the scenario book drives (module ``durasim.book``).

Each is small and shaped for one family of races: a hook against a step, a
hook against a timer, branches that write different numbers of steps, steps
racing each other, children, cancellation and streams.  Step bodies record
what they did in :data:`CALLS` so a scenario can count executions (the book
clears it before every scenario).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from durasim.runtime import (
    CancellationToken,
    FatalError,
    Hook,
    HookConflictError,
    RetryableError,
    RunCancelledError,
    Writable,
    cancellation_token,
    create_hook,
    get_step_metadata,
    get_writable,
    start,
    step,
    wait,
    workflow,
)

__all__ = ["CALLS", "MODULE"]

#: The module name in every workflow and step id of the book.
MODULE = "durasim.book"

#: What step bodies did, in the order they did it (cleared before each scenario).
CALLS: list[str] = []

#: Attempts of the flaky steps by key (cleared before each scenario).
ATTEMPTS: dict[str, int] = {}


# -- steps ------------------------------------------------------------------------------------


@step(module=MODULE)
async def charge(amount: int) -> str:
    CALLS.append(f"charge {amount}")
    return f"charged {amount}"


@step(module=MODULE)
async def probe() -> str:
    CALLS.append("probe")
    return "probed"


@step(module=MODULE)
async def branch(label: str) -> str:
    CALLS.append(f"branch {label}")
    return label


@step(module=MODULE)
async def tally(i: int) -> int:
    CALLS.append(f"tally {i}")
    return i * i


@step(module=MODULE)
async def tick(i: int) -> int:
    CALLS.append(f"tick {i}")
    return i + 1


@step(module=MODULE)
async def fast(delay: float = 0.0) -> str:
    await asyncio.sleep(delay)
    CALLS.append("fast")
    return "fast"


@step(module=MODULE)
async def slow(delay: float = 0.0) -> str:
    await asyncio.sleep(delay)
    CALLS.append("slow")
    return "slow"


@step(module=MODULE)
async def slow_charge(amount: int, seconds: float) -> str:
    """A charge that takes ``seconds`` (a slow payment provider), in virtual time."""
    CALLS.append(f"slow_charge {amount} begins")
    await asyncio.sleep(seconds)
    CALLS.append(f"slow_charge {amount} ends")
    return f"charged {amount}"


@step(module=MODULE, max_retries=3)
async def flaky(key: str, failures: int) -> str:
    ATTEMPTS[key] = ATTEMPTS.get(key, 0) + 1
    CALLS.append(f"flaky {key} attempt {ATTEMPTS[key]}")
    if ATTEMPTS[key] <= failures:
        raise RetryableError(f"{key} not yet", retry_after=timedelta(seconds=5))
    return f"{key} ok"


@step(module=MODULE)
async def observe_cancel() -> str:
    meta = get_step_metadata()
    CALLS.append("observe_cancel")
    reason = await meta.cancellation(poll=3600)
    CALLS.append(f"observed {reason}")
    return f"saw {reason}"


@step(module=MODULE)
async def watch_token(token: CancellationToken) -> str:
    reason = await token.wait(poll=3600)
    CALLS.append(f"token {reason}")
    return f"token {reason}"


@step(module=MODULE, max_retries=2)
async def emit(out: Writable, count: int) -> int:
    meta = get_step_metadata()
    CALLS.append(f"emit attempt {meta.attempt}")
    for i in range(count):
        await out.write(f"chunk {i}")
    if meta.attempt == 1:
        raise RetryableError(
            "the first attempt fails after writing", retry_after=timedelta(seconds=1)
        )
    return count


# -- helpers (workflow side) ------------------------------------------------------------------


async def _next(hook: Hook) -> Any:
    return await hook


def _payload(hook: Hook) -> asyncio.Future[Any]:
    return asyncio.ensure_future(_next(hook))


# -- smoke --------------------------------------------------------------------------------------


@workflow(module=MODULE)
async def nothing() -> str:
    """No step: the smallest log."""
    return "nothing"


@workflow(module=MODULE)
async def one_step() -> str:
    """One step."""
    return await charge(1)


@workflow(module=MODULE)
async def retried() -> str:
    """One step that fails twice with RetryableError (5 s apart), then succeeds."""
    return await flaky("twice", 2)


@workflow(module=MODULE)
async def fan_out(n: int) -> list[int]:
    """``n`` steps at once."""
    return list(await asyncio.gather(*(tally(i) for i in range(n))))


@workflow(module=MODULE)
async def run_ahead_loop(n: int) -> int:
    """``n`` steps one after the other (each outcome runs ahead into the next step)."""
    total = 0
    for _ in range(n):
        total = await tick(total)
    return total


@workflow(module=MODULE)
async def long_sleep(days: float) -> list[str]:
    """A step, a sleep of ``days``, a step."""
    first = await charge(1)
    await asyncio.sleep(days * 86400)
    return [first, await charge(2)]


# -- hooks against steps ------------------------------------------------------------------------


@workflow(module=MODULE)
async def approval(token: str) -> list[Any]:
    """A hook, then a step, then the hook's payload: [charge's result, payload]."""
    hook = create_hook(token=token)
    first = await charge(1)
    return [first, await hook]


@workflow(module=MODULE)
async def peek(token: str) -> list[Any]:
    """After a step, peek whether the payload is already here and branch on it."""
    hook = create_hook(token=token)
    payload = _payload(hook)
    await charge(1)
    label = "early" if payload.done() else "late"
    taken = await branch(label)
    return [taken, await payload]


@workflow(module=MODULE)
async def race(token: str) -> str:
    """The payload against a probe step: the first in log order wins."""
    hook = create_hook(token=token)
    payload = _payload(hook)
    probed = asyncio.ensure_future(probe())
    done, _ = await wait([payload, probed], return_when=asyncio.FIRST_COMPLETED)
    winner = "hook" if done[0] is payload else "probe"
    await probed
    return f"{winner} first, then {await payload}"


@workflow(module=MODULE)
async def double_payload(token: str) -> list[Any]:
    """Two payloads of one hook, taken in log order, around a step."""
    hook = create_hook(token=token)
    first = await hook
    charged = await charge(1)
    return [first, charged, await hook]


@workflow(module=MODULE)
async def attribute(token: str) -> list[Any]:
    """A payload cancels a workflow-made token (an ``attr_set``) while a step runs.

    The reason says whether the payload came before the step's outcome (in
    log order); a closing step makes the ``attr_set`` written with it.
    """
    cancel = cancellation_token()
    hook = create_hook(token=token)
    payload = _payload(hook)
    charged = asyncio.ensure_future(charge(1))
    done, _ = await wait([payload, charged], return_when=asyncio.FIRST_COMPLETED)
    order = "before" if done[0] is payload else "after"
    cancel.cancel(f"hook {await payload} {order} the step")
    return [await charged, await branch(order), cancel.cancelled]


# -- hooks against timers -----------------------------------------------------------------------


async def _hook_or_timer(hook: Hook, seconds: float) -> tuple[bool, Any]:
    payload = _payload(hook)
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    done, _ = await wait([payload, timer], return_when=asyncio.FIRST_COMPLETED)
    if done[0] is payload:
        timer.cancel()
        return True, payload.result()
    payload.cancel()
    return False, None


@workflow(module=MODULE)
async def deadline(token: str, seconds: float) -> str:
    """Approve by the hook before ``seconds`` pass, else expire (no step either way)."""
    hook = create_hook(token=token)
    won, payload = await _hook_or_timer(hook, seconds)
    return f"approved {payload}" if won else "expired"


@workflow(module=MODULE)
async def fork(token: str, seconds: float) -> str:
    """Hook against timer, then one branch step naming the winner."""
    hook = create_hook(token=token)
    won, payload = await _hook_or_timer(hook, seconds)
    return await branch(f"hook {payload}" if won else "timeout")


@workflow(module=MODULE)
async def count_fork(token: str, seconds: float) -> list[int]:
    """Hook against timer; the hook branch writes one step, the timeout branch three."""
    hook = create_hook(token=token)
    won, _ = await _hook_or_timer(hook, seconds)
    if won:
        return [await tally(10)]
    return [await tally(1), await tally(2), await tally(3)]


@workflow(module=MODULE)
async def equal_count_fork(token: str, seconds: float) -> str:
    """Hook against timer; both branches write one step of different names."""
    hook = create_hook(token=token)
    won, _ = await _hook_or_timer(hook, seconds)
    if won:
        return await fast()
    return await slow()


@workflow(module=MODULE)
async def late_append_fork(token: str, seconds: float) -> list[Any]:
    """Hook against timer; after the branch, wait for the (late) payload anyway."""
    hook = create_hook(token=token)
    payload = _payload(hook)
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    done, _ = await wait([payload, timer], return_when=asyncio.FIRST_COMPLETED)
    taken = await branch("hook" if done[0] is payload else "timeout")
    return [taken, await payload]


@workflow(module=MODULE)
async def unclaimed_payload(token: str, seconds: float, cancel_timer: bool = True) -> list[str]:
    """A hook nobody awaits; a timer against a step; the first in log order decides.

    With ``cancel_timer`` the losing timer is cancelled; without, the workflow
    ends with it still pending.
    """
    create_hook(token=token)
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    charged = asyncio.ensure_future(charge(1))
    done, _ = await wait([timer, charged], return_when=asyncio.FIRST_COMPLETED)
    first = "timer" if done[0] is timer else "step"
    if cancel_timer:
        timer.cancel()
    await charged
    return [first, await branch(first)]


@workflow(module=MODULE)
async def claimed_payload(token: str, seconds: float) -> list[str]:
    """Control of ``unclaimed_payload``: a branch awaits the hook too."""
    hook = create_hook(token=token)
    payload = _payload(hook)
    timer = asyncio.ensure_future(asyncio.sleep(seconds))
    charged = asyncio.ensure_future(charge(1))
    done, _ = await wait([payload, timer, charged], return_when=asyncio.FIRST_COMPLETED)
    first = "hook" if done[0] is payload else "timer" if done[0] is timer else "step"
    timer.cancel()
    await charged
    return [first, await branch(first)]


@workflow(module=MODULE)
async def bystander_sleep(token: str, seconds: float) -> list[Any]:
    """A sleep while payloads land on a hook nobody awaits yet; then take them."""
    hook = create_hook(token=token)
    first = await charge(1)
    await asyncio.sleep(seconds)
    return [first, await hook]


@workflow(module=MODULE)
async def clock_after_race(token: str, seconds: float) -> list[Any]:
    """Read the clock after a hook/timer race; the log's time, on every replay."""
    hook = create_hook(token=token)
    won, _ = await _hook_or_timer(hook, seconds)
    seen = time.time()
    recorded = await branch(f"{'hook' if won else 'timer'} at {seen:.0f}")
    return [recorded, seen]


# -- steps against steps --------------------------------------------------------------------------


@workflow(module=MODULE)
async def step_vs_step(fast_delay: float, slow_delay: float) -> list[str]:
    """Two steps at once (bodies sleeping the delays); the first outcome in log order wins."""
    a = asyncio.ensure_future(fast(fast_delay))
    b = asyncio.ensure_future(slow(slow_delay))
    done, _ = await wait([a, b], return_when=asyncio.FIRST_COMPLETED)
    first = done[0].result()
    await asyncio.gather(a, b)
    return [first, await branch(f"{first} won")]


@workflow(module=MODULE)
async def step_count_race(fast_delay: float, slow_delay: float) -> list[Any]:
    """Two steps at once; if ``fast`` is first one step follows, else two."""
    a = asyncio.ensure_future(fast(fast_delay))
    b = asyncio.ensure_future(slow(slow_delay))
    done, _ = await wait([a, b], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(a, b)
    if done[0] is a:
        return ["fast", await tally(1)]
    return ["slow", await tally(1), await tally(2)]


# -- tokens across runs ---------------------------------------------------------------------------


@workflow(module=MODULE)
async def holder(token: str) -> Any:
    """Holds ``token`` until a payload comes; a conflict is returned, not raised."""
    hook = create_hook(token=token)
    try:
        return await hook
    except HookConflictError as exc:
        return f"conflict with {exc.conflicting_run_id}"


# -- cancellation, children, streams -------------------------------------------------------------


@workflow(module=MODULE)
async def two_steps() -> list[str]:
    """Two steps one after the other."""
    return [await charge(1), await charge(2)]


@workflow(module=MODULE)
async def slow_then_fast(seconds: float) -> list[str]:
    """A step that runs ``seconds`` (longer than a lease), then a quick one."""
    return [await slow_charge(1, seconds), await charge(2)]


@workflow(module=MODULE)
async def cancel_observed() -> str:
    """A step that waits for its run's cancel, then a step that never runs."""
    seen = await observe_cancel()
    await charge(99)
    return seen


@workflow(module=MODULE)
async def token_cancel() -> list[Any]:
    """A workflow-made token cancelled after a step; a concurrent step waits on it."""
    token = cancellation_token()
    watcher = asyncio.ensure_future(watch_token(token))
    await charge(1)
    token.cancel("enough")
    return [await watcher, token.cancelled]


@workflow(module=MODULE)
async def child(n: int) -> int:
    """A child run: one step."""
    return await tally(n)


@workflow(module=MODULE)
async def sleeping_child(seconds: float) -> str:
    """A child that sleeps."""
    await asyncio.sleep(seconds)
    return await branch("child woke")


@workflow(module=MODULE)
async def parent(n: int) -> list[int]:
    """Two children, awaited in order."""
    a = await start(child, n)
    b = await start(child, n + 1)
    return [await a.result(), await b.result()]


@workflow(module=MODULE)
async def parent_of_sleeper(seconds: float) -> str:
    """A child that sleeps ``seconds``; the parent waits for it."""
    kid = await start(sleeping_child, seconds)
    try:
        value: str = await kid.result()
    except RunCancelledError:
        return "child cancelled"
    return value


@workflow(module=MODULE)
async def streamer(count: int) -> int:
    """A step writes ``count`` chunks, fails once, and is retried."""
    return await emit(get_writable("out"), count)


@workflow(module=MODULE)
async def fatal() -> str:
    """A step that fails for good; the workflow catches it."""
    try:
        await _boom()
    except FatalError as exc:
        return f"caught {exc}"
    return "unreachable"


@step(module=MODULE, max_retries=0)
async def _boom() -> None:
    CALLS.append("boom")
    raise FatalError("boom")
