"""explore() finds the buggy World's non-atomic resume dedup, with a seed and a script.

explore's harness sends every hook payload the way a retrying client does: twice at
once, one resume id. The reference Worlds collapse the two; examples/buggy_world.py
lands both (its dedup index is looked up and written across awaits).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from durasim.scenarios._cli import main
from durasim.scenarios.conformance import run_conformance

ROOT = Path(__file__).resolve().parents[2]


def test_explore_finds_the_race_with_a_seed_and_a_runnable_script(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    code = main(
        ["conformance", "examples.buggy_world:make", "--layers", "explore", "--examples", "20"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "[hook.resume_dedup]" in out
    seed = re.search(r"durasim:v1:[A-Za-z0-9_=-]+", out)
    assert seed is not None, out

    assert main(["reproduce", seed.group(0), "--no-trace"]) == 1
    replayed = capsys.readouterr().out
    assert "verdict: invariants" in replayed
    assert "[hook.resume_dedup]" in replayed

    start = out.index('"""Regression test from durasim explore')
    end = out.index("sim.run_sync(scenario)", start) + len("sim.run_sync(scenario)")
    namespace: dict[str, object] = {}
    exec(compile(out[start:end], "<explored>", "exec"), namespace)
    with pytest.raises(AssertionError):
        namespace["test_explored_schedule"]()  # type: ignore[operator]


def test_a_correct_world_passes_the_doubled_resumes() -> None:
    from durasim.worlds import MemoryWorld

    report = run_conformance(
        lambda setup: MemoryWorld(clock=setup.clock, ids=setup.ids),
        target="memory",
        layers=["explore"],
        examples=10,
    )
    assert report.ok, report.render()
