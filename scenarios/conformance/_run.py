"""``run_conformance``: every layer over one World factory, without pytest in charge."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from durasim.worlds import CountingIds, FixedClock, WorldFactory, WorldSetup, check_factory

from ._layers import (
    book_layer,
    concurrency_layer,
    contract_layer,
    crash_layer,
    explore_layer,
    model_layer,
)
from ._report import ConformanceReport, LayerReport
from ._target import CAPABILITY_NAMES, narrow

__all__ = ["LAYERS", "run_conformance"]

#: The layers, in the order they run.
LAYERS = ("contract", "model", "concurrency", "book", "explore", "crash")

#: Concurrent groups per example of the other searches (``examples=50``: 400 groups).
CONCURRENCY_GROUPS_PER_EXAMPLE = 8


def _describe(factory: WorldFactory) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The World's type name, the features it declares and the ones it lacks."""
    with tempfile.TemporaryDirectory(prefix="durasim-conformance-") as scratch:
        setup = WorldSetup(
            clock=FixedClock(), ids=CountingIds(), max_deliveries=2, directory=Path(scratch)
        )
        world = factory(setup)
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
    factory: WorldFactory,
    *,
    target: str | None = None,
    capabilities: Iterable[str] | None = None,
    layers: Iterable[str] = LAYERS,
    examples: int = 50,
    seed: int = 0,
    only: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> ConformanceReport:
    """Run the conformance suite over the Worlds ``factory`` builds; the report.

    Args:
        factory: ``make(setup: WorldSetup) -> World``; importable by
            ``module:qualname`` (and ``capabilities`` not narrowed), ``durasim
            reproduce`` rebuilds an exploration's World from it.
        target: how to name the factory in the report and in rerun commands
            (``pkg.module:factory``).
        capabilities: test only these features (a subset of what the World
            declares; ``None``: everything it declares).
        layers: which of ``contract``, ``model``, ``concurrency``, ``book``,
            ``explore``, ``crash`` to run (``crash``: durable Worlds only;
            docs/conformance.md).
        examples: examples of the World model and of each explored workflow;
            the concurrency layer runs eight groups per example.
        seed: the seed of every search (same seed, same report).
        only: run only the tests, scenarios or workflows whose names match.
        progress: called with a line as each layer ends.

    Returns:
        A :class:`ConformanceReport`; ``.ok`` only when every applicable check passed.
    """
    chosen = tuple(layers)
    unknown = set(chosen) - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown layers {sorted(unknown)}: choose from {', '.join(LAYERS)}")
    built = narrow(check_factory(factory), capabilities)
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
        elif layer == "concurrency":
            groups = CONCURRENCY_GROUPS_PER_EXAMPLE * examples
            report = concurrency_layer(built, groups=groups, seed=seed, only=only, rerun=rerun)
        elif layer == "book":
            report = book_layer(built, declared=declared, seed=seed, only=only, rerun=rerun)
        elif layer == "crash":
            report = crash_layer(
                built, origin=factory, target=target, seed=seed, only=only, rerun=rerun
            )
        else:
            report = explore_layer(
                built, declared=declared, examples=examples, seed=seed, only=only
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
