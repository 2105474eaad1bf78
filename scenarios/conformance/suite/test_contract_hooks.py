"""Contract: hooks: lifecycle, token uniqueness across runs, resume dedup, release on run end."""

from __future__ import annotations

import asyncio

import pytest

from durasim.worlds import (
    EntityConflict,
    EventResult,
    EventType,
    FixedClock,
    HookNotFound,
    HookStatus,
    World,
)

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import (
    all_events,
    assert_refused,
    end_run,
    new_hook,
    new_running_run,
    req,
    world_state,
)

ENDINGS = ["completed", "failed", "cancelled"]


async def test_hook_lifecycle(world: World, clock: FixedClock) -> None:
    run_id = await new_running_run(world)
    created = await world.events.create(
        run_id, req("hook_created", "h1", token="tok-1", metadata=b"meta", is_webhook=True)
    )
    hook = created.hook
    assert hook is not None
    assert (hook.hook_id, hook.token, hook.status, hook.metadata, hook.is_webhook) == (
        "h1",
        "tok-1",
        HookStatus.ACTIVE,
        b"meta",
        True,
    )
    assert hook.received_count == 0
    assert hook.created_at == clock.now()
    assert await world.hooks.get(run_id, "h1") == hook
    assert await world.hooks.get_by_token("tok-1") == hook

    clock.advance(1)
    for n in (1, 2):
        received = await world.events.create(run_id, req("hook_received", "h1", payload=b"p%d" % n))
        assert received.hook is not None
        assert received.hook.received_count == n
        assert received.event is not None
        # The World fills in the token the resume went to.
        assert dict(received.event.data) == {"payload": b"p%d" % n, "token": "tok-1"}

    disposed = await world.events.create(run_id, req("hook_disposed", "h1"))
    assert disposed.hook is not None
    assert disposed.hook.status is HookStatus.DISPOSED
    assert disposed.hook.received_count == 2
    assert await world.hooks.get(run_id, "h1") == disposed.hook
    assert await world.hooks.list(run_id) == (disposed.hook,)
    with pytest.raises(HookNotFound):
        await world.hooks.get_by_token("tok-1")


async def test_hooks_list_in_creation_order(world: World) -> None:
    run_id = await new_running_run(world)
    for hook_id in ("zz", "aa", "mm"):
        await new_hook(world, run_id, hook_id, token=f"t-{hook_id}")
    assert [h.hook_id for h in await world.hooks.list(run_id)] == ["zz", "aa", "mm"]
    with pytest.raises(HookNotFound):
        await world.hooks.get(run_id, "nope")


async def test_hook_refusals(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("hook_created", "h1", token="other")),
    )
    for request in (req("hook_received", "nope", payload=b""), req("hook_disposed", "nope")):
        await assert_refused(world, HookNotFound, lambda r=request: world.events.create(run_id, r))  # type: ignore[misc]
    await world.events.create(run_id, req("hook_disposed", "h1"))
    await assert_refused(
        world,
        HookNotFound,
        lambda: world.events.create(run_id, req("hook_received", "h1", payload=b"")),
    )
    await assert_refused(
        world, EntityConflict, lambda: world.events.create(run_id, req("hook_disposed", "h1"))
    )
    # A disposed hook's id stays taken.
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create(run_id, req("hook_created", "h1", token="tok")),
    )


# --- token uniqueness -------------------------------------------------------------------


async def test_token_conflict_across_runs_is_journaled(world: World) -> None:
    owner = await new_running_run(world)
    await new_hook(world, owner, "h1", "shared")
    other = await new_running_run(world)
    result = await world.events.create(
        other, req("hook_created", "h2", token="shared", metadata=b"m")
    )
    event = result.event
    assert event is not None
    assert event.type is EventType.HOOK_CONFLICT
    assert (event.seq, event.correlation_id) == (3, "h2")
    assert dict(event.data) == {
        "token": "shared",
        "conflicting_run_id": owner,
        "conflicting_hook_id": "h1",
        "metadata": b"m",
    }
    assert result.allocated == 1
    assert result.hook is None
    assert await world.hooks.list(other) == ()
    with pytest.raises(HookNotFound):
        await world.hooks.get(other, "h2")
    holder = await world.hooks.get_by_token("shared")
    assert (holder.run_id, holder.hook_id) == (owner, "h1")
    assert (await all_events(world, other))[-1] == event


async def test_token_conflict_within_one_run(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "shared")
    result = await world.events.create(run_id, req("hook_created", "h2", token="shared"))
    assert result.event is not None
    assert result.event.type is EventType.HOOK_CONFLICT
    assert result.event.data["conflicting_hook_id"] == "h1"
    assert [h.hook_id for h in await world.hooks.list(run_id)] == ["h1"]


async def test_token_reusable_after_dispose(world: World) -> None:
    first = await new_running_run(world)
    await new_hook(world, first, "h1", "shared")
    await world.events.create(first, req("hook_disposed", "h1"))
    second = await new_running_run(world)
    result = await world.events.create(second, req("hook_created", "h2", token="shared"))
    assert result.event is not None
    assert result.event.type is EventType.HOOK_CREATED
    holder = await world.hooks.get_by_token("shared")
    assert (holder.run_id, holder.hook_id) == (second, "h2")


@pytest.mark.parametrize("ending", ENDINGS)
async def test_run_end_releases_hooks_and_frees_tokens(world: World, ending: str) -> None:
    first = await new_running_run(world)
    await new_hook(world, first, "live", "shared")
    await new_hook(world, first, "gone", "other")
    await world.events.create(first, req("hook_disposed", "gone"))
    await end_run(world, first, ending)
    statuses = {h.hook_id: h.status for h in await world.hooks.list(first)}
    assert statuses == {"live": HookStatus.RELEASED, "gone": HookStatus.DISPOSED}
    with pytest.raises(HookNotFound):
        await world.hooks.get_by_token("shared")
    await assert_refused(
        world,
        HookNotFound,
        lambda: world.events.create(first, req("hook_received", "live", payload=b"")),
    )
    await assert_refused(
        world, EntityConflict, lambda: world.events.create(first, req("hook_disposed", "live"))
    )
    second = await new_running_run(world)
    result = await world.events.create(second, req("hook_created", "h2", token="shared"))
    assert result.event is not None
    assert result.event.type is EventType.HOOK_CREATED


async def test_conflicting_create_holds_no_token(world: World) -> None:
    # After a conflict, disposing the owner frees the token: the loser never took it.
    owner = await new_running_run(world)
    await new_hook(world, owner, "h1", "shared")
    loser = await new_running_run(world)
    await world.events.create(loser, req("hook_created", "h2", token="shared"))
    await world.events.create(owner, req("hook_disposed", "h1"))
    with pytest.raises(HookNotFound):
        await world.hooks.get_by_token("shared")
    # The loser's hook id was never created, so it can be created now.
    result = await world.events.create(loser, req("hook_created", "h2", token="shared"))
    assert result.event is not None
    assert result.event.type is EventType.HOOK_CREATED


# --- resume dedup ---------------------------------------------------------------------


async def test_same_resume_id_returns_the_same_event(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    first = await world.events.create(
        run_id, req("hook_received", "h1", payload=b"p", resume_id="res-1")
    )
    assert first.allocated == 1
    assert first.event is not None
    assert first.event.data["resume_id"] == "res-1"
    before = await world_state(world)
    again = await world.events.create(
        run_id, req("hook_received", "h1", payload=b"other", resume_id="res-1")
    )
    assert again.event == first.event
    assert again.allocated == 0
    assert await world_state(world) == before
    assert (await world.hooks.get(run_id, "h1")).received_count == 1
    other = await world.events.create(
        run_id, req("hook_received", "h1", payload=b"p", resume_id="res-2")
    )
    assert other.allocated == 1
    assert other.event != first.event


async def test_concurrent_resumes_collapse_onto_one_event(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    results = await asyncio.gather(
        *(
            world.events.create(run_id, req("hook_received", "h1", payload=b"p", resume_id="r"))
            for _ in range(6)
        )
    )
    assert len({r.event for r in results}) == 1
    assert sorted(r.allocated for r in results) == [0, 0, 0, 0, 0, 1]
    received = [e for e in await all_events(world, run_id) if e.type is EventType.HOOK_RECEIVED]
    assert len(received) == 1


@pytest.mark.parametrize("after", ["disposed", *ENDINGS])
async def test_duplicate_resume_is_answered_after_the_hook_is_gone(
    world: World, after: str
) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    first = await world.events.create(
        run_id, req("hook_received", "h1", payload=b"p", resume_id="res-1")
    )
    if after == "disposed":
        await world.events.create(run_id, req("hook_disposed", "h1"))
    else:
        await end_run(world, run_id, after)
    before = await world_state(world)
    again = await world.events.create(
        run_id, req("hook_received", "h1", payload=b"p", resume_id="res-1")
    )
    assert isinstance(again, EventResult)
    assert again.event == first.event
    assert again.allocated == 0
    assert await world_state(world) == before
    # A fresh resume id is refused: the hook no longer takes payloads.
    await assert_refused(
        world,
        HookNotFound,
        lambda: world.events.create(
            run_id, req("hook_received", "h1", payload=b"p", resume_id="res-2")
        ),
    )


async def test_resume_ids_are_scoped_to_their_run(world: World) -> None:
    run_a = await new_running_run(world)
    run_b = await new_running_run(world)
    await new_hook(world, run_a, "h1", "tok-a")
    await new_hook(world, run_b, "h1", "tok-b")
    first = await world.events.create(run_a, req("hook_received", "h1", payload=b"", resume_id="r"))
    second = await world.events.create(
        run_b, req("hook_received", "h1", payload=b"", resume_id="r")
    )
    assert first.allocated == second.allocated == 1
    assert first.event != second.event


async def test_duplicate_resume_in_a_batch_is_refused(world: World) -> None:
    run_id = await new_running_run(world)
    await new_hook(world, run_id, "h1", "tok")
    await new_hook(world, run_id, "h2", "tok-2")
    await world.events.create(run_id, req("hook_received", "h1", payload=b"", resume_id="r"))
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create_batch(
            run_id, [req("hook_received", "h2", payload=b"", resume_id="r")]
        ),
    )
    await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create_batch(
            run_id,
            [
                req("hook_received", "h1", payload=b"", resume_id="new"),
                req("hook_received", "h2", payload=b"", resume_id="new"),
            ],
        ),
    )
