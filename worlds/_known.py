"""What a World process last wrote to each run: the run, its counters, its unfinished steps.

A World that is the only writer of a run since it last wrote it may decide the
next write from this memory instead of reading the rows back.  The SQLite World
trusts it while ``PRAGMA data_version`` says no other connection wrote; the
PostgreSQL World trusts it only inside a write that also checks, in the same
statement, that the run's counters are still the remembered ones.

Only steps that are not finished are kept (a finished step is rarely written
again; a write that names one reads it).  Both maps are bounded, oldest run out
first.
"""

from __future__ import annotations

from ._entities import RunRecord, StepRecord
from ._guards import Plan

__all__ = ["KnownRuns"]


class KnownRuns:
    """Runs and their unfinished steps as of this process's last committed write to each."""

    def __init__(self, *, runs: int, step_runs: int) -> None:
        self._max_runs = runs
        self._max_step_runs = step_runs
        self._runs: dict[str, tuple[RunRecord, int, int]] = {}
        self._steps: dict[str, dict[str, StepRecord]] = {}

    def run(self, run_id: str) -> tuple[RunRecord, int, int] | None:
        """The run, its ``seq`` and its ``seq_in_band`` as last written here, if remembered."""
        return self._runs.get(run_id)

    def steps(self, run_id: str) -> dict[str, StepRecord] | None:
        """The run's unfinished steps as of :meth:`run`'s counters (``None``: none kept)."""
        return self._steps.get(run_id)

    def remember(self, plan: Plan) -> None:
        """Take in a committed plan (call after COMMIT, before anyone else writes the run)."""
        run_id = plan.run.run_id
        runs = self._runs
        runs[run_id] = (plan.run, plan.seq_after, plan.seq_in_band_after)
        if len(runs) > self._max_runs:
            del runs[next(iter(runs))]
        if not plan.steps:
            return
        steps = self._steps.pop(run_id, {})  # re-inserted last: the newest run
        for step_id, step in plan.steps.items():
            if step.status.terminal:
                steps.pop(step_id, None)
            else:
                steps[step_id] = step
        if steps:
            self._steps[run_id] = steps
            if len(self._steps) > self._max_step_runs:
                del self._steps[next(iter(self._steps))]

    def forget(self, run_id: str) -> None:
        """Drop one run (someone else wrote it)."""
        self._runs.pop(run_id, None)
        self._steps.pop(run_id, None)

    def clear(self) -> None:
        """Drop everything."""
        self._runs.clear()
        self._steps.clear()
