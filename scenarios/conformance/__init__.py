"""durasim.scenarios.conformance: does a World keep the contract? (docs/conformance.md).

One factory, ``factory(setup: WorldSetup) -> World`` (or the simulator's
``factory(clock, ids) -> World``), and four layers: the contract tests of
docs/protocol.md (shipped as pytest modules in :mod:`.suite`), the World model
machine against the reference World, the scenario book over the World, and an
exploration of the example workflows over it; each gated by the capabilities
the World declares.

* :func:`run_conformance` runs them from Python (``durasim conformance`` prints
  its :class:`ConformanceReport`);
* the pytest plugin (``pytest --durasim-conformance`` with a
  ``durasim_world_factory`` fixture) runs them as tests.
"""

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
