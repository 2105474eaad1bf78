"""The searching layers of the conformance suite: the World model and the exploration.

Both run examples until their time budget is spent (``--budget``, per layer) or
``--examples`` ran, whichever comes first, and report how many ran.  A failure
found within the budget is shrunk and minimized after it (its time is not
counted against the budget).
"""

from __future__ import annotations

import importlib
import time
from typing import Any

import hypothesis

from durasim.checkers import WorldModelFailure, run_world_model

from ._layers import RUNTIME_NEEDS, first_lines, queue_mode, stopped
from ._registry import Layer, LayerContext, register_layer
from ._report import Case, Finding, LayerReport
from .examples import EXAMPLES

__all__ = ["explore_layer", "model_layer"]

#: Examples of a search bounded by neither a budget nor a count.
_FALLBACK_EXAMPLES = 50
#: ``max_examples`` of a search bounded by its budget alone.
_UNBOUNDED = 1_000_000


def _options(context: LayerContext) -> str:
    """The command-line options that bound a search as this one was bounded."""
    options = f" --seed {context.seed}"
    if context.examples is not None:
        options += f" --examples {context.examples}"
    if context.budget is not None:
        options += f" --budget {context.budget:g}"
    return options


def _bounds(context: LayerContext) -> tuple[int, float | None]:
    """``(max_examples, max_seconds)`` of a search."""
    if context.examples is None and context.budget is None:
        return _FALLBACK_EXAMPLES, None
    return context.examples or _UNBOUNDED, context.budget


def _ran(count: int, seconds: float, *, spent: bool, budget: float | None) -> str:
    why = f" (budget {budget:g} s spent)" if spent and budget is not None else ""
    return f"{count} examples in {seconds:.0f} s{why}"


def model_layer(context: LayerContext) -> LayerReport:
    """The World model machine against the reference, for the budget (or ``examples``)."""
    started = time.perf_counter()
    max_examples, max_seconds = _bounds(context)
    # Shrinking and minimizing a failure get time of their own, in proportion.
    tidy = 20.0 if max_seconds is None else min(20.0, max(5.0, max_seconds / 2))
    try:
        run = run_world_model(
            context.factory,
            max_examples=max_examples,
            max_seconds=max_seconds,
            seed=context.seed,
            # Quiet: the layer reports the failure itself (Hypothesis would print its steps).
            settings=hypothesis.settings(
                database=None, print_blob=False, verbosity=hypothesis.Verbosity.quiet
            ),
            shrink_seconds=tidy,
            minimize_seconds=tidy,
        )
    except WorldModelFailure as exc:
        message = str(exc).split("\n\nreproduction", 1)[0]
        steps: list[str] = list(getattr(exc, "steps", ()) or [])
        finding = Finding(
            layer="world model",
            name="WorldModel",
            message=first_lines(message),
            reproduction="\n".join(f"    {s}" for s in steps),
            seed=str(context.seed),
            rerun=f"{context.rerun} --layers model{_options(context)}",
        )
        examples = int(getattr(exc, "examples", 0))
        return LayerReport(
            name="world model",
            failed=(finding,),
            seconds=time.perf_counter() - started,
            examples=examples + 1,
            note=f"failed in example {examples + 1}",
            cases=(Case(name="world model", outcome="failed"),),
        )
    return LayerReport(
        name="world model",
        passed=run.examples,
        seconds=time.perf_counter() - started,
        note=_ran(run.examples, run.seconds, spent=run.budget_spent, budget=max_seconds),
        examples=run.examples,
        budget_spent=run.budget_spent,
        cases=(Case(name=f"world model ({run.examples} examples)", outcome="passed"),),
    )


def explore_layer(context: LayerContext) -> LayerReport:
    """Explore each example workflow over the World under faults, sharing the budget."""
    try:
        # Imported by name: explore() ships separately and may be absent.
        explore: Any = importlib.import_module("durasim.scenarios._explore").explore
    except ImportError:
        return LayerReport(
            name="explore", not_applicable="durasim.scenarios explore() is not installed"
        )
    started = time.perf_counter()
    queue = queue_mode(context)
    max_examples, max_seconds = _bounds(context)
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    chosen = [
        (workflow, args, hooks)
        for workflow, args, hooks in EXAMPLES
        if not context.only or context.only in getattr(workflow, "__name__", "")
    ]
    passed = examples = 0
    spent = False
    failed: list[Finding] = []
    cases: list[Case] = []
    for index, (workflow, args, hooks) in enumerate(chosen):
        name = f"{getattr(workflow, '__name__', str(workflow))}{args!r}"
        share = None
        if deadline is not None:
            share = max(1.0, (deadline - time.monotonic()) / (len(chosen) - index))
        try:
            result = explore(
                workflow,
                *args,
                world_factory=context.factory,
                hooks=hooks,
                max_examples=max_examples,
                max_seconds=share,
                seed=context.seed,
                queue=queue,
            )
        except Exception as exc:  # the World's error is this check's failure
            failed.append(stopped("explore", name, exc))
            cases.append(Case(name=name, outcome="failed"))
            continue
        examples += result.stats.examples
        spent = spent or result.stats.budget_spent
        if result.failure is None:
            passed += 1
            cases.append(Case(name=name, outcome="passed"))
            continue
        failure = result.failure
        cases.append(Case(name=name, outcome="failed"))
        failed.append(
            Finding(
                layer="explore",
                name=name,
                message=f"{failure.verdict}: {first_lines(failure.detail, 6)}",
                reproduction=first_lines(failure.script, 40),
                seed=failure.seed,
                rerun=f"durasim reproduce {failure.seed}",
            )
        )
    seconds = time.perf_counter() - started
    return LayerReport(
        name="explore",
        passed=passed,
        failed=tuple(failed),
        seconds=seconds,
        note=f"{len(chosen)} workflows, {queue}'s queue, "
        + _ran(examples, seconds, spent=spent, budget=max_seconds),
        examples=examples,
        budget_spent=spent,
        cases=tuple(cases),
    )


register_layer(
    Layer(
        name="model",
        title="world model",
        cost=30,
        run=model_layer,
        searches=True,
        default_budget=50.0,
        summary="the World and the reference MemoryWorld driven side by side (Hypothesis)",
    )
)
register_layer(
    Layer(
        name="explore",
        title="explore",
        cost=40,
        run=explore_layer,
        needs=RUNTIME_NEEDS,
        searches=True,
        default_budget=30.0,
        summary="the example workflows explored under faults, with the runtime over the World",
    )
)
