"""explore() replays every example in a fresh process, and tells the truth about authoring errors.

Each workflow of ``freshflows`` replays alike in this process and differently
in another (hash seed, environment, wall clock, module state): explore() must
fail it with a seed that reproduces, where without the fresh-process replay it
passes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import freshflows
import pytest

from durasim.checkers import FreshProcessUnavailable
from durasim.runtime import step, workflow
from durasim.scenarios import ExploreResult, explore, reproduce

HERE = Path(__file__).parent


def _explore(wf: Any, *args: Any, **options: Any) -> ExploreResult:
    options = {"max_examples": 8, "seed": 0, "faults": (), **options}
    return explore(wf, *args, **options)


def _assert_caught(wf: Any, *kinds: str) -> str:
    """explore fails ``wf`` with one of ``kinds``; the seed reproduces it; without the check: ok."""
    assert _explore(wf, fresh_process=False).ok
    result = _explore(wf)
    assert not result.ok
    failure = result.failure
    assert failure is not None
    assert failure.verdict.split(",")[0] in kinds, failure.render()
    assert reproduce(failure.seed).verdict == failure.verdict.split(",")[0]
    return failure.detail


def test_a_set_order_deciding_the_first_step_fails_in_a_fresh_process() -> None:
    detail = _assert_caught(freshflows.set_order, "fresh-process")
    assert "PYTHONHASHSEED=" in detail
    assert "CORRUPTED_EVENT_LOG" in detail


def test_an_environment_read_the_sandbox_cannot_see_fails_in_a_fresh_process() -> None:
    # The replay server has DURASIM_FRESH_PROCESS=1, which this process lacks,
    # read where no guard looks (posix.environ, as a C extension would).
    _assert_caught(freshflows.env_read, "fresh-process")


def test_an_os_environ_read_is_refused_with_or_without_the_fresh_process() -> None:
    # FRESHFLOWS_REGION is set nowhere; os.environ is refused inside workflow
    # code, so the exploration fails whether the fresh process runs or not.
    for fresh in (True, False):
        result = _explore(freshflows.configured, fresh_process=fresh)
        assert result.failure is not None
        assert result.failure.verdict == "authoring", result.render()
        assert "os.environ" in result.failure.detail


def test_a_wall_clock_read_the_sandbox_cannot_see_fails_in_a_fresh_process() -> None:
    # datetime.now() inside the standard library (email.utils.localtime()).
    detail = _assert_caught(freshflows.wall_clock, "fresh-process")
    assert "wall clock" in detail


def test_a_memo_filled_by_the_probe_or_an_earlier_example_fails_in_a_fresh_process() -> None:
    # The probe (or the first run in this process) warmed the cache: no example
    # of this process calls warm_cache, but a fresh process does.
    detail = _assert_caught(freshflows.memoized, "fresh-process")
    assert "warm_cache" in detail


def test_a_replay_that_kills_the_fresh_process_fails_the_example_and_the_server_goes_on() -> None:
    result = _explore(freshflows.exits_elsewhere, max_examples=3)
    assert result.failure is not None
    assert result.failure.verdict == "fresh-process", result.render()
    assert "did not answer" in result.failure.detail
    assert _explore(freshflows.steady, 1, max_examples=3).ok


def test_a_deterministic_workflow_stays_green_with_the_fresh_process_replay() -> None:
    result = _explore(freshflows.steady, 3, max_examples=30, faults=("crash", "duplicate"))
    assert result.ok, result.render()
    assert result.stats.verdicts == {"ok": 30}


def test_a_sandbox_error_fails_the_exploration() -> None:
    for fresh in (True, False):
        result = _explore(freshflows.sleeps, fresh_process=fresh, max_examples=3)
        assert not result.ok
        assert result.failure is not None
        assert result.failure.verdict == "authoring", result.render()
        assert "WorkflowSandboxError" in result.failure.detail


def test_an_authoring_error_as_the_cause_of_the_runs_error_fails_the_exploration() -> None:
    result = _explore(freshflows.calls_a_workflow, max_examples=3)
    assert result.failure is not None
    assert result.failure.verdict == "authoring", result.render()
    assert "WorkflowCallError" in result.failure.detail


@step(module="fresh_nested")
def nested_step() -> int:
    return 1


def test_a_workflow_defined_in_a_function_is_refused_with_the_fix() -> None:
    @workflow(module="fresh_nested")
    async def inner() -> int:
        return await nested_step()

    with pytest.raises(FreshProcessUnavailable, match="fresh_process=False"):
        _explore(inner)
    assert _explore(inner, fresh_process=False).ok


def test_a_workflow_whose_module_cannot_be_imported_by_name_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "loose.py"
    source.write_text(
        "from durasim.runtime import step, workflow\n"
        "@step(module='loose')\n"
        "def one() -> int:\n"
        "    return 1\n"
        "@workflow(module='loose')\n"
        "async def wf() -> int:\n"
        "    return await one()\n"
    )
    spec = importlib.util.spec_from_file_location("not_on_the_path.loose", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(FreshProcessUnavailable, match=r"not_on_the_path\.loose.*fresh_process"):
        _explore(module.wf)
    assert _explore(module.wf, fresh_process=False).ok


SCRIPT = """
import freshflows
from durasim.scenarios import explore
for wf, args in ((freshflows.set_order, ()), (freshflows.memoized, ()), (freshflows.steady, (2,))):
    result = explore(wf, *args, max_examples=5, seed=0, faults=())
    print(wf.__name__, "ok" if result.ok else result.failure.verdict)
    if not result.ok:
        print("SEED", wf.__name__, result.failure.seed)
"""


@pytest.mark.parametrize("hash_seed", ["0", "1"])
def test_under_two_hash_seeds_the_failures_are_caught_and_reproduced(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(HERE)}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "set_order fresh-process" in out
    assert "memoized fresh-process" in out
    assert "steady ok" in out
    seeds = [line.split()[2] for line in out.splitlines() if line.startswith("SEED")]
    assert len(seeds) == 2
    # `durasim reproduce` reruns itself under the exploring process's hash seed, and
    # runs the workflow once first (explore's probe), in a new process each time.
    env.pop("PYTHONHASHSEED")
    for seed in seeds:
        again = subprocess.run(
            [sys.executable, "-m", "durasim.scenarios", "reproduce", seed, "--no-trace"],
            env=env,
            capture_output=True,
            text=True,
            cwd=HERE,
            check=False,
        )
        assert again.returncode == 1, again.stderr
        assert "verdict: fresh-process" in again.stdout
        assert f"PYTHONHASHSEED={int(hash_seed) + 1}" in again.stdout


@pytest.mark.parametrize("name", ["memoized", "set_order", "sleeps"])
def test_the_printed_script_fails_the_same_way(name: str) -> None:
    result = _explore(getattr(freshflows, name), max_examples=3)
    assert result.failure is not None
    namespace: dict[str, Any] = {}
    exec(compile(result.failure.script, "<explored>", "exec"), namespace)
    with pytest.raises(AssertionError):
        namespace["test_explored_schedule"]()
