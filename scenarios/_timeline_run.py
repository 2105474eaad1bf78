"""``durasim inspect run ID --html FILE``: a stored run's timeline page."""

from __future__ import annotations

from pathlib import Path

from durasim.checkers import check_log, render_timeline_html, timeline_from_log
from durasim.runtime import get_run
from durasim.worlds import DurasimError, World

from ._cli_world import open_world

__all__ = ["cmd_inspect_html", "write_run_html"]


async def write_run_html(world: World, run_id: str, path: Path) -> int:
    """Write the timeline page of run ``run_id`` of ``world`` to ``path``; its event count.

    The page shows the run's steps, hooks and waits on their lanes, in log
    order; a failed run's failing step and end, and any broken log rule
    (:func:`~durasim.checkers.check_log`), are highlighted.

    Raises:
        RunNotFound: ``world`` holds no run ``run_id``.
    """
    events = list(await get_run(run_id, world=world).events())
    report = check_log(events)
    timeline = timeline_from_log(
        events, title=f"durasim run {run_id}", report=report if not report.ok else None
    )
    path.write_text(render_timeline_html(timeline), encoding="utf-8")  # noqa: ASYNC240 -- one write, after the reads
    return len(events)


async def cmd_inspect_html(run_id: str | None, *, world_path: str | None, html: Path) -> int:
    """``durasim inspect run ID --html FILE``."""
    if run_id is None:
        raise DurasimError("--html needs a run id: durasim inspect run ID --html FILE")
    world = await open_world(world_path, must_exist=True)
    try:
        count = await write_run_html(world, run_id, html)
    finally:
        await world.close()
    print(f"timeline of run {run_id} ({count} events) written to {html}")
    return 0
