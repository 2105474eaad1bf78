"""The crash layer: every planted crash bug is caught and named; the real Worlds pass.

The planted Worlds (worlds_crash.py) each lose something only when their
process dies; the layer must name the bug class with default options.  The
unit tests below pin the checker's parts: the workload, the comparison after a
restart, the kill plan, task mode for factories a child cannot import.
"""

from __future__ import annotations

import re

import crash_factories
import pytest
import worlds_crash
from worlds_crash import EXPECTED, PLANTED

from durasim.checkers import (
    CRASH_CLASSES,
    CrashCheckError,
    check_crashes,
    factory_reference,
)
from durasim.scenarios.conformance import run_conformance
from durasim.worlds import Capabilities, MemoryWorld, World, WorldSetup


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_crash_bug_is_caught_and_named(name: str) -> None:
    factory = PLANTED[name]
    report = run_conformance(factory, target=f"worlds_crash:{factory.__name__}", layers=("crash",))
    assert not report.ok, f"{name} passed:\n{report.render()}"
    (layer,) = report.layers
    finding = layer.failed[0]
    assert finding.name == EXPECTED[name][0], report.render()
    assert finding.seed == "0"
    assert re.search(r"--layers crash --seed 0 --only kill-\d+$", finding.rerun), finding.rerun
    assert "kill: SIGKILL" in finding.reproduction
    assert "ops before the kill" in finding.reproduction
    assert "shrunk from 60" in finding.reproduction  # the first failing trial, shrunk
    assert len(finding.reproduction.splitlines()) < 30


def test_every_planted_world_has_a_docstring_naming_its_bug() -> None:
    assert len(PLANTED) >= 5
    for name, factory in PLANTED.items():
        assert factory.__doc__, name
        assert set(EXPECTED[name]) <= set(CRASH_CLASSES)
        assert factory_reference(factory) == f"worlds_crash:{factory.__name__}"


def test_sqlite_survives_every_kill() -> None:
    report = run_conformance(crash_factories.sqlite_process, layers=("crash",))
    assert report.ok, report.render()
    (layer,) = report.layers
    assert layer.status == "passed"
    assert layer.passed == 64
    assert "SIGKILL" in layer.note


def test_sqlite_with_synchronous_full_survives_kills() -> None:
    report = check_crashes(crash_factories.sqlite_power, seed=1, trials=16)
    assert report.ok, [f.message for f in report.findings]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("factory", ["sqlite_power", "sqlite_process"])
def test_sqlite_survives_the_default_crash_layer_under_other_seeds(factory: str, seed: int) -> None:
    report = check_crashes(getattr(crash_factories, factory), seed=seed)
    assert report.ok, [f"{f.message}\n{f.reproduction}" for f in report.findings]


@pytest.fixture
def postgres() -> object:
    from _postgres_support import require_postgres

    require_postgres()
    crash_factories.drop_crash_schemas()
    yield crash_factories.postgres_world
    crash_factories.drop_crash_schemas()


def test_postgres_survives_kills(postgres: object) -> None:
    report = check_crashes(postgres, seed=0, trials=6)  # type: ignore[arg-type]
    assert report.ok, [f.message for f in report.findings]
    assert (report.mode, report.trials) == ("process", 6)


@pytest.mark.slow
def test_postgres_survives_the_default_crash_layer(postgres: object) -> None:
    report = run_conformance(postgres, layers=("crash",))  # type: ignore[arg-type]
    assert report.ok, report.render()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_bugs_are_caught_under_other_seeds(name: str, seed: int) -> None:
    report = check_crashes(PLANTED[name], seed=seed, shrink=0)
    assert len(report.findings) == 1
    assert report.findings[0].kind in EXPECTED[name]


def test_a_world_that_is_not_durable_is_not_applicable() -> None:
    def memory(setup: WorldSetup) -> World:
        return MemoryWorld(clock=setup.clock, ids=setup.ids)

    report = run_conformance(memory, layers=("crash",))
    assert report.ok
    (layer,) = report.layers
    assert layer.status == "not applicable"
    assert layer.not_applicable == "the World lacks capability 'durable'"


def test_a_failure_reruns_alone_from_its_seed_and_trial() -> None:
    first = check_crashes(worlds_crash.make_unsaved_batch, seed=0, shrink=0)
    (finding,) = first.findings
    again = check_crashes(worlds_crash.make_unsaved_batch, seed=0, shrink=0, only=finding.trial)
    assert [(f.kind, f.trial, f.kill) for f in again.findings] == [
        (finding.kind, finding.trial, finding.kill)
    ]
    assert again.trials == 1  # only that trial was checked


# --- task mode: factories a child process cannot import ----------------------------


def _closure(make: object) -> object:
    def factory(setup: WorldSetup) -> World:
        return make(setup)  # type: ignore[operator, no-any-return]

    return factory


def test_a_closure_is_checked_in_this_process() -> None:
    factory = _closure(crash_factories.sqlite_process)
    assert factory_reference(factory) is None  # type: ignore[arg-type]
    report = check_crashes(factory, seed=0, trials=12)  # type: ignore[arg-type]
    assert (report.ok, report.mode, report.trials) == (True, "task", 12)
    assert "task cancellation" in report.note


def test_task_mode_cancels_inside_a_call_and_finds_half_a_batch() -> None:
    # The planted batch awaits between its per-event commits: a cancellation lands there.
    report = check_crashes(_closure(worlds_crash.make_batch_per_event), seed=0, shrink=0)  # type: ignore[arg-type]
    assert report.mode == "task"
    assert [f.kind for f in report.findings] == ["crash.half-applied"]
    assert "task cancelled at await" in report.findings[0].kill


@pytest.mark.parametrize("name", ["lazy_ack", "group_commit", "lazy_counter"])
def test_task_mode_finds_state_lost_with_the_abandoned_world(name: str) -> None:
    report = check_crashes(_closure(PLANTED[name]), seed=0, shrink=0)  # type: ignore[arg-type]
    assert [f.kind for f in report.findings] == [EXPECTED[name][0]]


def test_process_mode_needs_an_importable_factory() -> None:
    with pytest.raises(CrashCheckError, match="importable"):
        check_crashes(_closure(crash_factories.sqlite_power), mode="process")  # type: ignore[arg-type]


def test_factory_reference_prefers_the_hint_that_imports_the_same_object() -> None:
    make = crash_factories.sqlite_power
    assert factory_reference(make, "crash_factories:sqlite_power") == "crash_factories:sqlite_power"
    assert factory_reference(make, "crash_factories:sqlite_process") == (
        "crash_factories:sqlite_power"
    )
    assert factory_reference(_closure(make)) is None  # type: ignore[arg-type]


# --- the checker's parts -----------------------------------------------------------


def test_the_workload_is_a_function_of_the_seed_and_uses_every_facet() -> None:
    from durasim.checkers._crash_work import build_workload

    caps = Capabilities(durable=True)
    one, two = build_workload(caps, seed=3), build_workload(caps, seed=3)
    assert one.ops == two.ops
    assert one.answers == two.answers
    assert build_workload(caps, seed=4).ops != one.ops
    kinds = {op["op"] for op in one.ops[: one.child_ops]}
    assert {"create", "batch", "enqueue", "claim", "write"} <= kinds
    assert len(one.states) == len(one.ops) + 1
    bare = build_workload(
        Capabilities(durable=True, batch=False, queue=False, streams=False), seed=3
    )
    assert {op["op"] for op in bare.ops} <= {"create", "tick"}


def _events(run_id: str, count: int) -> tuple[object, ...]:
    from durasim.worlds import Event, EventType
    from durasim.worlds._time import EPOCH

    return tuple(
        Event(run_id=run_id, seq=n, type=EventType.ATTR_SET, created_at=EPOCH)
        for n in range(1, count + 1)
    )


def test_the_comparison_names_lost_half_applied_and_phantom_writes() -> None:
    from durasim.checkers._crash_compare import compare_restart
    from durasim.checkers._crash_work import State, Workload

    def state(count: int) -> State:
        return State(logs={"r": _events("r", count)}, streams={}, queue={}, message_ids={})  # type: ignore[dict-item]

    from durasim.worlds._time import EPOCH

    batch = {"op": "batch", "id": 2, "run": "r", "reqs": [["attr_set", None, {}]] * 3}
    workload = Workload(
        ops=({"op": "create", "id": 1, "run": "r", "req": ["attr_set", None, {}]}, batch),
        answers=({"seq": 2, "alloc": 1}, {"seq": [3, 4, 5]}),
        states=(state(1), state(2), state(5)),
        times=(EPOCH, EPOCH, EPOCH),
        child_ops=2,
        features=frozenset(),
    )

    def verdict(found: int, *, in_flight: bool = True) -> tuple[list[str], bool]:
        problems, applied = compare_restart(
            state(found), workload, acked=1, in_flight=in_flight, message_ids={}
        )
        return [p.kind for p in problems], applied

    assert verdict(2) == ([], False)  # the batch in flight is absent: fine
    assert verdict(5) == ([], True)  # ... or whole
    assert verdict(3) == (["crash.half-applied"], False)
    assert verdict(1) == (["crash.lost-write"], False)
    assert verdict(5, in_flight=False) == (["crash.phantom-write"], False)


def test_the_kill_plan_takes_every_kind_of_call_and_place_in_turn() -> None:
    from durasim.checkers._crash import _category, _plan
    from durasim.checkers._crash_run import Outcome
    from durasim.checkers._crash_work import build_workload

    workload = build_workload(Capabilities(durable=True), seed=0)
    calls = workload.child_ops
    census = Outcome(
        answers=workload.answers[:calls], in_flight=False, counts=(50,) * calls, intervals=(1e-3,)
    )
    kills = [_plan(0, t, workload, census, process=True) for t in range(1, 25)]
    assert kills == [_plan(0, t, workload, census, process=True) for t in range(1, 25)]
    turns = {
        (
            _category(workload.ops[k.op]),
            {"point": "inside" if k.at <= 50 else "unseen"}.get(k.mode, k.mode),
        )
        for t, k in enumerate(kills, 1)
        if t % 6 in (1, 3, 5)
    }
    assert turns == {
        (kind, place)
        for kind in ("create", "batch", "queue", "stream")
        for place in ("after", "unseen", "inside")
    }
    assert sum(k.mode == "timed" for k in kills) == 4
