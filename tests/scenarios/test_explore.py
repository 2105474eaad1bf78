"""explore(): green under every fault, planted bugs found and shrunk, seeds that replay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import exploreflows as flows
import pytest

from durasim.scenarios import (
    ExampleConfig,
    ExploreResult,
    PCTScheduler,
    SeedError,
    explore,
    explores,
    main,
    reproduce,
    sometimes,
)
from durasim.sim import FAULT_KINDS

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.fixture(autouse=True)
def _reset() -> None:
    flows.reset()


def test_a_correct_workflow_stays_green_under_every_fault() -> None:
    seen: list[int] = []
    result = explore(
        flows.ten_steps,
        10,
        max_examples=120,
        seed=3,
        require=["fault: crash", "fault: duplicate", "rejected: InBandSuperseded"],
        progress=lambda stats: seen.append(stats.examples),
        progress_every=40,
    )
    assert result.ok, result.render()
    stats = result.stats
    assert stats.examples == 120
    assert seen == [40, 80, 120, 120]  # every 40, then the end
    assert set(stats.faults) >= {"crash", "duplicate", "expire_lease", "withhold", "fail"}
    assert stats.interleavings > 20
    assert stats.verdicts == {"ok": 120}
    assert stats.reached["rejected: InBandSuperseded"] > 0
    assert "120 examples" in stats.render()


def test_hooks_and_cancels_land_at_drawn_points() -> None:
    result = explore(
        flows.approval,
        "tok",
        hooks={"tok": "yes"},
        cancel=True,
        max_examples=80,
        seed=1,
        require=[
            "explore: hook sent",
            "explore: cancel sent",
            "approval: payload after the first step",
        ],
    )
    assert result.ok, result.render()
    assert result.stats.statuses["completed"] > 0
    assert result.stats.statuses["cancelled"] > 0


def test_an_unreached_requirement_fails_the_exploration() -> None:
    result = explore(flows.ten_steps, 3, faults=(), max_examples=5, seed=0, require=["never"])
    assert not result.ok
    assert result.failure is None
    assert result.unreached == ("never",)
    assert "never" in result.render()


def test_sometimes_outside_an_exploration_just_returns_the_condition() -> None:
    assert sometimes("anything", True) is True
    assert sometimes("anything", False) is False


def _planted() -> ExploreResult:
    return explore(
        flows.welcome,
        "ann",
        property=flows.sent_once,
        setup=flows.reset,
        seed=0,
        max_examples=300,
    )


def test_a_non_idempotent_step_is_found_and_shrunk_to_one_crash() -> None:
    found = explore(
        flows.welcome,
        "ann",
        property=flows.sent_once,
        setup=flows.reset,
        seed=0,
        max_examples=300,
        shrink=False,
    )
    result = _planted()
    assert found.failure is not None
    assert result.failure is not None
    failure = result.failure
    assert failure.verdict == "property"
    # Shrunk: the fewest fault kinds, one fault, no longer a schedule than found.
    assert failure.report.config.faults == ("crash",)
    assert len(found.failure.report.config.faults) > 1
    assert failure.faults == ("crash",)
    assert len(failure.choices) <= len(found.failure.choices)
    # ... and it is the crash between the step's body and its record.
    assert "crash orch d1 at step:send_email d1 at events.create_batch:before" in failure.trace
    assert failure.seed.startswith("durasim:v1:")
    text = failure.render()
    for part in ("FAILED (property)", failure.seed, "def test_explored_schedule", "--- trace ---"):
        assert part in text


def test_the_seed_reproduces_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    failure = _planted().failure
    assert failure is not None
    capsys.readouterr()
    assert main(["reproduce", failure.seed]) == 1
    out = capsys.readouterr().out
    assert "verdict: property" in out
    assert failure.trace in out
    report = reproduce(failure.seed)
    assert report.verdict == "property"
    assert report.trace == failure.trace


def test_the_pasted_script_reproduces() -> None:
    failure = _planted().failure
    assert failure is not None
    namespace: dict[str, Any] = {}
    exec(compile(failure.script, "<regression>", "exec"), namespace)
    with pytest.raises(AssertionError):
        namespace["test_explored_schedule"]()


def test_the_seed_reproduces_in_another_process() -> None:
    failure = _planted().failure
    assert failure is not None
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    runs = [
        subprocess.run(
            [sys.executable, "-m", "durasim.scenarios", "reproduce", failure.seed],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            check=False,
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 1, run.stderr
        assert "verdict: property" in run.stdout
        assert failure.trace in run.stdout
    assert runs[0].stdout == runs[1].stdout


def test_seeds_round_trip_and_a_damaged_seed_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    config = ExampleConfig(
        workflow="exploreflows:approval",
        args=("tok", (1, 2)),
        faults=("crash", "drop"),
        hooks=(("tok", {"ok": True}),),
        hook_points=(7,),
        cancel_at=9,
        choices=(0, 19, 2, 0, 0),
        property="exploreflows:sent_once",
    )
    again = ExampleConfig.from_seed(config.to_seed())
    assert again == ExampleConfig(**{**_fields(config), "choices": (0, 19, 2)})
    with pytest.raises(SeedError, match="not a durasim seed"):
        ExampleConfig.from_seed("hello")
    with pytest.raises(SeedError, match="damaged"):
        ExampleConfig.from_seed("durasim:v1:AAAA")
    assert main(["reproduce", "durasim:v1:AAAA"]) == 2
    assert "damaged" in capsys.readouterr().err


def _fields(config: ExampleConfig) -> dict[str, Any]:
    import attrs

    return attrs.asdict(config, recurse=False)


def test_a_nondeterministic_workflow_fails_the_determinism_verdict() -> None:
    result = explore(flows.drifting, faults=(), max_examples=10, seed=0)
    assert result.failure is not None
    assert result.failure.verdict == "determinism"
    assert "the traces part at line" in result.failure.detail


def test_pct_finds_a_depth_two_ordering_bug_that_uniform_random_misses() -> None:
    # 300, not 100: which examples a seeded search generates depends on the constants
    # Hypothesis collects from every module loaded, so an unrelated import (the book,
    # imported first by another test of the same worker) moved PCT's find from example
    # 33 to 140.  Uniform random still misses in 300.
    options: dict[str, Any] = {
        "faults": (),
        "max_examples": 300,
        "property": flows.no_deep_race,
        "setup": flows.reset,
        "shrink": False,
        "determinism_every": 0,
    }
    pct = explore(flows.race, 6, seed=1, scheduler=PCTScheduler(depth=2), **options)
    uniform = explore(flows.race, 6, seed=1, scheduler="random", **options)
    assert pct.failure is not None
    assert pct.failure.verdict == "property"
    assert uniform.ok


@pytest.mark.slow
def test_pct_beats_uniform_random_over_many_seeds() -> None:
    options: dict[str, Any] = {
        "faults": (),
        "max_examples": 100,
        "property": flows.no_deep_race,
        "setup": flows.reset,
        "shrink": False,
        "determinism_every": 0,
    }
    found = {"pct": 0, "random": 0}
    for scheduler in found:
        for seed in range(10):
            result = explore(flows.race, 6, seed=seed, scheduler=scheduler, **options)
            found[scheduler] += not result.ok
    assert found["pct"] >= 3
    assert found["random"] <= 1


@explores(flows.ten_steps, 5, max_examples=10, seed=7, shards=2, faults=FAULT_KINDS)
def test_explores_spreads_shards_over_workers(result: ExploreResult) -> None:
    assert result.stats.examples == 5


@pytest.mark.slow
def test_a_long_exploration_of_a_correct_workflow() -> None:
    result = explore(flows.ten_steps, 10, max_examples=2000, seed=11)
    assert result.ok, result.render()


def test_explore_runs_over_a_sqlite_world(tmp_path: Path) -> None:
    from itertools import count

    from durasim.worlds import SQLiteWorld

    numbers = count()
    result = explore(
        flows.ten_steps,
        5,
        max_examples=30,
        seed=4,
        world_factory=lambda setup: SQLiteWorld(
            tmp_path / f"w{next(numbers)}.db", clock=setup.clock, ids=setup.ids
        ),
    )
    assert result.ok, result.render()
    assert result.stats.examples == 30
    assert sum(result.stats.faults.values()) > 0


def test_explore_runs_over_a_postgres_world() -> None:
    """Exploration drives PostgresWorld over real sockets, faults included (issue 9)."""
    from _postgres_support import new_schema, require_postgres

    from durasim.worlds import PostgresWorld

    dsn = require_postgres()
    result = explore(
        flows.ten_steps,
        5,
        max_examples=15,
        seed=4,
        world_factory=lambda setup: PostgresWorld(
            dsn, schema=new_schema(), clock=setup.clock, ids=setup.ids, pool_size=2
        ),
    )
    assert result.ok, result.render()
    assert result.stats.examples == 15
    assert sum(result.stats.faults.values()) > 0


def test_a_workflow_that_never_yields_is_a_stuck_failure_not_a_hang() -> None:
    # The plain run is stuck: it is the failing example (no Hypothesis search,
    # no shrinking: every try would cost the wall budget again).
    result = explore(flows.never_yields, max_examples=50, seed=0, max_wall_seconds=0.5)
    assert not result.ok
    failure = result.failure
    assert failure is not None
    assert failure.verdict == "stuck"
    assert "_spin()" in failure.detail
    assert "exploreflows.py:" in failure.detail
    assert result.stats.examples == 1
    assert "assert outcome.idle.stuck is None" in failure.script


def test_code_that_never_yields_after_a_fault_is_found_without_shrinking() -> None:
    result = explore(
        flows.stuck_after_a_fault,
        faults=("crash",),
        swarm=False,
        max_examples=200,
        seed=1,
        max_wall_seconds=0.5,
    )
    assert not result.ok
    failure = result.failure
    assert failure is not None
    assert failure.verdict == "stuck"
    assert "_spin()" in failure.detail
    assert "crash" in failure.faults
    assert result.stats.verdicts["stuck"] == 1  # found once, not shrunk
    assert reproduce(failure.seed, max_wall_seconds=0.5).verdict == "stuck"


def test_wake_ups_racing_the_deliveries_that_complete_the_same_sleeps_stay_green() -> None:
    # Run.wake_up() completes a sleep out of band while a delivery completes it
    # too (it once made that delivery replay the same stale log forever).
    result = explore(
        flows.naps,
        2,
        wake_up=True,
        max_examples=40,
        seed=3,
        require=["explore: sleep woken early"],
    )
    assert result.ok, result.render()
    assert result.stats.verdicts == {"ok": 40}
