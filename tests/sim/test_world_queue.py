"""``Sim(queue="world")``: the simulated runtime drives the World's own queue.

The recording queue mirrors what the World's queue was asked and checks every
answer; the real Worlds keep the contract through runs with steps, sleeps,
crashes, lease takeovers and failing renewals, and planted queue bugs are
caught as :class:`QueueContractBroken` naming the broken rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import simflows
from _postgres_support import new_schema, require_postgres

from durasim.checkers import check_invariants, verify_replay
from durasim.runtime import Limits
from durasim.sim import Match, QueueContractBroken, QueueModeUnsupported, Sim, SimError
from durasim.worlds import MemoryWorld, SQLiteWorld, World, WorldSetup


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    simflows.CALLS.clear()


def memory(setup: WorldSetup) -> World:
    return MemoryWorld(clock=setup.clock, ids=setup.ids)


def sqlite(setup: WorldSetup) -> World:
    return SQLiteWorld(setup.directory / "w.db", clock=setup.clock, ids=setup.ids)


WORLDS = [memory, sqlite]


async def _checked(sim: Sim, run_id: str) -> None:
    assert (await check_invariants(sim.store)).ok
    assert (await verify_replay(sim.store, run_id)).ok
    assert await sim.store.queue.messages() == ()


def test_queue_mode_is_checked() -> None:
    with pytest.raises(SimError, match="queue='both' is not a queue mode"):
        Sim(queue="both")
    sim = Sim()
    assert sim.queue_mode == "sim"

    async def nothing(sim: Sim) -> None:
        return None

    sim.run_sync(nothing)  # (closes the simulation's loop)


@pytest.mark.parametrize("factory", WORLDS)
def test_a_run_goes_through_the_worlds_own_queue(factory: Callable[[WorldSetup], World]) -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.naps_then_charge, 0.25, 1.5)
        await sim.run_until_idle()
        await _checked(sim, run.run_id)
        return await sim.outcome(run.run_id)

    asked: list[str] = []

    def counted(setup: WorldSetup) -> World:
        world = factory(setup)
        inner = world.queue

        class Counted:
            def __getattr__(self, name: str) -> Any:
                asked.append(name)
                return getattr(inner, name)

        world.queue = Counted()  # type: ignore[misc]
        return world

    sim = Sim(counted, queue="world")
    outcome = sim.run_sync(script)
    assert outcome.value == [1.75, "charged 1"]
    assert {"enqueue", "claim", "ack"} <= set(asked)


@pytest.mark.parametrize("factory", WORLDS)
def test_a_crash_and_a_takeover_through_the_worlds_queue(
    factory: Callable[[WorldSetup], World],
) -> None:
    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step="two_naps"))
        run = await sim.start(simflows.naps_then_charge, 3.0, 0.5)
        await sim.run_until_idle()
        await _checked(sim, run.run_id)
        return await sim.outcome(run.run_id)

    sim = Sim(factory, queue="world")
    assert sim.run_sync(script).value == [3.5, "charged 1"]
    assert "+8.000000s d2 deliver" in sim.trace_text  # after the World's lease lapsed


@pytest.mark.parametrize("factory", WORLDS)
def test_a_stalled_heartbeat_takeover_refuses_the_old_holder(
    factory: Callable[[WorldSetup], World],
) -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.step_sleeps, 12.0)
        await sim.until(Match(event_type="step_started"))
        assert sim.stall_heartbeat(run.run_id, seconds=30.0) == 1
        await sim.run_until_idle()
        await _checked(sim, run.run_id)
        return await sim.outcome(run.run_id)

    sim = Sim(factory, queue="world")
    assert sim.run_sync(script).value == 12.0
    assert sim.takeovers == [(1, 2)]
    assert "d1 could not settle" in sim.trace_text  # the World refused the old holder too


@pytest.mark.parametrize("seed", range(6))
def test_random_schedules_with_faults_keep_the_contract(seed: int) -> None:
    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.chain, 3)
        await sim.run_until_idle()
        return run.run_id

    faults = ("crash", "expire_lease", "duplicate", "stall_heartbeat", "fail_renewal", "drop")
    sim = Sim(sqlite, queue="world", seed=seed, faults=faults, fault_odds=4)
    sim.run_sync(script)
    assert "dropped" not in sim.trace_text  # a World's queue cannot be made to lose one


def test_script_only_faults_say_to_use_the_sims_queue() -> None:
    async def script(sim: Sim) -> Any:
        sim.auto_deliver = False
        await sim.start(simflows.one_step, 1)
        sim.drop_queued()

    with pytest.raises(QueueModeUnsupported, match="queue='sim'"):
        Sim(queue="world").run_sync(script)


# --- planted queue bugs, caught under the runtime ------------------------------------------


def _planted(changes: dict[str, Any]) -> Callable[[WorldSetup], World]:
    def make(setup: WorldSetup) -> World:
        world = MemoryWorld(clock=setup.clock, ids=setup.ids)
        inner = world.queue

        class Planted:
            def __getattr__(self, name: str) -> Any:
                return changes.get(name) or getattr(inner, name)

        world.queue = Planted()  # type: ignore[assignment]
        changes["inner"] = inner
        return world

    return make


def test_a_truncated_release_delay_is_caught() -> None:
    changes: dict[str, Any] = {}

    async def release(delivery: Any, *, delay: float = 0.0) -> None:
        await changes["inner"].release(delivery, delay=float(int(delay)))

    changes["release"] = release

    async def script(sim: Sim) -> Any:
        run = await sim.start(simflows.retry_fractional)
        await sim.run_until_idle()
        return run

    queued = Limits(sync_steps="inline", inline_steps=0, queue_steps=True)
    with pytest.raises(QueueContractBroken, match=r"release\(delay=0.25\)") as caught:
        Sim(_planted(changes), queue="world", limits=queued).run_sync(script)
    assert caught.value.check == "delay"


def test_a_truncated_enqueue_delay_is_caught() -> None:
    changes: dict[str, Any] = {}

    async def enqueue(*args: Any, delay: float = 0.0, **kwargs: Any) -> str:
        result: str = await changes["inner"].enqueue(*args, delay=float(int(delay)), **kwargs)
        return result

    changes["enqueue"] = enqueue

    async def script(sim: Sim) -> Any:
        await sim.run(simflows.retry_fractional)

    with pytest.raises(QueueContractBroken, match=r"delay=0\.25") as caught:
        Sim(_planted(changes), queue="world").run_sync(script)
    assert caught.value.check == "delay"


def test_an_ack_that_keeps_the_message_is_caught() -> None:
    changes: dict[str, Any] = {}

    async def ack(delivery: Any) -> None:
        await changes["inner"].extend(delivery, lease_seconds=0)  # "acked": lease ended only

    changes["ack"] = ack

    async def script(sim: Sim) -> Any:
        await sim.run(simflows.one_step, 1)

    with pytest.raises(QueueContractBroken) as caught:
        Sim(_planted(changes), queue="world").run_sync(script)
    assert caught.value.check == "redelivered"


def test_next_due_ignoring_delayed_messages_is_caught() -> None:
    changes: dict[str, Any] = {}

    async def next_due(*, queue_prefix: str = "") -> Any:
        return None

    changes["next_due"] = next_due

    async def script(sim: Sim) -> Any:
        await sim.run(simflows.one_step, 1)

    with pytest.raises(QueueContractBroken) as caught:
        Sim(_planted(changes), queue="world").run_sync(script)
    assert caught.value.check == "next_due"


# --- PostgreSQL -------------------------------------------------------------------------


def test_postgres_keeps_the_contract_under_the_runtime() -> None:
    dsn = require_postgres()

    def postgres(setup: WorldSetup) -> World:
        from durasim.worlds import PostgresWorld

        return PostgresWorld(dsn, schema=new_schema(), clock=setup.clock, ids=setup.ids)

    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step="two_naps"))
        run = await sim.start(simflows.naps_then_charge, 3.0, 0.5)
        await sim.run_until_idle()
        await _checked(sim, run.run_id)
        return await sim.outcome(run.run_id)

    sim = Sim(postgres, queue="world")
    assert sim.run_sync(script).value == [3.5, "charged 1"]
