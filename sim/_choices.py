"""Choice sources: where every scheduling and fault decision comes from.

The scheduler never draws from the global ``random``: it asks one
:class:`ChoiceSource` ``choose(n)`` for an index below ``n`` whenever more than
one thing could happen next.  FIFO always answers 0; a seeded RNG answers at
random, reproducibly; a sequence (a list, an iterator, or a callable such as a
Hypothesis ``data.draw`` wrapper) lets a search engine decide and shrink.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FunctionType
from typing import Protocol, TypeGuard, runtime_checkable

__all__ = [
    "CHOICE_KINDS",
    "ChoiceSource",
    "FifoChoices",
    "LabeledChoiceSource",
    "SeededChoices",
    "SequenceChoices",
    "as_choice_source",
]


@runtime_checkable
class ChoiceSource(Protocol):
    """Answers ``choose(n)`` with an index in ``range(n)``; ``n`` is at least 2.

    Contract: the same source, asked the same questions in the same order, gives
    the same answers (that is what makes a trace reproducible).  0 should mean
    "the default": the oldest waiting task, no fault, so shrinking toward 0
    shrinks toward the plainest schedule.
    """

    def choose(self, n: int) -> int:
        """An index in ``range(n)``."""
        ...


#: What a choice is about, as :class:`LabeledChoiceSource` is told: which task
#: goes next, whether a fault is injected here (``choose(fault_odds)``), which
#: fault kind, and how many seconds a delayed message waits (minus one).
CHOICE_KINDS = ("schedule", "fault", "fault-kind", "delay")


@runtime_checkable
class LabeledChoiceSource(ChoiceSource, Protocol):
    """A choice source that is also told what each choice is about.

    Contract: when a source has ``choose_labeled``, the scheduler calls it in
    place of ``choose`` for every choice, with ``what`` one of
    :data:`CHOICE_KINDS` and ``labels`` naming the options where they have
    names (``schedule``: each candidate's writer label such as ``orch d3`` or
    ``msg msg_000004``, which can repeat; ``fault-kind``: the kinds).  The
    answers alone replay the execution: feeding them back in order through
    :class:`SequenceChoices` gives the same trace.  Schedulers that need task
    identities (priority schedulers such as PCT) implement this.
    """

    def choose_labeled(self, n: int, what: str, labels: Sequence[str]) -> int:
        """An index in ``range(n)``."""
        ...


class FifoChoices:
    """Always the first candidate: the oldest waiting task, no faults."""

    def choose(self, n: int) -> int:
        """0."""
        return 0


class SeededChoices:
    """Uniform choices from ``random.Random(seed)``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        # Made at the first choice: a simulation that never has two candidates
        # (one run, one task at a time) does not pay for seeding a generator.
        self._rng: random.Random | None = None

    def choose(self, n: int) -> int:
        """A seeded uniform index."""
        rng = self._rng
        if rng is None:
            rng = self._rng = random.Random(self.seed)  # noqa: S311 -- scheduling, not secrets
        return rng.randrange(n)


class SequenceChoices:
    """Choices from a sequence, an iterator or a callable ``f(n) -> int``.

    Answers are reduced modulo ``n``; an exhausted sequence answers 0.  Pass a
    Hypothesis-backed callable (``lambda n: data.draw(st.integers(0, n - 1))``)
    to let Hypothesis search and shrink schedules.
    """

    def __init__(self, source: Iterable[int] | Callable[[int], int]) -> None:
        self._call: Callable[[int], int] | None = None
        self._iter: Iterator[int] | None = None
        if callable(source):
            self._call = source
        else:
            self._iter = iter(source)

    def choose(self, n: int) -> int:
        """The next answer, modulo ``n``."""
        if self._call is not None:
            return int(self._call(n)) % n
        assert self._iter is not None
        return int(next(self._iter, 0)) % n


def as_choice_source(
    choices: ChoiceSource | Iterable[int] | Callable[[int], int] | None, *, seed: int | None
) -> ChoiceSource:
    """Normalize what a caller passed: a source, a sequence, a callable, or a seed."""
    if choices is None:
        return FifoChoices() if seed is None else SeededChoices(seed)
    if _has_choose(choices) or isinstance(choices, ChoiceSource):
        return choices
    return SequenceChoices(choices)


def _has_choose(choices: object) -> TypeGuard[ChoiceSource]:
    """A sure ``isinstance(choices, ChoiceSource)`` (``False``: ask isinstance).

    The runtime-checkable Protocol's check looks the attribute up anew each
    time (slow on 3.11).  An object whose class defines ``choose`` as a plain
    function, read through the default ``__getattribute__``, and whose own
    ``__dict__`` does not shadow it, passes that check whatever else it holds:
    that much of the answer is kept per class.
    """
    kind = type(choices)
    known = _CHOOSES.get(kind)
    if known is None:
        known = _CHOOSES[kind] = _class_chooses(kind)
    if not known:
        return False
    own = getattr(choices, "__dict__", None)
    return own is None or "choose" not in own


def _class_chooses(kind: type) -> bool:
    if len(_CHOOSES) >= 256:
        _CHOOSES.clear()
    if getattr(kind, "__getattribute__", None) is not _DEFAULT_GETATTRIBUTE:
        return False
    for base in kind.__mro__:
        if "choose" in base.__dict__:
            return isinstance(base.__dict__["choose"], FunctionType)
    return False


_DEFAULT_GETATTRIBUTE = object.__getattribute__
#: _has_choose(): per class, whether ``choose`` is a plain function of the class.
_CHOOSES: dict[type, bool] = {}
