"""The process's one heartbeat thread, shared by every worker (``runtime/_heartbeat.py``).

Renewals are observed through fake renewers that set events (bounded waits,
never reached when the code is right); nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Any

import pytest

import durasim.runtime._heartbeat as beats
from durasim.runtime import Worker, start, step, workflow
from durasim.runtime._heartbeat import Heartbeat
from durasim.runtime._leases import LeaseKeeper, LeasePolicy
from durasim.worlds import Delivery, FixedClock, MemoryWorld

BOUND = 60.0  # seconds a wait may take at most (never reached when the code is right)


class FakeRenewer:
    """Records each renewal and sets ``renewed``; ``hold`` (if given) makes it hang first."""

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.renewed = threading.Event()
        self.closed = threading.Event()
        self.calls: list[str] = []
        self.threads: set[str] = set()
        self._hold = hold

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        self.threads.add(threading.current_thread().name)
        if self._hold is not None:
            await self._hold.wait()
        self.calls.append(delivery.lease_id)
        self.renewed.set()
        return delivery

    async def close(self) -> None:
        self.closed.set()


def _fake_world(renewer: FakeRenewer) -> MemoryWorld:
    world = MemoryWorld(clock=FixedClock())
    world.queue.lease_renewer = lambda: renewer  # type: ignore[method-assign]
    return world


async def _claimed(world: MemoryWorld, name: str) -> Delivery:
    await world.queue.enqueue(f"durasim/{name}", b"{}")
    delivery = await world.queue.claim(queue_prefix=f"durasim/{name}", lease_seconds=600)
    assert delivery is not None
    return delivery


def _wait(event: threading.Event) -> bool:
    return event.wait(timeout=BOUND)


@step
def beat_add(a: int, b: int) -> int:
    return a + b


@workflow
async def beat_sum(n: int) -> int:
    total = 0
    for i in range(n):
        total = await beat_add(total, i)
    return total


async def test_back_to_back_and_side_by_side_workers_share_one_thread(own_hub: beats._Hub) -> None:
    # (A hub of this test's own: another test's lingering thread is not counted.)
    before = {t for t in threading.enumerate() if t.name == "durasim-heartbeat"}
    seen: set[threading.Thread | None] = set()
    for _ in range(5):
        world = MemoryWorld(clock=FixedClock())
        run = await start(beat_sum, 3, world=world)
        worker = Worker(world)
        await worker.drain()
        assert await run.result() == 3
        assert not worker.heartbeat.serving  # the drained worker left the thread at once
        seen.add(beats._hub.thread)
    assert len(seen) == 1
    (thread,) = seen
    assert thread is not None
    assert thread.is_alive()
    assert thread.name == "durasim-heartbeat"
    # Two workers holding leases at once: both served by that one thread.
    first, second = (Heartbeat(MemoryWorld(), LeaseKeeper(LeasePolicy())) for _ in range(2))
    first.acquire()
    second.acquire()
    try:
        assert first.serving
        assert second.serving
        assert beats._hub.thread is thread
        now = {t for t in threading.enumerate() if t.name == "durasim-heartbeat"}
        assert now - before == {thread}
    finally:
        first.release()
        second.release()
    assert not first.serving
    assert not second.serving


async def test_every_worker_on_the_thread_is_renewed_and_one_slow_world_holds_none_back() -> None:
    hang = asyncio.Event()  # never set: the first World's renewal hangs (a stuck connection)
    slow, fast = FakeRenewer(hold=hang), FakeRenewer()
    policy = LeasePolicy(lease_seconds=0.3, renew_every=0.02, warn_blocked_after=10)
    beats = []
    for renewer in (slow, fast):
        world = _fake_world(renewer)
        keeper = LeaseKeeper(policy)
        heartbeat = Heartbeat(world, keeper)
        heartbeat.acquire()
        # Held since long ago: due at the thread's next beat.
        keeper.hold(await _claimed(world, "w"), renewed_at=time.monotonic() - 10)
        beats.append(heartbeat)
    try:
        assert await asyncio.to_thread(_wait, fast.renewed)
        assert fast.threads == {"durasim-heartbeat"}
        assert slow.threads == {"durasim-heartbeat"}  # under way, stuck: the other went on
        assert not slow.renewed.is_set()
    finally:
        for heartbeat in beats:
            heartbeat.release()
    # Their last user left: the thread closes each renewer (the stuck one once its
    # renewal ends; here it never does, so only the free one is closed now).
    assert await asyncio.to_thread(_wait, fast.closed)


async def test_a_renewer_is_made_only_when_due_and_closed_as_the_last_user_leaves() -> None:
    renewer = FakeRenewer()  # (holds nothing of the World)
    world = MemoryWorld(clock=FixedClock())
    made: list[int] = []

    def make() -> FakeRenewer:
        made.append(1)
        return renewer

    world.queue.lease_renewer = make  # type: ignore[method-assign,assignment]
    keeper = LeaseKeeper(LeasePolicy(lease_seconds=0.3, renew_every=0.02))
    heartbeat = Heartbeat(world, keeper)
    heartbeat.acquire()
    try:
        keeper.hold(await _claimed(world, "a"), renewed_at=time.monotonic() - 10)
        assert await asyncio.to_thread(_wait, renewer.renewed)
        assert made == [1]
        assert heartbeat._state.renewing
    finally:
        heartbeat.release()
    assert await asyncio.to_thread(_wait, renewer.closed)  # woken to close it, not polled
    state = heartbeat._state
    ref = weakref.ref(world)
    del world, heartbeat  # the worker is dropped
    # The renewer's closing task may still be finishing; once it has, nothing holds the World.
    for _ in range(1000):
        gc.collect()
        if ref() is None:
            break
        await asyncio.to_thread(time.sleep, 0)  # let the thread finish its task (no wait)
    assert ref() is None
    assert not state.renewing


async def test_a_worker_dropped_while_serving_leaves_the_thread(
    monkeypatch: pytest.MonkeyPatch, own_hub: beats._Hub
) -> None:
    heartbeat = Heartbeat(MemoryWorld(), LeaseKeeper(LeasePolicy()))
    heartbeat.acquire()  # never released: the worker is dropped mid-delivery
    state = heartbeat._state
    assert state.registered
    world = weakref.ref(heartbeat.world)
    del heartbeat
    gc.collect()
    assert world() is None  # the state let the World go at once
    assert state.world is None
    # The thread takes the state off its list at its next beat (woken now).
    thread = beats._hub.thread
    assert thread is not None
    _end_lingering(monkeypatch)
    thread.join(timeout=BOUND)
    assert not thread.is_alive()
    assert state not in beats._hub.states
    assert not state.registered


def _end_lingering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Heartbeat, "LINGER_SECONDS", 0.0)
    with beats._hub.lock:
        beats._hub.poke()


async def test_the_thread_ends_after_lingering_and_the_next_user_starts_another(
    monkeypatch: pytest.MonkeyPatch, own_hub: beats._Hub
) -> None:
    heartbeat = Heartbeat(MemoryWorld(), LeaseKeeper(LeasePolicy()))
    heartbeat.acquire()
    heartbeat.release()
    thread = beats._hub.thread
    assert thread is not None
    assert heartbeat.alive  # lingering with no user
    _end_lingering(monkeypatch)
    thread.join(timeout=BOUND)
    assert not thread.is_alive()
    assert not heartbeat.alive
    monkeypatch.setattr(Heartbeat, "LINGER_SECONDS", 3.0)
    heartbeat.acquire()
    try:
        assert heartbeat.alive
        assert beats._hub.thread is not thread
    finally:
        heartbeat.release()


class Died(BaseException):
    pass


async def test_a_thread_that_dies_is_logged_and_restarted_by_the_next_acquire(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, own_hub: beats._Hub
) -> None:
    plain = beats._Beat.check
    died = threading.Event()

    def dying(self: Any) -> None:
        if not died.is_set():
            died.set()
            raise Died  # not an Exception: ends the thread's loop
        plain(self)

    monkeypatch.setattr(beats._Beat, "check", dying)
    renewer = FakeRenewer()
    world = _fake_world(renewer)
    keeper = LeaseKeeper(LeasePolicy(lease_seconds=0.3, renew_every=0.02))
    heartbeat = Heartbeat(world, keeper)
    with caplog.at_level(logging.ERROR, logger="durasim.runtime"):
        heartbeat.acquire()  # (a lingering thread is woken: this state's tick is shorter)
        try:
            thread = beats._hub.thread
            assert thread is not None
            keeper.hold(await _claimed(world, "d"), renewed_at=time.monotonic() - 10)
            assert await asyncio.to_thread(_wait, died)
            thread.join(timeout=BOUND)
            assert not thread.is_alive()
            assert not heartbeat.alive
            assert any("heartbeat thread failed" in r.getMessage() for r in caplog.records)
            heartbeat.acquire()  # the next delivery: a new thread, which renews
            try:
                assert heartbeat.alive
                assert await asyncio.to_thread(_wait, renewer.renewed)
            finally:
                heartbeat.release()
        finally:
            heartbeat.release()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_starts_its_own_thread() -> None:
    # After a fork the parent's thread does not exist in the child: the child's first
    # acquire must start one there (not believe the parent's is running).
    script = textwrap.dedent(
        """
        import asyncio, os, sys, threading
        from durasim.runtime._heartbeat import Heartbeat, _hub
        from durasim.runtime._leases import LeaseKeeper, LeasePolicy
        from durasim.worlds import MemoryWorld

        async def use():
            heartbeat = Heartbeat(MemoryWorld(), LeaseKeeper(LeasePolicy()))
            heartbeat.acquire()
            try:
                assert heartbeat.alive, "no heartbeat thread"
                return _hub.thread
            finally:
                heartbeat.release()

        parent = asyncio.run(use())
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                assert _hub.thread is None and not _hub.states
                child = asyncio.run(use())
                assert child is not parent and child.is_alive()
            except BaseException as exc:
                print("child:", repr(exc), flush=True)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
