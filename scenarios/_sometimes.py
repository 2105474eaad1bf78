"""``sometimes(name, condition)``: reachability assertions across an exploration.

A green exploration means little if the faults it was meant to survive never
fired.  ``sometimes("a stale in-band write was refused", cond)`` records, for
the exploration that is running, that the named situation was looked for and
whether it held; ``explore(..., require=[...])`` then fails when a required
name never held in any example, and every result reports the names that were
looked for but never reached.  Outside an exploration the call only returns
``condition``.  It may be called from a workflow (replays count again: only
"at least once" is meant), a step body, a property, or the harness itself.
"""

from __future__ import annotations

from collections import Counter

import attrs

__all__ = ["Reachability", "sometimes"]


@attrs.define(eq=False)
class Reachability:
    """What ``sometimes()`` saw during one exploration: name -> times it held / was asked."""

    held: Counter[str] = attrs.field(factory=Counter)
    asked: Counter[str] = attrs.field(factory=Counter)

    def record(self, name: str, condition: bool) -> None:
        """Count one evaluation of ``name``."""
        self.asked[name] += 1
        if condition:
            self.held[name] += 1

    def reached(self) -> dict[str, int]:
        """Names that held at least once, with how often."""
        return {name: count for name, count in sorted(self.held.items()) if count}

    def unreached(self, required: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Names asked (or required) that never held, sorted."""
        names = set(self.asked) | set(required)
        return tuple(sorted(n for n in names if not self.held.get(n)))


_ACTIVE: list[Reachability] = []


def sometimes(name: str, condition: bool = True) -> bool:
    """Record that the situation ``name`` was looked for, and whether it held now.

    Args:
        name: a stable name ("stale in-band write refused"); explorations report
            and require by it.
        condition: whether the situation holds at this call.

    Returns:
        ``condition``, so the call can sit inside an ``if``.
    """
    if _ACTIVE:
        _ACTIVE[-1].record(name, bool(condition))
    return condition


def push(reach: Reachability) -> None:
    """Make ``reach`` the collector of ``sometimes()`` calls (explorations nest)."""
    _ACTIVE.append(reach)


def pop(reach: Reachability) -> None:
    """Stop collecting into ``reach``."""
    if _ACTIVE and _ACTIVE[-1] is reach:
        _ACTIVE.pop()
    elif reach in _ACTIVE:
        _ACTIVE.remove(reach)
