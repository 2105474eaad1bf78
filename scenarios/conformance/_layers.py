"""The five layers of the conformance suite, each a function over one World factory.

* contract: the shipped contract tests (docs/protocol.md), run by pytest in this
  process with the factory as ``durasim_world_factory``;
* world model: :func:`~durasim.checkers.run_world_model` against the reference;
* concurrency: :func:`~durasim.checkers.run_concurrency`, concurrent groups over
  every facet checked for linearizability against the reference (every World);
* book: every scenario of :data:`durasim.scenarios.book.BOOK` over the World;
* explore: :func:`~durasim.scenarios.explore` of the example workflows over it;
* crash: :func:`~durasim.checkers.check_crashes`: a durable World killed inside
  its calls, reopened and compared with what it acknowledged.

The book and exploration layers come from sibling packages; a layer whose
package is absent reports so and counts as skipped.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import re
import tempfile
import time
import types
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis

from durasim.checkers import (
    WorldModelFailure,
    check_crashes,
    factory_reference,
    run_concurrency,
    run_world_model,
)
from durasim.worlds import WorldFactory

from . import _plugin, suite
from ._report import Finding, LayerReport
from .examples import EXAMPLES

__all__ = [
    "RUNTIME_NEEDS",
    "book_layer",
    "concurrency_layer",
    "contract_layer",
    "crash_layer",
    "explore_layer",
    "model_layer",
]

#: What the runtime (hence the book and exploration) needs of a World.
RUNTIME_NEEDS = ("in_band_fence", "batch")

_SKIP = re.compile(r"capability '(\w+)' not declared")


def _first_lines(text: str, count: int = 12) -> str:
    lines = text.strip().splitlines()
    more = f"\n    ... ({len(lines) - count} more lines)" if len(lines) > count else ""
    return "\n".join(lines[:count]) + more


class _Provider:
    """A pytest plugin object: hands out the factory and records every test's outcome."""

    def __init__(self, factory: WorldFactory) -> None:
        import pytest  # noqa: PLC0415 -- only the contract layer needs pytest

        self.outcomes: dict[str, tuple[str, str]] = {}
        self.order: list[str] = []

        def durasim_world_factory() -> WorldFactory:
            return factory

        # A module holds the fixture: pytest parses fixtures of module plugins.
        self.fixtures = types.ModuleType("durasim_conformance_factory")
        self.fixtures.durasim_world_factory = pytest.fixture(durasim_world_factory)  # type: ignore[attr-defined]

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid: str = report.nodeid
        if nodeid not in self.outcomes:
            self.order.append(nodeid)
        previous = self.outcomes.get(nodeid, ("passed", ""))
        if report.failed:
            self.outcomes[nodeid] = ("failed", str(report.longreprtext))
        elif report.skipped and previous[0] != "failed":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            self.outcomes[nodeid] = ("skipped", str(reason))
        elif nodeid not in self.outcomes or previous[0] == "passed":
            self.outcomes[nodeid] = previous


def contract_layer(factory: WorldFactory, *, only: str | None = None, rerun: str) -> LayerReport:
    """Run the contract tests over ``factory``'s Worlds (pytest, in this process)."""
    try:
        import pytest  # noqa: PLC0415 -- only the contract layer needs pytest
    except ImportError:  # pragma: no cover - pytest ships with the dev extra
        return LayerReport(name="contract", note="pytest is not installed: pip install pytest")
    started = time.perf_counter()
    provider = _Provider(factory)
    with tempfile.TemporaryDirectory(prefix="durasim-contract-") as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")
        args = [
            str(Path(suite.__file__).parent),
            "-c",
            str(ini),
            "--rootdir",
            scratch,
            "-p",
            "no:cacheprovider",
            "-p",
            "no:durasim",  # the entry point: the module is passed in below instead
            "--basetemp",
            str(Path(scratch) / "tmp"),
            "--durasim-conformance",
            "-k",
            f"test_contract and ({only})" if only else "test_contract",
            "-q",
        ]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            pytest.main(args, plugins=[_plugin, provider, provider.fixtures])
    passed = 0
    skipped: Counter[str] = Counter()
    failed: list[Finding] = []
    for nodeid in provider.order:
        outcome, text = provider.outcomes[nodeid]
        name = nodeid.rsplit("::", 1)[-1]
        if outcome == "passed":
            passed += 1
        elif outcome == "skipped":
            match = _SKIP.search(text)
            skipped[f"capability {match.group(1)!r}" if match else text or "skipped"] += 1
        else:
            failed.append(
                Finding(
                    layer="contract",
                    name=nodeid.split("/")[-1],
                    message=_first_lines(_assertion(text)),
                    reproduction=_first_lines(_test_source(text), 30),
                    rerun=f"{rerun} --layers contract --only '{name.split('[')[0]}'",
                )
            )
    return LayerReport(
        name="contract",
        passed=passed,
        failed=tuple(failed),
        skipped=tuple(sorted(skipped.items())),
        seconds=time.perf_counter() - started,
        note=f"{len(provider.order)} tests",
    )


def _assertion(text: str) -> str:
    """The ``E ...`` lines of a pytest failure, without the prefix."""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(errors) or text.strip().splitlines()[-1]


def _test_source(text: str) -> str:
    """The failing test's body as pytest printed it (the first block of the report)."""
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith(("E ", "_ _ _")) or re.match(r"^\S+\.py:\d+", line):
            break
        block.append(line)
    return "\n".join(block).strip("\n")


def model_layer(factory: WorldFactory, *, examples: int, seed: int, rerun: str) -> LayerReport:
    """The World model machine against the reference, ``examples`` runs."""
    started = time.perf_counter()
    settings = hypothesis.settings(database=None, print_blob=False)
    try:
        run_world_model(factory, max_examples=examples, seed=seed, settings=settings)
    except WorldModelFailure as exc:
        message = str(exc).split("\n\nreproduction", 1)[0]
        steps: list[str] = list(getattr(exc, "steps", ()) or [])
        finding = Finding(
            layer="world model",
            name="WorldModel",
            message=_first_lines(message),
            reproduction="\n".join(f"    {s}" for s in steps),
            seed=str(seed),
            rerun=f"{rerun} --layers model --seed {seed}",
        )
        return LayerReport(
            name="world model", failed=(finding,), seconds=time.perf_counter() - started
        )
    return LayerReport(
        name="world model",
        passed=examples,
        seconds=time.perf_counter() - started,
        note=f"{examples} examples",
    )


def concurrency_layer(
    factory: WorldFactory, *, groups: int, seed: int, only: str | None = None, rerun: str
) -> LayerReport:
    """Concurrent groups over every facet, linearizable against the reference; no capability gate.

    Facets the World lacks are left out of its workload, not failed.
    """
    started = time.perf_counter()
    try:
        result = run_concurrency(factory, groups=groups, seed=seed, only=only)
    except Exception as exc:  # the World failed to open or to close, outside any call
        finding = Finding(
            layer="concurrency",
            name="opening or closing the World",
            message=f"{type(exc).__name__}: {exc}",
            seed=str(seed),
            rerun=f"{rerun} --layers concurrency --seed {seed}",
        )
        return LayerReport(
            name="concurrency", failed=(finding,), seconds=time.perf_counter() - started
        )
    note = f"{result.groups} groups, {result.instances} World instance(s)"
    if result.note:
        note += f"; {result.note}"
    if result.undecided:
        note += f"; {result.undecided} undecided"
    witness = result.failure
    if witness is None:
        return LayerReport(
            name="concurrency", passed=result.groups, seconds=result.seconds, note=note
        )
    finding = Finding(
        layer="concurrency",
        name=f"{witness.anomaly.name} (group {witness.group.number}, {witness.group.kind})",
        message=f"{witness.anomaly.name}: {witness.anomaly.detail}",
        reproduction=witness.render(headline=False),
        seed=str(seed),
        rerun=f"{rerun} --layers concurrency --seed {seed}",
    )
    return LayerReport(
        name="concurrency",
        passed=result.groups - 1,
        failed=(finding,),
        seconds=result.seconds,
        note=note,
    )


def _missing(declared: tuple[str, ...], needs: tuple[str, ...] | frozenset[str]) -> list[str]:
    return sorted(name for name in needs if name not in declared)


def book_layer(
    store: WorldFactory,
    *,
    declared: tuple[str, ...],
    seed: int,
    only: str | None = None,
    rerun: str,
) -> LayerReport:
    """Every scenario of the book over the World."""
    try:
        from durasim.scenarios.book import BOOK, run_scenario  # noqa: PLC0415 -- optional
    except ImportError:
        return LayerReport(name="book", note="durasim.scenarios.book is not installed")
    started = time.perf_counter()
    passed = known = 0
    skipped: Counter[str] = Counter()
    failed: list[Finding] = []
    for scenario in BOOK:
        if only and only not in scenario.name:
            continue
        missing = _missing(declared, scenario.requires)
        if missing:
            skipped[f"capability {missing[0]!r}"] += 1
            continue
        result = run_scenario(scenario, store=store, seed=seed)
        if result.skipped:
            skipped[f"capability {result.skipped}"] += 1
        elif scenario.known_red:
            known += 1
        elif result.ok:
            passed += 1
        else:
            failed.append(
                Finding(
                    layer="book",
                    name=scenario.name,
                    message=_first_lines(result.detail),
                    reproduction=_first_lines(scenario.doc, 8)
                    + "\n--- trace ---\n"
                    + _first_lines(result.trace, 40),
                    seed=str(seed),
                    rerun=f"{rerun} --layers book --only {scenario.name} --seed {seed}",
                )
            )
    return LayerReport(
        name="book",
        passed=passed,
        failed=tuple(failed),
        skipped=tuple(sorted(skipped.items())),
        known_red=known,
        seconds=time.perf_counter() - started,
        note=f"{len(BOOK)} scenarios",
    )


def explore_layer(
    store: WorldFactory,
    *,
    declared: tuple[str, ...],
    examples: int,
    seed: int,
    only: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> LayerReport:
    """Explore each example workflow over the World under faults."""
    try:
        # Imported by name: explore() ships separately and may be absent.
        explore: Any = importlib.import_module("durasim.scenarios._explore").explore
    except ImportError:
        return LayerReport(name="explore", note="durasim.scenarios explore() is not installed")
    missing = _missing(declared, RUNTIME_NEEDS)
    if missing:
        return LayerReport(
            name="explore",
            skipped=((f"capability {missing[0]!r}", len(EXAMPLES)),),
            note="the runtime needs " + " and ".join(RUNTIME_NEEDS),
        )
    started = time.perf_counter()
    passed = 0
    failed: list[Finding] = []
    for workflow, args, hooks in EXAMPLES:
        name = getattr(workflow, "__name__", str(workflow))
        if only and only not in name:
            continue
        result = explore(
            workflow, *args, world_factory=store, hooks=hooks, max_examples=examples, seed=seed
        )
        if progress is not None:
            progress(f"explore {name}: {'ok' if result.ok else 'FAILED'}")
        if result.failure is None:
            passed += 1
            continue
        failure = result.failure
        failed.append(
            Finding(
                layer="explore",
                name=f"{name}{args!r}",
                message=f"{failure.verdict}: {_first_lines(failure.detail, 6)}",
                reproduction=_first_lines(failure.script, 40),
                seed=failure.seed,
                rerun=f"durasim reproduce {failure.seed}",
            )
        )
    return LayerReport(
        name="explore",
        passed=passed,
        failed=tuple(failed),
        seconds=time.perf_counter() - started,
        note=f"{len(EXAMPLES)} workflows x {examples} examples",
    )


def crash_layer(
    factory: WorldFactory,
    *,
    origin: Any,
    target: str | None,
    seed: int,
    only: str | None = None,
    rerun: str,
    trials: int | None = None,
    budget: float | None = None,
) -> LayerReport:
    """Kill the World inside its calls, reopen it, compare (durable Worlds only).

    ``origin`` is the factory as the user gave it and ``target`` its name: the
    child process that is killed imports it from there (``module:qualname``).
    """
    if only is not None and not re.fullmatch(r"kill-\d+", only):
        return LayerReport(name="crash", note=f"--only {only!r} names no crash trial (kill-N)")
    started = time.perf_counter()
    options: dict[str, Any] = {} if trials is None else {"trials": trials}
    try:
        report = check_crashes(
            factory,
            reference=factory_reference(origin, target),
            seed=seed,
            only=only,
            budget=budget,
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
        return LayerReport(name="crash", failed=(finding,), seconds=time.perf_counter() - started)
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
    )
