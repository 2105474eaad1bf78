"""The layers of the conformance suite, as a registry a new layer joins with one call.

A layer is a function from a :class:`LayerContext` (the World factory in both
forms, what the World declares, the seed, the time budget ...) to a
:class:`~durasim.scenarios.conformance.LayerReport`, plus what the runner needs to
know about it: its name, where it runs in the default order (``cost``: cheap
and telling layers first, so ``--exitfirst`` stops early), the capabilities
without which it is *not applicable*, and whether a time budget bounds it.

A module that defines layers registers them when imported
(``register_layer(Layer(...))``) and is listed in :data:`LAYER_MODULES`, which
the runner imports before it reads the registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import attrs

from durasim.worlds import Capabilities, WorldFactory

from ._report import LayerReport

__all__ = [
    "DEFAULT_BUDGET",
    "LAYER_MODULES",
    "Layer",
    "LayerContext",
    "layer_named",
    "register_layer",
    "registered_layers",
]

#: Seconds a searching layer spends starting examples when neither ``budget`` nor
#: ``examples`` is given and the layer names no default of its own
#: (``Layer.default_budget``: the World model 50, the exploration 30; chosen so the
#: default run on SQLite stays under 2 minutes on 2 cores, docs/benchmarks.md).
DEFAULT_BUDGET = 40.0

#: Modules (relative to this package) whose import registers layers.
LAYER_MODULES = ["._layers", "._layers_search", "._layers_durability"]


@attrs.frozen(kw_only=True)
class LayerContext:
    """What a layer is run with.

    Attributes:
        factory: ``factory(setup) -> World`` (narrowed to the capabilities under test).
        origin: the factory as the user gave it (before narrowing), and ``target`` its
            ``module:qualname``: a child process imports it from there (the crash
            layer) and ``durasim reproduce`` rebuilds an exploration's World from it.
        capabilities: what the World declares (narrowed).
        declared: the feature names it declares.
        seed: the seed of every search.
        only: run only the checks whose names contain this.
        rerun: the command that runs the suite again (``durasim conformance ref``).
        budget: seconds a searching layer may spend starting examples (``None``:
            the layer's default when ``examples`` is ``None`` too, else no time limit).
        examples: at most this many examples (``None``: bounded by ``budget`` alone).
        progress: where a layer may report progress (one line at a time).
    """

    factory: WorldFactory
    origin: Any = None
    target: str | None = None
    capabilities: Capabilities
    declared: tuple[str, ...]
    seed: int = 0
    only: str | None = None
    rerun: str = "durasim conformance"
    budget: float | None = None
    examples: int | None = None
    progress: Callable[[str], None] | None = None

    def lacks(self, needs: tuple[str, ...] | frozenset[str]) -> list[str]:
        """The capabilities in ``needs`` the World does not declare, sorted."""
        return sorted(name for name in needs if not getattr(self.capabilities, name, False))


@attrs.frozen(kw_only=True)
class Layer:
    """One layer of the suite.

    Attributes:
        name: its name on the command line (``--layers contract,model``).
        title: its name in the report (``world model``).
        cost: its place in the default order (lower runs first).
        run: the layer itself.
        needs: capabilities without which nothing of it applies (reported as
            *not applicable*, naming the first one missing).
        searches: whether it runs examples until ``budget`` / ``examples``.
        default_budget: its budget when the run names none (``None``: :data:`DEFAULT_BUDGET`).
        default: whether a run without ``--layers`` includes it.
        summary: one line for ``--help`` and docs.
    """

    name: str
    title: str
    cost: int
    run: Callable[[LayerContext], LayerReport]
    needs: tuple[str, ...] = ()
    searches: bool = False
    default_budget: float | None = None
    default: bool = True
    summary: str = ""


_REGISTRY: dict[str, Layer] = {}


def register_layer(layer: Layer) -> Layer:
    """Add ``layer`` to the suite (a layer of the same name is replaced); returns it."""
    _REGISTRY[layer.name] = layer
    return layer


def registered_layers() -> tuple[Layer, ...]:
    """Every layer, cheapest first (the modules of :data:`LAYER_MODULES` imported first)."""
    for module in LAYER_MODULES:
        importlib.import_module(module, __package__)
    return tuple(sorted(_REGISTRY.values(), key=lambda layer: (layer.cost, layer.name)))


def layer_named(name: str) -> Layer:
    """The layer called ``name``; ``ValueError`` naming the choices if there is none."""
    layers = {layer.name: layer for layer in registered_layers()}
    if name not in layers:
        raise ValueError(f"unknown layer {name!r}: choose from {', '.join(layers)}")
    return layers[name]
