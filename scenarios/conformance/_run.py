"""``run_conformance``: every layer over one World factory, without pytest in charge."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from durasim.checkers import WorldSetup
from durasim.worlds import CountingIds, FixedClock

from ._layers import book_layer, contract_layer, crash_layer, explore_layer, model_layer
from ._report import ConformanceReport, LayerReport
from ._target import (
    CAPABILITY_NAMES,
    AnyFactory,
    StoreFactory,
    narrow,
    setup_factory,
    store_factory,
)

__all__ = ["LAYERS", "run_conformance"]

#: The layers, in the order they run.
LAYERS = ("contract", "model", "book", "explore", "crash")


def _describe(factory: AnyFactory) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The World's type name, the features it declares and the ones it lacks."""
    with tempfile.TemporaryDirectory(prefix="durasim-conformance-") as scratch:
        setup = WorldSetup(
            clock=FixedClock(), ids=CountingIds(), max_deliveries=2, directory=Path(scratch)
        )
        world = setup_factory(factory)(setup)
        try:
            caps = world.capabilities
            inner = getattr(world, "inner", world)
            name = type(inner).__name__
        finally:
            asyncio.run(world.close())
    declared = tuple(n for n in CAPABILITY_NAMES if getattr(caps, n))
    lacking = tuple(n for n in CAPABILITY_NAMES if not getattr(caps, n))
    return name, declared, lacking


def run_conformance(
    factory: AnyFactory,
    *,
    target: str | None = None,
    capabilities: Iterable[str] | None = None,
    layers: Iterable[str] = LAYERS,
    examples: int = 50,
    seed: int = 0,
    only: str | None = None,
    store: StoreFactory | None = None,
    progress: Callable[[str], None] | None = None,
) -> ConformanceReport:
    """Run the conformance suite over the Worlds ``factory`` builds; the report.

    Args:
        factory: ``factory(setup: WorldSetup) -> World`` (or ``factory(clock, ids)``).
        target: how to name the factory in the report and in rerun commands
            (``pkg.module:factory``).
        capabilities: test only these features (a subset of what the World
            declares; ``None``: everything it declares).
        layers: which of ``contract``, ``model``, ``book``, ``explore``, ``crash``
            to run (``crash``: durable Worlds only; docs/conformance.md).
        examples: examples of the World model and of each explored workflow.
        seed: the seed of every search (same seed, same report).
        only: run only the tests, scenarios or workflows whose names match.
        store: the ``(clock, ids)`` factory the simulated layers use; pass an
            importable one so ``durasim reproduce`` can rebuild the World
            (default: adapted from ``factory``).
        progress: called with a line as each layer ends.

    Returns:
        A :class:`ConformanceReport`; ``.ok`` only when every applicable check passed.
    """
    chosen = tuple(layers)
    unknown = set(chosen) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layers {sorted(unknown)}: choose from {', '.join(LAYERS)}")
    built = narrow(setup_factory(factory), capabilities)
    sim_store = store if store is not None and capabilities is None else store_factory(built)
    name, declared, lacking = _describe(built)
    label = str(target or getattr(factory, "__qualname__", "factory"))
    rerun = f"durasim conformance {label}"
    if capabilities is not None:
        rerun += f" --capabilities {','.join(declared) or 'none'}"
    reports: list[LayerReport] = []
    for layer in chosen:
        if layer == "contract":
            report = contract_layer(built, only=only, rerun=rerun)
        elif layer == "model":
            report = model_layer(built, examples=examples, seed=seed, rerun=rerun)
        elif layer == "book":
            report = book_layer(sim_store, declared=declared, seed=seed, only=only, rerun=rerun)
        elif layer == "crash":
            report = crash_layer(
                built, origin=factory, target=target, seed=seed, only=only, rerun=rerun
            )
        else:
            report = explore_layer(
                sim_store, declared=declared, examples=examples, seed=seed, only=only
            )
        reports.append(report)
        if progress is not None:
            progress(f"{report.name}: {report.status} ({report.seconds:.1f} s)")
    return ConformanceReport(
        target=label,
        world=name,
        capabilities=declared,
        lacking=lacking,
        layers=tuple(reports),
        seed=seed,
    )
