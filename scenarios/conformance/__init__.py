"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

One factory, ``make(setup: WorldSetup) -> World`` (the shape everything in
durasim builds Worlds with, see :class:`~durasim.worlds.WorldSetup`), and a
registry of layers (:func:`register_layer`), cheapest first: the contract tests of
docs/protocol.md (shipped as pytest modules in :mod:`.suite`), the scenario book
over the World, the World model machine against the reference World, concurrent
calls on every facet checked for linearizability against it, an exploration of
the example workflows over it, and (for a durable World) kills inside its calls
followed by restarts; each but the concurrency layer gated by the capabilities
the World declares.

* :func:`run_conformance` runs them from Python (``durasim conformance`` prints
  its :class:`ConformanceReport`; :func:`write_report` writes it as JSON or
  JUnit XML);
* the pytest plugin (``pytest --durasim-conformance`` with a
  ``durasim_world_factory`` fixture) runs them as tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ._formats import report_to_json, report_to_junit, write_report
    from ._registry import DEFAULT_BUDGET, Layer, LayerContext, register_layer, registered_layers
    from ._report import Case, ConformanceReport, Finding, LayerReport
    from ._run import LAYERS, default_layers, run_conformance
    from ._target import CAPABILITY_NAMES, load_factory
    from ._vercel import (
        Difference,
        VercelVerdict,
        check_repros,
        load_profile,
        repro_script,
        run_vercel_conformance,
    )

__all__ = [
    "CAPABILITY_NAMES",
    "DEFAULT_BUDGET",
    "LAYERS",
    "Case",
    "ConformanceReport",
    "Difference",
    "Finding",
    "Layer",
    "LayerContext",
    "LayerReport",
    "VercelVerdict",
    "check_repros",
    "default_layers",
    "load_factory",
    "load_profile",
    "register_layer",
    "registered_layers",
    "report_to_json",
    "report_to_junit",
    "repro_script",
    "run_conformance",
    "run_vercel_conformance",
    "write_report",
]

# Every public name is imported when first used (see durasim.scenarios._lazy: the pytest
# plugin lives in this package). The imports above are for static tools;
# tests/test_plugin.py checks that both lists agree.
_LAZY = {
    "CAPABILITY_NAMES": "._target",
    "Case": "._report",
    "ConformanceReport": "._report",
    "Difference": "._vercel",
    "DEFAULT_BUDGET": "._registry",
    "Finding": "._report",
    "LAYERS": "._run",
    "Layer": "._registry",
    "LayerContext": "._registry",
    "LayerReport": "._report",
    "VercelVerdict": "._vercel",
    "default_layers": "._run",
    "load_factory": "._target",
    "load_profile": "._vercel",
    "register_layer": "._registry",
    "registered_layers": "._registry",
    "report_to_json": "._formats",
    "report_to_junit": "._formats",
    "repro_script": "._vercel",
    "check_repros": "._vercel",
    "run_conformance": "._run",
    "run_vercel_conformance": "._vercel",
    "write_report": "._formats",
}


if not TYPE_CHECKING:  # static tools see the imports above, and no catch-all attribute
    __getattr__, __dir__ = _lazy_exports(__name__, _LAZY)
