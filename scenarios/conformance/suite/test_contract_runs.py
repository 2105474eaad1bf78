"""Contract: runs.list: newest first, filters, cursor paging."""

from __future__ import annotations

import pytest

from durasim.worlds import FixedClock, InvalidRequest, RunRecord, RunStatus, World

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import all_runs, assert_refused, end_run, new_run, new_running_run


async def _population(world: World, clock: FixedClock) -> list[str]:
    """Nine runs over four instants (several share one), mixed names and statuses."""
    ids: list[str] = []
    for i in range(9):
        if i % 3 == 0:
            clock.advance(1)
        name = "alpha" if i % 2 == 0 else "beta"
        run_id = f"run-{(i * 7) % 9}"
        if i % 3 == 0:
            await new_run(world, run_id, workflow_name=name)
        else:
            await new_running_run(world, run_id, workflow_name=name)
        if i % 4 == 1:
            await end_run(world, run_id, "completed")
        ids.append(run_id)
    return ids


def _expected_order(runs: list[RunRecord]) -> list[str]:
    ordered = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
    return [r.run_id for r in ordered]


async def test_runs_list_newest_first(world: World, clock: FixedClock) -> None:
    ids = await _population(world, clock)
    page = await world.runs.list()
    assert page.cursor is None
    runs = list(page.runs)
    assert sorted(r.run_id for r in runs) == sorted(ids)
    assert [r.run_id for r in runs] == _expected_order(runs)
    # Same instant: run id descending breaks the tie.
    assert [r.run_id for r in runs[:3]] == sorted((r.run_id for r in runs[:3]), reverse=True)
    for run in runs:
        assert await world.runs.get(run.run_id) == run


async def test_runs_list_filters(world: World, clock: FixedClock) -> None:
    await _population(world, clock)
    everything = await all_runs(world)
    alpha = await world.runs.list(workflow_name="alpha")
    assert alpha.runs == tuple(r for r in everything if r.workflow_name == "alpha")
    running = await world.runs.list(status=RunStatus.RUNNING)
    assert running.runs == tuple(r for r in everything if r.status is RunStatus.RUNNING)
    assert running.runs
    wanted = {RunStatus.PENDING, RunStatus.COMPLETED}
    mixed = await world.runs.list(status=[RunStatus.PENDING, RunStatus.COMPLETED])
    assert mixed.runs == tuple(r for r in everything if r.status in wanted)
    both = await world.runs.list(workflow_name="beta", status=[RunStatus.COMPLETED])
    assert both.runs == tuple(
        r for r in everything if r.workflow_name == "beta" and r.status is RunStatus.COMPLETED
    )
    assert both.runs
    assert (await world.runs.list(status=[])).runs == ()
    assert (await world.runs.list(workflow_name="nope")).runs == ()
    assert (await world.runs.list(status="running")).runs == running.runs  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1, 2, 4, 9, 10])
@pytest.mark.parametrize(
    "filters",
    [{}, {"workflow_name": "alpha"}, {"status": [RunStatus.RUNNING, RunStatus.PENDING]}],
    ids=["all", "by-name", "by-status"],
)
async def test_runs_cursor_paging(
    world: World, clock: FixedClock, limit: int, filters: dict[str, object]
) -> None:
    await _population(world, clock)
    whole = await world.runs.list(limit=100, **filters)  # type: ignore[arg-type]
    seen: list[RunRecord] = []
    cursor = None
    pages = 0
    while True:
        page = await world.runs.list(limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        assert len(page.runs) <= limit
        seen.extend(page.runs)
        pages += 1
        cursor = page.cursor
        if cursor is None:
            break
        assert len(page.runs) == limit
    assert tuple(seen) == whole.runs  # no duplicates, no gaps, same order
    assert pages == max(1, -(-len(whole.runs) // limit))


async def test_cursor_survives_new_runs(world: World, clock: FixedClock) -> None:
    await _population(world, clock)
    first = await world.runs.list(limit=3)
    clock.advance(10)
    await new_run(world, "newest")
    rest = await world.runs.list(limit=100, cursor=first.cursor)
    before = {r.run_id for r in first.runs}
    assert "newest" not in {r.run_id for r in rest.runs}
    assert before.isdisjoint(r.run_id for r in rest.runs)
    assert len(before) + len(rest.runs) == 9


async def test_runs_list_bad_arguments(world: World, clock: FixedClock) -> None:
    await _population(world, clock)
    for kwargs in (
        {"limit": 0},
        {"limit": "5"},
        {"status": "bogus"},
        {"status": ["running", "bogus"]},
        {"cursor": "garbage"},
        {"cursor": ""},
    ):
        await assert_refused(world, InvalidRequest, lambda kw=kwargs: world.runs.list(**kw))  # type: ignore[misc]
