"""Fewer young-generation collections while exploring.

An explored example allocates and drops tens of thousands of container objects
(two simulations, the oracle's World, their events), nearly all freed by
reference counting when the example ends.  With CPython's default threshold (a
young collection per 700 net allocations) the collector walks them several
times per example: about 2% of an example's instructions on the 10-step bench
(0.35 M of 17.9 M).  With a threshold ten times higher most of them are gone
before a collection looks at them; the objects a collection does find and the
garbage cycles it frees are the same kinds, later.

The threshold is the process's: the first exploration in progress sets it, the
last one to end puts back what it found (unless something else changed it
meanwhile), so explorations in several threads or nested ones leave it as it was.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["EXPLORE_YOUNG_THRESHOLD", "fewer_young_collections"]

#: Net allocations of container objects between two young collections while exploring.
EXPLORE_YOUNG_THRESHOLD = 7000


class _Explorations:
    """How many explorations are in progress, and the threshold the first one found."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.saved: tuple[int, int, int] = (0, 0, 0)


_STATE = _Explorations()


def _raised(saved: tuple[int, int, int]) -> tuple[int, int, int]:
    young, middle, old = saved
    if young <= 0:  # 0: the collector's automatic runs are off; leave them so
        return saved
    return max(young, EXPLORE_YOUNG_THRESHOLD), middle, old


@contextlib.contextmanager
def fewer_young_collections() -> Iterator[None]:
    """Raise the young generation's threshold for the block (never lower it)."""
    state = _STATE
    with state.lock:
        if state.active == 0:
            state.saved = gc.get_threshold()
            gc.set_threshold(*_raised(state.saved))
        state.active += 1
    try:
        yield
    finally:
        with state.lock:
            state.active -= 1
            if state.active == 0 and gc.get_threshold() == _raised(state.saved):
                gc.set_threshold(*state.saved)
