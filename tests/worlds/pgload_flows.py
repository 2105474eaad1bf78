"""The workflow the PostgreSQL load tests run in ``durasim worker`` processes."""

from __future__ import annotations

from durasim.runtime import step, workflow


@step(module="pgload", name="square")
def square(i: int) -> int:
    return i * i


@workflow(module="pgload", name="chain")
async def chain(steps: int) -> int:
    """``steps`` sequential steps; returns the sum of their squares."""
    total = 0
    for i in range(steps):
        total += await square(i)
    return total


def expected(steps: int) -> int:
    """What :func:`chain` returns."""
    return sum(i * i for i in range(steps))
