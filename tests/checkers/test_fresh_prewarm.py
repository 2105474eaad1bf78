"""A replay grandchild readied ahead of its request judges exactly as one that was not.

The grandchild makes its event loop and replays the zygote's own warm-up log
before the request comes (``_fresh_child._prewarm``); the request's logs are
then replayed on that loop.  Run in a subprocess: the replay perturbs the
environment of the process it runs in for good.
"""

from __future__ import annotations

import os
import subprocess
import sys

PREWARM = """
import asyncio, os, sys
import attrs
from durasim.checkers import _fresh_child
from durasim.checkers._fresh import wire_log
from durasim.checkers import finished_logs
from durasim.runtime import step, workflow
from durasim.sim import Sim
from durasim.worlds import Event, EventType

@step(module="prewarm_check")
def add(total: int, i: int) -> int:
    return total + i

@workflow(module="prewarm_check")
async def adds(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    if n == 2:
        raise ValueError("two")
    return total

async def scenario(sim):
    for n in (0, 2, 3):
        await sim.run(adds, n)
    return await finished_logs(sim.store)

_fresh_child._warm_up()
assert _fresh_child._WARM_LOGS, "the zygote keeps its warm-up logs"
environ_class = type(os.environ)
user_modules = {name for name in sys.modules if name.startswith("prewarm")}
# Readied for both modes (before the first request), or for the last request's only.
runners = {modes: _fresh_child._prewarm(modes) for modes in ((True, False), (True,), (False,))}
assert type(os.environ) is environ_class, "the prewarm perturbs nothing"
assert {name for name in sys.modules if name.startswith("prewarm")} == user_modules

logs = Sim().run_sync(scenario)
# One log whose end the replay cannot give again: another output.
end = logs[-1][-1]
assert end.type is EventType.RUN_COMPLETED
other = attrs.evolve(end, data={**dict(end.data.items()), "output": b"other"})
logs.append([*logs[-1][:-1], other])
wires = [wire_log(events) for events in logs]
for checked in (True, False):
    plain = _fresh_child._replay(wires, checked=checked)
    for modes, runner in runners.items():
        ready = _fresh_child._replay(wires, checked=checked, runner=runner)
        assert plain == ready, (modes, plain, ready)
        kinds = [v["kind"] for v in ready["verdicts"]]
        assert kinds == ["ok", "ok", "ok", "replay.output-differs"], kinds
print("ok")
"""


def test_a_prewarmed_grandchild_gives_the_verdicts_of_a_cold_one() -> None:
    env = {**os.environ, "DURASIM_FRESH_PROCESS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PREWARM], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
