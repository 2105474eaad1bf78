"""Contract: the queue: leases, stable redelivery, idempotency, exclusivity, dead letters."""

from __future__ import annotations

from datetime import timedelta

import pytest

from durasim.worlds import Delivery, FixedClock, InvalidRequest, LeaseLost, World

from ._fixtures import MakeWorld, clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import assert_refused


async def claim(world: World, **kwargs: object) -> Delivery:
    """Claim, insisting that something was due."""
    delivery = await world.queue.claim(**kwargs)  # type: ignore[arg-type]
    assert delivery is not None, "expected a due message"
    return delivery


async def test_enqueue_claim_ack(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("flow/wf", b"payload", run_id="r1")
    assert message_id.startswith("msg_")
    (message,) = await world.queue.messages()
    assert (message.message_id, message.queue_name, message.payload, message.attempt) == (
        message_id,
        "flow/wf",
        b"payload",
        0,
    )
    assert message.enqueued_at == message.available_at == clock.now()
    assert message.run_id == "r1"
    delivery = await claim(world, lease_seconds=10)
    assert (delivery.message_id, delivery.attempt, delivery.payload) == (message_id, 1, b"payload")
    assert delivery.lease_expires_at == clock.now() + timedelta(seconds=10)
    assert await world.queue.claim() is None  # leased: not due again yet
    await world.queue.ack(delivery)
    assert await world.queue.messages() == ()
    assert await world.queue.claim() is None
    assert await world.queue.next_due() is None


async def test_claim_order_is_due_time_then_enqueue_order(world: World, clock: FixedClock) -> None:
    late = await world.queue.enqueue("q", b"late", delay=5)
    first = await world.queue.enqueue("q", b"first")
    second = await world.queue.enqueue("q", b"second")
    assert (await claim(world)).message_id == first
    assert (await claim(world)).message_id == second
    assert await world.queue.claim() is None
    assert await world.queue.next_due() == clock.now() + timedelta(seconds=5)
    clock.advance(5)
    assert (await claim(world)).message_id == late


async def test_queue_prefix_filters(world: World) -> None:
    step = await world.queue.enqueue("step/charge", b"s")
    flow = await world.queue.enqueue("flow/wf", b"f")
    assert (await claim(world, queue_prefix="flow/")).message_id == flow
    assert await world.queue.claim(queue_prefix="flow/") is None
    assert (await claim(world, queue_prefix="step/")).message_id == step


async def test_lease_expiry_redelivers_the_same_message(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m")
    first = await claim(world, lease_seconds=10)
    assert await world.queue.next_due() == first.lease_expires_at
    clock.advance(9)
    assert await world.queue.claim() is None
    clock.advance(1)
    second = await claim(world, lease_seconds=10)
    assert second.message_id == message_id
    assert second.attempt == first.attempt + 1 == 2
    assert second.lease_id != first.lease_id
    assert second.payload == b"m"
    # The first holder lost its lease: it can settle nothing.
    for settle in (
        lambda: world.queue.ack(first),
        lambda: world.queue.release(first),
        lambda: world.queue.extend(first, lease_seconds=5),
    ):
        exc = await assert_refused(world, LeaseLost, settle)
        assert exc.message_id == message_id  # type: ignore[attr-defined]
    await world.queue.ack(second)
    assert await world.queue.messages() == ()


async def test_ack_twice_is_lease_lost(world: World) -> None:
    await world.queue.enqueue("q", b"m")
    delivery = await claim(world)
    await world.queue.ack(delivery)
    await assert_refused(world, LeaseLost, lambda: world.queue.ack(delivery))
    await assert_refused(world, LeaseLost, lambda: world.queue.release(delivery))


async def test_release_with_delay(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m")
    first = await claim(world, lease_seconds=60)
    await world.queue.release(first, delay=5)
    (message,) = await world.queue.messages()
    assert message.available_at == clock.now() + timedelta(seconds=5)
    assert await world.queue.claim() is None
    assert await world.queue.next_due() == clock.now() + timedelta(seconds=5)
    clock.advance(5)
    second = await claim(world)
    assert (second.message_id, second.attempt) == (message_id, 2)
    await assert_refused(world, LeaseLost, lambda: world.queue.ack(first))


async def test_release_now_is_due_at_once(world: World) -> None:
    message_id = await world.queue.enqueue("q", b"m")
    await world.queue.release(await claim(world))
    again = await claim(world)
    assert (again.message_id, again.attempt) == (message_id, 2)


async def test_extend_renews_the_lease(world: World, clock: FixedClock) -> None:
    await world.queue.enqueue("q", b"m")
    delivery = await claim(world, lease_seconds=10)
    clock.advance(8)
    extended = await world.queue.extend(delivery, lease_seconds=10)
    assert extended.lease_expires_at == clock.now() + timedelta(seconds=10)
    assert extended.lease_id == delivery.lease_id
    clock.advance(5)  # past the first expiry, within the renewed one
    assert await world.queue.claim() is None
    await world.queue.ack(extended)
    assert await world.queue.messages() == ()


async def test_delayed_enqueue(world: World, clock: FixedClock) -> None:
    message_id = await world.queue.enqueue("q", b"m", delay=30)
    (message,) = await world.queue.messages()
    assert message.available_at == clock.now() + timedelta(seconds=30)
    clock.advance(29.5)
    assert await world.queue.claim() is None
    clock.advance(0.5)
    assert (await claim(world)).message_id == message_id


# --- idempotency keys -------------------------------------------------------------------


async def test_idempotency_key_dedups_while_pending_and_in_flight(world: World) -> None:
    first = await world.queue.enqueue("q", b"a", idempotency_key="k")
    assert await world.queue.enqueue("q", b"b", idempotency_key="k") == first
    assert len(await world.queue.messages()) == 1
    delivery = await claim(world)
    assert await world.queue.enqueue("q", b"c", idempotency_key="k") == first
    assert len(await world.queue.messages()) == 1
    other = await world.queue.enqueue("q", b"d", idempotency_key="k2")
    assert other != first
    await world.queue.ack(delivery)
    # After the ack the key is free: a new message is queued.
    fresh = await world.queue.enqueue("q", b"e", idempotency_key="k")
    assert fresh not in (first, other)
    assert [m.message_id for m in await world.queue.messages()] == [other, fresh]


async def test_idempotency_key_survives_release(world: World) -> None:
    first = await world.queue.enqueue("q", b"a", idempotency_key="k")
    await world.queue.release(await claim(world), delay=10)
    assert await world.queue.enqueue("q", b"b", idempotency_key="k") == first


# --- orchestrator exclusivity --------------------------------------------------------------


async def test_one_orchestrator_delivery_per_run(world: World, clock: FixedClock) -> None:
    a1 = await world.queue.enqueue("flow", b"1", run_id="ra", orchestrator=True)
    a2 = await world.queue.enqueue("flow", b"2", run_id="ra", orchestrator=True)
    step = await world.queue.enqueue("step", b"s", run_id="ra")
    b1 = await world.queue.enqueue("flow", b"3", run_id="rb", orchestrator=True)
    held = await claim(world, lease_seconds=10)
    assert held.message_id == a1
    # ra's second orchestrator message waits; others of the same run and other runs do not.
    assert (await claim(world)).message_id == step
    assert (await claim(world)).message_id == b1
    assert await world.queue.claim() is None
    await world.queue.ack(held)
    assert (await claim(world)).message_id == a2


async def test_orchestrator_exclusivity_ends_with_the_lease(
    world: World, clock: FixedClock
) -> None:
    await world.queue.enqueue("flow", b"1", run_id="ra", orchestrator=True)
    await world.queue.enqueue("flow", b"2", run_id="ra", orchestrator=True)
    await claim(world, lease_seconds=10)
    assert await world.queue.claim() is None
    clock.advance(10)
    first_again = await claim(world, lease_seconds=10)
    assert first_again.message.run_id == "ra"
    assert await world.queue.claim() is None  # still one at a time


async def test_released_orchestrator_delivery_frees_the_run(world: World) -> None:
    await world.queue.enqueue("flow", b"1", run_id="ra", orchestrator=True)
    a2 = await world.queue.enqueue("flow", b"2", run_id="ra", orchestrator=True)
    held = await claim(world)
    await world.queue.release(held, delay=60)
    assert (await claim(world)).message_id == a2


# --- dead letters ----------------------------------------------------------------------


async def test_dead_letters_after_max_deliveries(make_world: MakeWorld, clock: FixedClock) -> None:
    world = make_world(clock, max_deliveries=2)
    try:
        message_id = await world.queue.enqueue("q", b"m", idempotency_key="k")
        keep = await world.queue.enqueue("q", b"keep", delay=100)
        first = await claim(world, lease_seconds=5)
        clock.advance(5)
        second = await claim(world, lease_seconds=5)
        assert (second.message_id, second.attempt) == (message_id, 2)
        clock.advance(5)
        assert await world.queue.claim() is None
        (dead,) = await world.queue.dead_letters()
        assert (dead.message_id, dead.attempt, dead.payload) == (message_id, 2, b"m")
        assert [m.message_id for m in await world.queue.messages()] == [keep]
        await assert_refused(world, LeaseLost, lambda: world.queue.ack(second))
        await assert_refused(world, LeaseLost, lambda: world.queue.ack(first))
        # The key of a dead message is free again.
        assert await world.queue.enqueue("q", b"m2", idempotency_key="k") not in (message_id, keep)
    finally:
        await world.close()


async def test_acked_message_never_dead_letters(make_world: MakeWorld, clock: FixedClock) -> None:
    world = make_world(clock, max_deliveries=1)
    try:
        await world.queue.enqueue("q", b"m")
        await world.queue.ack(await claim(world))
        assert await world.queue.claim() is None
        assert await world.queue.dead_letters() == ()
    finally:
        await world.close()


async def test_dead_letter_skips_to_the_next_due_message(
    make_world: MakeWorld, clock: FixedClock
) -> None:
    world = make_world(clock, max_deliveries=1)
    try:
        doomed = await world.queue.enqueue("q", b"a")
        await claim(world, lease_seconds=1)
        other = await world.queue.enqueue("q", b"b", delay=1)
        clock.advance(1)
        assert (await claim(world)).message_id == other
        assert [m.message_id for m in await world.queue.dead_letters()] == [doomed]
    finally:
        await world.close()


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("q", "text"), {}),
        (("q", bytearray(b"x")), {}),
        (("q", memoryview(b"x")), {}),
        (("", b"x"), {}),
        (("bad name", b"x"), {}),
        (("q", b"x"), {"delay": -1}),
        (("q", b"x"), {"delay": "5"}),
        (("q", b"x"), {"orchestrator": True}),
        (("q", b"x"), {"run_id": "../x"}),
        (("q", b"x"), {"idempotency_key": ""}),
    ],
    ids=[
        "str-payload",
        "bytearray-payload",
        "memview-payload",
        "empty-queue",
        "space-in-queue",
        "negative-delay",
        "str-delay",
        "orchestrator-without-run",
        "path-run-id",
        "empty-key",
    ],
)
async def test_enqueue_bad_input(
    world: World, args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.queue.enqueue(*args, **kwargs),  # type: ignore[arg-type]
    )


async def test_claim_and_release_bad_input(world: World) -> None:
    await world.queue.enqueue("q", b"m")
    await assert_refused(world, InvalidRequest, lambda: world.queue.claim(lease_seconds=-1))
    delivery = await claim(world)
    await assert_refused(world, InvalidRequest, lambda: world.queue.release(delivery, delay=-5))
    await world.queue.ack(delivery)


async def test_expired_lease_not_reclaimed_may_still_settle(
    world: World, clock: FixedClock
) -> None:
    # docs/protocol.md §11: only another claim takes a lease away.
    for settle in ("ack", "release", "extend"):
        message_id = await world.queue.enqueue("q", settle.encode())
        delivery = await claim(world, lease_seconds=5)
        clock.advance(10)
        if settle == "ack":
            await world.queue.ack(delivery)
            assert message_id not in {m.message_id for m in await world.queue.messages()}
        elif settle == "release":
            await world.queue.release(delivery)
            again = await claim(world)
            assert (again.message_id, again.attempt) == (message_id, 2)
            await world.queue.ack(again)
        else:
            renewed = await world.queue.extend(delivery, lease_seconds=5)
            assert renewed.lease_expires_at == clock.now() + timedelta(seconds=5)
            assert await world.queue.claim() is None
            await world.queue.ack(renewed)
    assert await world.queue.messages() == ()


async def test_delay_bounds(world: World) -> None:
    year_and_a_day = 366 * 86_400
    await world.queue.enqueue("q", b"m", delay=year_and_a_day)
    await assert_refused(
        world, InvalidRequest, lambda: world.queue.enqueue("q", b"m", delay=year_and_a_day + 1)
    )
