"""The scenario book on every World kind, and what run_scenario reports."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from _postgres_support import new_schema, require_postgres

from durasim.scenarios.book import BOOK, Scenario, ScenarioFailed, run_scenario
from durasim.scenarios.book import _workflows as wf
from durasim.sim import Sim, SimClock, SimLoop
from durasim.worlds import Capabilities, MemoryWorld, SQLiteWorld, World, WorldFactory, WorldSetup

KINDS = ["memory", "sqlite", "postgres"]


def factory_of_kind(kind: str, directory: Path) -> WorldFactory | None:
    """A factory of fresh Worlds of ``kind`` on the simulation's clock and ids."""
    if kind == "memory":
        return None
    if kind == "sqlite":
        return lambda setup: SQLiteWorld(directory / "book.db", clock=setup.clock, ids=setup.ids)
    dsn = require_postgres()
    if not SIM_CAN_DO_IO:
        pytest.skip("the simulator's loop cannot do I/O, so PostgresWorld cannot connect")

    def postgres(setup: WorldSetup) -> World:
        from durasim.worlds import PostgresWorld

        return PostgresWorld(
            dsn, schema=new_schema(), clock=setup.clock, ids=setup.ids, pool_size=2
        )

    return postgres


def _sim_can_do_io() -> bool:
    loop = SimLoop(SimClock())
    left, right = socket.socketpair()
    try:
        loop.add_writer(left.fileno(), lambda: None)
        loop.remove_writer(left.fileno())
        return True
    except NotImplementedError:
        return False
    finally:
        loop.close()
        left.close()
        right.close()


SIM_CAN_DO_IO = _sim_can_do_io()


def _param(scenario: Scenario) -> Any:
    marks = (
        [pytest.mark.xfail(reason=scenario.known_red, strict=True)] if scenario.known_red else []
    )
    return pytest.param(scenario, id=scenario.name, marks=marks)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scenario", [_param(s) for s in BOOK])
def test_scenario(scenario: Scenario, kind: str, tmp_path: Path) -> None:
    result = run_scenario(scenario, store=factory_of_kind(kind, tmp_path))
    assert result.skipped is None, result.detail
    assert result.ok, f"{result.detail}\n\ntrace:\n{result.trace}"
    if kind != "memory" and not scenario.known_red:
        # The simulator tests the real store: the same script, the same trace, event for event.
        reference = run_scenario(scenario)
        assert result.trace == reference.trace, f"{kind} differs from memory"


def test_the_book_is_big_and_named_uniquely() -> None:
    names = [s.name for s in BOOK]
    assert len(names) >= 30
    assert len(set(names)) == len(names)
    for scenario in BOOK:
        assert scenario.doc.strip(), scenario.name
        assert scenario.known_red is None or len(scenario.known_red) > 40, scenario.name


async def _wrong(sim: Sim) -> None:
    run = await sim.start(wf.nothing)
    await sim.run_until_idle()
    raise ScenarioFailed(f"run {run.run_id}: the book expected another log")


async def _broken(sim: Sim) -> None:
    raise RuntimeError("the script itself is broken")


def test_a_failing_scenario_reports_its_message_and_trace() -> None:
    result = run_scenario(Scenario(name="wrong", doc="a wrong log", script=_wrong))
    assert not result.ok
    assert result.detail == "ScenarioFailed: run wrun_000001: the book expected another log"
    assert "run_completed" in result.trace
    assert len(result.trace_hash) == 64


def test_a_script_error_is_a_failure_naming_it() -> None:
    result = run_scenario(Scenario(name="broken", doc="broken", script=_broken))
    assert not result.ok
    assert "RuntimeError: the script itself is broken" in result.detail


class _NoDedup(MemoryWorld):
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(hook_resume_dedup=False)


def test_a_missing_capability_skips_the_scenario() -> None:
    needs = next(s for s in BOOK if "hook_resume_dedup" in s.requires)
    result = run_scenario(needs, store=lambda setup: _NoDedup(clock=setup.clock, ids=setup.ids))
    assert result.ok
    assert result.skipped == "the World lacks hook_resume_dedup"


def test_an_unknown_capability_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown capabilities"):
        Scenario(name="x", doc="x", script=_broken, requires=["teleport"])


def test_the_same_seed_gives_the_same_trace() -> None:
    for scenario in BOOK[:10]:
        first = run_scenario(scenario, seed=3)
        second = run_scenario(scenario, seed=3)
        assert first.trace_hash == second.trace_hash, scenario.name
