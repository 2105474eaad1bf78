"""Shared test set-up: Hypothesis profiles and World factories.

Profiles: ``dev`` (default, quick) and ``ci`` (chosen when ``CI`` is set; more
examples, no deadline, derandomized so CI is reproducible).  Fixtures hand out
factories, never live Worlds: Hypothesis reuses function-scoped fixtures across
examples, so each example builds its own World from the factory.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _postgres_support import build_postgres, drop_schemas, require_postgres
from hypothesis import HealthCheck, settings

import durasim.runtime._heartbeat as beats
from durasim.worlds import CountingIds, FixedClock, MemoryWorld, World, WorldFactory, WorldSetup

settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

WORLD_KINDS = ["memory", "sqlite", "postgres"]


def factory_of(kind: str) -> WorldFactory:
    """``make(setup) -> World`` of ``kind`` (memory, sqlite or postgres)."""

    def make(setup: WorldSetup) -> World:
        options = {"max_deliveries": setup.max_deliveries}
        if kind == "memory":
            return MemoryWorld(clock=setup.clock, ids=setup.ids, **options)
        if kind == "postgres":
            return build_postgres(setup.clock, **options)  # type: ignore[arg-type]
        from durasim.worlds import SQLiteWorld

        return SQLiteWorld(
            setup.directory / "world.db", clock=setup.clock, ids=setup.ids, **options
        )

    return make


@pytest.fixture(params=WORLD_KINDS)
def durasim_world_factory(request: pytest.FixtureRequest) -> WorldFactory:
    """One factory per World kind: the contract tests here and the shipped ones
    (durasim.scenarios.conformance) run once against each."""
    if request.param == "postgres":
        require_postgres()  # skip (or fail under DURASIM_REQUIRE_PG=1) before the test
    return factory_of(request.param)


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    """Drop the PostgreSQL schemas a test created (a no-op for every other test)."""
    yield
    drop_schemas()


#: Markers whose tests run only when ``-m`` names them: long soaks, and the tests
#: that restart the PostgreSQL server (they would break the connections of every
#: test running beside them; ``.ci/run`` runs them alone, serially, after the rest).
OPT_IN_MARKERS = ("slow", "pgrestart")


ROOT = Path(__file__).resolve().parent.parent
INSTALL = "pip install -e '.[dev]' --config-settings editable_mode=strict"


def unlinked_modules(root: Path = ROOT) -> list[str]:
    """Modules of the checkout that the editable install does not link (made before them).

    The README's install links each file of the five folders into a tree of its
    own (setuptools' strict editable mode, which static tools can read); a module
    added since is missing there and would fail to import, or import stale code.
    Empty when durasim is imported from the checkout itself or from a wheel.
    """
    missing: list[str] = []
    for top in ("worlds", "runtime", "sim", "checkers", "scenarios"):
        package = importlib.import_module(f"durasim.{top}")
        installed = Path(str(package.__file__)).parent
        if "__editable__" not in str(installed) or not (root / top).is_dir():
            continue
        for source in sorted((root / top).rglob("*.py")):
            relative = source.relative_to(root / top)
            if not (installed / relative).exists():
                missing.append(f"{top}/{relative}")
    return missing


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run against an editable install that misses modules of the checkout."""
    missing = unlinked_modules()
    if missing:
        raise pytest.UsageError(
            f"the editable install does not link {', '.join(missing)} (added since it was "
            f"made): run `.venv/bin/{INSTALL}` again, then the tests"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``slow`` and ``pgrestart`` tests unless the ``-m`` expression names them."""
    expression = config.getoption("markexpr") or ""
    for item in items:
        for marker in OPT_IN_MARKERS:
            if item.get_closest_marker(marker) is not None and marker not in expression:
                item.add_marker(pytest.mark.skip(reason=f"{marker}: run with -m {marker}"))
                break


@pytest.fixture
def own_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[beats._Hub]:
    """A heartbeat hub (and so a heartbeat thread) of the test's own.

    The process's one heartbeat thread serves every worker of every test that ran
    in this process: a test that asserts the thread ends, or how many there are,
    must not depend on no earlier test having left a worker on it.  Heartbeats made
    during the test join this hub; at its end the hub's thread is made to end (no
    lingering), and joined (bounded: never reached when the code is right).
    """
    hub = beats._Hub()
    monkeypatch.setattr(beats, "_hub", hub)
    yield hub
    monkeypatch.setattr(beats.Heartbeat, "LINGER_SECONDS", 0.0)
    with hub.lock:
        thread = hub.thread
        hub.poke()
    if thread is not None:
        thread.join(timeout=60.0)


@pytest.fixture
def clock() -> FixedClock:
    """A clock that moves only when the test says so (no wall-clock sleeps)."""
    return FixedClock()


@pytest.fixture
def world(
    durasim_world_factory: WorldFactory, clock: FixedClock, tmp_path: Path
) -> Iterator[World]:
    """A fresh World of each kind on the test's clock."""
    directory = tmp_path / "durasim-world"  # the test's own files stay apart
    directory.mkdir()
    built = durasim_world_factory(WorldSetup(clock=clock, ids=CountingIds(), directory=directory))
    yield built
    asyncio.run(built.close())


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh event loop (no plugin needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True
