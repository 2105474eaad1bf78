"""The deterministic layers of the conformance suite: the contract tests and the book.

* contract: the shipped contract tests (docs/protocol.md), run by pytest in this
  process with the factory as ``durasim_world_factory``;
* book: every scenario of :data:`durasim.scenarios.book.BOOK` over the World.

The searching layers (world model, explore) are in :mod:`._layers_search`.  Each
layer registers itself (:mod:`._registry`).  The book comes from a sibling
package; when it is absent the layer reports so and counts as not applicable.
"""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
import time
import traceback
import types
from collections import Counter
from pathlib import Path
from typing import Any

from durasim.worlds import WorldFactory

from . import _plugin, suite
from ._registry import Layer, LayerContext, register_layer
from ._report import Case, Finding, LayerReport

__all__ = [
    "RUNTIME_NEEDS",
    "book_layer",
    "contract_layer",
    "first_lines",
    "queue_mode",
    "stopped",
]

#: What the runtime (hence the book and exploration) needs of a World.
RUNTIME_NEEDS = ("in_band_fence", "batch", "conditional_writes", "strict_lifecycles")

_SKIP = re.compile(r"capability '(\w+)' not declared")


def first_lines(text: str, count: int = 12) -> str:
    """The first ``count`` lines of ``text``, saying how many more there were."""
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


def queue_mode(context: LayerContext) -> str:
    """``"world"`` when the World declares a queue (the runtime drives it), else ``"sim"``."""
    return "sim" if context.lacks(("queue",)) else "world"


def stopped(layer: str, name: str, exc: BaseException) -> Finding:
    """A check that stopped on an exception (the World's, most often) instead of a verdict."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return Finding(
        layer=layer,
        name=name,
        message=f"stopped on {type(exc).__name__}: {first_lines(str(exc), 4)}",
        reproduction=first_lines("".join(frames[-3:]), 20),
    )


def contract_layer(context: LayerContext) -> LayerReport:
    """Run the contract tests over the factory's Worlds (pytest, in this process)."""
    try:
        import pytest  # noqa: PLC0415 -- only the contract layer needs pytest
    except ImportError:  # pragma: no cover - pytest ships with the dev extra
        return LayerReport(
            name="contract", not_applicable="pytest is not installed: pip install pytest"
        )
    only, rerun = context.only, context.rerun
    started = time.perf_counter()
    provider = _Provider(context.factory)
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
    cases: list[Case] = []
    for nodeid in provider.order:
        outcome, text = provider.outcomes[nodeid]
        name = nodeid.rsplit("::", 1)[-1]
        path, _, test = nodeid.partition("::")  # a parameter may hold a "/" ("../x")
        case = f"{path.rsplit('/', 1)[-1]}::{test}"
        if outcome == "passed":
            passed += 1
            cases.append(Case(name=case, outcome="passed"))
        elif outcome == "skipped":
            match = _SKIP.search(text)
            reason = f"capability {match.group(1)!r}" if match else text or "skipped"
            skipped[reason] += 1
            cases.append(Case(name=case, outcome="not applicable", detail=reason))
        else:
            cases.append(Case(name=case, outcome="failed"))
            failed.append(
                Finding(
                    layer="contract",
                    name=case,
                    message=first_lines(_assertion(text)),
                    reproduction=first_lines(_test_source(text), 30),
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
        cases=tuple(cases),
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


def book_layer(context: LayerContext) -> LayerReport:
    """Every scenario of the book over the World."""
    try:
        from durasim.scenarios.book import BOOK, run_scenario  # noqa: PLC0415 -- optional
    except ImportError:
        return LayerReport(name="book", not_applicable="durasim.scenarios.book is not installed")
    only, seed, rerun = context.only, context.seed, context.rerun
    queue = queue_mode(context)
    started = time.perf_counter()
    passed = known = 0
    skipped: Counter[str] = Counter()
    failed: list[Finding] = []
    cases: list[Case] = []
    for scenario in BOOK:
        if only and only not in scenario.name:
            continue
        missing = context.lacks(scenario.requires)
        if missing:
            skipped[f"capability {missing[0]!r}"] += 1
            cases.append(Case(name=scenario.name, outcome="not applicable", detail=missing[0]))
            continue
        try:
            result = run_scenario(scenario, store=context.factory, seed=seed, queue=queue)
        except Exception as exc:  # the World's error is this scenario's failure
            failed.append(stopped("book", scenario.name, exc))
            cases.append(Case(name=scenario.name, outcome="failed"))
            continue
        if result.skipped:
            skipped[f"capability {result.skipped}"] += 1
            cases.append(Case(name=scenario.name, outcome="not applicable", detail=result.skipped))
        elif scenario.known_red:
            known += 1
            cases.append(Case(name=scenario.name, outcome="known red", detail=scenario.known_red))
        elif result.ok:
            passed += 1
            cases.append(Case(name=scenario.name, outcome="passed"))
        else:
            cases.append(Case(name=scenario.name, outcome="failed"))
            failed.append(
                Finding(
                    layer="book",
                    name=scenario.name,
                    message=first_lines(result.detail),
                    reproduction=first_lines(scenario.doc, 8)
                    + "\n--- trace ---\n"
                    + first_lines(result.trace, 40),
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
        note=f"{len(BOOK)} scenarios, {queue}'s queue",
        cases=tuple(cases),
    )


register_layer(
    Layer(
        name="contract",
        title="contract",
        cost=10,
        run=contract_layer,
        summary="the contract tests of docs/protocol.md, one pytest test per rule",
    )
)
register_layer(
    Layer(
        name="book",
        title="book",
        cost=20,
        run=book_layer,
        needs=RUNTIME_NEEDS,
        summary="every scripted race of the scenario book, run by the runtime over the World",
    )
)
