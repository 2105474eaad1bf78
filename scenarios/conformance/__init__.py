"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

One factory, ``factory(setup: WorldSetup) -> World`` (or the simulator's
``factory(clock, ids) -> World``), and five layers: the contract tests of
docs/protocol.md (shipped as pytest modules in :mod:`.suite`), the World model
machine against the reference World, the scenario book over the World, an
exploration of the example workflows over it, and (for a durable World) kills
inside its calls followed by restarts; each gated by the capabilities the World
declares.

* :func:`run_conformance` runs them from Python (``durasim conformance`` prints
  its :class:`ConformanceReport`);
* the pytest plugin (``pytest --durasim-conformance`` with a
  ``durasim_world_factory`` fixture) runs them as tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._report import ConformanceReport, Finding, LayerReport
    from ._run import LAYERS, run_conformance
    from ._target import (
        CAPABILITY_NAMES,
        AnyFactory,
        FactoryError,
        SetupFactory,
        StoreFactory,
        load_factory,
        setup_factory,
        store_factory,
    )

__all__ = [
    "CAPABILITY_NAMES",
    "LAYERS",
    "AnyFactory",
    "ConformanceReport",
    "FactoryError",
    "Finding",
    "LayerReport",
    "SetupFactory",
    "StoreFactory",
    "load_factory",
    "run_conformance",
    "setup_factory",
    "store_factory",
]

# Every public name is imported when first used (PEP 562): the pytest plugin lives in this
# package and pytest loads it in every run of every project that installs durasim, so
# importing the package must not import the runtime, the simulator or Hypothesis.
# The imports above are for static tools; tests/test_plugin.py checks both lists agree.
_LAZY = {
    "AnyFactory": "._target",
    "CAPABILITY_NAMES": "._target",
    "ConformanceReport": "._report",
    "FactoryError": "._target",
    "Finding": "._report",
    "LAYERS": "._run",
    "LayerReport": "._report",
    "SetupFactory": "._target",
    "StoreFactory": "._target",
    "load_factory": "._target",
    "run_conformance": "._run",
    "setup_factory": "._target",
    "store_factory": "._target",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
