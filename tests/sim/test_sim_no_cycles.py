"""A finished simulation is freed by reference counting alone (issue 22).

The scheduler owns its World wrapper, faults, deliveries and trace, and each of
them reaches it weakly; a delivery that ends early (superseded by another after
a crash, a lease that expired, a duplicate) lets go of the frames it left.  So a
Sim its caller drops takes its store and every log in it along at once, and a
long exploration never waits for the collector's full passes.

From Python 3.12 a finished frame keeps its caller (``f_back``): an error that
ended a delivery (an injected failure) and is held by a caller up the stack from
where it was raised (the handled message's outcome) ties those frames into a
cycle.  On those Pythons the faulted runs are checked to be freed by one
collection (no leak); the fault-free runs by reference counting on every Python.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest
import simflows
from _cycles import collector_off, durasim_garbage

from durasim.sim import FAULT_KINDS, Sim

#: The layers a simulation is made of (scenarios keep per-exploration state of their own).
LAYERS = ("durasim.worlds", "durasim.runtime", "durasim.sim")


async def _script(sim: Sim) -> Any:
    first = await sim.start(simflows.chain, 4)
    second = await sim.start(simflows.two_steps)
    await sim.run_until_idle()
    return [first.run_id, second.run_id]


@pytest.mark.parametrize("queue", ["sim", "world"])
def test_a_dropped_sim_leaves_nothing_for_the_collector(queue: str) -> None:
    faulted = 0
    with collector_off():
        for seed in range(16):
            sim = Sim(seed=seed, faults=FAULT_KINDS, fault_odds=4, max_faults=3, queue=queue)
            sim.run_sync(_script)
            faulted += bool(sim.faults_injected)
            store = weakref.ref(sim.store)
            del sim
            if sys.version_info >= (3, 12):
                gc.collect()  # an error that ended a delivery (see the module docstring)
            assert store() is None, f"seed {seed}: the store outlived its Sim"
        assert durasim_garbage(*LAYERS) == []
    assert faulted >= 8  # the faulted paths (crashes, supersessions) were taken


def test_a_plain_sim_run_leaves_nothing_for_the_collector() -> None:
    with collector_off():
        for seed in range(4):
            Sim(seed=seed).run_sync(_script)
        assert durasim_garbage(*LAYERS) == []
