"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

One factory, ``factory(setup: WorldSetup) -> World`` (or the simulator's
``factory(clock, ids) -> World``), and a registry of layers (:func:`register_layer`),
cheapest first: the contract tests of docs/protocol.md (shipped as pytest modules
in :mod:`.suite`), the scenario book over the World, the World model machine
against the reference World, and an exploration of the example workflows over
it; each gated by the capabilities the World declares.

* :func:`run_conformance` runs them from Python (``durasim conformance`` prints
  its :class:`ConformanceReport`; :func:`write_report` writes it as JSON or
  JUnit XML);
* the pytest plugin (``pytest --durasim-conformance`` with a
  ``durasim_world_factory`` fixture) runs them as tests.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._formats import report_to_json, report_to_junit, write_report
    from ._registry import DEFAULT_BUDGET, Layer, LayerContext, register_layer, registered_layers
    from ._report import Case, ConformanceReport, Finding, LayerReport
    from ._run import LAYERS, default_layers, run_conformance
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
    "DEFAULT_BUDGET",
    "LAYERS",
    "AnyFactory",
    "Case",
    "ConformanceReport",
    "FactoryError",
    "Finding",
    "Layer",
    "LayerContext",
    "LayerReport",
    "SetupFactory",
    "StoreFactory",
    "default_layers",
    "load_factory",
    "register_layer",
    "registered_layers",
    "report_to_json",
    "report_to_junit",
    "run_conformance",
    "setup_factory",
    "store_factory",
    "write_report",
]

# Every public name is imported when first used (PEP 562): the pytest plugin lives in this
# package and pytest loads it in every run of every project that installs durasim, so
# importing the package must not import the runtime, the simulator or Hypothesis.
# The imports above are for static tools; tests/test_plugin.py checks both lists agree.
_LAZY = {
    "AnyFactory": "._target",
    "CAPABILITY_NAMES": "._target",
    "Case": "._report",
    "ConformanceReport": "._report",
    "DEFAULT_BUDGET": "._registry",
    "FactoryError": "._target",
    "Finding": "._report",
    "LAYERS": "._run",
    "Layer": "._registry",
    "LayerContext": "._registry",
    "LayerReport": "._report",
    "SetupFactory": "._target",
    "StoreFactory": "._target",
    "default_layers": "._run",
    "load_factory": "._target",
    "register_layer": "._registry",
    "registered_layers": "._registry",
    "report_to_json": "._formats",
    "report_to_junit": "._formats",
    "run_conformance": "._run",
    "setup_factory": "._target",
    "store_factory": "._target",
    "write_report": "._formats",
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
