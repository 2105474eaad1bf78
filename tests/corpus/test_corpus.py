"""The acceptance corpus: every nondeterministic workflow is caught before production.

Each workflow of ``ndflows`` hides its nondeterminism the way real code does.
Each must be refused by the sandbox (the run fails with a
``WorkflowSandboxError``, or the check before the run names the escape) or
fail ``explore()`` with a seed that ``reproduce`` replays to the same verdict.
None may pass.  And no run of any of them may finish with a result recorded
for an input other than the one its step ran with.

The whole corpus runs again in two subprocesses under two ``PYTHONHASHSEED``
values: what depends on the hash seed must be caught under either.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ndflows
import pytest

from durasim.runtime import Limits, Worker, WorkflowSandboxError, start
from durasim.runtime.lowlevel import RunPayloads, step_definition
from durasim.runtime.serialization import deserialize
from durasim.scenarios import explore, reproduce
from durasim.worlds import CountingIds, EventType, FixedClock, MemoryWorld

HERE = Path(__file__).parent
#: The corpus's steps by id (pure functions: their result follows from their input).
STEPS = {step_definition(fn).step_id: fn for fn in (ndflows.note, ndflows.charge)}  # type: ignore[union-attr]


def _explore(wf: Any, args: tuple[Any, ...]) -> Any:
    return explore(wf, *args, max_examples=10, seed=7, faults=("crash", "duplicate"))


CAUGHT = sorted(n for n, entry in ndflows.CORPUS.items() if entry[3] != "deterministic")


@pytest.mark.parametrize("name", CAUGHT)
def test_every_corpus_workflow_is_caught_with_a_seed_that_reproduces(name: str) -> None:
    wf, args, what, caught_by = ndflows.CORPUS[name]
    result = _explore(wf, args)
    assert not result.ok, f"{name} ({what}) passed explore:\n{result.render()}"
    failure = result.failure
    assert failure is not None
    verdict = failure.verdict.split(",")[0]
    if caught_by == "sandbox":
        assert verdict == "authoring", failure.render()
        assert "WorkflowSandboxError" in failure.detail, failure.render()
    else:
        assert verdict in ("replay", "fresh-process", "determinism"), failure.render()
    again = reproduce(failure.seed)
    assert again.verdict == verdict, again.render_verdict()


@pytest.mark.parametrize(
    "name", sorted(n for n, entry in ndflows.CORPUS.items() if entry[3] == "deterministic")
)
def test_what_the_sandbox_makes_deterministic_explores_green(name: str) -> None:
    wf, args, _, _ = ndflows.CORPUS[name]
    result = _explore(wf, args)
    assert result.ok, result.render()


@pytest.mark.parametrize(
    "name", sorted(n for n, entry in ndflows.CORPUS.items() if entry[3] == "sandbox")
)
async def test_the_sandbox_refuses_before_any_step_runs(name: str) -> None:
    # Refused in production too, on the first delivery: no step of the run ran,
    # and the run's cause revives as WorkflowSandboxError, naming the escape.
    wf, args, _, _ = ndflows.CORPUS[name]
    clock = FixedClock()
    world = MemoryWorld(clock=clock, ids=CountingIds())
    run = await start(wf, *args, world=world)
    await Worker(world).drain()
    events = await run.events()
    assert events[-1].type is EventType.RUN_FAILED, [e.type.value for e in events]
    assert not [e for e in events if e.type is EventType.STEP_STARTED]
    error = deserialize(events[-1].data["error"])
    assert isinstance(error, WorkflowSandboxError), repr(error)


@pytest.mark.parametrize(
    "name", sorted(n for n, entry in ndflows.CORPUS.items() if entry[3] == "explore")
)
async def test_no_run_finishes_with_a_result_recorded_for_another_input(name: str) -> None:
    # Runs of the explore-caught workflows in this process, each delivery
    # replaying the log cold: a replay whose input differs fails the run
    # (CORRUPTED_EVENT_LOG); a run that finishes ran each step with the input
    # recorded for it, and got the result recorded for that input.
    wf, args, _, _ = ndflows.CORPUS[name]
    clock = FixedClock()
    world = MemoryWorld(clock=clock, ids=CountingIds())
    for _ in range(3):
        run = await start(wf, *args, world=world)
        worker = Worker(world, limits=Limits(keep_replays=False, inline_steps=1))
        for _ in range(20):
            await worker.drain()
            if (await run.status()).terminal:
                break
        events = await run.events()
        inputs = {e.correlation_id: e for e in events if e.type is EventType.STEP_CREATED}
        payloads = RunPayloads.from_log(events)
        for event in events:
            if event.type is not EventType.STEP_COMPLETED:
                continue
            created = inputs[event.correlation_id]
            step = STEPS[created.data["step_name"]]
            given = payloads.decode(created.data["input"], record=event.correlation_id)
            # The pure step, run on the recorded input, gives the recorded result.
            assert step(*given["args"], **given["kwargs"]) == payloads.decode(event.data["result"])
        if events[-1].type is EventType.RUN_FAILED:
            assert events[-1].data["error_code"] == "CORRUPTED_EVENT_LOG"


@pytest.mark.parametrize("hash_seed", ["0", "1"])
def test_the_corpus_is_caught_under_two_hash_seeds(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            str(HERE / "test_corpus.py"),
            "-k",
            "every_corpus_workflow and (set_order or dict_from_set or hash_order or memoized)",
        ],
        env=env,
        cwd=HERE.parent.parent,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
