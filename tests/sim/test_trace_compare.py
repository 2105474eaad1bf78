"""Trace.same_text / Sim.same_trace: the determinism replay's comparison renders only if needed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import simflows

from durasim.sim import Sim, SimClock, Trace
from durasim.worlds import Event, EventType


async def _chain(sim: Sim, length: int) -> Any:
    return (await sim.run(simflows.chain, length)).value


def _ran(seed: int, length: int) -> Sim:
    sim = Sim(seed=seed)
    sim.run_sync(lambda s: _chain(s, length))
    return sim


def _trace(clock: SimClock, **data: Any) -> Trace:
    trace = Trace(clock)
    trace.add("note", "begin")
    event = Event(
        run_id="run_1",
        seq=1,
        type=EventType.STEP_COMPLETED,
        created_at=clock.now(),
        correlation_id="step#1",
        data=data,
    )
    trace.event(event, "orch d1")
    return trace


def test_same_runs_have_the_same_trace_and_text() -> None:
    first, second = _ran(3, 3), _ran(3, 3)
    assert first.same_trace(second)
    assert first.trace_text == second.trace_text


def test_other_runs_differ_as_their_texts_do() -> None:
    first, longer = _ran(3, 3), _ran(3, 4)
    assert not first.same_trace(longer)
    assert first.trace_text != longer.trace_text


def test_values_equal_but_shown_otherwise_are_told_apart() -> None:
    clock = SimClock()
    # 1 == 1.0 == True and 0.0 == -0.0, but their lines differ: not "the same".
    assert not _trace(clock, output=1).same_text(_trace(clock, output=1.0))
    assert not _trace(clock, output=1).same_text(_trace(clock, output=True))
    assert not _trace(clock, output=0.0).same_text(_trace(clock, output=-0.0))
    assert not _trace(clock, a=1, b=2).same_text(_trace(clock, b=2, a=1))
    # Values rendered as something shorter than themselves stay alike when so shown.
    assert _trace(clock, output=b"ab").same_text(_trace(clock, output=b"cd"))
    assert _trace(clock, output=[1, 2]).same_text(_trace(clock, output=[1, 2]))
    assert _trace(clock, output=1.5).same_text(_trace(clock, output=1.5))


def test_a_clock_started_elsewhere_is_compared_by_text() -> None:
    clock = SimClock()
    later = SimClock(clock.now() + timedelta(days=1))
    moment = clock.now() + timedelta(seconds=5)
    assert not _trace(clock, at=moment).same_text(_trace(later, at=moment))
    assert _trace(clock, at=moment).same_text(_trace(clock, at=moment))
