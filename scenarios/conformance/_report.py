"""What the conformance suite found: per layer, passed / failed / skipped, and each failure."""

from __future__ import annotations

import attrs

__all__ = ["ConformanceReport", "Finding", "LayerReport"]


@attrs.frozen(kw_only=True)
class Finding:
    """One failure, with what a human needs to see it again.

    Attributes:
        layer: ``contract``, ``world model``, ``book``, ``explore`` or ``crash``.
        name: the test, scenario or workflow that failed.
        message: what went wrong (first lines of the assertion or verdict).
        reproduction: a minimal reproduction: the shrunk rules, the scenario's
            trace, or the explored schedule as a runnable script.
        seed: the seed to run it again with (``durasim reproduce SEED`` for an
            exploration), or ``""`` when the layer is deterministic.
        rerun: a command that runs this failure alone.
    """

    layer: str
    name: str
    message: str
    reproduction: str = ""
    seed: str = ""
    rerun: str = ""


@attrs.frozen(kw_only=True)
class LayerReport:
    """One layer's outcome.

    Attributes:
        name: the layer.
        passed: checks that passed (tests, examples' workflows, scenarios).
        failed: the failures.
        skipped: why checks were skipped, with how many (``capability 'queue': 14``).
        known_red: book scenarios marked as known, explained reds (not failures).
        seconds: wall time.
        note: what ran (``100 examples``), or why the layer did not run.
    """

    name: str
    passed: int = 0
    failed: tuple[Finding, ...] = ()
    skipped: tuple[tuple[str, int], ...] = ()
    known_red: int = 0
    seconds: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        """Whether nothing failed."""
        return not self.failed

    @property
    def status(self) -> str:
        """``passed``, ``FAILED`` or ``skipped`` (nothing applicable ran)."""
        if self.failed:
            return "FAILED"
        if self.passed == 0:
            return "skipped"
        return "passed"


@attrs.frozen(kw_only=True)
class ConformanceReport:
    """The whole suite's outcome for one World factory."""

    target: str
    world: str
    capabilities: tuple[str, ...]
    lacking: tuple[str, ...]
    layers: tuple[LayerReport, ...]
    seed: int

    @property
    def ok(self) -> bool:
        """Whether every applicable check passed."""
        return all(layer.ok for layer in self.layers)

    def render(self) -> str:
        """The report a human reads (``durasim conformance`` prints it)."""
        lines = [
            f"durasim conformance: {self.target} (World: {self.world}, seed {self.seed})",
            f"capabilities: {' '.join(self.capabilities) or 'none'}"
            + (f"; lacking: {' '.join(self.lacking)}" if self.lacking else ""),
            "",
        ]
        for layer in self.layers:
            counts = [f"{layer.passed} passed"]
            if layer.failed:
                counts.append(f"{len(layer.failed)} failed")
            skipped = sum(n for _, n in layer.skipped)
            if skipped:
                why = ", ".join(f"{reason}: {n}" for reason, n in layer.skipped)
                counts.append(f"{skipped} skipped ({why})")
            if layer.known_red:
                counts.append(f"{layer.known_red} known red")
            note = f"  [{layer.note}]" if layer.note else ""
            lines.append(
                f"  {layer.name:<12} {layer.status:<8} {', '.join(counts)}"
                f"  {layer.seconds:.1f} s{note}"
            )
        failures = [f for layer in self.layers for f in layer.failed]
        for number, finding in enumerate(failures, 1):
            lines += ["", f"--- failure {number}: {finding.layer}: {finding.name}", finding.message]
            if finding.seed:
                lines.append(f"seed: {finding.seed}")
            if finding.rerun:
                lines.append(f"rerun: {finding.rerun}")
            if finding.reproduction:
                lines += ["minimal reproduction:", finding.reproduction.rstrip()]
        failed = [layer.name for layer in self.layers if not layer.ok]
        lines += [
            "",
            "verdict: "
            + ("PASSED" if not failed else f"FAILED ({', '.join(failed)})")
            + f"; {len(failures)} failure(s)",
        ]
        return "\n".join(lines)
