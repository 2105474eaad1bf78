"""Workflows the lease and step-error process tests run in ``durasim worker`` processes.

Each step appends a line to the file it is given, so the test counts how many
times a body really ran, across processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from durasim.runtime import step, workflow


def _mark(path: str, what: str) -> int:
    with open(path, "a") as out:
        out.write(f"{what} {os.getpid()}\n")
    return len(Path(path).read_text().splitlines())


@step(max_retries=0)
async def blocker(path: str, seconds: float) -> int:
    """Blocks its event loop (sync sleep inside ``async def``) for ``seconds``."""
    _mark(path, "start")
    time.sleep(seconds)  # noqa: ASYNC251 - the bug survived: blocking code in async def
    _mark(path, "end")
    return os.getpid()


@workflow
async def busy(path: str, seconds: float) -> int:
    return await blocker(path, seconds)


@step(max_retries=1)
def exits_once(path: str) -> str:
    """Raises SystemExit (as argparse does) on its first attempt."""
    if _mark(path, "exits_once") == 1:
        raise SystemExit(2)
    return "ok"


@step(max_retries=0)
def always_exits(path: str) -> str:
    _mark(path, "always_exits")
    raise SystemExit("usage: tool [-h]")


@step(max_retries=1)
async def interrupted_once(path: str) -> str:
    if _mark(path, "interrupted_once") == 1:
        raise KeyboardInterrupt
    return "ok"


@workflow
async def exiting(path: str) -> str:
    return await exits_once(path)


@workflow
async def exits_for_good(path: str) -> str:
    return await always_exits(path)


@workflow
async def interrupting(path: str) -> str:
    return await interrupted_once(path)
