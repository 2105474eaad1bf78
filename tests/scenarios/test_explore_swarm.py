"""explore()'s swarm subset: one drawn bit mask gives the same subsets as a coin per kind."""

from __future__ import annotations

import itertools

import exploreflows as flows
from hypothesis import given
from hypothesis import strategies as st

from durasim.scenarios import explore
from durasim.scenarios._explore import swarm_subset
from durasim.sim import FAULT_KINDS


def test_every_mask_is_one_subset_and_every_subset_one_mask() -> None:
    masks = range(1 << len(FAULT_KINDS))
    subsets = [swarm_subset(FAULT_KINDS, mask) for mask in masks]
    coins = [
        tuple(kind for kind, on in zip(FAULT_KINDS, flips, strict=True) if on)
        for flips in itertools.product((False, True), repeat=len(FAULT_KINDS))
    ]
    assert sorted(subsets) == sorted(coins)
    assert len(set(subsets)) == len(subsets)
    assert swarm_subset(FAULT_KINDS, 0) == ()
    assert swarm_subset(FAULT_KINDS, len(masks) - 1) == FAULT_KINDS


@given(st.lists(st.booleans(), min_size=len(FAULT_KINDS), max_size=len(FAULT_KINDS)))
def test_a_mask_enables_what_its_coins_would(flips: list[bool]) -> None:
    mask = sum(1 << i for i, on in enumerate(flips) if on)
    expected = tuple(kind for kind, on in zip(FAULT_KINDS, flips, strict=True) if on)
    assert swarm_subset(FAULT_KINDS, mask) == expected


def test_the_swarm_reaches_every_fault_kind() -> None:
    result = explore(
        flows.ten_steps,
        10,
        faults=FAULT_KINDS,
        max_examples=300,
        seed=0,
        fresh_process=False,
        determinism_every=0,
    )
    assert result.ok, result.render()
    assert set(result.stats.faults) == set(FAULT_KINDS)
