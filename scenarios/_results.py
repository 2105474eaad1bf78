"""What ``explore()`` returns: its totals, the minimal failure, and the verdict."""

from __future__ import annotations

from collections import Counter

import attrs

from ._example import ExampleReport

__all__ = ["ExploreFailure", "ExploreResult", "ExploreStats"]


@attrs.define(eq=False)
class ExploreStats:
    """Progress and totals of an exploration.

    Attributes:
        examples: examples run (shrinking included).
        faults: faults injected, by kind.
        traces: distinct trace hashes seen (distinct interleavings).
        verdicts: examples by verdict (``ok`` or the failed verdict's kind).
        statuses: examples by how the run ended (``completed``, ``stalled``, ...).
        reached: ``sometimes()`` names that held, with how often.
        unreached: names looked for (or required) that never held.
        witnesses: for each name that held, the seed of the first example it
            held in (``reproduce(seed)`` replays that example, trace and all).
        seconds: wall time so far.
        budget_spent: ``max_seconds`` ended the search before ``max_examples``.
    """

    examples: int = 0
    faults: Counter[str] = attrs.field(factory=Counter)
    traces: set[str] = attrs.field(factory=set)
    verdicts: Counter[str] = attrs.field(factory=Counter)
    statuses: Counter[str] = attrs.field(factory=Counter)
    reached: dict[str, int] = attrs.field(factory=dict)
    unreached: tuple[str, ...] = ()
    witnesses: dict[str, str] = attrs.field(factory=dict)
    seconds: float = 0.0
    budget_spent: bool = False

    @property
    def interleavings(self) -> int:
        """Distinct trace hashes seen."""
        return len(self.traces)

    @property
    def examples_per_second(self) -> float:
        """Examples per wall-clock second."""
        return self.examples / self.seconds if self.seconds else 0.0

    def render(self) -> str:
        """A short summary (a few lines)."""
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"{self.examples} examples in {self.seconds:.1f} s "
            f"({self.examples_per_second:.0f}/s), {self.interleavings} distinct interleavings",
            f"faults injected: {faults}",
            "verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items())),
            "runs ended: " + ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())),
        ]
        if self.reached:
            lines.append(
                "reached: " + ", ".join(f"{k!r} x{v}" for k, v in sorted(self.reached.items()))
            )
        if self.unreached:
            lines.append("NEVER reached: " + ", ".join(repr(n) for n in self.unreached))
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class ExploreFailure:
    """The minimal failing example.

    Attributes:
        verdict: the failed verdicts' kinds, most severe first, comma-separated.
        detail: what each failed verdict said.
        seed: the durable seed (``durasim reproduce SEED``).
        script: a runnable pytest test replaying the schedule.
        trace: the simulation's trace of the failing execution.
        faults: the faults injected, in order.
        choices: the scheduler's answers, in order.
        report: the example's full report.
    """

    verdict: str
    detail: str
    seed: str
    script: str
    trace: str
    faults: tuple[str, ...]
    choices: tuple[int, ...]
    report: ExampleReport

    def render(self) -> str:
        """What a failure prints: verdict, seed, script, trace."""
        return "\n".join(
            [
                f"durasim explore: FAILED ({self.verdict})",
                self.detail,
                "",
                f"faults: {', '.join(self.faults) or 'none'}; choices: {len(self.choices)} answers",
                f"seed: {self.seed}",
                f"reproduce: durasim reproduce {self.seed}",
                "",
                "--- regression test ---",
                self.script,
                "--- trace ---",
                self.trace,
            ]
        )


@attrs.frozen(kw_only=True)
class ExploreResult:
    """What ``explore()`` found.

    Attributes:
        ok: no example failed and every required ``sometimes()`` name was reached.
        failure: the minimal failing example (``None`` if none failed).
        stats: totals (examples, faults, interleavings, verdicts, reachability).
        unreached: required names never reached (``ok`` is false when any).
    """

    ok: bool
    failure: ExploreFailure | None
    stats: ExploreStats
    unreached: tuple[str, ...] = ()

    def render(self) -> str:
        """The summary, then the failure (if any)."""
        head = "durasim explore: " + ("OK" if self.ok else "FAILED")
        parts = [head, self.stats.render()]
        if self.unreached:
            parts.append("required but never reached: " + ", ".join(map(repr, self.unreached)))
        if self.failure is not None:
            parts += ["", self.failure.render()]
        return "\n".join(parts)

    def raise_for_failure(self) -> None:
        """Raise ``AssertionError`` with :meth:`render` unless ``ok``."""
        if not self.ok:
            raise AssertionError(self.render())
