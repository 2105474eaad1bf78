"""The worker and the simulator settle a message through the same engine code.

Both hand every claimed message to the engine (the worker to
:meth:`Engine.handle`, which parses it; the simulator, which parsed it to name
its writer, to :meth:`Engine.handle_message`, which ``handle`` calls), which runs
it and maps its end to a settlement with the one :func:`settle`; the drivers only
apply what it returns.  The tests spy on ``handle_message``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import simflows

from durasim.runtime import DeliveryReport, Worker, start
from durasim.runtime.lowlevel import (
    ORCHESTRATOR_QUEUE,
    Engine,
    Handled,
    SettleAction,
    Settlement,
    WakeMessage,
    backoff,
    engine_for,
    parse_message,
    settle,
)
from durasim.sim import Sim
from durasim.worlds import CountingIds, FixedClock, MemoryWorld

Seen = list[tuple[str, Any, int, Handled]]


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    """Every message any driver handled: (driver's world type, message, attempt, Handled)."""
    records: Seen = []
    handle = Engine.handle_message

    async def spy(self: Engine, message: Any, **options: Any) -> Handled:
        handled = await handle(self, message, **options)
        records.append((type(self.world).__name__, message, options["attempt"], handled))
        return handled

    # The worker calls Engine.handle (which parses, then calls this); the
    # simulator, which parsed the message to name its writer, calls it directly.
    monkeypatch.setattr(Engine, "handle_message", spy)
    return records


async def _by_worker() -> None:
    clock = FixedClock()
    world = MemoryWorld(clock=clock, ids=CountingIds())
    run = await start(simflows.sleepy, 1.0, world=world)
    worker = Worker(world)
    for _ in range(10):
        await worker.drain()
        if (await run.status()).terminal:
            return
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due)
    raise AssertionError("the run did not end")


async def _by_sim(sim: Sim) -> None:
    run = await sim.start(simflows.sleepy, 1.0)
    await sim.run_until_idle()
    assert (await sim.outcome(run.run_id)).value == "awake"


def _story(seen: Seen, driver: str) -> list[tuple[str, str, Settlement]]:
    return [
        (type(message).__name__, str(h.report.status) if h.report else "-", h.settlement)
        for world, message, _, h in seen
        if world == driver
    ]


def test_the_worker_and_the_simulator_settle_each_message_through_the_engine(seen: Seen) -> None:
    asyncio.run(_by_worker())
    Sim(seed=3).run_sync(_by_sim)
    drivers = {world for world, *_ in seen}
    assert drivers == {"MemoryWorld", "SimWorld"}, drivers
    for _, _, attempt, handled in seen:
        assert handled.settlement == settle(handled.report, attempt)
    # The same run, the same messages: the same deliveries end the same way.
    by_worker, by_sim = _story(seen, "MemoryWorld"), _story(seen, "SimWorld")
    assert by_worker == by_sim
    assert [status for _, status, _ in by_worker] == ["suspended", "finished"]
    assert {s.action for _, _, s in by_worker} == {SettleAction.ACK}


def test_the_same_report_settles_the_same_for_every_driver() -> None:
    retry = DeliveryReport(run_id="r1", status="retry", divergences=2)
    assert settle(retry, 1) == Settlement(SettleAction.REQUEUE, wake=WakeMessage("r1", 2))
    unavailable = DeliveryReport(run_id="r1", status="unavailable")
    assert settle(unavailable, 3) == Settlement(SettleAction.RELEASE, delay=backoff(3))
    assert settle(None, 10) == Settlement(SettleAction.RELEASE, delay=60.0)  # capped
    for status in ("suspended", "finished", "superseded"):
        assert settle(DeliveryReport(run_id="r1", status=status), 1).action is SettleAction.ACK


async def test_a_malformed_message_is_dropped_by_the_worker() -> None:
    world = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    await world.queue.enqueue(ORCHESTRATOR_QUEUE, b"not json", run_id="x", orchestrator=True)
    handled = await engine_for(world).handle(
        ORCHESTRATOR_QUEUE,
        b"not json",
        attempt=1,
        limits=Worker(world).limits,
        sync_in_thread=False,
    )
    assert handled.settlement.action is SettleAction.DROP
    assert await Worker(world).drain() == 1
    assert await world.queue.next_due() is None  # acked: gone, not redelivered


def test_a_world_that_cannot_carry_its_engine_gets_a_fresh_one() -> None:
    class Slotted:
        __slots__ = ()

    world: Any = Slotted()
    assert engine_for(world) is not engine_for(world)
    plain = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    assert engine_for(plain) is engine_for(plain)


def test_a_wake_message_round_trips() -> None:
    wake = WakeMessage("run-1", divergences=1, seq=7)
    assert parse_message(ORCHESTRATOR_QUEUE, wake.encode()) == wake
    assert timedelta(seconds=backoff(1)) == timedelta(seconds=2)


def test_a_copied_world_gets_its_own_engine() -> None:
    import copy

    world = MemoryWorld(clock=FixedClock(), ids=CountingIds())
    engine = engine_for(world)
    engine.cancellations.mark("run-1", "stop")
    twin = copy.deepcopy(world)
    assert engine_for(twin) is not engine
    assert engine_for(twin).cancellations.reason("run-1") is None
    assert engine_for(world) is engine
