"""``run(wf, ...)``: a workflow from a script, on the embedded World, to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, overload

from durasim.worlds import SQLiteWorld, World

from ._client import start
from ._decorators import WorkflowFunction
from ._worker import Worker

__all__ = ["DEFAULT_HOME", "default_world", "run"]

#: Where the embedded World lives unless told otherwise.
DEFAULT_HOME = Path(".durasim")

R = TypeVar("R")


def default_world(home: str | Path = DEFAULT_HOME) -> SQLiteWorld:
    """The embedded SQLite World in ``home/world.db`` (created on first use)."""
    directory = Path(home)
    directory.mkdir(parents=True, exist_ok=True)
    return SQLiteWorld(directory / "world.db")


@overload
def run(
    workflow: WorkflowFunction[Any, R],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> R: ...
@overload
def run(
    workflow: Callable[..., Any],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> Any: ...
def run(
    workflow: Callable[..., Any],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> Any:
    """Start ``workflow(*args, **kwargs)`` and serve it in this process until it ends.

    Uses the embedded World in ``.durasim/`` unless ``world`` is given.  If the
    process dies, running it again with the same ``run_id`` resumes the run where
    its log ends.  Returns the workflow's value or raises its failure.
    """

    async def main() -> Any:
        target = world or default_world()
        try:
            handle = await start(workflow, *args, world=target, run_id=run_id, **kwargs)
            return await Worker(target).run_until_complete(handle)
        finally:
            if world is None:
                await target.close()

    return asyncio.run(main())
