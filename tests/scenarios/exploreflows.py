"""Workflows explored by the exploration tests (module ``exploreflows``).

Module level on purpose: seeds name them by ``module:qualname`` and
``durasim reproduce`` imports them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from durasim.runtime import create_hook, get_step_metadata, start, step, workflow
from durasim.scenarios import sometimes
from durasim.sim import RunOutcome
from durasim.worlds import Event, RunStatus

#: Emails "sent" by :func:`send_email` (a non-idempotent side effect).
SENT: list[str] = []
#: The order in which :func:`mark` bodies ran.
ORDER: list[str] = []
#: Executions of :func:`slow_work` running now (a lease takeover makes two).
RUNNING: list[int] = []


def reset() -> None:
    """The per-example set-up: forget the side effects of the last example."""
    SENT.clear()
    ORDER.clear()
    RUNNING.clear()


@step(module="exploreflows")
def add(a: int, b: int) -> int:
    return a + b


@step(module="exploreflows")
def send_email(to: str) -> str:
    SENT.append(to)  # not idempotent: a body that runs twice sends twice
    return f"sent to {to}"


@step(module="exploreflows")
def mark(who: str, index: int) -> str:
    ORDER.append(f"{who}{index}")
    return f"{who}{index}"


@workflow(module="exploreflows")
async def ten_steps(n: int) -> int:
    """A correct 10-step workflow (the bench's too)."""
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


@workflow(module="exploreflows")
async def approval(token: str) -> list[Any]:
    """Waits for a hook, then charges: hook deliveries and cancels land anywhere."""
    hook = create_hook(token=token)
    first = await add(1, 1)
    payload = await hook
    sometimes("approval: payload after the first step", True)
    return [first, payload]


@workflow(module="exploreflows")
async def welcome(user: str) -> str:
    """Planted bug: the email step is not idempotent (a crash after it re-sends)."""
    await add(1, 2)
    return await send_email(user)


def sent_once(outcome: RunOutcome, log: Sequence[Event]) -> bool:
    """The property of :func:`welcome`: a completed run sent exactly one email."""
    if outcome.status is not RunStatus.COMPLETED:
        return True
    return len(SENT) == 1


@workflow(module="exploreflows")
async def worker(who: str, n: int) -> int:
    for i in range(n):
        await mark(who, i)
    return n


@workflow(module="exploreflows")
async def race(n: int) -> int:
    """Two child runs of ``n`` steps each, delivered concurrently."""
    a = await start(worker, "a", n)
    b = await start(worker, "b", n)
    return int(await a.result()) + int(await b.result())


def no_deep_race(outcome: RunOutcome, log: Sequence[Event]) -> bool:
    """Planted depth-2 ordering bug: ``b0``, then every ``a``, then ``b1`` breaks it."""
    first = {name: ORDER.index(name) for name in dict.fromkeys(ORDER)}
    a_names = [name for name in first if name.startswith("a")]
    if "b0" not in first or "b1" not in first or not a_names:
        return True
    return not (
        first["b0"] < min(first[a] for a in a_names)
        and max(first[a] for a in a_names) < first["b1"]
    )


_DRIFT = [0]


@step(module="exploreflows")
def drift() -> str:
    _DRIFT[0] += 1  # never reset: a second run returns a longer value
    return "x" * _DRIFT[0]


@workflow(module="exploreflows")
async def drifting() -> str:
    """Planted nondeterminism: its step's result depends on process-wide state."""
    return await drift()


def _spin() -> None:
    n = 0
    while True:  # never yields: only the wall-time watchdog ends it
        n += 1


@workflow(module="exploreflows")
async def never_yields() -> None:
    _spin()


@step(module="exploreflows")
def spins_on_a_retry(n: int) -> int:
    if get_step_metadata().attempt > 1:
        _spin()
    return n


@workflow(module="exploreflows")
async def stuck_after_a_fault() -> int:
    """Fine on the plain path; a step that runs again (a crash, a retry) never yields."""
    return await spins_on_a_retry(1)


@workflow(module="exploreflows")
async def naps(n: int) -> list[int]:
    """Steps between long sleeps, one sleep racing a step: wake_up() may end any sleep early."""
    done = []
    for i in range(n):
        await asyncio.sleep(86_400)
        done.append(await add(i, 1))
    first, _ = await asyncio.gather(add(n, 1), asyncio.sleep(3_600))
    return [*done, first]


@step(module="exploreflows")
async def slow_work(seconds: float) -> str:
    """A step that runs ``seconds`` (longer than a lease, in virtual time)."""
    RUNNING.append(1)
    sometimes("slow_work: two executions overlap", len(RUNNING) > 1)
    try:
        await asyncio.sleep(seconds)
    finally:
        RUNNING.pop()
    return "worked"


@workflow(module="exploreflows")
async def slow(seconds: float) -> list[Any]:
    """A slow step, then a quick one: a lease may lapse while the slow one runs."""
    return [await slow_work(seconds), await add(1, 2)]
