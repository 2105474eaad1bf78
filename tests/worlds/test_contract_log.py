"""The shipped contract tests (log) on every World kind (conftest.py)."""

from durasim.scenarios.conformance.suite.test_contract_log import *  # noqa: F403


async def test_durasim_worlds_declare_every_feature(world: World) -> None:  # noqa: F405
    caps = world.capabilities
    assert (caps.batch, caps.hook_resume_dedup, caps.queue, caps.streams) == (True,) * 4
