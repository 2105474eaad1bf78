"""Scheduler.call's fast path gives what the general path gives, seed for seed.

At each interception point with no watch armed, ``Scheduler.call`` asks
``_alone_at`` whether nothing else could run; if so it records the point and goes
on without :meth:`Scheduler.at` (no Parked, no trip through the idle point).
Here every simulation runs twice: as it is, and with that shortcut refused at
every point (each point then takes the general path: parked, the idle point's
candidates, its choice and its fault question).  The trace, its hash, the
choices, the faults injected and every Point must be the same, over seeded
Sims with and without faults, with the simulator's queue and with the World's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import simflows as sf
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.sim import FAULT_KINDS, Sim
from durasim.sim._scheduler import Scheduler

_WORKFLOWS: list[tuple[Any, tuple[Any, ...]]] = [
    (sf.chain, (3,)),
    (sf.fan_out, (3,)),
    (sf.sleepy, (2,)),
]


@contextmanager
def general_path_only() -> Iterator[list[int]]:
    """Refuse the fast path at every point; yields how often it was refused."""
    refused: list[int] = []
    fast = Scheduler._alone_at

    def never_alone(self: Scheduler, now: float) -> bool:
        refused.append(1)
        return False

    Scheduler._alone_at = never_alone  # type: ignore[method-assign]
    try:
        yield refused
    finally:
        Scheduler._alone_at = fast  # type: ignore[method-assign]


def _simulate(
    seed: int, workflow: Any, args: tuple[Any, ...], runs: int, **options: Any
) -> dict[str, Any]:
    async def script(sim: Sim) -> None:
        for _ in range(runs):
            await sim.start(workflow, *args)
        await sim.run_until_idle()

    sim = Sim(seed=seed, **options)
    try:
        sim.run_sync(script)
        error = None
    except Exception as exc:  # the same failure, if any, both ways
        error = f"{type(exc).__name__}: {exc}"
    return {
        "error": error,
        "trace": sim.trace_text,
        "hash": sim.trace_hash,
        "choices": sim.choices_made,
        "faults": sim.faults_injected,
        "points": sim.points,
    }


_OPTIONS = [
    {},
    {"faults": FAULT_KINDS, "fault_odds": 4},
    {"queue": "world"},
    {"queue": "world", "faults": ("crash", "duplicate", "delay"), "fault_odds": 5},
]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    case=st.sampled_from(_WORKFLOWS),
    runs=st.integers(1, 3),
    options=st.sampled_from(_OPTIONS),
)
def test_the_fast_path_gives_the_general_paths_trace_choices_faults_and_points(
    seed: int, case: tuple[Any, tuple[Any, ...]], runs: int, options: dict[str, Any]
) -> None:
    workflow, args = case
    fast = _simulate(seed, workflow, args, runs, **options)
    with general_path_only() as refused:
        general = _simulate(seed, workflow, args, runs, **options)
    # Every intercepted call asks (a fault may leave none: a dropped first message).
    assert refused or not fast["points"], "the general path was never taken"
    assert general["error"] == fast["error"]
    assert general["trace"] == fast["trace"]
    assert general["hash"] == fast["hash"]
    assert general["choices"] == fast["choices"]
    assert general["faults"] == fast["faults"]
    assert general["points"] == fast["points"]


def test_the_fast_path_is_taken_in_a_lone_run() -> None:
    """The comparison above is not vacuous: a lone run takes the fast path."""
    taken: list[bool] = []
    fast = Scheduler._alone_at

    def counting(self: Scheduler, now: float) -> bool:
        alone = fast(self, now)
        taken.append(alone)
        return alone

    Scheduler._alone_at = counting  # type: ignore[method-assign]
    try:
        _simulate(1, sf.chain, (3,), 1)
    finally:
        Scheduler._alone_at = fast  # type: ignore[method-assign]
    assert any(taken)
