"""Workflows for the crash-point tests (module ``crashflows``): a checkout whose charge
step is idempotent or not (docs/simulator.md, "Crash points and idempotency")."""

from __future__ import annotations

from durasim.runtime import get_step_metadata, step, workflow

#: The payment provider: one entry per charge it made, with the key it was made under.
LEDGER: list[tuple[str, str]] = []


@step(module="crashflows")
def reserve(order_id: str) -> str:
    return f"reserved {order_id}"


@step(module="crashflows")
def charge(order_id: str) -> str:
    """Not idempotent: every execution charges again."""
    LEDGER.append((order_id, "no key"))
    return f"charged {order_id}"


@step(module="crashflows")
def charge_once(order_id: str) -> str:
    """Idempotent: the charge carries the step's stable id, the provider keeps one per key."""
    key = get_step_metadata().step_id
    if all(k != key for _, k in LEDGER):
        LEDGER.append((order_id, key))
    return f"charged {order_id}"


@step(module="crashflows")
def ship(order_id: str) -> str:
    return f"shipped {order_id}"


@workflow(module="crashflows")
async def checkout(order_id: str) -> str:
    await reserve(order_id)
    await charge(order_id)
    return await ship(order_id)


@workflow(module="crashflows")
async def checkout_once(order_id: str) -> str:
    await reserve(order_id)
    await charge_once(order_id)
    return await ship(order_id)
