"""The example workflows the conformance suite explores over a World (and ``durasim demo`` runs).

Together they write every kind of event the runtime writes: steps in parallel
and in sequence, a retried step, a hook resumed from outside, a durable sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from durasim.runtime import RetryableError, create_hook, get_step_metadata, step, workflow

__all__ = ["EXAMPLES", "approval", "checkout"]


@step
def reserve(item: int) -> str:
    """Reserve one item."""
    return f"item-{item} reserved"


@step(max_retries=3)
def charge(total: int) -> dict[str, object]:
    """Charge the total; the first attempt fails (a declined card, retried)."""
    if get_step_metadata().attempt == 1:
        raise RetryableError("card declined, retry")
    return {"charged": total, "currency": "EUR"}


@workflow
async def checkout(items: int) -> dict[str, object]:
    """Reserve ``items`` items at once, then charge for them."""
    # Steps are awaitable inside a workflow; their declared types are the bodies'.
    reservations = await asyncio.gather(*(cast(Any, reserve)(i) for i in range(items)))
    payment = await cast(Any, charge)(10 * items)
    return {"reservations": list(reservations), "payment": payment}


@step
def ship(order: str) -> str:
    """Ship the order."""
    return f"{order} shipped"


@workflow
async def approval(order: str) -> str:
    """Wait for an approval from outside (a hook), nap, then ship."""
    hook = create_hook(token=f"approve-{order}")
    decision = await hook
    await asyncio.sleep(60)
    if decision != "yes":
        return f"{order} refused"
    shipped: str = await cast(Any, ship)(order)
    return shipped


#: ``(workflow, args, hooks)`` the exploration layer runs; ``hooks`` maps tokens to payloads.
EXAMPLES: tuple[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]], ...] = (
    (checkout, (3,), {}),
    (approval, ("o-1",), {"approve-o-1": "yes"}),
)
