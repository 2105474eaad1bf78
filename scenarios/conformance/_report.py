"""What the conformance suite found: per layer, passed / failed / not applicable, and each failure.

The report renders as text (:meth:`ConformanceReport.render`, what ``durasim
conformance`` prints) and as JSON or JUnit XML (:mod:`._formats`, ``--report``).
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Case", "ConformanceReport", "Finding", "LayerReport"]

#: A layer's status in the report (``LayerReport.status``).
PASSED, FAILED, NOT_APPLICABLE, NOT_RUN, EMPTY = (
    "passed",
    "FAILED",
    "not applicable",
    "not run",
    "nothing ran",
)


@attrs.frozen(kw_only=True)
class Finding:
    """One failure, with what a human needs to see it again.

    Attributes:
        layer: ``contract``, ``world model``, ``book``, ``explore`` ... (the title).
        name: the test, scenario or workflow that failed (``(the layer)`` when the
            layer itself stopped on an error).
        message: what went wrong (first lines of the assertion or verdict).
        reproduction: a minimal reproduction: the shrunk rules, the scenario's
            trace, or the explored schedule as a runnable script.
        seed: the seed to run it again with (``durasim reproduce SEED`` for an
            exploration), or ``""`` when the layer is deterministic.
        rerun: a command that runs this failure alone.
        witness: the checker's own account of the failure, for tools that act on it
            (the concurrency layer's :class:`~durasim.checkers.ConcurrencyWitness`);
            not part of the written reports.
    """

    layer: str
    name: str
    message: str
    reproduction: str = ""
    seed: str = ""
    rerun: str = ""
    witness: Any = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class Case:
    """One check of a layer, for reports that list checks one by one (JUnit XML).

    Attributes:
        name: the test, scenario, workflow or search.
        outcome: ``passed``, ``failed``, ``not applicable`` or ``known red``.
        detail: why it is not applicable or known red (failures are in ``failed``).
    """

    name: str
    outcome: str
    detail: str = ""


@attrs.frozen(kw_only=True)
class LayerReport:
    """One layer's outcome.

    Attributes:
        name: the layer (its title: ``world model``).
        passed: checks that passed (tests, examples, workflows, scenarios).
        failed: the failures.
        skipped: checks not applicable to this World, by reason, with how many
            (``("capability 'queue'", 14)``).
        known_red: book scenarios marked as known, explained reds (not failures).
        seconds: wall time.
        note: what ran (``312 examples in 40 s``).
        not_applicable: why nothing of the layer applies (``the runtime needs
            capability 'batch'``); empty when it ran.
        not_run: why it did not run although it applies (``--exitfirst``).
        examples: examples a searching layer ran (0 for the others).
        budget_spent: the time budget ended a searching layer's search.
        cases: every check one by one (what JUnit XML lists).
    """

    name: str
    passed: int = 0
    failed: tuple[Finding, ...] = ()
    skipped: tuple[tuple[str, int], ...] = ()
    known_red: int = 0
    seconds: float = 0.0
    note: str = ""
    not_applicable: str = ""
    not_run: str = ""
    examples: int = 0
    budget_spent: bool = False
    cases: tuple[Case, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether nothing failed."""
        return not self.failed

    @property
    def status(self) -> str:
        """``passed``, ``FAILED``, ``not applicable``, ``not run`` or ``nothing ran``."""
        if self.failed:
            return FAILED
        if self.not_run:
            return NOT_RUN
        if self.not_applicable or (self.passed == 0 and self.skipped):
            return NOT_APPLICABLE
        if self.passed == 0 and not self.known_red:
            return EMPTY
        return PASSED

    @property
    def gaps(self) -> list[str]:
        """What of this layer did not run for this World (what ``strict`` refuses)."""
        gaps = [f"{n} not applicable ({reason})" for reason, n in self.skipped]
        if self.not_applicable:
            gaps.append(f"not applicable: {self.not_applicable}")
        if self.not_run:
            gaps.append(f"not run: {self.not_run}")
        if self.status == EMPTY:
            gaps.append("nothing ran")
        return gaps

    def summary(self) -> str:
        """The layer's line of the report."""
        counts = [f"{self.passed} passed"]
        if self.failed:
            counts.append(f"{len(self.failed)} failed")
        skipped = sum(n for _, n in self.skipped)
        if skipped:
            why = ", ".join(f"{reason}: {n}" for reason, n in self.skipped)
            counts.append(f"{skipped} not applicable ({why})")
        if self.known_red:
            counts.append(f"{self.known_red} known red")
        if self.not_applicable:
            counts = [self.not_applicable]
        if self.not_run:
            counts = [self.not_run]
        note = f"  [{self.note}]" if self.note else ""
        return (
            f"  {self.name:<12} {self.status:<14} {', '.join(counts)}  {self.seconds:.1f} s{note}"
        )


@attrs.frozen(kw_only=True)
class ConformanceReport:
    """The whole suite's outcome for one World factory.

    Attributes:
        target: the factory's name (``pkg.module:make``).
        world: the World's type name.
        capabilities: the features it declares; ``lacking``: the ones it does not.
        layers: each layer's report, in the order they ran.
        seed: the seed of every search.
        strict: certification mode: anything not applicable or not run fails.
    """

    target: str
    world: str
    capabilities: tuple[str, ...]
    lacking: tuple[str, ...]
    layers: tuple[LayerReport, ...]
    seed: int
    strict: bool = False

    @property
    def gaps(self) -> list[str]:
        """What did not run, layer by layer (``contract: 14 not applicable (...)``)."""
        return [f"{layer.name}: {gap}" for layer in self.layers for gap in layer.gaps]

    @property
    def ok(self) -> bool:
        """Whether every applicable check passed (and, when ``strict``, every check applied)."""
        return all(layer.ok for layer in self.layers) and not (self.strict and self.gaps)

    @property
    def verdict(self) -> str:
        """``PASSED``, ``FAILED (contract, explore)`` or ``FAILED (strict: ...)``."""
        failed = [layer.name for layer in self.layers if not layer.ok]
        if failed:
            return f"FAILED ({', '.join(failed)})"
        if self.strict and self.gaps:
            return f"FAILED (strict: {len(self.gaps)} gap(s))"
        return "PASSED"

    def render(self) -> str:
        """The report a human reads (``durasim conformance`` prints it)."""
        lines = [
            f"durasim conformance: {self.target} (World: {self.world}, seed {self.seed})",
            f"capabilities: {' '.join(self.capabilities) or 'none'}"
            + (f"; lacking: {' '.join(self.lacking)}" if self.lacking else ""),
            "",
            *(layer.summary() for layer in self.layers),
        ]
        failures = [f for layer in self.layers for f in layer.failed]
        for number, finding in enumerate(failures, 1):
            lines += ["", f"--- failure {number}: {finding.layer}: {finding.name}", finding.message]
            if finding.seed:
                lines.append(f"seed: {finding.seed}")
            if finding.rerun:
                lines.append(f"rerun: {finding.rerun}")
            if finding.reproduction:
                lines += ["minimal reproduction:", finding.reproduction.rstrip()]
        if self.strict and self.gaps:
            lines += ["", "--strict: every check must apply; these did not:"]
            lines += [f"  {gap}" for gap in self.gaps]
        lines += ["", f"verdict: {self.verdict}; {len(failures)} failure(s)"]
        return "\n".join(lines)
