"""The ``@scenario`` decorator and the list it fills (in definition order)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

from durasim.runtime import Limits

from ._model import Scenario, Script

__all__ = ["CHAPTERS", "SCENARIOS", "in_reading_order", "scenario"]

#: Every scenario defined so far, in definition order.
SCENARIOS: list[Scenario] = []

#: The chapters of the book, in reading order (``BOOK`` follows it).
CHAPTERS = ("_smoke", "_hooks", "_forks", "_faults", "_leases", "_lifecycle")


def in_reading_order(scenarios: list[Scenario]) -> tuple[Scenario, ...]:
    """``scenarios`` by chapter, then in definition order within a chapter."""
    chapter = {s.name: CHAPTERS.index(s.script.__module__.rsplit(".", 1)[-1]) for s in scenarios}
    return tuple(sorted(scenarios, key=lambda s: chapter[s.name]))


_DEFAULT_REQUIRES = frozenset({"in_band_fence", "batch"})


def scenario(
    name: str,
    *,
    requires: Iterable[str] = (),
    limits: Limits | None = None,
    known_red: str | None = None,
) -> Callable[[Script], Script]:
    """Register ``script`` as a scenario of the book; its docstring is the scenario's doc."""

    def register(script: Script) -> Script:
        if not script.__doc__:
            raise TypeError(f"scenario {name!r} needs a docstring: the race and its log")
        if any(s.name == name for s in SCENARIOS):
            raise ValueError(f"scenario {name!r} is defined twice")
        SCENARIOS.append(
            Scenario(
                name=name,
                doc=inspect.cleandoc(script.__doc__),
                script=script,
                requires=_DEFAULT_REQUIRES | frozenset(requires),
                limits=limits,
                known_red=known_red,
            )
        )
        return script

    return register
