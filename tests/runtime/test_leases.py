"""Lease options, the lease keeper, the heartbeat, and steps raising BaseExceptions.

The keeper is driven with an injected clock (no waiting).  Two tests block a
real event loop on purpose (that is the behaviour under test), for under a
second each.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
import types
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.runtime import (
    LeaseOptionsError,
    LeasePolicy,
    Limits,
    Worker,
    WorkflowFailed,
    start,
    step,
    workflow,
)
from durasim.runtime._leases import LeaseKeeper
from durasim.scenarios import main
from durasim.worlds import (
    Delivery,
    EventType,
    FixedClock,
    LeaseLost,
    MemoryWorld,
    Message,
    World,
    WorldError,
)

# -- options ------------------------------------------------------------------------


def test_defaults_recover_a_dead_workers_runs_in_about_five_seconds() -> None:
    policy = LeasePolicy()
    assert (policy.lease_seconds, policy.renew_every) == (5.0, 1.0)
    worker = Worker(MemoryWorld())
    assert worker.lease_seconds == 5.0
    assert worker.leases.policy.renew_every == 1.0
    assert LeasePolicy.of(30.0, None).renew_every == 1.0
    assert LeasePolicy.of(0.3, None).renew_every == pytest.approx(0.1)


@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-3, 3),
        st.booleans(),
        st.just(1.0),
    )
)
def test_the_default_policy_shortcut_equals_the_general_path(warn: Any) -> None:
    # LeasePolicy.of(None, None) hands out one validated default instance: the same
    # value, or the same refusal, as building the policy from the defaults anew.
    def outcome(make: Any) -> Any:
        try:
            return make()
        except LeaseOptionsError as exc:
            return ("refused", str(exc))

    shortcut = outcome(lambda: LeasePolicy.of(None, None, warn_blocked_after=warn))
    general = outcome(
        lambda: LeasePolicy(lease_seconds=5.0, renew_every=1.0, warn_blocked_after=warn)
    )
    assert shortcut == general
    if not isinstance(shortcut, tuple):
        assert type(shortcut.warn_blocked_after) is type(general.warn_blocked_after)


@pytest.mark.parametrize(
    ("lease", "renew", "says"),
    [
        (0, None, "lease_seconds=0: a lease option must be more than 0"),
        (-1.0, None, "more than 0 seconds"),
        (math.nan, None, "finite number"),
        (math.inf, None, "finite number"),
        (5.0, 5.0, "renew_every=5.0 is not less than lease_seconds=5.0"),
        (5.0, 0, "renew_every=0"),
        (1.0, 2.0, "the lease would lapse before it is renewed"),
    ],
)
def test_lease_options_are_validated(lease: float, renew: float | None, says: str) -> None:
    with pytest.raises(LeaseOptionsError, match=says.replace("(", r"\(").replace(".", r"\.")):
        Worker(MemoryWorld(), lease_seconds=lease, renew_every=renew)


@pytest.mark.parametrize(
    "options",
    [["--lease-seconds", "0"], ["--lease-seconds", "2", "--renew-every", "2"]],
)
def test_the_worker_cli_refuses_bad_lease_options(
    options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", *options])
    assert exited.value.code == 2
    assert "lease" in capsys.readouterr().err


# -- the keeper, in injected time ---------------------------------------------------


def _delivery(n: int) -> Delivery:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    message = Message(
        message_id=f"msg{n}", queue_name="q", payload=b"", available_at=now, enqueued_at=now
    )
    return Delivery(message=message, lease_id=f"lease{n}", lease_expires_at=now)


async def test_the_keeper_renews_what_is_due_and_forgets_lost_leases() -> None:
    now = [0.0]
    keeper = LeaseKeeper(LeasePolicy(lease_seconds=5, renew_every=1), clock=lambda: now[0])
    calls: Counter[str] = Counter()
    fail: dict[str, BaseException] = {}

    async def extend(delivery: Delivery) -> Delivery:
        calls[delivery.message_id] += 1
        if delivery.message_id in fail:
            raise fail[delivery.message_id]
        return delivery

    a, b, c = _delivery(1), _delivery(2), _delivery(3)
    for d in (a, b, c):
        keeper.hold(d)
    assert await keeper.renew_due(extend) == 0  # just claimed: nothing due
    now[0] = 1.0
    fail["msg2"] = LeaseLost("taken", message_id="msg2")
    fail["msg3"] = WorldError("busy")
    assert await keeper.renew_due(extend) == 1
    now[0] = 1.5
    assert await keeper.renew_due(extend) == 0  # a renewed at 1.0; c is retried...
    assert calls == Counter(msg1=1, msg2=1, msg3=2)  # ...and b, lost, never again
    keeper.drop(a)
    now[0] = 10.0
    fail.clear()
    assert await keeper.renew_due(extend) == 1  # only c: a dropped, b lost
    assert len(keeper) == 2


async def test_the_keeper_says_when_its_next_renewal_falls_due(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a driver in virtual time (the simulator) moves its clock to.
    now = [0.3]
    keeper = LeaseKeeper(LeasePolicy(lease_seconds=5, renew_every=1), clock=lambda: now[0])
    assert keeper.next_renewal() is None
    a, b = _delivery(1), _delivery(2)
    keeper.hold(a)
    now[0] = 0.7
    keeper.hold(b)
    assert keeper.next_renewal() == 0.3 + 1
    now[0] = keeper.next_renewal()  # exactly then: due (one sum decides both)
    assert keeper.due() == [a]

    async def lost(delivery: Delivery) -> Delivery:
        raise LeaseLost("taken", message_id=delivery.message_id)

    with caplog.at_level(logging.INFO, logger="durasim.runtime"):
        assert await keeper.renew_due(lost, log_failures=False) == 0  # a simulator's trace says it
    assert caplog.records == []
    assert keeper.next_renewal() == 0.7 + 1  # a is lost: only b is renewed from now on


# -- the heartbeat, on a real (blocked) loop ----------------------------------------

BLOCKS: Counter[str] = Counter()


@step(max_retries=0)
async def hog(seconds: float) -> str:
    BLOCKS["hog"] += 1
    time.sleep(seconds)  # noqa: ASYNC251 - blocking code in async def: what is survived
    return "done"


@workflow
async def hogging(seconds: float) -> str:
    return await hog(seconds)


async def test_a_step_blocking_the_loop_keeps_its_lease_and_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    BLOCKS.clear()
    world = MemoryWorld()  # the real clock: the lease really runs out unless renewed
    run = await start(hogging, 0.6, world=world)
    first = Worker(world, lease_seconds=0.2, renew_every=0.05, warn_blocked_after=0.1)
    second = Worker(world, lease_seconds=0.2, renew_every=0.05)
    with caplog.at_level(logging.WARNING, logger="durasim.runtime"):
        assert await first.run_one()
        # Had the lease lapsed during the block, the message would be claimable now.
        assert not await second.run_one()
        assert await first.run_until_complete(run, poll=0.05) == "done"
    assert BLOCKS["hog"] == 1
    blocked = [
        r.getMessage() for r in caplog.records if "blocked the worker's event loop" in r.message
    ]
    assert blocked
    assert all("hog" in m for m in blocked)


# -- steps that raise BaseExceptions ------------------------------------------------

ATTEMPTS: Counter[str] = Counter()
#: A fresh key per test: ``id(world)`` is reused once a freed World's address is taken again.
_KEYS = itertools.count()


@step(max_retries=1)
def sync_exits_once(key: str) -> str:
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] == 1:
        raise SystemExit(2)
    return "ok"


@step(max_retries=1)
async def async_interrupted_once(key: str) -> str:
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] == 1:
        raise KeyboardInterrupt
    return "ok"


class Custom(BaseException):
    pass


@step(max_retries=0)
def raises_base(key: str) -> str:
    ATTEMPTS[key] += 1
    raise Custom("custom")


@workflow
async def retried(key: str) -> list[str]:
    return [await sync_exits_once(key), await async_interrupted_once(key + "-kbd")]


@workflow
async def failing(key: str) -> str:
    return await raises_base(key)


@pytest.mark.parametrize("sync_steps", ["thread", "inline"])
@pytest.mark.parametrize("queued", [False, True])
async def test_base_exceptions_fail_the_attempt_and_are_retried(
    world: World, clock: FixedClock, sync_steps: str, queued: bool
) -> None:
    key = f"{sync_steps}-{queued}-{next(_KEYS)}"
    run = await start(retried, key, world=world)
    limits = Limits(sync_steps=sync_steps, inline_steps=0 if queued else 8, queue_steps=queued)
    await _serve(world, clock, Worker(world, limits=limits), run)
    assert await run.result() == ["ok", "ok"]
    assert ATTEMPTS[key] == 2
    assert ATTEMPTS[key + "-kbd"] == 2
    retrying = [e for e in await run.events() if e.type is EventType.STEP_RETRYING]
    assert len(retrying) == 2
    errors = b" ".join(e.data["error"] for e in retrying)
    assert b"SystemExit" in errors
    assert b"KeyboardInterrupt" in errors


async def test_an_unhandled_base_exception_fails_the_step_then_the_run(
    world: World, clock: FixedClock
) -> None:
    key = f"base-{next(_KEYS)}"
    run = await start(failing, key, world=world)
    await _serve(world, clock, Worker(world), run)
    with pytest.raises(WorkflowFailed) as failed:
        await run.result()
    assert "test_leases.Custom" in repr(failed.value.__cause__)  # recorded with its type
    assert ATTEMPTS[key] == 1
    assert any(e.type is EventType.STEP_FAILED for e in await run.events())


async def test_cancelling_a_delivery_still_propagates() -> None:
    from durasim.runtime._metadata import WorkflowMetadata
    from durasim.runtime._steps import execute_step  # the step runner, directly
    from durasim.runtime.serialization import serialize

    started = asyncio.Event()

    @step(name="sleeper_for_cancel")
    async def sleeper() -> None:
        started.set()
        await asyncio.sleep(3600)

    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    task = asyncio.ensure_future(
        execute_step(
            sleeper.definition,
            "step_1",
            serialize({"args": [], "kwargs": {}}),
            attempt=1,
            now=now,
            workflow=WorkflowMetadata(run_id="r", workflow_id="w", started_at=now),
        )
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _serve(world: World, clock: FixedClock, worker: Worker, run: Any) -> None:
    for _ in range(50):
        await worker.drain()
        if (await run.status()).terminal:
            return
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due + timedelta(microseconds=1))
    raise AssertionError("the run did not end")


def test_a_step_that_begins_after_the_unanswered_ping_is_still_named(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The ping went out while the delivery was busy before its step began (a loaded
    # machine): the first look finds no step body old enough; a later beat must.
    import durasim.runtime._heartbeat as beats

    now = [100.0]
    monkeypatch.setattr(beats.time, "monotonic", lambda: now[0])
    found: list[list[str]] = [[], [], ["blocker"]]
    monkeypatch.setattr(beats, "_steps_on", lambda thread, since: found.pop(0))
    loop = asyncio.new_event_loop()  # never run: the ping stays unanswered
    try:
        beat = types.SimpleNamespace(_watched=loop, _watched_thread=None)
        watcher = beats._LoopWatcher(beat, 1.0)  # type: ignore[arg-type]
        caplog.set_level(logging.DEBUG, logger="durasim.runtime")
        for _ in range(5):  # a ping, then beats 0.6 s apart: three past the threshold
            watcher.check()
            now[0] += 0.6
    finally:
        loop.close()
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" has ")[0] for r in warned] == ["step 'blocker'"]


def test_an_unanswered_ping_does_not_keep_its_watcher_alive() -> None:
    # A loop that does not turn (back-to-back deliveries on a World whose calls never
    # yield) holds every ping in its queue: the ping must not hold the watcher, its
    # heartbeat state and its leases (10,000 fresh workers kept 6,000 such objects).
    import gc
    import weakref

    import durasim.runtime._heartbeat as beats

    loop = asyncio.new_event_loop()  # never run: the ping stays queued
    try:
        beat = types.SimpleNamespace(_watched=loop, _watched_thread=None)
        watcher = beats._LoopWatcher(beat, 1.0)  # type: ignore[arg-type]
        watcher.check()
        assert len(loop._ready) == 1  # type: ignore[attr-defined]
        gone = weakref.ref(watcher)
        del watcher
        gc.collect()
        assert gone() is None
        loop.run_until_complete(asyncio.sleep(0))  # the queued ping runs, finds nobody
    finally:
        loop.close()


def test_an_answered_ping_reaches_its_watcher() -> None:
    import durasim.runtime._heartbeat as beats

    loop = asyncio.new_event_loop()
    try:
        beat = types.SimpleNamespace(_watched=loop, _watched_thread=None)
        watcher = beats._LoopWatcher(beat, 1.0)  # type: ignore[arg-type]
        watcher.check()
        assert not watcher._answered.is_set()
        loop.run_until_complete(asyncio.sleep(0))
        assert watcher._answered.is_set()
    finally:
        loop.close()


# -- nothing outlives a drained worker (issue 22) ------------------------------------


@step
def leak_add(a: int, b: int) -> int:
    return a + b


@workflow
async def leak_sequence(n: int) -> int:
    total = 0
    for i in range(n):
        total = await leak_add(total, i)
    return total


def test_a_drained_worker_and_its_world_are_freed_while_the_heartbeat_lingers(
    monkeypatch: pytest.MonkeyPatch, own_hub: Any
) -> None:
    # (own_hub: a heartbeat thread of this test's own, which no other test's worker keeps.)
    # The heartbeat thread outlives its last delivery (LINGER_SECONDS); it must not keep
    # the Worker, the World or the log it read alive meanwhile.
    import gc
    import weakref

    import durasim.runtime._heartbeat as beats

    refs: list[weakref.ref[Any]] = []
    threads: list[Any] = []

    async def one() -> None:
        world = MemoryWorld(clock=FixedClock())
        run = await start(leak_sequence, 5, world=world)
        # A renewal is never due here (the heartbeat makes no renewer of the World).
        worker = Worker(world, lease_seconds=600, renew_every=200)
        await worker.drain()
        assert await run.result() == 10
        assert worker.heartbeat.alive  # the process's thread lingers, as designed...
        assert not worker.heartbeat.serving  # ...but no longer serves the drained worker
        threads.append(beats._hub.thread)
        first = (await world.events.list(run.run_id)).events[0]  # the log, by one of its events
        refs.extend(weakref.ref(o) for o in (world, worker, worker.heartbeat, first))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(one())
        gc.collect()
        assert [r() for r in refs] == [None] * len(refs)  # the loop has not run again
        assert threads[0] is not None
        assert threads[0].is_alive()  # lingering, holding nothing of the worker
        # ...and the shared thread ends once nobody used it for LINGER_SECONDS (made 0
        # here, its sleep cut short: the join's bound is never reached).
        _end_lingering(monkeypatch)
        threads[0].join(timeout=60)
        assert not threads[0].is_alive()
    finally:
        loop.close()


def _end_lingering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the shared heartbeat thread end at its next beat, and beat now."""
    import durasim.runtime._heartbeat as beats

    monkeypatch.setattr(beats.Heartbeat, "LINGER_SECONDS", 0.0)
    with beats._hub.lock:
        beats._hub.poke()


#: Set once the heartbeat's beat has begun while a lease is held (cleared by its test).
_BEAT_ENTERED = threading.Event()


@step
def leak_hold_until_beat(a: int) -> int:
    # Runs while its lease is held: waits (bounded, never reached) for a heartbeat beat
    # to begin, so that beat sees a user and the World in use.
    assert _BEAT_ENTERED.wait(timeout=60)
    return a


@workflow
async def leak_one_beat(n: int) -> int:
    return await leak_hold_until_beat(n)


def test_a_beat_under_way_as_the_worker_is_dropped_does_not_keep_the_world(
    monkeypatch: pytest.MonkeyPatch, own_hub: Any
) -> None:
    # (own_hub: a heartbeat thread of this test's own, which no other test's worker keeps.)
    # CI on 3.12 (session 11): a beat that had taken the World just before the last lease
    # was released still held it when the worker was dropped.  Made deterministic here: the
    # heartbeat's beat is stopped mid-way (in the keeper's due()) while the run finishes,
    # the worker is released and dropped, and everything is collected.
    import gc
    import weakref

    import durasim.runtime._heartbeat as beats

    entered = _BEAT_ENTERED
    entered.clear()
    go = threading.Event()
    refs: list[weakref.ref[Any]] = []
    threads: list[Any] = []

    async def one() -> None:
        world = MemoryWorld(clock=FixedClock())
        run = await start(leak_one_beat, 7, world=world)
        worker = Worker(world, lease_seconds=600, renew_every=200)
        keeper = worker.heartbeat.keeper
        plain_due = keeper.due

        def due() -> list[Any]:
            if threading.current_thread().name == "durasim-heartbeat" and not entered.is_set():
                entered.set()
                assert go.wait(timeout=60)  # bounded, never reached: released below
            return plain_due()

        keeper.due = due  # type: ignore[method-assign]
        await worker.drain()
        assert await run.result() == 7
        assert entered.is_set()  # the beat began while the step held its lease...
        assert not worker.heartbeat.serving  # (the drained worker left the thread at once)
        threads.append(beats._hub.thread)
        first = (await world.events.list(run.run_id)).events[0]
        refs.extend(weakref.ref(o) for o in (world, first))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(one())
        gc.collect()
        # ...and is still under way: it must not be what keeps the World and its log.
        assert [r() for r in refs] == [None] * len(refs)
        go.set()
        _end_lingering(monkeypatch)
        threads[0].join(timeout=60)
        assert not threads[0].is_alive()
    finally:
        go.set()
        loop.close()
