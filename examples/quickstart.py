"""A first durable workflow: `durasim run examples/quickstart.py:checkout 3`.

Each step's result is journaled in the embedded SQLite World (.durasim/); kill the
process at any moment and run the same command with `--run-id` again: completed
steps are not run twice.
"""

from __future__ import annotations

import asyncio

from durasim.runtime import get_step_metadata, step, workflow


@step
def reserve(item: int) -> str:
    return f"item-{item} reserved (attempt {get_step_metadata().attempt})"


@step(max_retries=5)
async def charge(total: int) -> dict[str, object]:
    return {"charged": total, "currency": "EUR"}


@workflow
async def checkout(items: int) -> dict[str, object]:
    reservations = await asyncio.gather(*(reserve(i) for i in range(items)))
    payment = await charge(10 * items)
    return {"reservations": list(reservations), "payment": payment}
