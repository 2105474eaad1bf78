"""One World factory shape, ``make(setup: WorldSetup) -> World``, everywhere Worlds are built.

The simulator builds the setup with its virtual clock and a scratch directory it
removes after the run; every entry point refuses the old ``make(clock, ids)``
shape before anything runs, with a message naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from exploreflows import ten_steps

from durasim.checkers import run_world_model
from durasim.scenarios import explore
from durasim.scenarios._reproduce import _current
from durasim.scenarios.book import BOOK, run_scenario
from durasim.scenarios.conformance import load_factory, run_conformance
from durasim.sim import Sim, SimClock
from durasim.worlds import (
    FactoryError,
    MemoryWorld,
    SQLiteWorld,
    World,
    WorldSetup,
    check_factory,
)


def old_shape(clock: Any, ids: Any) -> World:
    return MemoryWorld(clock=clock, ids=ids)


def no_argument() -> World:
    return MemoryWorld()


ENTRY_POINTS: dict[str, Callable[[Any], object]] = {
    "Sim": Sim,
    "explore": lambda factory: explore(ten_steps, 1, world_factory=factory, max_examples=1),
    "run_scenario": lambda factory: run_scenario(BOOK[0], store=factory),
    "run_world_model": lambda factory: run_world_model(factory, max_examples=1),
    "run_conformance": lambda factory: run_conformance(factory, layers=("contract",)),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_refuses_the_old_shape_with_the_fix(entry: str) -> None:
    with pytest.raises(FactoryError) as caught:
        ENTRY_POINTS[entry](old_shape)
    message = str(caught.value)
    assert "old_shape(clock, ids) has the old shape" in message
    assert "def old_shape(setup: WorldSetup) -> World" in message
    assert "setup.clock" in message


def test_a_factory_of_no_argument_is_refused_too() -> None:
    with pytest.raises(FactoryError, match=r"no_argument\(\) takes no argument"):
        check_factory(no_argument)


def test_callables_of_every_kind_pass_the_check() -> None:
    class Maker:
        def __call__(self, setup: WorldSetup) -> World:
            return MemoryWorld(clock=setup.clock, ids=setup.ids)

    def with_options(setup: WorldSetup, *, path: Path | None = None) -> World:
        return MemoryWorld(clock=setup.clock, ids=setup.ids)

    for factory in (Maker(), with_options, lambda setup: MemoryWorld(), lambda *a: MemoryWorld()):
        assert check_factory(factory) is factory
    with pytest.raises(FactoryError, match="not a World factory"):
        check_factory(42)  # type: ignore[arg-type]


def test_the_sim_builds_the_setup_on_its_clock_in_a_scratch_directory() -> None:
    seen: list[WorldSetup] = []

    def make(setup: WorldSetup) -> World:
        seen.append(setup)
        assert setup.directory.is_dir()
        assert not any(setup.directory.iterdir())
        return SQLiteWorld(setup.directory / "w.db", clock=setup.clock, ids=setup.ids)

    clock = SimClock()
    sim = Sim(make, clock=clock)
    (setup,) = seen
    assert setup.clock is clock
    assert setup.max_deliveries is None
    assert (setup.directory / "w.db").exists()

    async def script(sim: Sim) -> Any:
        return (await sim.run(ten_steps, 3)).value

    assert sim.run_sync(script) == 0 + 1 + 2
    assert not setup.directory.exists()  # removed once the store is closed


def test_conformance_loads_a_factory_by_reference_and_checks_its_shape(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "old_world.py").write_text(
        "from durasim.worlds import MemoryWorld\n\n"
        "def make(clock, ids):\n"
        "    return MemoryWorld(clock=clock, ids=ids)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(FactoryError, match=r"make\(clock, ids\) has the old shape"):
        load_factory("old_world:make")


def test_seeds_naming_the_old_conformance_adapter_name_the_factory_itself() -> None:
    old = "durasim.scenarios.conformance.stores:examples/buggy_world:make"
    assert _current(old) == "examples.buggy_world:make"
    assert _current("pkg.module:make") == "pkg.module:make"
