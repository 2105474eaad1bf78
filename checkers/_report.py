"""The checkers' verdicts: a broken rule, a report, and what a World stores about a run."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import attrs

from durasim.worlds import HookRecord, RunRecord, Snapshot, StepRecord, WaitRecord

from ._rules import RULES

__all__ = ["HookInterval", "Report", "StoredRun", "Violation"]


@attrs.frozen
class Violation:
    """One broken rule, where it broke."""

    rule: str
    run_id: str | None
    message: str
    seq: int | None = None

    def render(self) -> str:
        """One line: ``[rule] run: message``."""
        where = f"run {self.run_id}: " if self.run_id else ""
        return f"[{self.rule}] {where}{self.message}"


@attrs.frozen
class Report:
    """The verdict of a check: ``ok`` when no rule is broken."""

    violations: tuple[Violation, ...] = ()
    runs: int = 0
    events: int = 0

    @property
    def ok(self) -> bool:
        """Whether every rule held."""
        return not self.violations

    def rules_broken(self) -> Counter[str]:
        """How often each rule was broken."""
        return Counter(v.rule for v in self.violations)

    def render(self) -> str:
        """A plain-text report: a summary line, then one line per violation."""
        head = (
            f"{'OK' if self.ok else 'VIOLATED'}: {self.runs} run(s), {self.events} event(s), "
            f"{len(RULES)} rules, {len(self.violations)} violation(s)"
        )
        return "\n".join([head, *(v.render() for v in self.violations)])

    def __add__(self, other: Report) -> Report:
        return Report(
            self.violations + other.violations, self.runs + other.runs, self.events + other.events
        )


@attrs.frozen
class StoredRun:
    """What a World stores about one run, to compare with the fold of its log."""

    run: RunRecord | None = None
    steps: tuple[StepRecord, ...] = ()
    hooks: tuple[HookRecord, ...] = ()
    waits: tuple[WaitRecord, ...] = ()
    snapshot: Snapshot | None = None


@attrs.define
class HookInterval:
    """When a hook held its token (``end`` is ``None`` while it still does)."""

    run_id: str
    hook_id: str
    token: str
    start: datetime
    end: datetime | None
