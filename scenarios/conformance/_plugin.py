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
"""

from __future__ import annotations

import functools
import importlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pluggy import HookimplMarker

if TYPE_CHECKING:
    import pytest

__all__ = ["SUITE_PACKAGE"]

#: The package whose test modules make up the suite.
SUITE_PACKAGE = "durasim.scenarios.conformance.suite"
_SUITE_DIR = Path(__file__).parent / "suite"

# pytest.hookimpl, without importing pytest when this module is imported alone.
_hookimpl = HookimplMarker("pytest")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--durasim-conformance``, ``--durasim-examples``, ``--durasim-seed``."""
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
    group.addoption("--durasim-seed", type=int, default=0, help="seed of the searches (default 0)")


def pytest_configure(config: pytest.Config) -> None:
    """Add the suite's directory to what pytest collects."""
    if config.getoption("durasim_conformance") and str(_SUITE_DIR) not in config.args:
        config.args.append(str(_SUITE_DIR))


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
