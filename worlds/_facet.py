"""The base of a World's facets: they reach their World without owning it.

A World owns its facets (``world.events``, ``world.queue`` ...) and each facet
calls back into its World (its guards, its connection, its overridable
methods).  Held both ways, World and facets would be a reference cycle: a World
its user drops, and every run's log it holds, would wait for the cyclic garbage
collector, whose full passes then land in someone else's run (issue 22).  So a
facet holds its World through a weak reference: dropping the World frees it at
once, by reference counting alone.  A facet is usable while its World lives.
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

from ._errors import WorldError

__all__ = ["WorldFacet"]

W = TypeVar("W")


class WorldFacet(Generic[W]):
    """One facet of a World, reaching the World through a weak reference.

    Copies and pickles of a World carry its facets along: the reference is
    strong in the copied state (so the copy's facets reach the copied World)
    and weak again once restored.

    Args:
        world: the World this facet belongs to.
    """

    def __init__(self, world: W) -> None:
        self._ref: weakref.ReferenceType[Any] = weakref.ref(world)

    @property
    def _w(self) -> W:
        world: W | None = self._ref()
        if world is None:
            raise WorldError(
                f"this {type(self).__name__} belongs to a World that was dropped: keep a "
                "reference to the World itself while you use its facets"
            )
        return world

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ref"] = self._w
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        world = state.pop("_ref")
        self.__dict__.update(state)
        self._ref = weakref.ref(world)
