"""The conformance layers beyond the contract tests, for ``pytest --durasim-conformance``.

The World model machine against the reference, the concurrency checker, each
scenario of the book, an exploration of each example workflow, and (for a durable
World) the crash layer, over the World ``durasim_world_factory`` builds.
``--durasim-examples`` and ``--durasim-seed`` size and seed the searches.
"""

from __future__ import annotations

import asyncio
import importlib
import tempfile
from pathlib import Path
from typing import Any

import pytest

from durasim.checkers import check_crashes, factory_reference, run_concurrency, run_world_model

# Absolute: pytest may import this file as ``scenarios.conformance.suite.test_layers``
# (its rootdir logic), and the example workflows must keep their one module name.
from durasim.scenarios.conformance._layers import RUNTIME_NEEDS
from durasim.scenarios.conformance.examples import EXAMPLES
from durasim.worlds import CountingIds, FixedClock, WorldFactory, WorldSetup, check_factory

try:
    from durasim.scenarios.book import BOOK
except ImportError:  # the book is not installed: no scenario tests
    BOOK = ()


def _declared(factory: WorldFactory) -> Any:
    with tempfile.TemporaryDirectory() as scratch:
        setup = WorldSetup(
            clock=FixedClock(), ids=CountingIds(), max_deliveries=2, directory=Path(scratch)
        )
        world = check_factory(factory)(setup)
        caps = world.capabilities
        asyncio.run(world.close())
    return caps


def _require(factory: WorldFactory, needs: Any) -> None:
    caps = _declared(factory)
    for name in sorted(needs):
        if not getattr(caps, name):
            pytest.skip(f"capability {name!r} not declared by the World (Capabilities.{name})")


def test_world_model(durasim_world_factory: WorldFactory, pytestconfig: pytest.Config) -> None:
    run_world_model(
        durasim_world_factory,
        max_examples=pytestconfig.getoption("durasim_examples"),
        max_seconds=pytestconfig.getoption("durasim_budget"),
        seed=pytestconfig.getoption("durasim_seed"),
    )


def test_concurrency(durasim_world_factory: WorldFactory, pytestconfig: pytest.Config) -> None:
    result = run_concurrency(
        durasim_world_factory,
        groups=8 * pytestconfig.getoption("durasim_examples"),
        seed=pytestconfig.getoption("durasim_seed"),
    )
    assert result.failure is None, result.failure.render()


@pytest.mark.parametrize("scenario", BOOK, ids=lambda s: str(s.name))
def test_book(
    durasim_world_factory: WorldFactory, scenario: Any, pytestconfig: pytest.Config
) -> None:
    from durasim.scenarios.book import run_scenario

    _require(durasim_world_factory, scenario.requires)
    if scenario.known_red:
        pytest.xfail(f"known red: {scenario.known_red}")
    result = run_scenario(
        scenario,
        store=durasim_world_factory,
        seed=pytestconfig.getoption("durasim_seed"),
    )
    assert result.ok, f"{result.detail}\n--- trace ---\n{result.trace}"


@pytest.mark.parametrize(
    ("workflow", "args", "hooks"), EXAMPLES, ids=lambda v: getattr(v, "__name__", "")
)
def test_explore(
    durasim_world_factory: WorldFactory,
    workflow: Any,
    args: tuple[Any, ...],
    hooks: dict[str, Any],
    pytestconfig: pytest.Config,
) -> None:
    # Imported by name: explore() ships separately and may be absent.
    explore: Any = importlib.import_module("durasim.scenarios._explore").explore

    _require(durasim_world_factory, RUNTIME_NEEDS)
    result = explore(
        workflow,
        *args,
        world_factory=durasim_world_factory,
        hooks=hooks,
        max_examples=pytestconfig.getoption("durasim_examples"),
        max_seconds=pytestconfig.getoption("durasim_budget"),
        seed=pytestconfig.getoption("durasim_seed"),
    )
    assert result.failure is None, result.failure.render()


def test_crash(durasim_world_factory: WorldFactory, pytestconfig: pytest.Config) -> None:
    _require(durasim_world_factory, ("durable",))
    report = check_crashes(
        durasim_world_factory,
        reference=factory_reference(durasim_world_factory),
        seed=pytestconfig.getoption("durasim_seed"),
    )
    assert report.ok, "\n\n".join(
        f"[{f.kind}] {f.message}\n({f.trial}: {f.kill})\n{f.reproduction}" for f in report.findings
    )
