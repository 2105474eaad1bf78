"""Small helpers shared by the World contract tests (public API only)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from durasim.worlds import (
    EntityConflict,
    EventRequest,
    InvalidRequest,
    RunExpired,
    RunRecord,
    StaleView,
    TooEarly,
    World,
)

from ._fixtures import require

req = EventRequest.of

#: The capability a World must declare for the suite to expect each refusal of it.
REFUSAL_NEEDS: dict[type[BaseException], str] = {
    InvalidRequest: "input_validation",
    EntityConflict: "strict_lifecycles",
    RunExpired: "strict_lifecycles",
    TooEarly: "strict_lifecycles",
    StaleView: "conditional_writes",
}


async def new_run(
    world: World,
    run_id: str | None = None,
    *,
    workflow_name: str = "wf",
    input: bytes = b"in",
    **data: Any,
) -> str:
    """Create a pending run; return its id."""
    result = await world.events.create(
        run_id, req("run_created", workflow_name=workflow_name, input=input, **data)
    )
    return result.run.run_id


async def new_running_run(world: World, run_id: str | None = None, **kwargs: Any) -> str:
    """Create a run and start it; return its id."""
    run_id = await new_run(world, run_id, **kwargs)
    await world.events.create(run_id, req("run_started"))
    return run_id


async def new_step(world: World, run_id: str, step_id: str = "s1", *, start: bool = False) -> None:
    """Create a step (and start it when ``start``)."""
    await world.events.create(run_id, req("step_created", step_id, step_name="st", input=b"i"))
    if start:
        await world.events.create(run_id, req("step_started", step_id))


async def new_hook(world: World, run_id: str, hook_id: str = "h1", token: str = "tok") -> None:
    """Create an active hook holding ``token``."""
    result = await world.events.create(run_id, req("hook_created", hook_id, token=token))
    assert result.event is not None
    assert result.event.type == "hook_created"


async def new_wait(world: World, run_id: str, wait_id: str = "w1", *, seconds: float = 60) -> None:
    """Create a wait due ``seconds`` from now."""
    resume_at = world.clock.now() + timedelta(seconds=seconds)
    await world.events.create(run_id, req("wait_created", wait_id, resume_at=resume_at))


async def end_run(world: World, run_id: str, how: str) -> None:
    """Finish a run: ``completed``, ``failed`` or ``cancelled``."""
    if how == "completed":
        await world.events.create(run_id, req("run_completed", output=b"out"))
    elif how == "failed":
        await world.events.create(run_id, req("run_failed", error=b"err", error_code="USER_ERROR"))
    else:
        await world.events.create(run_id, req("run_cancelled", reason="operator"))


async def all_runs(world: World) -> tuple[RunRecord, ...]:
    """Every run, newest first, following cursors."""
    runs: list[RunRecord] = []
    cursor = None
    while True:
        page = await world.runs.list(limit=100, cursor=cursor)
        runs.extend(page.runs)
        cursor = page.cursor
        if cursor is None:
            return tuple(runs)


async def all_events(world: World, run_id: str) -> tuple[Any, ...]:
    """A run's whole log, following pages."""
    events: list[Any] = []
    after = 0
    while True:
        page = await world.events.list(run_id, after_seq=after, limit=1000)
        events.extend(page.events)
        if not page.has_more:
            return tuple(events)
        after = page.next_after


async def world_state(world: World) -> dict[str, Any]:
    """Everything a caller can observe, to assert that a refusal wrote nothing.

    The queue and streams are read only when the World declares them.
    """
    caps = world.capabilities
    runs = await all_runs(world)
    state: dict[str, Any] = {"runs": runs}
    for run in runs:
        rid = run.run_id
        state[rid] = (
            await world.events.list(rid),
            await all_events(world, rid),
            await world.steps.list(rid),
            await world.hooks.list(rid),
            await world.waits.list(rid),
        )
        if caps.streams:
            streams = await world.streams.list(rid)
            state[rid] += (
                streams,
                [await world.streams.read(rid, name, limit=10_000) for name in streams],
            )
    if caps.queue:
        state["messages"] = await world.queue.messages()
        state["dead"] = await world.queue.dead_letters()
    return state


async def assert_refused(
    world: World,
    error: type[BaseException],
    action: Callable[[], Awaitable[Any]],
) -> BaseException:
    """Run ``action``, expect ``error``, and check the World is unchanged; return the error.

    Skipped (not applicable) when the World does not promise that refusal
    (:data:`REFUSAL_NEEDS`).
    """
    needs = REFUSAL_NEEDS.get(error)
    if needs is not None:
        require(world, needs)
    before = await world_state(world)
    try:
        await action()
    except error as exc:
        caught = exc
    else:
        raise AssertionError(f"expected {error.__name__}, nothing was raised")
    assert type(caught) is error, f"expected exactly {error.__name__}, got {type(caught).__name__}"
    after = await world_state(world)
    assert after == before, "a refused call changed the World"
    check = getattr(world, "_check", None)
    if check is not None:
        check()
    return caught
