"""explore(upgrade=...): "the code changes here", under every interleaving and fault."""

from __future__ import annotations

import pytest
import upgradeflows as flows

from durasim.scenarios import explore, reproduce

#: Found by explore(order, upgrade=order_forgot_two, faults=(), seed=0): the run
#: created step two on the old code, then the code changed and the patch's old
#: branch does not call it.  Kept as a regression: it must stay reproducible.
FORGOT_TWO = (
    "durasim:v1:eNptjM0KwjAQhN9lvAZRwcu-ipGwNElVIivJ1hRK390V1JOn-Yb5WcB1bCDE25508dh4kId6OI-n8"
    "em8wmG4yHVI7W0dMk9FP1wStwQ6bncOd55BphKjpQej6TFWjpZ_KRfpjaTGVEOWOooG7YJfM7DamUPPfzdYXw2BOcs"
)


def test_a_correct_patch_stays_green_whenever_the_code_changes() -> None:
    result = explore(
        flows.order,
        upgrade=flows.order_patched,
        max_examples=40,
        seed=0,
        require=["explore: the code changed mid-run"],
    )
    assert result.ok, result.failure


def test_a_patch_that_forgets_a_branch_is_found_with_a_seed() -> None:
    result = explore(
        flows.order, upgrade=flows.order_forgot_two, faults=(), max_examples=60, seed=0
    )
    assert result.failure is not None
    assert result.failure.verdict == "upgrade"
    assert "step//upgradeflows//two#1" in result.failure.detail
    assert reproduce(result.failure.seed).verdict == "upgrade"
    namespace: dict[str, object] = {}
    exec(compile(result.failure.script, "<regression>", "exec"), namespace)
    with pytest.raises(AssertionError, match="CORRUPTED_EVENT_LOG"):
        namespace["test_explored_schedule"]()  # type: ignore[operator]


def test_the_kept_seed_still_reproduces() -> None:
    report = reproduce(FORGOT_TWO)
    assert report.verdict == "upgrade"
    assert report.config.upgrade == "upgradeflows:order_forgot_two"


def test_an_edit_without_a_patch_is_found() -> None:
    result = explore(flows.order, upgrade=flows.order_unpatched, faults=(), max_examples=60, seed=0)
    assert result.failure is not None
    assert result.failure.verdict == "upgrade"
