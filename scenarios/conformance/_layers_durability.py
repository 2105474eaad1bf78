"""The concurrency and crash layers: what a busy deployment and a killed process do.

* concurrency: seeded groups of concurrent calls on every facet, from several
  instances of the World at once, whose history must be linearizable against the
  reference (:func:`~durasim.checkers.run_concurrency`); no capability gate;
* crash: the World killed inside its calls (SIGKILL of a child process, or a
  cancelled task), reopened from the same setup and compared with what it
  acknowledged (:func:`~durasim.checkers.check_crashes`); durable Worlds only.
"""

from __future__ import annotations

import re
import time
from typing import Any

from durasim.checkers import check_crashes, factory_reference, run_concurrency

from ._registry import Layer, LayerContext, register_layer
from ._report import Case, Finding, LayerReport

__all__ = [
    "CONCURRENCY_GROUPS",
    "CONCURRENCY_GROUPS_PER_EXAMPLE",
    "concurrency_layer",
    "crash_layer",
]

#: Concurrent groups of a default run (``--examples N``: eight groups per example).
CONCURRENCY_GROUPS = 400
CONCURRENCY_GROUPS_PER_EXAMPLE = 8


def concurrency_layer(context: LayerContext) -> LayerReport:
    """Concurrent groups over every facet, linearizable against the reference; no capability gate.

    Facets the World lacks are left out of its workload, not failed.  After an anomaly
    the other kinds of groups go on: one finding per kind that shows one.
    """
    seed, rerun = context.seed, context.rerun
    groups = (
        CONCURRENCY_GROUPS
        if context.examples is None
        else CONCURRENCY_GROUPS_PER_EXAMPLE * context.examples
    )
    started = time.perf_counter()
    try:
        result = run_concurrency(
            context.factory, groups=groups, seed=seed, only=context.only, every_kind=True
        )
    except Exception as exc:  # the World failed to open or to close, outside any call
        finding = Finding(
            layer="concurrency",
            name="opening or closing the World",
            message=f"{type(exc).__name__}: {exc}",
            seed=str(seed),
            rerun=f"{rerun} --layers concurrency --seed {seed}",
        )
        return LayerReport(
            name="concurrency",
            failed=(finding,),
            seconds=time.perf_counter() - started,
            cases=(Case(name="concurrency", outcome="failed"),),
        )
    note = f"{result.groups} groups, {result.instances} World instance(s)"
    if result.note:
        note += f"; {result.note}"
    if result.undecided:
        note += f"; {result.undecided} undecided"
    if not result.failures:
        return LayerReport(
            name="concurrency", passed=result.groups, seconds=result.seconds, note=note
        )
    findings = tuple(
        Finding(
            layer="concurrency",
            name=f"{witness.anomaly.name} (group {witness.group.number}, {witness.group.kind})",
            message=f"{witness.anomaly.name}: {witness.anomaly.detail}",
            reproduction=witness.render(headline=False),
            seed=str(seed),
            rerun=f"{rerun} --layers concurrency --seed {seed}",
            witness=witness,
        )
        for witness in result.failures
    )
    return LayerReport(
        name="concurrency",
        passed=result.groups - len(findings),
        failed=findings,
        seconds=result.seconds,
        note=note,
        cases=tuple(
            Case(name=finding.name, outcome="failed", detail=finding.message)
            for finding in findings
        ),
    )


def crash_layer(context: LayerContext, *, trials: int | None = None) -> LayerReport:
    """Kill the World inside its calls, reopen it, compare (durable Worlds only).

    The child process that is killed imports the factory as the user gave it
    (``context.origin``), by ``context.target`` or its own ``module:qualname``.
    """
    seed, rerun, only = context.seed, context.rerun, context.only
    if only is not None and not re.fullmatch(r"kill-\d+", only):
        return LayerReport(name="crash", note=f"--only {only!r} names no crash trial (kill-N)")
    started = time.perf_counter()
    options: dict[str, Any] = {} if trials is None else {"trials": trials}
    origin = context.origin if context.origin is not None else context.factory
    try:
        report = check_crashes(
            context.factory,
            reference=factory_reference(origin, context.target),
            seed=seed,
            only=only,
            **options,
        )
    except Exception as exc:
        finding = Finding(
            layer="crash",
            name="crash.error",
            message=f"the crash layer could not run: {type(exc).__name__}: {exc}",
            seed=str(seed),
            rerun=f"{rerun} --layers crash --seed {seed}",
        )
        return LayerReport(
            name="crash",
            failed=(finding,),
            seconds=time.perf_counter() - started,
            cases=(Case(name="crash", outcome="failed"),),
        )
    if not report.applicable:
        return LayerReport(
            name="crash",
            skipped=(("capability 'durable'", 1),),
            seconds=time.perf_counter() - started,
            note=report.note,
        )
    failed = tuple(
        Finding(
            layer="crash",
            name=f.kind,
            message=f"{f.message}\n({f.trial}: {f.kill})",
            reproduction=f.reproduction,
            seed=str(seed),
            rerun=f"{rerun} --layers crash --seed {seed} --only {f.trial}",
        )
        for f in report.findings
    )
    return LayerReport(
        name="crash",
        passed=report.trials - len(failed),
        failed=failed,
        seconds=time.perf_counter() - started,
        note=report.note,
        cases=tuple(Case(name=f.name, outcome="failed", detail=f.message) for f in failed),
    )


register_layer(
    Layer(
        name="concurrency",
        title="concurrency",
        cost=25,
        run=concurrency_layer,
        summary="concurrent calls on every facet from several instances, linearizable "
        "against the reference",
    )
)
register_layer(
    Layer(
        name="crash",
        title="crash",
        cost=28,
        run=crash_layer,
        needs=("durable",),
        summary="SIGKILL inside a durable World's calls; reopened, it keeps what it acknowledged",
    )
)
