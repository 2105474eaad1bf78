"""Planted-bug Worlds for the queue: one realistic queue bug each.

Each World is a project World (the reference :class:`MemoryWorld`, or
:class:`SQLiteWorld`) whose queue facet is wrapped the way a third-party author
writes it: a lease checked in one round trip and written in another (each an
``await``), a delay stored in a column of whole seconds, a release that forgets
its delay, an extend that finds the message by id alone, an idempotency index
dropped when a lease is re-claimed, a ``next_due`` that looks only at messages
never delayed.  ``durasim conformance`` catches each with its default options::

    durasim conformance tests.planted.worlds_queue:make_ack_two_round_trips

``PLANTED`` maps each name to its factory ``make_<name>(setup) -> World``;
``CHECK`` the contract test (or layer) expected to catch it; the factory's
docstring says the bug.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta
from typing import Any

import attrs

from durasim.runtime import RetryableError, get_step_metadata, step, workflow
from durasim.worlds import Delivery, LeaseLost, MemoryWorld, SQLiteWorld, World, WorldSetup


class _Queue:
    """Forwards every call to the World's own queue, except those a subclass defines."""

    def __init__(self, world: Any, inner: Any) -> None:
        self.world = world
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("world", "inner"):
            raise AttributeError(name)
        return getattr(self.inner, name)


async def round_trip() -> None:
    """One request to a remote store: other calls run meanwhile."""
    await asyncio.sleep(0)


def _memory(setup: WorldSetup, facet: type[_Queue]) -> MemoryWorld:
    world = MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)
    world.queue = facet(world, world.queue)  # type: ignore[assignment]
    return world


def _sqlite(setup: WorldSetup, facet: type[_Queue]) -> SQLiteWorld:
    world = SQLiteWorld(
        setup.directory / "planted.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
    )
    world.queue = facet(world, world.queue)  # type: ignore[assignment]
    return world


def _lease_holds(world: MemoryWorld, delivery: Delivery) -> None:
    slot = world._queue.get(delivery.message_id)
    if slot is None or slot.lease_id != delivery.lease_id:
        raise LeaseLost(
            f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer held",
            message_id=delivery.message_id,
        )


# -- 1. ack: check the lease, then delete by id in a second round trip -----------------------


class _AckTwoRoundTrips(_Queue):
    async def ack(self, delivery: Delivery) -> None:
        _lease_holds(self.world, delivery)  # SELECT ... WHERE lease_id = ?
        await round_trip()
        slot = self.world._queue.pop(delivery.message_id, None)  # DELETE ... WHERE id = ?
        if slot is not None and slot.message.idempotency_key is not None:
            self.world._idempotency.pop(slot.message.idempotency_key, None)


def make_ack_two_round_trips(setup: WorldSetup) -> World:
    """``ack`` checks the lease, then deletes by message id in a second round trip.

    A worker that re-claims the message after the lease expired, in between,
    has its message deleted under it: the work it does is lost.
    """
    return _memory(setup, _AckTwoRoundTrips)


# -- 2. a delay stored in whole seconds --------------------------------------------------------


class _WholeSeconds(_Queue):
    async def enqueue(self, queue_name: str, payload: bytes, **kwargs: Any) -> str:
        if isinstance(kwargs.get("delay"), float):
            kwargs["delay"] = float(int(kwargs["delay"]))  # an INTEGER column of seconds
        result: str = await self.inner.enqueue(queue_name, payload, **kwargs)
        return result


def make_delay_truncated(setup: WorldSetup) -> World:
    """``enqueue`` stores its delay with ``int()``: a 0.25 s retry is due at once."""
    return _sqlite(setup, _WholeSeconds)


# -- 3. release forgets its delay --------------------------------------------------------------


class _ReleaseNow(_Queue):
    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        await self.inner.release(delivery)  # the keyword never passed down


def make_release_ignores_delay(setup: WorldSetup) -> World:
    """``release`` ignores its delay: a step retry is due again at once."""
    return _sqlite(setup, _ReleaseNow)


# -- 4. a release delay rounded up to whole seconds --------------------------------------------


class _ReleaseCeil(_Queue):
    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        await self.inner.release(delivery, delay=float(math.ceil(delay)))


def make_release_delay_rounded(setup: WorldSetup) -> World:
    """``release`` rounds its delay up to whole seconds (a timer of second granularity)."""
    return _memory(setup, _ReleaseCeil)


# -- 5. extend finds the message by id alone ---------------------------------------------------


class _ExtendAnyHolder(_Queue):
    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        world: MemoryWorld = self.world
        slot = world._queue.get(delivery.message_id)
        if slot is None:
            raise LeaseLost(
                f"message {delivery.message_id!r} is gone", message_id=delivery.message_id
            )
        slot.lease_id = delivery.lease_id  # UPDATE ... WHERE id = ? (the owner never checked)
        result: Delivery = await self.inner.extend(delivery, lease_seconds=lease_seconds)
        return result


def make_extend_any_holder(setup: WorldSetup) -> World:
    """``extend`` does not check the lease owner: a holder whose message was re-claimed
    takes the lease back, and the message is worked on twice."""
    return _memory(setup, _ExtendAnyHolder)


# -- 6. release: check the lease, then clear it in a second round trip -------------------------


class _ReleaseTwoRoundTrips(_Queue):
    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        world: MemoryWorld = self.world
        _lease_holds(world, delivery)
        await round_trip()
        slot = world._queue.get(delivery.message_id)
        if slot is not None:  # UPDATE ... SET lease_id = NULL WHERE id = ?
            slot.lease_id = None
            slot.lease_expires_at = None
            slot.set_message(
                attrs.evolve(slot.message, available_at=world.clock.now() + _seconds(delay))
            )


def _seconds(delay: float) -> timedelta:
    return timedelta(seconds=delay)


def make_release_two_round_trips(setup: WorldSetup) -> World:
    """``release`` checks the lease, then clears it by message id in a second round trip:
    a re-claim in between loses its lease (and the message is delivered twice)."""
    return _memory(setup, _ReleaseTwoRoundTrips)


# -- 7. the idempotency index dropped at a re-claim --------------------------------------------


class _KeyDroppedAtReclaim(_Queue):
    async def claim(self, **kwargs: Any) -> Delivery | None:
        delivery: Delivery | None = await self.inner.claim(**kwargs)
        message = None if delivery is None else delivery.message
        if message is not None and message.attempt > 1 and message.idempotency_key is not None:
            self.world._idempotency.pop(message.idempotency_key, None)  # "moved to retries"
        return delivery


def make_key_dropped_at_reclaim(setup: WorldSetup) -> World:
    """A message re-claimed after its lease expired loses its idempotency key: the same
    key then queues a second message."""
    return _memory(setup, _KeyDroppedAtReclaim)


# -- 8. next_due looks only at messages never delayed or leased --------------------------------


class _NextDueDueOnly(_Queue):
    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        now = self.world.clock.now()
        due = [
            m.available_at
            for m in await self.inner.messages()
            if m.queue_name.startswith(queue_prefix) and m.available_at <= now
        ]
        return min(due, default=None)


def make_next_due_ignores_delayed(setup: WorldSetup) -> World:
    """``next_due`` answers only for messages already due: a worker sleeping until then
    never wakes for a delayed message (or a lease that will expire)."""
    return _sqlite(setup, _NextDueDueOnly)


PLANTED = {
    "ack_two_round_trips": make_ack_two_round_trips,
    "delay_truncated": make_delay_truncated,
    "release_ignores_delay": make_release_ignores_delay,
    "release_delay_rounded": make_release_delay_rounded,
    "extend_any_holder": make_extend_any_holder,
    "release_two_round_trips": make_release_two_round_trips,
    "key_dropped_at_reclaim": make_key_dropped_at_reclaim,
    "next_due_ignores_delayed": make_next_due_ignores_delayed,
}

#: The contract test each planted World fails (at least).
CHECK = {
    "ack_two_round_trips": "test_settle_racing_a_reclaim_after_expiry",
    "delay_truncated": "test_fractional_delays_are_kept_exactly",
    "release_ignores_delay": "test_release_with_delay",
    "release_delay_rounded": "test_fractional_delays_are_kept_exactly",
    "extend_any_holder": "test_lost_holder_cannot_touch_the_new_lease",
    "release_two_round_trips": "test_settle_racing_a_reclaim_after_expiry",
    "key_dropped_at_reclaim": "test_idempotency_key_in_every_message_state",
    "next_due_ignores_delayed": "test_next_due_follows_every_message_state",
}


def make_control_memory(setup: WorldSetup) -> World:
    """The unmodified reference."""
    return _memory(setup, _Queue)


def make_control_sqlite(setup: WorldSetup) -> World:
    """The unmodified SQLiteWorld behind the same forwarding wrapper."""
    return _sqlite(setup, _Queue)


# -- a workflow whose step asks for a sub-second retry (explore over the World's queue) ------


@step(module="planted_queue")
async def quarter_retry() -> int:
    """Fails its first attempt, asking for a retry 0.25 s later."""
    meta = get_step_metadata()
    if meta.attempt == 1:
        raise RetryableError("not yet", retry_after=timedelta(seconds=0.25))
    return meta.attempt


@workflow(module="planted_queue")
async def retry_in_a_quarter() -> int:
    """One step, retried once after 0.25 s."""
    return await quarter_retry()
