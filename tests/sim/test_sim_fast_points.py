"""A write's point fields hold its request events; make_point derives the types and
correlation ids as Scheduler.call used to compute them at every point."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.sim._calls import make_point
from durasim.sim._points import ORCHESTRATOR, Writer

_WRITER = Writer(kind=ORCHESTRATOR, run_id="run-1", delivery=1)
_TYPES = ["step_created", "step_started", "step_completed", "run_completed", "wait_created"]
_CIDS = [None, "", "step//m//charge#1", "step//m//ship#2", "wait-1"]

events = st.lists(
    st.tuples(st.sampled_from(_TYPES), st.sampled_from(_CIDS), st.integers(0, 9)), max_size=4
).map(tuple)


def _plain(asked: tuple[Any, ...], committed: tuple[Any, ...] | None) -> tuple[Any, Any, Any]:
    """(types, cids, events) of a point as call() computed them eagerly."""
    types = tuple([e[0] for e in asked])
    cids = tuple([e[1] for e in asked if e[1]])
    if committed:
        types += tuple([t for t, _, _ in committed if t not in types])
        return types, cids, committed
    return types, cids, asked


@settings(max_examples=300, deadline=None)
@given(asked=events, committed=st.one_of(st.none(), events), failed=st.booleans())
def test_lazy_write_point_is_the_eager_one(
    asked: tuple[Any, ...], committed: tuple[Any, ...] | None, failed: bool
) -> None:
    asked = tuple((t, c, 0) for t, c, _ in asked)
    types, cids, shown = _plain(asked, committed)
    tail: tuple[Any, ...] = (True, "StaleView") if failed else ()
    phase = "before" if committed is None else "after"
    head = (3, 0.5, 2, "events.create_batch", phase, (_WRITER,), "run-1")
    eager = make_point((*head, types, cids, None, shown, *tail))
    lazy = make_point((*head, asked, None, None, shown, *tail))
    assert lazy == eager
    assert lazy.types == eager.types
    assert lazy.correlation_ids == eager.correlation_ids
