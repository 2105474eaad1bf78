"""The queue corpus: each planted queue bug is caught by the default suite; the controls pass.

Every planted World of ``worlds_queue`` runs ``durasim conformance`` with its
default options, stopping at the first failing layer (``-x``): the layers run
cheapest first, so the contract layer (the queue races, fractional delays,
``next_due`` and idempotency keys in every state) names the bug.  The controls
(the same wrappers with no bug) pass the contract layer and, through the
World's own queue under the runtime, the book.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from worlds_queue import (
    CHECK,
    PLANTED,
    make_control_memory,
    make_control_sqlite,
    make_delay_truncated,
    retry_in_a_quarter,
)

from durasim.checkers import WorldModelFailure, run_world_model
from durasim.scenarios import explore, reproduce
from durasim.scenarios.conformance import run_conformance
from durasim.worlds import World, WorldSetup


def test_every_planted_world_names_its_check() -> None:
    assert set(PLANTED) == set(CHECK)
    assert len(PLANTED) >= 6


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_queue_bug_is_caught_with_default_options(name: str) -> None:
    report = run_conformance(
        PLANTED[name], target=f"worlds_queue:make_{name}", stop_at_first_failure=True
    )
    assert not report.ok, report.render()
    failing = [layer for layer in report.layers if layer.failed]
    assert failing, report.render()
    names = {finding.name.split("::")[-1].split("[")[0] for finding in failing[0].failed}
    assert CHECK[name] in names, report.render()
    assert "rerun: durasim conformance" in report.render()


@pytest.mark.parametrize("control", [make_control_memory, make_control_sqlite])
def test_the_unwrapped_queue_passes(control: Callable[[WorldSetup], World]) -> None:
    report = run_conformance(control, layers=("contract", "book"))
    assert report.ok, report.render()


# --- the World model's queue rules (fractional delays, re-claim races, keys, next_due) --------

#: Planted Worlds whose bug the model's queue rules reach on their own.
MODEL_CATCHES = (
    "release_delay_rounded",
    "delay_truncated",
    "key_dropped_at_reclaim",
    "extend_any_holder",
    "next_due_ignores_delayed",
)


@pytest.mark.parametrize("name", MODEL_CATCHES)
def test_the_models_queue_rules_catch(name: str) -> None:
    with pytest.raises(WorldModelFailure, match="differs from the reference"):
        run_world_model(
            PLANTED[name], max_examples=300, seed=0, shrink_seconds=5.0, minimize_seconds=5.0
        )


def test_the_models_queue_rules_pass_the_control() -> None:
    run = run_world_model(make_control_memory, max_examples=25, seed=0)
    assert run.examples >= 25


# --- explore: the World's own queue under the runtime, verdict "queue", reproducible --------


def test_explore_names_a_broken_queue_and_its_seed_reproduces() -> None:
    result = explore(
        retry_in_a_quarter,
        world_factory=make_delay_truncated,
        queue="world",
        max_examples=20,
        seed=0,
        fresh_process=False,
    )
    assert result.failure is not None
    assert result.failure.verdict == "queue"
    assert "(delay)" in result.failure.detail
    again = reproduce(result.failure.seed)
    assert again.verdict == "queue"
