"""Schedulers for exploration: how an example's draws become the sim's choices.

An example draws uniform integers from Hypothesis (``draw(n)``: an index below
``n``, shrinking toward 0).  A scheduler turns them into answers to the
simulator's questions (see :class:`~durasim.sim.LabeledChoiceSource`): which
candidate runs next, whether a fault fires here, which kind.  Whatever the
scheduler, the answers are recorded, and the recorded answers alone replay the
execution through :class:`~durasim.sim.SequenceChoices`: that is what a seed
stores.

* :class:`RandomScheduler`: every answer is a draw (uniform random testing).
* :class:`PCTScheduler`: probabilistic concurrency testing (Burckhardt et al.,
  ASPLOS 2010): each task gets a random priority when first seen, the highest
  priority candidate always runs, and at ``depth - 1`` drawn steps the running
  task drops below every other.  A bug that needs ``d`` ordering constraints
  is hit with probability at least ``1 / (n * k^(d-1))`` per example, where a
  uniform scheduler's odds fall exponentially with the length of the runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import attrs

__all__ = ["PCTScheduler", "RandomScheduler", "RecordingSource", "Scheduling"]

#: A uniform draw of an index below ``n`` (from Hypothesis data while exploring).
Draw = Callable[[int], int]


class Policy(Protocol):
    """Picks which schedule candidate runs (one per example)."""

    def pick(self, labels: Sequence[str], draw: Draw) -> int:
        """An index into ``labels``."""
        ...


class Scheduling(Protocol):
    """A scheduler for :func:`~durasim.scenarios.explore`.

    Contract: :meth:`policy` is called once per example, before the run, and
    may draw; its policy answers every ``schedule`` choice of that example
    (other choices are plain draws).  Everything must come from ``draw``:
    the same draws must give the same answers.
    """

    @property
    def name(self) -> str:
        """A short name for reports ("random", "pct")."""
        ...

    def policy(self, draw: Draw, *, steps: int) -> Policy | None:
        """The example's policy (``None``: uniform draws); ``steps`` estimates its choices."""
        ...


@attrs.frozen
class RandomScheduler:
    """Uniform random scheduling: each choice is one draw (shrinks toward FIFO)."""

    name: str = "random"

    def policy(self, draw: Draw, *, steps: int) -> Policy | None:
        """No policy: every schedule choice is a plain draw."""
        return None


@attrs.frozen
class PCTScheduler:
    """PCT-style priorities with ``depth - 1`` change points.

    Attributes:
        depth: the bug depth aimed at (ordering constraints); ``depth - 1``
            change points are drawn.
        steps: the number of schedule choices an example makes, for placing
            change points (0: estimated by ``explore()`` from a plain run).
        priorities: priorities are drawn below this (ties run the oldest first,
            so all-zero draws, the shrink target, are FIFO).
    """

    depth: int = 2
    steps: int = 0
    priorities: int = 1024
    name: str = "pct"

    def policy(self, draw: Draw, *, steps: int) -> Policy | None:
        """Draw the change points; priorities are drawn as tasks appear."""
        horizon = max(1, self.steps or steps)
        changes: dict[int, int] = {}
        for number in range(self.depth - 1):
            at = draw(horizon + 1)  # 0: this change point is not used
            if at and at not in changes:
                changes[at] = number + 1
        return _PCT(changes=changes, priorities=self.priorities)


@attrs.define(eq=False)
class _PCT:
    changes: dict[int, int]
    priorities: int
    step: int = 0
    priority: dict[str, int] = attrs.field(factory=dict)

    def pick(self, labels: Sequence[str], draw: Draw) -> int:
        tasks = [_task(label) for label in labels]
        for task in tasks:
            if task not in self.priority:
                self.priority[task] = draw(self.priorities)
        best = 0
        for index, task in enumerate(tasks):
            if self.priority[task] > self.priority[tasks[best]]:
                best = index
        self.step += 1
        lowered = self.changes.get(self.step)
        if lowered is not None:
            self.priority[tasks[best]] = -lowered  # below every drawn priority
        return best


def _task(label: str) -> str:
    # One delivery is one task, whether it is at an orchestrator point
    # ("orch d3") or inside a step body it runs ("step:charge d3").
    head, _, tail = label.rpartition(" ")
    if head and tail.startswith("d") and tail[1:].isdigit():
        return tail
    return label


class RecordingSource:
    """The choice source of one explored example: answers from a policy, a plan or draws.

    Schedule choices come from the scheduler's policy (or a draw); fault
    questions are answered from ``faults``, a plan drawn up front mapping the
    n-th fault question to a kind (so each fault is one list element that
    Hypothesis can delete on its own, and removing one does not shift where
    the others land); every other question is a draw.  It implements
    :class:`~durasim.sim.LabeledChoiceSource`, and :attr:`answers` replays
    the example through ``SequenceChoices``.
    """

    def __init__(
        self, draw: Draw, policy: Policy | None, faults: Mapping[int, str] | None = None
    ) -> None:
        self._draw = draw
        self._policy = policy
        self._plan = faults
        self._questions = 0
        self._kind = ""
        self.answers: list[int] = []

    def choose(self, n: int) -> int:
        """A drawn index (questions without a label)."""
        return self.choose_labeled(n, "", ())

    def choose_labeled(self, n: int, what: str, labels: Sequence[str]) -> int:
        """The policy's pick, the plan's fault, or a draw; recorded."""
        if what == "schedule" and self._policy is not None and len(labels) == n:
            index = self._policy.pick(labels, self._draw)
        elif what == "fault" and self._plan is not None:
            self._questions += 1
            self._kind = self._plan.get(self._questions, "")
            index = n - 1 if self._kind else 0
        elif what == "fault-kind" and self._plan is not None:
            index = list(labels).index(self._kind) if self._kind in labels else 0
        else:
            index = self._draw(n)
        self.answers.append(index)
        return index
