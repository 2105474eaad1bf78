"""check_determinism: the same scenario and seed twice, compared line by line."""

from __future__ import annotations

import os
import posix
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from durasim.checkers import FRESH_ENV_VAR, FreshProcessUnavailable, check_determinism
from durasim.runtime import step, workflow
from durasim.sim import Sim


@step(module="determinismtests")
def fetch(i: int) -> int:
    return i * i


CALLS = [0]


@step(module="determinismtests")
def noisy() -> int:
    CALLS[0] += 1  # state from outside the simulation: differs between the two runs
    return CALLS[0]


@workflow(module="determinismtests")
async def fan_out(n: int) -> int:
    import asyncio

    return sum(await asyncio.gather(*(fetch(i) for i in range(n))))


@workflow(module="determinismtests")
async def with_noise() -> int:
    if await noisy() % 2:
        await fetch(1)
    return 0


async def _two_runs(sim: Sim) -> None:
    await sim.start(fan_out, 4)
    await sim.start(fan_out, 3)
    await sim.run_until_idle()


async def _noise(sim: Sim) -> None:
    await sim.run(with_noise)


def test_a_seeded_scenario_traces_alike_twice() -> None:
    verdict = check_determinism(_two_runs, seed=7)
    assert verdict.ok, verdict.render()
    assert verdict.render().startswith("deterministic: seed 7")


def test_a_scenario_with_outside_randomness_is_caught_at_the_first_differing_line() -> None:
    verdict = check_determinism(_noise, seed=1)
    assert not verdict.ok
    assert verdict.line > 0
    assert "fetch" in verdict.first or "fetch" in verdict.second
    assert verdict.first != verdict.second
    assert f"traces part at line {verdict.line}" in verdict.render()


# --- the fresh-process replay: nondeterminism that only another process shows ---------

#: A dozen strings: their set's order under two hash seeds is (almost) never the same.
NAMES = frozenset(
    "amber basil cedar delta ember fjord grove heron ivory juniper kestrel lumen".split()  # noqa: SIM905
)


@step(module="determinismtests")
def pick(name: str) -> str:
    return name


@step(module="determinismtests")
def warm() -> str:
    return "warm"


@workflow(module="determinismtests")
async def by_set_order() -> str:
    order = list(NAMES)
    await (fetch(1) if order[0] < order[1] else pick("x"))
    return ",".join(order)


def _env_flag() -> str:
    # In a helper, as configuration code is: the replay server has the variable.
    # Read where no sandbox guard looks (the environment the process started with,
    # as a C extension's getenv() would): os.environ is refused in workflow code.
    return posix.environ.get(FRESH_ENV_VAR.encode(), b"unset").decode()


@workflow(module="determinismtests")
async def by_environment() -> str:
    await pick("a")
    return _env_flag()


WARMED: list[str] = []


@workflow(module="determinismtests")
async def by_memo() -> str:
    if not WARMED:  # the first run in a process warms; later runs skip the step
        WARMED.append("yes")
        await warm()
    return await pick("served")


def _runs(wf: Any) -> Callable[[Sim], Coroutine[Any, Any, None]]:
    async def scenario(sim: Sim) -> None:
        await sim.run(wf)

    return scenario


@pytest.mark.parametrize("wf", [by_set_order, by_environment, by_memo])
def test_what_only_a_fresh_process_sees_fails_the_check(wf: Any) -> None:
    WARMED[:] = ["by an earlier run in this process"]  # (a memo's first run differs here too)
    assert check_determinism(_runs(wf), seed=3, fresh_process=False).ok
    verdict = check_determinism(_runs(wf), seed=3)
    assert not verdict.ok
    assert verdict.fresh
    assert "in a fresh process" in verdict.render()
    assert "PYTHONHASHSEED=" in verdict.render()
    assert check_determinism(_runs(wf), seed=3).render() == verdict.render()  # again, alike


def test_a_deterministic_scenario_passes_the_fresh_process_replay() -> None:
    verdict = check_determinism(_two_runs, seed=7)
    assert verdict.ok, verdict.render()
    assert verdict.fresh == ()


def test_a_workflow_defined_in_a_function_is_refused_with_the_fix() -> None:
    @workflow(module="determinismtests")
    async def local() -> int:
        return await fetch(2)

    with pytest.raises(FreshProcessUnavailable, match="fresh_process=False"):
        check_determinism(_runs(local), seed=1)
    assert check_determinism(_runs(local), seed=1, fresh_process=False).ok


SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import test_determinism_check as t
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from durasim.checkers import FRESH_ENV_VAR, FreshProcessUnavailable, check_determinism
print("set", check_determinism(t._runs(t.by_set_order), seed=1).ok)
print("steady", check_determinism(t._two_runs, seed=1).ok)
"""


@pytest.mark.parametrize("hash_seed", ["0", "1"])
def test_under_two_hash_seeds_a_set_order_fails_the_check(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    script = SCRIPT.format(here=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "set False" in out
    assert "steady True" in out
