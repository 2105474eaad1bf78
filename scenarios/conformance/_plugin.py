"""The pytest plugin (entry point ``pytest11``: ``durasim``): the conformance suite in pytest.

A World author defines one fixture in their ``conftest.py``::

    @pytest.fixture
    def durasim_world_factory():
        return my_factory          # factory(setup: WorldSetup) -> World

and runs ``pytest --durasim-conformance``: the contract tests, the World model
machine, the scenario book and the exploration of the example workflows are
collected from the installed package next to their own tests.  Importing this
module is cheap: it imports pytest and the standard library only; the suite's
modules are imported when pytest collects them.

pytest loads this module in every run of every project that installs durasim,
so importing it costs next to nothing and changes nothing: it imports the
standard library's cheapest modules and ``pluggy`` (already loaded by pytest),
never the rest of durasim; its packages' ``__init__`` import their public names
lazily.  tests/test_plugin.py pins what it imports.

The fixture may live in any ``conftest.py`` of the project.  pytest shows a
conftest's fixtures only to the tests below that conftest's folder, and the
suite's files live in the installed package, below none of them; so with
``--durasim-conformance`` the plugin hands the ``durasim_world_factory`` of
every conftest that defines one (with the fixtures of that conftest it asks
for, not autouse ones) to pytest again as a plugin's fixtures, which every test
sees.  Two conftests defining different factories: the one pytest loads last wins.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import types
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pluggy import HookimplMarker

if TYPE_CHECKING:
    import pytest

__all__ = ["FACTORY_FIXTURE", "SUITE_PACKAGE"]

#: The package whose test modules make up the suite.
SUITE_PACKAGE = "durasim.scenarios.conformance.suite"
_SUITE_DIR = Path(__file__).parent / "suite"
#: The fixture a World author defines: it returns the World factory.
FACTORY_FIXTURE = "durasim_world_factory"

# pytest.hookimpl, without importing pytest when this module is imported alone.
_hookimpl = HookimplMarker("pytest")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options: ``--durasim-conformance``, ``-examples``, ``-budget``, ``-seed``."""
    import pytest  # noqa: PLC0415 -- already loaded: pytest is calling us

    # The suite's asserts must explain themselves wherever its modules are imported
    # from (a project's own test files may import them): registered here, the first
    # hook pytest calls, before any conftest or test module is imported.
    pytest.register_assert_rewrite(SUITE_PACKAGE)
    group = parser.getgroup("durasim", "durasim conformance suite (docs/conformance.md)")
    group.addoption(
        "--durasim-conformance",
        action="store_true",
        default=False,
        help="also collect the durasim conformance suite; needs a durasim_world_factory fixture",
    )
    group.addoption(
        "--durasim-examples",
        type=int,
        default=50,
        help="examples for the World model and for each explored workflow (default 50)",
    )
    group.addoption(
        "--durasim-budget",
        type=float,
        default=None,
        help="seconds for the World model and for each explored workflow, on top of "
        "--durasim-examples (default: no time limit)",
    )
    group.addoption("--durasim-seed", type=int, default=0, help="seed of the searches (default 0)")


class _Hoisting:
    """Per pytest run: conftests seen before ``--durasim-conformance`` was known, and
    whether it was given."""

    def __init__(self) -> None:
        self.enabled = False
        self.pending: list[types.ModuleType] = []


# Keyed by plugin manager: one pytest run each (pytester and the conformance
# runner start pytest runs inside a process).
_HOISTING: weakref.WeakKeyDictionary[Any, _Hoisting] = weakref.WeakKeyDictionary()


def pytest_configure(config: pytest.Config) -> None:
    """Add the suite's directory to what pytest collects; show it the user's factory."""
    if not config.getoption("durasim_conformance"):
        return
    if str(_SUITE_DIR) not in config.args:
        config.args.append(str(_SUITE_DIR))
    state = _HOISTING.setdefault(config.pluginmanager, _Hoisting())
    state.enabled = True
    for conftest in state.pending:
        _hoist(config.pluginmanager, conftest)
    state.pending.clear()


def pytest_plugin_registered(plugin: object, manager: Any) -> None:
    """A conftest that defines ``durasim_world_factory``: hoist it (see the docstring)."""
    if not isinstance(plugin, types.ModuleType):
        return
    if not str(getattr(plugin, "__file__", "")).endswith("conftest.py"):
        return
    if not any(_fixture_of(value, FACTORY_FIXTURE) for value in vars(plugin).values()):
        return
    state = _HOISTING.setdefault(manager, _Hoisting())
    if state.enabled:
        _hoist(manager, plugin)
    else:
        state.pending.append(plugin)


def _marker(value: object) -> Any:
    """The fixture marker of a ``@pytest.fixture`` object (pytest 8.4+, and before), or None."""
    marker = getattr(value, "_fixture_function_marker", None)
    if marker is None:
        marker = getattr(value, "_pytestfixturefunction", None)
    return marker


def _fixture_of(value: object, name: str) -> bool:
    marker = _marker(value)
    if marker is None:
        return False
    return (marker.name or getattr(value, "__name__", None)) == name


def _hoist(manager: Any, conftest: types.ModuleType) -> None:
    """Register the conftest's factory fixture, and what it asks for, as a plugin's."""
    fixtures = {
        (_marker(value).name or getattr(value, "__name__", key)): (key, value)
        for key, value in vars(conftest).items()
        if _marker(value) is not None and not _marker(value).autouse
    }
    wanted, hoisted = [FACTORY_FIXTURE], {}
    while wanted:
        name = wanted.pop()
        if name in hoisted or name not in fixtures:
            continue
        key, value = fixtures[name]
        hoisted[name] = (key, value)
        with contextlib.suppress(TypeError, ValueError):  # no signature: asks for nothing
            wanted += list(inspect.signature(value).parameters)
    # Not ending in "conftest.py": pytest would scope it like a conftest again.
    holder_name = f"durasim-conformance-fixtures({conftest.__file__})"
    if manager.get_plugin(holder_name) is not None:
        return
    holder = types.ModuleType(holder_name)
    for key, value in hoisted.values():
        setattr(holder, key, value)
    manager.register(holder, name=holder_name)


def pytest_pycollect_makemodule(module_path: Path, parent: Any) -> pytest.Module | None:
    """Collect the suite's files as modules of the installed package."""
    if module_path.parent == _SUITE_DIR:
        return _suite_module_class().from_parent(parent, path=module_path)
    return None


@functools.cache
def _suite_module_class() -> type[pytest.Module]:
    import pytest  # noqa: PLC0415 -- already loaded: pytest is collecting

    class _SuiteModule(pytest.Module):
        """A suite module, imported by its package name (never as a loose file)."""

        def _getobj(self) -> Any:
            return importlib.import_module(f"{SUITE_PACKAGE}.{self.path.stem}")

    return _SuiteModule


@_hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run the suite's ``async def`` tests on a fresh event loop."""
    function = pyfuncitem.obj
    if not inspect.iscoroutinefunction(function):
        return None
    if not getattr(function, "__module__", "").startswith(SUITE_PACKAGE):
        return None
    import asyncio  # noqa: PLC0415 -- only when a suite test runs

    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(function(**{name: pyfuncitem.funcargs[name] for name in names}))
    return True
