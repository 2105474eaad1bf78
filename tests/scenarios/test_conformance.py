"""The conformance suite: the reference and SQLite Worlds pass, the buggy World is caught."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from durasim.scenarios import main
from durasim.scenarios.conformance import load_factory, run_conformance
from durasim.worlds import FactoryError, MemoryWorld, SQLiteWorld, World, WorldSetup

ROOT = Path(__file__).resolve().parents[2]


def memory_world(setup: WorldSetup) -> World:
    return MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)


def sqlite_world(setup: WorldSetup) -> World:
    return SQLiteWorld(
        setup.directory / "w.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


@pytest.mark.parametrize("factory", [memory_world, sqlite_world], ids=["memory", "sqlite"])
def test_reference_worlds_pass_contract_and_model(factory: object) -> None:
    report = run_conformance(factory, layers=("contract", "model"), examples=10)  # type: ignore[arg-type]
    assert report.ok, report.render()
    contract, model = report.layers
    assert contract.passed > 300
    assert contract.skipped == ()
    assert model.status == "passed"
    assert "verdict: PASSED" in report.render()


def test_the_old_clock_ids_factory_shape_is_refused_with_the_fix() -> None:
    def store(clock: object, ids: object) -> World:
        return MemoryWorld(clock=clock, ids=ids)  # type: ignore[arg-type]

    with pytest.raises(FactoryError, match=r"store\(clock, ids\) has the old shape") as caught:
        run_conformance(store, layers=("contract",))  # type: ignore[arg-type]
    assert "def store(setup: WorldSetup) -> World" in str(caught.value)
    assert "durasim.worlds" in str(caught.value)


def test_undeclared_capabilities_are_skipped_and_named() -> None:
    report = run_conformance(
        memory_world, layers=("contract",), capabilities=["in_band_fence", "batch"]
    )
    assert report.ok, report.render()
    (contract,) = report.layers
    reasons = dict(contract.skipped)
    for name in ("queue", "streams", "hook_resume_dedup"):
        assert reasons[f"capability {name!r}"] > 0
    assert "lacking: hook_resume_dedup queue streams" in report.render()


def test_buggy_world_race_is_found_and_named() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        factory = load_factory("examples.buggy_world:make")
    finally:
        sys.path.remove(str(ROOT))
    report = run_conformance(factory, target="examples.buggy_world:make", layers=("contract",))
    assert not report.ok
    (finding,) = report.layers[0].failed
    assert finding.name.endswith("test_concurrent_resumes_collapse_onto_one_event")
    assert "resume_id" in finding.message
    text = report.render()
    assert "asyncio.gather" in text  # the minimal reproduction: the racing calls
    assert "rerun: durasim conformance examples.buggy_world:make --layers contract" in text
    assert "verdict: FAILED (contract)" in text


def test_cli_exit_codes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    args = ["--layers", "contract", "--only", "resume"]
    assert main(["conformance", "examples.buggy_world:make", *args]) == 1
    out = capsys.readouterr().out
    assert "test_concurrent_resumes_collapse_onto_one_event" in out
    ref = "durasim.scenarios._cli_conformance:sqlite_world"
    assert main(["conformance", ref, *args]) == 0
    assert "verdict: PASSED" in capsys.readouterr().out
    assert main(["conformance", "no_such_module:make"]) == 2
    assert "cannot import the factory" in capsys.readouterr().err


def test_pytest_plugin_from_a_world_authors_repository(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from durasim.worlds import MemoryWorld\n\n\n"
        "@pytest.fixture\n"
        "def durasim_world_factory():\n"
        "    return lambda setup: MemoryWorld(clock=setup.clock, ids=setup.ids,"
        " max_deliveries=setup.max_deliveries)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    command = [sys.executable, "-m", "pytest", "--durasim-conformance", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-q", "-k", "test_contract_runs or test_world_model", "--durasim-examples", "5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
