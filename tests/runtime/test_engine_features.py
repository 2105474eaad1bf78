"""Engine features: custom-class arguments, nested and method steps, sandbox, limits, wake-up."""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import threading
import time

import attrs
import pytest
from _drive import run_to_end

from durasim.runtime import (
    Limits,
    Worker,
    WorkflowFailed,
    serializable,
    start,
    step,
    workflow,
)
from durasim.runtime.lowlevel import engine_for
from durasim.worlds import FixedClock, RunStatus, World, WorldError


@serializable
@attrs.frozen
class Cart:
    owner: str
    items: tuple[str, ...] = ()

    def with_item(self, item: str) -> Cart:
        return attrs.evolve(self, items=(*self.items, item))


@step
def add_item(cart: Cart, item: str) -> Cart:
    return cart.with_item(item)


@workflow
async def fill_cart(n: int) -> Cart:
    cart = Cart(owner="ada")
    for i in range(n):
        cart = await add_item(cart, f"item-{i}")
    return cart


async def test_custom_class_arguments_never_force_a_full_replay(
    world: World, clock: FixedClock
) -> None:
    """Seed 003: a custom-class argument per iteration; the run replays from the top once."""
    run = await start(fill_cart, 40, world=world)
    worker = await run_to_end(world, clock, run)
    cart = await run.result()
    assert cart == Cart(owner="ada", items=tuple(f"item-{i}" for i in range(40)))
    assert sum(r.full_replays for r in worker.reports) == 1
    assert sum(r.steps_run for r in worker.reports) == 40


@workflow
async def nested_closure(prefix: str) -> tuple[list[str], list[str]]:
    seen: list[str] = ["kept"]

    @step
    def label(n: int) -> list[str]:
        seen.append("changed inside the step")  # a copy: the workflow's list is untouched
        return [f"{prefix}-{n}", *seen]

    first = await label(1)
    return first, seen


async def test_nested_steps_carry_captured_values_by_value(world: World, clock: FixedClock) -> None:
    run = await start(nested_closure, "order", world=world)
    await run_to_end(world, clock, run)
    first, seen = await run.result()
    assert first == ["order-1", "kept", "changed inside the step"]
    assert seen == ["kept"]


@serializable
@attrs.frozen
class Account:
    name: str
    balance: int

    @step
    def deposited(self, amount: int) -> int:
        return self.balance + amount

    @step
    @staticmethod
    def fee(amount: int) -> int:
        return amount // 10


@workflow
async def method_steps() -> tuple[int, int]:
    account = Account(name="ada", balance=100)
    return await account.deposited(50), await Account.fee(50)


async def test_method_and_static_steps_run_in_a_workflow(world: World, clock: FixedClock) -> None:
    run = await start(method_steps, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == (150, 5)
    names = {e.data["step_name"] for e in await run.events() if e.type.value == "step_created"}
    assert names == {
        "step//test_engine_features//Account#deposited",
        "step//test_engine_features//Account.fee",
    }


@workflow
async def misbehaves(what: str) -> None:
    if what == "sleep":
        time.sleep(0.001)  # noqa: ASYNC251 -- the point of the test
    elif what == "thread":
        threading.Thread(target=print).start()
    elif what == "socket":
        socket.socket()


@pytest.mark.parametrize(
    ("what", "hint"),
    [
        ("sleep", "asyncio.sleep"),
        ("thread", "asyncio tasks"),
        ("socket", "network I/O inside a @step"),
    ],
)
async def test_the_sandbox_names_the_call_and_the_alternative(
    world: World, clock: FixedClock, what: str, hint: str
) -> None:
    run = await start(misbehaves, what, world=world)
    await run_to_end(world, clock, run)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert hint in str(caught.value.__cause__)


@workflow
async def signals() -> list[str]:
    ready = asyncio.Event()
    log: list[str] = []

    async def waiter() -> None:
        await ready.wait()
        log.append("woken")

    task = asyncio.create_task(waiter())
    await asyncio.sleep(1)
    ready.set()
    await task
    try:
        await asyncio.wait_for(asyncio.Event().wait(), timeout=5)
    except TimeoutError:
        log.append("timed out")
    return log


async def test_events_tasks_and_timeouts_work_and_replay(world: World, clock: FixedClock) -> None:
    run = await start(signals, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == ["woken", "timed out"]
    waits = [e for e in await run.events() if e.type.value == "wait_created"]
    # Named by kind, function and call line: sleep/signals:<line digest>#1, timeout/...
    kinds = [re.sub(r":[0-9a-f]{6}#", "#", e.correlation_id or "") for e in waits]
    assert kinds == ["sleep/signals#1", "timeout/signals#1"]


@step
def tick(i: int) -> int:
    return i


@workflow
async def long_loop(n: int) -> int:
    for i in range(n):
        await tick(i)
    return n


async def test_max_events_fails_the_run(world: World, clock: FixedClock) -> None:
    run = await start(long_loop, 100, world=world)
    worker = Worker(world, limits=Limits(max_events=30))
    await worker.drain()
    assert await run.status() is RunStatus.FAILED
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert caught.value.error_code == "MAX_EVENTS_EXCEEDED"  # type: ignore[attr-defined]
    # checked between writes: the writes in flight (a born-running step, its outcome) and
    # run_failed may pass the limit by a few events
    assert 30 <= len(await run.events()) <= 30 + 3


@workflow
async def naps() -> str:
    await asyncio.sleep(24 * 3600)
    return "rested"


async def test_wake_up_fires_due_sleeps_now(world: World, clock: FixedClock) -> None:
    run = await start(naps, world=world)
    worker = Worker(world)
    await worker.drain()
    assert await run.status() is RunStatus.RUNNING
    assert await run.wake_up() == 1
    await worker.drain()  # no clock jump: the sleep was completed early
    assert await run.result() == "rested"
    completed = next(e for e in await run.events() if e.type.value == "wait_completed")
    assert completed.data.get("early") is True


class _FlakyEvents:
    """The World's events facet, failing its n-th write (single or batch) with a WorldError."""

    def __init__(self, inner: object, fail_at: int) -> None:
        self._inner = inner
        self._writes = 0
        self._fail_at = fail_at

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def _count(self) -> None:
        self._writes += 1
        if self._writes == self._fail_at:
            raise WorldError("the disk hiccuped")

    async def create(self, *args: object, **kwargs: object) -> object:
        self._count()
        return await self._inner.create(*args, **kwargs)  # type: ignore[attr-defined]

    async def create_batch(self, *args: object, **kwargs: object) -> object:
        self._count()
        return await self._inner.create_batch(*args, **kwargs)  # type: ignore[attr-defined]


async def test_a_world_failure_mid_delivery_is_retried_later(
    world: World, clock: FixedClock
) -> None:
    run = await start(long_loop, 3, world=world)
    flaky = _FlakyEvents(world.events, fail_at=3)
    world.events = flaky  # type: ignore[misc]
    worker = Worker(world)
    await worker.drain()
    assert list(worker.reports) == []  # the failed delivery released its message with a back-off
    assert await run.status() is RunStatus.RUNNING
    due = await world.queue.next_due()
    assert due is not None
    clock.current = due
    await worker.drain()
    assert await run.result() == 3
    kinds = [e.type.value for e in await run.events()]
    assert kinds.count("step_completed") == 3


WORLD_FOR_STEP: list[World] = []


@step
async def wakes_the_run(run_id: str) -> str:
    # An out-of-band write lands while the step runs: the run-ahead commit of this
    # step's outcome must notice and fall back to a plain write and a cold replay.
    from durasim.runtime import get_run

    assert await get_run(run_id, world=WORLD_FOR_STEP[0]).wake_up() == 1
    return "woke"


@workflow
async def races_a_wake_up() -> list[str]:
    from durasim.runtime import get_workflow_metadata

    run_id = get_workflow_metadata().run_id
    nap = asyncio.ensure_future(asyncio.sleep(3600))
    await asyncio.sleep(0)  # let the nap arm its timer first (sleep#1)
    woke = await wakes_the_run(run_id)
    await nap
    return [woke, "rested"]


async def test_an_event_landing_during_run_ahead_falls_back_to_a_cold_replay(
    world: World, clock: FixedClock
) -> None:
    WORLD_FOR_STEP[:] = [world]
    run = await start(races_a_wake_up, world=world)
    worker = await run_to_end(world, clock, run)  # also replays the final log cold
    assert await run.result() == ["woke", "rested"]
    assert worker.reports[0].full_replays == 2  # the first replay went stale, one more cold
    kinds = [e.type.value for e in await run.events()]
    completed = kinds.index("step_completed")
    assert kinds.index("wait_completed") < completed  # the wake-up landed first, in log order


async def test_a_worker_keeps_a_bounded_number_of_reports(world: World, clock: FixedClock) -> None:
    from durasim.runtime._worker import REPORTS_KEPT

    worker = Worker(world)
    for _ in range(3):
        run = await start(long_loop, 1, world=world)
        await worker.drain()
        assert await run.result() == 1
    assert len(worker.reports) == 3
    assert worker.reports.maxlen == REPORTS_KEPT


async def test_over_its_replay_budget_a_delivery_hands_over_after_progress(
    world: World, clock: FixedClock
) -> None:
    run = await start(long_loop, 5, world=world)
    worker = Worker(world, limits=Limits(replay_budget=0.0))
    await worker.drain()
    assert await run.result() == 5
    # every delivery made progress (one step) and handed the rest to a fresh one,
    # which continued the replay this process kept instead of replaying cold
    assert len(worker.reports) >= 5
    assert all(r.steps_run >= 1 for r in list(worker.reports)[:-1])
    assert [r.full_replays for r in worker.reports] == [1] + [0] * (len(worker.reports) - 1)


async def test_a_handed_over_run_replays_cold_where_nothing_was_kept(
    world: World, clock: FixedClock
) -> None:
    run = await start(long_loop, 3, world=world)
    worker = Worker(world, limits=Limits(replay_budget=0.0))
    while await worker.run_one():
        engine_for(world).forget_kept_replays()  # as if each delivery ran in another process
    assert await run.result() == 3
    assert all(r.full_replays == 1 for r in worker.reports)


async def test_sync_steps_can_run_on_the_loop(world: World, clock: FixedClock) -> None:
    run = await start(long_loop, 4, world=world)
    await Worker(world, limits=Limits(sync_steps="inline")).drain()
    assert await run.result() == 4
    with pytest.raises(ValueError, match="'thread' or 'inline'"):
        Limits(sync_steps="fiber")


async def test_arguments_that_do_not_fit_fail_the_run(world: World, clock: FixedClock) -> None:
    run = await start(long_loop, 1, 2, 3, world=world)  # long_loop takes one argument
    await run_to_end(world, clock, run)
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert caught.value.error_code == "USER_ERROR"  # type: ignore[attr-defined]
    assert isinstance(caught.value.__cause__, TypeError)


@workflow
async def sleeps_three_ways() -> list[float]:
    from datetime import UTC, datetime, timedelta

    from durasim.runtime import sleep

    marks = [time.time()]
    await sleep(10)
    marks.append(time.time())
    await sleep(timedelta(minutes=1))
    marks.append(time.time())
    await sleep(datetime.fromtimestamp(marks[-1] + 3600, UTC))
    marks.append(time.time())
    return [b - a for a, b in itertools.pairwise(marks)]


async def test_sleep_takes_seconds_a_timedelta_or_a_datetime(
    world: World, clock: FixedClock
) -> None:
    run = await start(sleeps_three_ways, world=world)
    await run_to_end(world, clock, run)
    gaps = await run.result()
    assert gaps[0] >= 10
    assert gaps[1] >= 60
    assert gaps[2] >= 3600
    waits = [e for e in await run.events() if e.type.value == "wait_created"]
    assert len(waits) == 3
