"""The wall budget ends code that never yields (issue 15, bug A), with a report naming it."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from simflows import chain, sleepy

from durasim.runtime import step, workflow
from durasim.sim import BudgetExceeded, Sim, StuckCode, _watchdog
from durasim.worlds import SQLiteWorld, WorldSetup

#: Small enough to keep the suite fast; the one budget each test below relies on.
BUDGET = 0.5


def spin_forever() -> None:
    """A loop that never yields (no await, no call into the simulator)."""
    n = 0
    while True:
        n += 1


@step(module="watchdogtests")
def spinning_step() -> None:
    spin_forever()


@workflow(module="watchdogtests")
async def spins_in_workflow() -> None:
    n = 0
    while True:
        n += 1


@workflow(module="watchdogtests")
async def spins_in_step() -> None:
    await spinning_step()


@step(module="watchdogtests")
def fine_step() -> int:
    return 1


@workflow(module="watchdogtests")
async def spins_in_one_of_two_steps() -> None:
    await asyncio.gather(fine_step(), spinning_step())


def _assert_names(stuck: StuckCode | None, function: str) -> StuckCode:
    assert stuck is not None
    assert stuck.function == function
    assert stuck.filename == __file__
    assert stuck.lineno > 0
    assert any(function in frame for frame in stuck.stack)
    return stuck


def test_a_workflow_that_never_yields_ends_with_a_report_naming_it() -> None:
    sim = Sim(max_wall_seconds=BUDGET)
    outcome = sim.run_sync(lambda s: s.run(spins_in_workflow))

    assert outcome.idle.status == "budget"
    stuck = _assert_names(outcome.idle.stuck, "spins_in_workflow")
    assert stuck.writer.startswith("orchestrator of run ")
    assert "spins_in_workflow()" in (outcome.idle.reason or "")
    assert f"{__file__}:{stuck.lineno}" in (outcome.idle.reason or "")
    assert outcome.status.value == "running"  # nothing recorded: the run is not failed
    assert any("halted: wall-time budget" in line for line in sim.trace_lines)


def test_a_step_body_that_never_yields_ends_with_a_report_naming_it() -> None:
    sim = Sim(max_wall_seconds=BUDGET)
    outcome = sim.run_sync(lambda s: s.run(spins_in_step))

    assert outcome.idle.status == "budget"
    stuck = _assert_names(outcome.idle.stuck, "spin_forever")
    assert any("spinning_step" in frame for frame in stuck.stack)
    assert outcome.status.value == "running"


def test_after_the_interrupt_a_sqlite_world_can_be_read_reported_and_closed(
    tmp_path: Path,
) -> None:
    def sqlite(setup: WorldSetup) -> SQLiteWorld:
        return SQLiteWorld(tmp_path / "w.db", clock=setup.clock, ids=setup.ids)

    async def script(sim: Sim) -> tuple[Any, ...]:
        outcome = await sim.run(spins_in_step)
        return outcome, await sim.snapshot(), await sim.stall_report()

    sim = Sim(sqlite, max_wall_seconds=BUDGET)
    outcome, snapshot, stall = sim.run_sync(script)

    assert outcome.idle.status == "budget"
    _assert_names(outcome.idle.stuck, "spin_forever")
    (run,) = snapshot.runs
    assert snapshot.log(run.run_id)[-1][0] == "step_started"  # nothing written after
    assert "no delivery will finish it" in str(stall)


def test_a_step_running_beside_another_that_never_yields_is_named() -> None:
    # Concurrent steps run as tasks: the interrupted one is awaited by the
    # orchestrator, which re-raises it later; the report stays the first one's.
    sim = Sim(max_wall_seconds=BUDGET)
    outcome = sim.run_sync(lambda s: s.run(spins_in_one_of_two_steps))

    assert outcome.idle.status == "budget"
    _assert_names(outcome.idle.stuck, "spin_forever")
    assert outcome.status.value == "running"


def test_a_script_that_never_yields_raises_budget_exceeded_naming_it() -> None:
    async def script(sim: Sim) -> None:
        await sim.run(chain, 2)
        spin_forever()

    sim = Sim(max_wall_seconds=BUDGET)
    with pytest.raises(BudgetExceeded, match="spin_forever") as caught:
        sim.run_sync(script)
    stuck = _assert_names(caught.value.stuck, "spin_forever")  # type: ignore[attr-defined]
    assert stuck.writer == "the script"


def test_a_script_stuck_after_the_scheduler_halted_gets_the_allowance_then_ends() -> None:
    async def script(sim: Sim) -> None:
        outcome = await sim.run(sleepy, 365)
        assert outcome.idle.status == "budget"  # the virtual-time budget: halted by itself
        spin_forever()

    sim = Sim(max_wall_seconds=BUDGET, max_virtual_time=timedelta(days=30))
    with pytest.raises(BudgetExceeded, match="virtual-time budget") as caught:
        sim.run_sync(script)
    _assert_names(caught.value.stuck, "spin_forever")  # type: ignore[attr-defined]


def test_the_simulation_thread_is_not_interrupted_after_the_sim_ended() -> None:
    # Many short simulations in a row, each with the small budget: none is
    # interrupted, and nothing is raised in this thread after they end.
    for n in range(20):
        outcome = Sim(max_wall_seconds=BUDGET).run_sync(lambda s, n=n: s.run(chain, n % 4))
        assert outcome.idle.status == "idle"
    spin = 0
    for _ in range(200_000):  # bytecode boundaries where a stray interrupt would land
        spin += 1
    assert spin == 200_000


def test_an_unbounded_wall_budget_arms_no_watchdog() -> None:
    outcome = Sim(max_wall_seconds=float("inf")).run_sync(lambda s: s.run(chain, 2))
    assert outcome.idle.status == "idle"
    outcome = Sim(max_wall_seconds=1e12).run_sync(lambda s: s.run(chain, 2))
    assert outcome.idle.status == "idle"


class _Notes:
    """A stand-in for the watchdog's condition: counts the wake-ups an arm asks for."""

    def __init__(self) -> None:
        self.notified = 0

    def notify(self) -> None:
        self.notified += 1


def _guard(due: float) -> _watchdog.WallGuard:
    guard = _watchdog.WallGuard(threading.get_ident(), label=lambda frame: None)
    guard.due = due
    return guard


def _wakes_at(dog: _watchdog._Watchdog, now: float) -> float | None:
    """The thread's plan after handling the due guards, at wall time ``now``."""
    dog._plan_wake(now)
    return dog._waking_at


def test_with_nothing_armed_the_thread_lingers_once_then_waits_for_an_arm() -> None:
    # The decision alone: no thread, no clock.
    dog = _watchdog._Watchdog()
    linger = _watchdog._LINGER
    assert _wakes_at(dog, 100.0) == 100.0 + linger  # nothing armed: it lingers
    assert _wakes_at(dog, 100.0 + linger) is None  # lingered in vain: an arm wakes it
    dog._guards = [_guard(300.0), _guard(250.0)]
    assert _wakes_at(dog, 200.0) == 250.0  # the earliest deadline
    dog._guards = []
    assert _wakes_at(dog, 260.0) == 260.0 + linger  # guards seen: it lingers again


def test_an_arm_wakes_a_lingering_thread_only_for_an_earlier_deadline() -> None:
    dog = _watchdog._Watchdog()
    notes = _Notes()
    dog._changed = notes  # type: ignore[assignment]
    dog._thread = threading.current_thread()  # as if running: arm() starts none
    dog._plan_wake(100.0)  # lingering until 100 + _LINGER
    dog.arm(_guard(100.0 + _watchdog._LINGER + 1))
    assert notes.notified == 0  # seen when the thread wakes at the linger's end
    dog.arm(_guard(100.0 + _watchdog._LINGER - 1))
    assert notes.notified == 1  # before the linger's end: the thread is woken for it
    dog._guards.clear()
    dog._plan_wake(200.0 + _watchdog._LINGER)
    assert _wakes_at(dog, 300.0 + _watchdog._LINGER) is None  # waiting for an arm
    dog.arm(_guard(1e9))
    assert notes.notified == 2  # any deadline wakes a thread that waits for an arm
