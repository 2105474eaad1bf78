"""A workflow and its next versions, for explore(upgrade=...) (tests/scenarios/test_upgrades.py).

``order`` is what runs in production; ``order_patched`` the edit made safely
behind ``patched()``; ``order_forgot_two`` a patch whose old branch forgets the
step the old code called, which breaks every run that reached it on the old
code; ``order_unpatched`` the edit with no patch at all.
"""

from __future__ import annotations

from durasim.runtime import patched, sleep, step, workflow


@step
def one() -> int:
    return 1


@step
def two(x: int) -> int:
    return x + 2


@step
def three(x: int) -> int:
    return x + 3


@workflow
async def order() -> int:
    x = await one()
    y = await two(x)
    await sleep(10)
    return y


async def order_patched() -> int:
    x = await one()
    if patched("order-three"):
        y = await three(x)
    else:
        y = await two(x)
    await sleep(10)
    return y


async def order_forgot_two() -> int:
    x = await one()
    if patched("order-three"):
        y = await three(x)
    else:
        y = x  # the old branch forgot the step two
    await sleep(10)
    return y


async def order_unpatched() -> int:
    x = await one()
    y = await three(x)
    await sleep(10)
    return y
