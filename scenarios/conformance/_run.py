"""``run_conformance``: every layer over one World factory, without pytest in charge.

The runner never loses its report: an exception raised by the World (or by a
layer itself) in any layer is that layer's failure, shown with where it was
raised, and every other layer still runs and is reported.  Only a factory that
cannot build a World at all stops it before the first layer (:class:`FactoryError`).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from durasim.worlds import (
    Capabilities,
    CountingIds,
    FactoryError,
    FixedClock,
    WorldFactory,
    WorldSetup,
    check_factory,
)

from ._layers import stopped
from ._registry import DEFAULT_BUDGET, Layer, LayerContext, layer_named, registered_layers
from ._report import Case, ConformanceReport, LayerReport
from ._target import CAPABILITY_NAMES, narrow

__all__ = ["DEFAULT_BUDGET", "LAYERS", "default_layers", "run_conformance"]


def default_layers() -> tuple[str, ...]:
    """The layers a run without ``layers=`` runs, cheapest and most telling first."""
    return tuple(layer.name for layer in registered_layers() if layer.default)


#: The default layers, in the order they run (more may register: :func:`default_layers`).
LAYERS = default_layers()


def _describe(factory: WorldFactory, label: str) -> tuple[str, Capabilities]:
    """The World's type name and what it declares (one World built and closed)."""
    with tempfile.TemporaryDirectory(prefix="durasim-conformance-") as scratch:
        setup = WorldSetup(
            clock=FixedClock(), ids=CountingIds(), max_deliveries=2, directory=Path(scratch)
        )
        try:
            world = factory(setup)
        except Exception as exc:
            raise FactoryError(
                f"the factory {label} cannot build a World: {type(exc).__name__}: {exc}; "
                "call it with a WorldSetup yourself to see why"
            ) from exc
        try:
            caps = world.capabilities
            inner = getattr(world, "inner", world)
            name = type(inner).__name__
        finally:
            asyncio.run(world.close())
    return name, caps


def _run_layer(layer: Layer, context: LayerContext) -> LayerReport:
    """One layer; never raises (an exception is the layer's failure)."""
    missing = context.lacks(layer.needs)
    if missing:
        why = f"the World lacks capability {missing[0]!r}"
        return LayerReport(
            name=layer.title,
            not_applicable=why,
            cases=(Case(name=layer.title, outcome="not applicable", detail=why),),
        )
    if layer.searches and context.budget is None and context.examples is None:
        budget = DEFAULT_BUDGET if layer.default_budget is None else layer.default_budget
        context = attrs.evolve(context, budget=budget)
    started = time.perf_counter()
    try:
        return layer.run(context)
    except Exception as exc:  # reported as the layer's failure
        return LayerReport(
            name=layer.title,
            failed=(stopped(layer.title, "(the layer)", exc),),
            seconds=time.perf_counter() - started,
            cases=(Case(name=layer.title, outcome="failed"),),
        )


def run_conformance(
    factory: WorldFactory,
    *,
    target: str | None = None,
    capabilities: Iterable[str] | None = None,
    layers: Iterable[str] | None = None,
    budget: float | None = None,
    examples: int | None = None,
    seed: int = 0,
    only: str | None = None,
    strict: bool = False,
    stop_at_first_failure: bool = False,
    progress: Callable[[str], None] | None = None,
) -> ConformanceReport:
    """Run the conformance suite over the Worlds ``factory`` builds; the report.

    Args:
        factory: ``make(setup: WorldSetup) -> World``; importable by
            ``module:qualname`` (and ``capabilities`` not narrowed), the crash layer's
            child process imports it and ``durasim reproduce`` rebuilds an
            exploration's World from it.
        target: how to name the factory in the report and in rerun commands
            (``pkg.module:factory``).
        capabilities: test only these features (a subset of what the World
            declares; ``None``: everything it declares).
        layers: which layers to run, in this order (default: :func:`default_layers`).
        budget: seconds each searching layer (world model, explore) spends
            starting examples (default: each layer's own, 50 s for the World
            model and 30 s for the exploration; none when ``examples`` is given).
        examples: at most this many examples per searching layer (per
            workflow for the exploration); with no ``budget``, exactly this many.
        seed: the seed of every search (same seed and ``examples``, same report).
        only: run only the tests, scenarios or workflows whose names match.
        strict: certification mode: a check that is not applicable to the World,
            or a layer that did not run, fails the report.
        stop_at_first_failure: run no layer after the first that fails (the
            others are reported as not run).
        progress: called with ``"<layer>: running"`` as each layer starts and with
            its report line as it ends.

    Returns:
        A :class:`ConformanceReport`; ``.ok`` only when every applicable check passed.

    Raises:
        FactoryError: the factory cannot build a World.
        ValueError: an unknown layer or capability.
    """
    chosen = [layer_named(name) for name in (default_layers() if layers is None else layers)]
    built = narrow(check_factory(factory), capabilities)
    label = str(target or getattr(factory, "__qualname__", "factory"))
    name, caps = _describe(built, label)
    declared = tuple(n for n in CAPABILITY_NAMES if getattr(caps, n))
    lacking = tuple(n for n in CAPABILITY_NAMES if not getattr(caps, n))
    rerun = f"durasim conformance {label}"
    if capabilities is not None:
        rerun += f" --capabilities {','.join(declared) or 'none'}"
    context = LayerContext(
        factory=built,
        origin=factory,
        target=target,
        capabilities=caps,
        declared=declared,
        seed=seed,
        only=only,
        rerun=rerun,
        budget=budget,
        examples=examples,
        progress=progress,
    )
    reports: list[LayerReport] = []
    stop = ""
    for layer in chosen:
        if stop:
            reports.append(LayerReport(name=layer.title, not_run=stop))
            continue
        if progress is not None:
            progress(f"{layer.title}: running")
        report = _run_layer(layer, context)
        reports.append(report)
        if progress is not None:
            progress(report.summary())
        if stop_at_first_failure and not report.ok:
            stop = f"stopped after the first failing layer ({report.name})"
    return ConformanceReport(
        target=label,
        world=name,
        capabilities=declared,
        lacking=lacking,
        layers=tuple(reports),
        seed=seed,
        strict=strict,
    )
