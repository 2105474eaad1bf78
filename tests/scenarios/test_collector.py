"""explore() raises the young generation's threshold while it runs, and puts it back."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import exploreflows as flows
import pytest

from durasim.scenarios import explore
from durasim.scenarios._collector import EXPLORE_YOUNG_THRESHOLD, fewer_young_collections


@pytest.fixture(autouse=True)
def _threshold() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_the_threshold_is_raised_inside_and_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_young_collections():
        assert gc.get_threshold() == (EXPLORE_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_blocks_restore_once_the_outermost_ends() -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_young_collections():
        with fewer_young_collections():
            pass
        assert gc.get_threshold() == (EXPLORE_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_automatic_collection_off_is_left_alone() -> None:
    gc.set_threshold(50_000, 5, 5)
    with fewer_young_collections():
        assert gc.get_threshold() == (50_000, 5, 5)
    gc.set_threshold(0, 10, 10)
    with fewer_young_collections():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_a_threshold_changed_meanwhile_is_kept() -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_young_collections():
        gc.set_threshold(1234, 10, 10)
    assert gc.get_threshold() == (1234, 10, 10)


def test_explore_leaves_the_threshold_as_it_found_it() -> None:
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, int, int]] = []
    result = explore(
        flows.welcome,
        "ann",
        faults=(),
        max_examples=3,
        seed=0,
        fresh_process=False,
        progress=lambda _: seen.append(gc.get_threshold()),
        progress_every=1,
    )
    assert result.ok
    assert seen[0] == (EXPLORE_YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)
