"""Workflows the timeline tests draw (module ``timelinetests``): hostile strings included."""

from __future__ import annotations

from durasim.runtime import FatalError, Run, sleep, step, workflow
from durasim.sim import Sim
from durasim.worlds import Event

#: A step argument and error that would run script if a page parsed them as markup.
HOSTILE_ORDER = "<img src=x onerror=\"document.title='pwned'\">"
HOSTILE_ERROR = "<script>document.title='pwned'</script></script> no address"


@step(module="timelinetests")
def charge(amount: int) -> int:
    return amount


@step(module="timelinetests", max_retries=0)
def ship(order: str) -> str:
    raise FatalError(f"{HOSTILE_ERROR} for {order}")


@workflow(module="timelinetests")
async def checkout(n: int) -> str:
    for i in range(n):
        await charge(i)
    await sleep(5)
    return await ship(HOSTILE_ORDER)


def failed_run(n: int = 3) -> tuple[Sim, list[Event]]:
    """A simulation of ``checkout(n)`` (n charges, a sleep, a failing ship) and its log."""
    sim = Sim()

    async def script(sim: Sim) -> list[Event]:
        outcome = await sim.run(checkout, n)
        return await Run(run_id=outcome.run_id, world=sim.store).events()

    return sim, sim.run_sync(script)
