"""Workflows whose nondeterminism shows only across processes (module ``freshflows``).

Each replays alike in the process that ran it (same hash seed, environment,
wall clock, module state) and differently in another one, where production
replays it after a restart.  Module level on purpose: the fresh-process replay
and ``durasim reproduce`` import them by name.
"""

from __future__ import annotations

import email.utils
import os
import posix
import time

from durasim.runtime import step, workflow

#: Strings whose set iterates in an order that depends on the hash seed (a
#: dozen: two hash seeds giving one order of all of them is vanishingly rare).
NAMES = frozenset(
    [
        "amber",
        "basil",
        "cedar",
        "delta",
        "ember",
        "fjord",
        "grove",
        "heron",
        "ivory",
        "juniper",
        "kestrel",
        "lumen",
    ]
)


@step(module="freshflows")
def first_a() -> str:
    return "a"


@step(module="freshflows")
def first_b() -> str:
    return "b"


@step(module="freshflows")
def echo(value: str) -> str:
    return value


@step(module="freshflows")
def warm_cache() -> str:
    return "warmed"


@workflow(module="freshflows")
async def set_order() -> str:
    """Which step runs first, and the output, follow a set's iteration order."""
    order = [name for name in {*NAMES}]  # noqa: C416 -- the set's order is the point
    first = first_a if order[0] < order[1] else first_b
    await first()
    return ",".join(order)


def region() -> str:
    """Where this worker runs, read from its environment (in a helper, as config code is).

    Read from ``posix.environ``, the process's environment as it started, which no
    sandbox guard sees (as a C extension reading ``getenv()`` would): ``os.environ``
    itself is refused inside workflow code.
    """
    return posix.environ.get(b"DURASIM_FRESH_PROCESS", b"local").decode()


@workflow(module="freshflows")
async def env_read() -> str:
    """Takes a branch on an environment variable the replay server has and we lack."""
    if region() == "local":
        await echo("near")
    else:
        await first_a()
    return region()


@workflow(module="freshflows")
async def wall_clock() -> str:
    """Puts the year of ``datetime.now()`` (not the run's clock) into its output."""
    await echo("x")
    # The standard library reads the wall clock for us (datetime.now() inside
    # email.utils): the check before the run reads only the project's own code.
    return str(email.utils.localtime().year)


#: Keys warmed in this process (a memo: filled once, never reset).
_WARMED: set[str] = set()


def _first_time(key: str) -> bool:
    if key in _WARMED:
        return False
    _WARMED.add(key)
    return True


@workflow(module="freshflows")
async def memoized() -> str:
    """Warms a cache with a step only the first time it runs in a process."""
    if _first_time("cache"):
        await warm_cache()
    return await echo("served")


@workflow(module="freshflows")
async def steady(n: int) -> int:
    """Deterministic: the same in every process."""
    total = 0
    for i in range(n):
        total += len(await echo(str(i)))
    return total


@workflow(module="freshflows")
async def sleeps() -> str:
    """Sleeps in workflow code: the sandbox refuses it and the run fails."""
    await echo("before")
    time.sleep(0.001)  # noqa: ASYNC251 -- the sandbox must refuse it
    return "never"


@workflow(module="freshflows")
async def calls_a_workflow() -> int:
    """Calls a workflow like a function (WorkflowCallError), and wraps what it raised."""
    await echo("before")
    try:
        steady(1)
    except TypeError as exc:
        raise RuntimeError("could not compute the total") from exc
    return 0


@workflow(module="freshflows")
async def exits_elsewhere() -> str:
    """Ends the process when replayed where the replay server's variable is set."""
    await echo("x")
    if region() != "local":
        os._exit(3)
    return "here"


@workflow(module="freshflows")
async def configured() -> str:
    """Branches on a variable set on no worker here (read with a default, as config is)."""
    if os.environ.get("FRESHFLOWS_REGION", "eu") == "eu":
        await echo("eu")
    else:
        await first_b()
    return "done"
