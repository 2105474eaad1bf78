"""check_determinism: the same scenario and seed twice, compared line by line."""

from __future__ import annotations

from durasim.checkers import check_determinism
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
