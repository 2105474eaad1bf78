"""Contract: the queue under the runtime's races, sub-second delays, ``next_due``, keys.

The runtime settles a delivery (``ack``, ``release``, ``extend``) while another
worker may already be re-claiming the same message after its lease expired;
retries are released with fractional delays; a worker sleeps until
``next_due``; an idempotency key is re-enqueued in every state of its message.
Each race is run in both orders of arrival (two calls in flight at once): a
World that checks the lease in one round trip and writes in another lets the
re-claim slip in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from durasim.worlds import Delivery, FixedClock, LeaseLost, World

from ._fixtures import MakeWorld, clock, make_world, world  # noqa: F401 -- fixtures


async def claim(world: World, **kwargs: object) -> Delivery:
    """Claim, insisting that something was due."""
    delivery = await world.queue.claim(**kwargs)  # type: ignore[arg-type]
    assert delivery is not None, "expected a due message"
    return delivery


async def in_flight(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Start every call at once (in this order); their results or their errors."""
    results = await asyncio.gather(*(call() for call in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, LeaseLost):
            raise result
    return list(results)


def _settle(world: World, how: str, delivery: Delivery) -> Callable[[], Awaitable[Any]]:
    if how == "ack":
        return lambda: world.queue.ack(delivery)
    if how == "release":
        return lambda: world.queue.release(delivery)
    return lambda: world.queue.extend(delivery, lease_seconds=5)


# --- a settle racing a re-claim after the lease expired -----------------------------------


@pytest.mark.parametrize("first", ["settle-first", "claim-first"])
@pytest.mark.parametrize("how", ["ack", "release", "extend"])
async def test_settle_racing_a_reclaim_after_expiry(
    world: World, clock: FixedClock, how: str, first: str
) -> None:
    message_id = await world.queue.enqueue("q", b"m")
    old = await claim(world, lease_seconds=5)
    clock.advance(5)  # expired, not re-claimed yet: the old holder may still settle
    settle = _settle(world, how, old)

    async def reclaim() -> Delivery | None:
        return await world.queue.claim(lease_seconds=30)

    if first == "settle-first":
        settled, new = await in_flight(settle, reclaim)
    else:
        new, settled = await in_flight(reclaim, settle)
    left = {m.message_id for m in await world.queue.messages()}
    if isinstance(settled, LeaseLost):
        # The re-claim came first: the old holder settles nothing, the new one holds it.
        assert isinstance(new, Delivery), f"{how} refused with LeaseLost, yet nobody re-claimed"
        assert message_id in left, f"{how} was refused, yet the re-claimed message is gone"
    elif how == "ack":
        assert new is None, (
            "the old holder's ack succeeded and the message was also claimed again: "
            "an acked message was redelivered (or the re-claimed message was deleted)"
        )
        assert message_id not in left, "ack succeeded but the message is still queued"
        clock.advance(60)
        assert await world.queue.claim() is None, "an acked message came back"
        return
    elif how == "extend":
        assert new is None, (
            "extend by the old holder succeeded and another claim took the message too: "
            "the lease was renewed for the wrong holder (the message is delivered twice)"
        )
        assert await world.queue.claim() is None, "a renewed lease did not hold the message"
        await world.queue.ack(settled)
        assert await world.queue.messages() == ()
        return
    # The re-claim holds the message (after a release, or because it came first).
    if new is None and how == "release":
        # A claim that met the release's row lock may answer "nothing due" at once
        # (``FOR UPDATE SKIP LOCKED``): no loss, as long as the released message is
        # still there and the next claim takes it.
        assert message_id in left, "the released message is gone"
        new = await world.queue.claim(lease_seconds=30)
    assert isinstance(new, Delivery), f"after {how}, the due message was not re-claimed: {new!r}"
    assert new.message_id == message_id
    assert new.attempt == 2
    assert await world.queue.claim() is None, "a message under a fresh lease was claimed again"
    await world.queue.ack(new)  # LeaseLost here: the old holder's settle wiped the new lease
    assert await world.queue.messages() == ()


async def test_acked_message_never_comes_back(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m", delay=0.5)
    clock.advance(0.5)
    delivery = await claim(world, lease_seconds=1)
    await world.queue.ack(delivery)
    for _ in range(3):
        clock.advance(1)
        assert await world.queue.claim() is None, f"acked message {message_id} was redelivered"
    assert await world.queue.next_due() is None


async def test_lost_holder_cannot_touch_the_new_lease(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m")
    old = await claim(world, lease_seconds=5)
    clock.advance(5)
    new = await claim(world, lease_seconds=5)
    for how in ("extend", "release", "ack"):
        try:
            await _settle(world, how, old)()
        except LeaseLost:
            pass
        else:
            raise AssertionError(f"{how} by a holder whose message was re-claimed succeeded")
    (message,) = await world.queue.messages()
    assert message.message_id == message_id
    clock.advance(4)
    assert await world.queue.claim() is None  # the new lease still holds, unchanged
    clock.advance(1)
    third = await claim(world)
    assert third.attempt == 3
    await world.queue.ack(third)
    del new


# --- fractional delays ---------------------------------------------------------------------


async def test_fractional_delays_are_kept_exactly(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m", delay=0.25)
    (message,) = await world.queue.messages()
    assert message.available_at == clock.now() + timedelta(seconds=0.25), (
        "a 0.25 s delay was not kept exactly (truncated to whole seconds?)"
    )
    assert await world.queue.next_due() == clock.now() + timedelta(seconds=0.25)
    assert await world.queue.claim() is None, "claimed before its 0.25 s delay"
    clock.advance(0.25)
    delivery = await claim(world, lease_seconds=2.5)
    assert delivery.message_id == message_id
    assert delivery.lease_expires_at == clock.now() + timedelta(seconds=2.5)
    extended = await world.queue.extend(delivery, lease_seconds=0.75)
    assert extended.lease_expires_at == clock.now() + timedelta(seconds=0.75)
    await world.queue.release(extended, delay=1.5)
    (message,) = await world.queue.messages()
    assert message.available_at == clock.now() + timedelta(seconds=1.5), (
        "a 1.5 s release delay was not kept exactly"
    )
    assert await world.queue.next_due() == clock.now() + timedelta(seconds=1.5)
    clock.advance(1.499)
    assert await world.queue.claim() is None, "released message claimed before its delay"
    clock.advance(0.001)
    again = await claim(world)
    assert (again.message_id, again.attempt) == (message_id, 2)
    await world.queue.ack(again)


async def test_sub_second_release_is_not_due_at_once(world: World, clock: FixedClock) -> None:
    await world.queue.enqueue("q", b"m")
    await world.queue.release(await claim(world), delay=0.2)
    assert await world.queue.claim() is None, "a 0.2 s release delay was dropped"
    clock.advance(0.2)
    assert (await claim(world)).attempt == 2


# --- next_due -----------------------------------------------------------------------------


async def test_next_due_follows_every_message_state(world: World, clock: FixedClock) -> None:
    start = clock.now()

    def at(seconds: float) -> object:
        return start + timedelta(seconds=seconds)

    assert await world.queue.next_due() is None
    late = await world.queue.enqueue("q", b"late", delay=10)
    assert await world.queue.next_due() == at(10), "next_due ignores a delayed message"
    await world.queue.enqueue("q", b"soon", delay=3.5)
    assert await world.queue.next_due() == at(3.5)
    assert await world.queue.next_due(queue_prefix="other") is None
    assert await world.queue.next_due(queue_prefix="q") == at(3.5)
    clock.advance(3.5)
    soon = await claim(world, lease_seconds=20)  # leased until 23.5
    assert await world.queue.next_due() == at(10), "next_due after a claim"
    clock.advance(6.5)
    held = await claim(world, lease_seconds=1)  # leased until 11
    assert held.message_id == late
    assert await world.queue.next_due() == at(11), "next_due ignores a lease's expiry"
    await world.queue.ack(held)
    assert await world.queue.next_due() == at(23.5), "next_due after an ack"
    await world.queue.release(soon, delay=2.25)
    assert await world.queue.next_due() == at(12.25), "next_due after a release with a delay"
    clock.advance(2.25)
    await world.queue.ack(await claim(world))
    assert await world.queue.next_due() is None


# --- idempotency keys in every state of their message -------------------------------------


async def test_idempotency_key_in_every_message_state(world: World, clock: FixedClock) -> None:
    first = await world.queue.enqueue("q", b"a", idempotency_key="k")

    async def same(state: str) -> None:
        again = await world.queue.enqueue("q", b"again", idempotency_key="k")
        assert again == first, f"idempotency key gave a second message while {state}"
        keyed = [m for m in await world.queue.messages() if m.idempotency_key == "k"]
        assert len(keyed) == 1, f"two messages with one idempotency key while {state}"

    await same("queued")
    delivery = await claim(world, lease_seconds=5)
    await same("claimed")
    clock.advance(5)
    await same("its lease expired")
    delivery = await claim(world, lease_seconds=5)
    assert delivery.attempt == 2
    await same("re-claimed after expiry")
    await world.queue.release(delivery, delay=1)
    await same("released")
    clock.advance(1)
    delivery = await claim(world)
    await world.queue.ack(delivery)
    fresh = await world.queue.enqueue("q", b"b", idempotency_key="k")
    assert fresh != first, "after the ack the key must be free"
    assert [m.message_id for m in await world.queue.messages()] == [fresh]
    assert await world.queue.enqueue("q", b"c", idempotency_key="k") == fresh
