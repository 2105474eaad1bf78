"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

One factory, ``make(setup: WorldSetup) -> World`` (the shape everything in
durasim builds Worlds with, see :class:`~durasim.worlds.WorldSetup`), and six
layers: the contract tests of docs/protocol.md (shipped as pytest modules in
:mod:`.suite`), the World model machine against the reference World, concurrent
calls on every facet checked for linearizability against it, the scenario book
over the World, an exploration of the example workflows over it, and (for a
durable World) kills inside its calls followed by restarts; each but the
concurrency layer gated by the capabilities the World declares.

* :func:`run_conformance` runs them from Python (``durasim conformance`` prints
  its :class:`ConformanceReport`);
* the pytest plugin (``pytest --durasim-conformance`` with a
  ``durasim_world_factory`` fixture) runs them as tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ._report import ConformanceReport, Finding, LayerReport
    from ._run import LAYERS, run_conformance
    from ._target import CAPABILITY_NAMES, load_factory

__all__ = [
    "CAPABILITY_NAMES",
    "LAYERS",
    "ConformanceReport",
    "Finding",
    "LayerReport",
    "load_factory",
    "run_conformance",
]

# Every public name is imported when first used (see durasim.scenarios._lazy: the pytest
# plugin lives in this package). The imports above are for static tools;
# tests/test_plugin.py checks that both lists agree.
_LAZY = {
    "CAPABILITY_NAMES": "._target",
    "ConformanceReport": "._report",
    "Finding": "._report",
    "LAYERS": "._run",
    "LayerReport": "._report",
    "load_factory": "._target",
    "run_conformance": "._run",
}


if not TYPE_CHECKING:  # static tools see the imports above, and no catch-all attribute
    __getattr__, __dir__ = _lazy_exports(__name__, _LAZY)
