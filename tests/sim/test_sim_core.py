"""The simulator's core: determinism, virtual time, stalls, budgets, store parity."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import simflows

from durasim.sim import (
    AlreadyPassedError,
    FifoChoices,
    HoldNeverReached,
    Match,
    SeededChoices,
    SequenceChoices,
    Sim,
    SimClock,
    SimDeadlock,
    _scheduler,  # the shortcuts under test are private
    simulate,
)
from durasim.worlds import CountingIds, RunStatus, SQLiteWorld, World, WorldSetup, housekeeping


async def _two_chains(sim: Sim) -> list[Any]:
    first = await sim.start(simflows.chain, 3)
    second = await sim.start(simflows.chain, 2)
    await sim.run_until_idle()
    return [(await sim.outcome(r.run_id)).value for r in (first, second)]


def _hash(seed: int) -> str:
    sim = Sim(seed=seed)
    assert sim.run_sync(_two_chains) == [3, 1]
    return sim.trace_hash


def test_the_same_seed_gives_the_same_trace_ten_times() -> None:
    hashes = {_hash(7) for _ in range(10)}
    assert len(hashes) == 1


def test_different_seeds_interleave_differently() -> None:
    hashes = {_hash(seed) for seed in range(8)}
    assert len(hashes) > 1


#: Faults that stop or break a running delivery's lease renewal.
LEASE = ("stall_heartbeat", "fail_renewal", "crash")


async def _mixed(sim: Sim) -> None:
    await sim.start(simflows.fan_out, 3)
    await sim.start(simflows.sleep_loop, 3, 5.0)
    await sim.start(simflows.chain, 4)
    await sim.start(simflows.hook_or_timeout, "tok-mixed", 30.0)
    await sim.start(simflows.step_sleeps, 12.0)  # longer than a lease: lease faults matter
    await sim.run_until_idle()


def test_choices_made_without_the_loop_are_the_idle_points_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheduler decides at a point when the idle point would come next; same answers.

    With the shortcuts off, every choice goes through the loop's idle point:
    the traces and the choices asked must be the same, faults or not.
    """

    def runs() -> list[tuple[str, list[tuple[int, int]]]]:
        found = []
        for seed in range(6):
            for faults in ((), ("crash", "fail", "duplicate", "expire_lease", "withhold"), LEASE):
                sim = Sim(seed=seed, faults=faults, fault_odds=6)
                sim.run_sync(_mixed)
                found.append((sim.trace_hash, sim.choices_made))
        return found

    quick = runs()
    monkeypatch.setattr(_scheduler.Scheduler, "_alone", lambda self: False)
    monkeypatch.setattr(_scheduler.Scheduler, "_idle_next", lambda self: False)
    assert runs() == quick
    assert sum(len(choices) for _, choices in quick) > 100  # there were choices to make


def test_fifo_and_sequences_are_choice_sources() -> None:
    fifo = Sim(choices=FifoChoices())
    fifo.run_sync(_two_chains)
    assert all(index == 0 for _, index in fifo.choices_made)
    zeros = Sim(choices=[0] * 100)
    zeros.run_sync(_two_chains)
    assert zeros.trace_hash == fifo.trace_hash
    called = Sim(choices=lambda n: n - 1)
    called.run_sync(_two_chains)
    assert called.trace_hash != fifo.trace_hash
    assert SequenceChoices([5]).choose(3) == 2
    assert SeededChoices(1).choose(10) == SeededChoices(1).choose(10)


def test_a_year_of_sleep_costs_no_wall_time() -> None:
    async def script(sim: Sim) -> Any:
        return await sim.run(simflows.sleepy, 365)

    started = time.perf_counter()
    outcome = simulate(script)
    assert time.perf_counter() - started < 0.5
    assert outcome.value == "awake"
    assert outcome.idle.virtual_seconds == 365 * 86_400


def test_a_step_body_sleeping_uses_virtual_time() -> None:
    async def script(sim: Sim) -> Any:
        outcome = await sim.run(simflows.step_sleeps, 30 * 86_400.0)
        return outcome.value, sim.clock.elapsed

    assert simulate(script) == (30 * 86_400.0, 30 * 86_400.0)


def test_a_hook_never_resumed_is_a_stall_naming_the_token() -> None:
    async def script(sim: Sim) -> Any:
        return await sim.run(simflows.waits_forever, "never")

    outcome = simulate(script)
    assert outcome.status is RunStatus.RUNNING
    assert outcome.idle.status == "stalled"
    assert outcome.idle.stall is not None
    assert "token 'never' never resumed" in str(outcome.idle.stall)


def test_the_virtual_time_budget_ends_a_long_sleep() -> None:
    from datetime import timedelta

    async def script(sim: Sim) -> Any:
        return await sim.run(simflows.sleepy, 365)

    outcome = simulate(script, max_virtual_time=timedelta(days=30))
    assert outcome.idle.status == "budget"
    assert "virtual-time budget" in (outcome.idle.reason or "")


def test_the_delivery_budget_ends_a_long_run() -> None:
    async def script(sim: Sim) -> Any:
        return await sim.run(simflows.sleep_loop, 50, 1.0)

    outcome = simulate(script, max_deliveries=5)
    assert outcome.idle.status == "budget"
    assert "delivery budget" in (outcome.idle.reason or "")


def test_a_script_waiting_on_nothing_simulated_is_a_deadlock_not_a_hang() -> None:
    async def script(sim: Sim) -> None:
        import asyncio

        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimDeadlock):
        simulate(script)


def test_a_hold_never_reached_raises_instead_of_hanging() -> None:
    async def script(sim: Sim) -> None:
        await sim.start(simflows.one_step, 1)
        await sim.step("refund").run_to_event_committed("step_completed")

    with pytest.raises(HoldNeverReached, match="refund"):
        simulate(script)


def test_asking_for_a_point_already_passed_raises() -> None:
    async def script(sim: Sim) -> None:
        await sim.run(simflows.one_step, 1)
        await sim.orchestrator().run_to_event_produced("step_started", step="charge")

    with pytest.raises(AlreadyPassedError, match="step_started"):
        simulate(script)


def test_until_sees_a_point_without_holding() -> None:
    async def script(sim: Sim) -> Any:
        await sim.start(simflows.one_step, 1)
        point = await sim.until(Match(event_type="step_completed"))
        await sim.run_until_idle()
        return point.writer.label

    assert simulate(script) == "step:charge d1"


def _sqlite(path: Path) -> Any:
    def build(setup: WorldSetup) -> World:
        return SQLiteWorld(path, clock=setup.clock, ids=setup.ids)

    return build


async def _scripted_race(sim: Sim) -> list[tuple[str, str | None]]:
    """A hook lands while the orchestrator is held inside its step_started write."""
    run = await sim.start(simflows.approval, "parity")
    orchestrator = sim.orchestrator()
    await orchestrator.run_to_event_committed("step_started", step="charge")
    await sim.deliver_hook("parity", "yes")
    orchestrator.release()
    await sim.run_until_idle()
    outcome = await sim.outcome(run.run_id)
    assert outcome.value == ["charged 1", "yes"]
    return (await sim.snapshot()).log(run.run_id)


def test_the_same_script_gives_the_same_log_over_memory_and_sqlite(tmp_path: Path) -> None:
    memory = Sim(seed=1)
    sqlite = Sim(_sqlite(tmp_path / "sim.db"), seed=1)
    assert memory.run_sync(_scripted_race) == sqlite.run_sync(_scripted_race)
    assert memory.trace_hash == sqlite.trace_hash


def test_a_store_built_by_the_caller_on_the_sim_clock(tmp_path: Path) -> None:
    clock = SimClock()
    store = SQLiteWorld(tmp_path / "own.db", clock=clock, ids=CountingIds())

    async def script(sim: Sim) -> Any:
        return (await sim.run(simflows.chain, 4)).value

    assert Sim(store, clock=clock).run_sync(script) == 6
    import asyncio

    asyncio.run(store.close())


def _with_chores(marked: bool) -> tuple[str, list[float], float]:
    """A 1-day sleep beside an endless 6-hourly chore, marked as housekeeping or not."""
    fired: list[float] = []

    async def chores() -> None:
        while True:
            await asyncio.sleep(6 * 3600)
            fired.append(asyncio.get_running_loop().time())

    async def script(sim: Sim) -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        if marked:
            with housekeeping():
                task = loop.create_task(chores())
        else:
            task = loop.create_task(chores())
        run = await sim.start(simflows.sleepy, 1)
        idle = await sim.run_until_idle()
        assert (await sim.outcome(run.run_id)).value == "awake"
        task.cancel()
        return idle.status, loop.time() - start

    status, elapsed = Sim(seed=0, max_virtual_time=timedelta(days=400)).run_sync(script)
    return status, fired, elapsed


def test_a_worlds_housekeeping_timers_fire_but_never_move_the_clock() -> None:
    """A pool's maintenance timers (worlds.housekeeping) must not keep virtual time going."""
    status, fired, elapsed = _with_chores(marked=True)
    assert status == "idle"
    assert elapsed == 86400  # the sleep moved the clock; the chores did not move it further
    # The chore due at 6 h fired once the clock had passed it: at the jump to 24 h.
    assert fired == [86400.0]
    # Unmarked, the same chore is work to wait for: the clock runs to the budget.
    status, fired, elapsed = _with_chores(marked=False)
    assert status == "budget"
    assert elapsed >= 400 * 86400
    assert len(fired) >= 1600
