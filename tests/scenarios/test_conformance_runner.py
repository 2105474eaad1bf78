"""The conformance runner: layers in a registry, budgets, reports, a report never lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from durasim.checkers import run_world_model
from durasim.checkers._diff import render_difference
from durasim.scenarios import main
from durasim.scenarios.book._check import numbered
from durasim.scenarios.conformance import (
    Layer,
    LayerReport,
    default_layers,
    register_layer,
    report_to_json,
    report_to_junit,
    run_conformance,
)
from durasim.scenarios.conformance._registry import _REGISTRY
from durasim.worlds import EPOCH, Event, EventType, MemoryWorld, World, WorldError, WorldSetup

ROOT = Path(__file__).resolve().parents[2]


def memory_world(setup: WorldSetup) -> World:
    return MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)


def test_default_layers_run_cheapest_first() -> None:
    assert default_layers() == ("contract", "book", "concurrency", "crash", "model", "explore")


@pytest.fixture
def extra_layers() -> Any:
    before = dict(_REGISTRY)
    yield
    _REGISTRY.clear()
    _REGISTRY.update(before)


def test_a_registered_layer_runs_in_cost_order_and_its_error_is_its_failure(
    extra_layers: Any,
) -> None:
    def exploding(context: Any) -> LayerReport:
        raise WorldError("the store went away")

    def fine(context: Any) -> LayerReport:
        return LayerReport(name="fine", passed=1)

    register_layer(Layer(name="exploding", title="exploding", cost=15, run=exploding))
    register_layer(Layer(name="fine", title="fine", cost=16, run=fine, needs=("queue",)))
    assert default_layers()[:4] == ("contract", "exploding", "fine", "book")
    report = run_conformance(memory_world, layers=["exploding", "fine"])
    exploded, ran = report.layers
    assert exploded.status == "FAILED"
    (finding,) = exploded.failed
    assert finding.name == "(the layer)"
    assert "stopped on WorldError: the store went away" in finding.message
    assert ran.status == "passed"  # the next layer still ran and is reported
    assert "verdict: FAILED (exploding)" in report.render()


def test_a_layer_needing_an_undeclared_capability_is_not_applicable(extra_layers: Any) -> None:
    register_layer(
        Layer(
            name="q",
            title="q",
            cost=99,
            run=lambda c: LayerReport(name="q", passed=1),
            needs=("queue",),
        )
    )
    report = run_conformance(memory_world, layers=["q"], capabilities=["batch"])
    (layer,) = report.layers
    assert layer.status == "not applicable"
    assert "lacks capability 'queue'" in layer.not_applicable
    assert report.ok
    strict = run_conformance(memory_world, layers=["q"], capabilities=["batch"], strict=True)
    assert not strict.ok
    assert strict.verdict.startswith("FAILED (strict:")


def test_stop_at_first_failure_reports_the_rest_as_not_run(extra_layers: Any) -> None:
    register_layer(
        Layer(name="boom", title="boom", cost=1, run=lambda c: 1 / 0)  # type: ignore[arg-type,return-value]
    )
    report = run_conformance(
        memory_world, layers=["boom", "contract", "model"], stop_at_first_failure=True
    )
    assert [layer.status for layer in report.layers] == ["FAILED", "not run", "not run"]
    assert "stopped on ZeroDivisionError" in report.render()


def test_a_time_budget_bounds_the_model_and_says_how_many_examples_ran() -> None:
    report = run_conformance(memory_world, layers=["model"], budget=2)
    (model,) = report.layers
    assert model.status == "passed"
    assert model.budget_spent
    assert model.examples == model.passed > 0
    assert f"{model.examples} examples in" in model.note
    assert "budget 2 s spent" in model.note
    fixed = run_conformance(memory_world, layers=["model"], examples=3)
    assert (fixed.layers[0].examples, fixed.layers[0].budget_spent) == (3, False)


def test_run_world_model_stops_when_its_time_is_spent() -> None:
    run = run_world_model(memory_world, max_seconds=1, seed=0)
    assert run.budget_spent
    assert run.examples > 0


def test_json_and_junit_reports() -> None:
    report = run_conformance(
        memory_world,
        layers=["contract"],
        only="test_hook_lifecycle or queue",
        capabilities=["in_band_fence", "batch"],
    )
    document = json.loads(report_to_json(report))
    assert document["format"] == "durasim-conformance-report"
    assert document["version"] == 1
    (layer,) = document["layers"]
    assert layer["name"] == "contract"
    assert layer["status"] == "passed"
    assert layer["not_applicable"]["capability 'queue'"] > 0
    assert {c["outcome"] for c in layer["cases"]} == {"passed", "not applicable"}
    assert document["lacking"][:1] == ["hook_resume_dedup"]
    root = ET.fromstring(report_to_junit(report))
    assert root.tag == "testsuites"
    (suite,) = root
    assert suite.get("name") == "contract"
    skipped = [case for case in suite.iter("testcase") if case.find("skipped") is not None]
    assert len(skipped) == int(suite.get("skipped", "0")) > 0
    assert int(root.get("tests", "0")) == len(list(suite.iter("testcase")))


def test_cli_options_report_file_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    ref = "durasim.scenarios._cli_conformance:sqlite_world"
    path = tmp_path / "out.xml"
    args = ["conformance", ref, "--layers", "contract", "--only", "test_hook_lifecycle"]
    assert main([*args, "--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "verdict: PASSED" in out
    assert f"report written to {path}" in out
    assert ET.parse(path).getroot().get("failures") == "0"
    assert main([*args, "--report", str(tmp_path / "out.txt")]) == 2
    assert ".json (JSON) or .xml (JUnit XML)" in capsys.readouterr().err
    assert main(["conformance", ref, "--layers", "nope"]) == 2
    assert "unknown layer 'nope'" in capsys.readouterr().err
    strict = ["conformance", ref, "--layers", "contract", "--only", "queue", "--strict", "-x"]
    assert main([*strict, "--capabilities", "batch"]) == 1
    assert "FAILED (strict:" in capsys.readouterr().out


def test_a_factory_that_cannot_build_a_world_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "brokenworld.py").write_text("def make(setup):\n    raise OSError('no disk')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["conformance", "brokenworld:make"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot build a World: OSError: no disk" in err


def test_reproduce_an_unloadable_factory_is_one_line() -> None:
    from durasim.scenarios._seeds import ExampleConfig

    seed = ExampleConfig(
        workflow="durasim.scenarios.conformance.examples:checkout",
        args=(3,),
        world="durasim.scenarios.conformance.stores:nosuch/mod:make",
    ).to_seed()
    done = subprocess.run(
        [sys.executable, "-m", "durasim.scenarios", "reproduce", seed],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "cannot import 'nosuch.mod:make'" in done.stderr


def _event(seq: int, type_: str, cid: str | None = None) -> Event:
    return Event(run_id="r", seq=seq, type=EventType(type_), created_at=EPOCH, correlation_id=cid)


def test_book_logs_are_numbered_by_position_and_show_holes() -> None:
    log = [
        _event(1, "run_created"),
        _event(2, "run_started"),
        _event(4, "step_created", "step//m//charge#1"),
    ]
    assert numbered(log).splitlines() == [
        "  #1 run_created",
        "  #2 run_started",
        "  #3 (missing: a hole in the log)",
        "  #4 step_created charge#1",
    ]


def test_differences_name_the_fields_not_the_whole_values() -> None:
    a = ("ok", _event(3, "hook_conflict", "h2"))
    b = ("ok", _event(3, "hook_created", "h2"))
    text = render_difference(a, b, right="Mine")
    assert text == ("  .type: reference EventType.HOOK_CONFLICT | Mine EventType.HOOK_CREATED")
    refused = ("error", WorldError, {"run_id": "r"})
    assert "answer: reference returned" in render_difference(a, refused)


def test_the_plugin_runs_from_a_conftest_in_a_subfolder(tmp_path: Path) -> None:
    world_tests = tmp_path / "tests" / "world"
    world_tests.mkdir(parents=True)
    (world_tests / "conftest.py").write_text(
        "import pytest\n"
        "from durasim.worlds import MemoryWorld\n\n\n"
        "@pytest.fixture\n"
        "def store_options():\n"
        "    return {}\n\n\n"
        "@pytest.fixture\n"
        "def durasim_world_factory(store_options):\n"
        "    return lambda setup: MemoryWorld(clock=setup.clock, ids=setup.ids,"
        " max_deliveries=setup.max_deliveries, **store_options)\n"
    )
    (world_tests / "test_own.py").write_text("def test_own(durasim_world_factory):\n    pass\n")
    (tmp_path / "tests" / "test_elsewhere.py").write_text("def test_other():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "--durasim-conformance", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-q", "-k", "test_contract_runs or test_own or test_other"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert " passed" in done.stdout


def test_the_progress_line_of_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from durasim.scenarios._cli_conformance import _Progress

    progress = _Progress()
    report = run_conformance(
        memory_world, layers=["contract"], only="test_hook_lifecycle", progress=progress
    )
    out = capsys.readouterr().out
    assert out.startswith("  contract     ...\r  contract     passed")
    assert out.endswith(report.layers[0].summary() + "\n")


@pytest.mark.parametrize("make", ["memory", "sqlite"])
def test_the_concurrency_layer_of_seed_0_passes_memory_and_sqlite(make: str) -> None:
    # Seed 0 of `durasim demo`'s conformance found a World view (session 12) that read its
    # steps through the steps dict's bound methods: the linearizability checker's deep copy
    # of the reference MemoryWorld kept them as they were, so the copy read the original's
    # steps and answered StepNotFound where the World under test (rightly) said pending.
    from durasim.scenarios._cli_conformance import sqlite_world

    factory = memory_world if make == "memory" else sqlite_world
    report = run_conformance(factory, layers=["concurrency"], seed=0)
    (layer,) = report.layers
    assert layer.status == "passed", report.render()
    assert layer.passed > 100
