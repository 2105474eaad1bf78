"""Hooks: create, resume, iterate, dispose, conflicts, dedup, the hook-vs-timeout race."""

from __future__ import annotations

import datetime as dt

import pytest
import wf_hooks
from _drive import check_cold_replay, run_to_end

from durasim.runtime import (
    HookNotFoundError,
    Worker,
    resume_hook,
    start,
)
from durasim.worlds import EventType, FixedClock, HookNotFound, RunStatus, World


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    wf_hooks.SEEN.clear()


async def _token(world: World, run_id: str, index: int = 0) -> str:
    hooks = await world.hooks.list(run_id)
    return hooks[index].token


async def test_a_payload_reaches_the_awaiting_workflow(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.one_payload, world=world)
    await Worker(world).drain()
    assert await run.status() is RunStatus.RUNNING  # suspended on the hook
    token = await _token(world, run.run_id)
    assert len(token) >= 32  # 192 random bits, url-safe
    assert [token] == wf_hooks.SEEN  # the step got the recorded token
    event = await resume_hook(token, {"approved": True}, world=world)
    assert event.type is EventType.HOOK_RECEIVED
    await run_to_end(world, clock, run)
    assert await run.result() == {"approved": True}
    hook = (await world.hooks.list(run.run_id))[0]
    assert hook.status == "released"  # the run's end freed the token
    with pytest.raises(HookNotFoundError):
        await resume_hook(token, "late", world=world)


async def test_payloads_sent_before_anyone_awaits_are_kept_in_order(
    world: World, clock: FixedClock
) -> None:
    run = await start(wf_hooks.three_payloads, world=world)
    await Worker(world).drain()
    token = await _token(world, run.run_id)
    for n in (1, 2, 3, 4):  # the 4th lands but is never read
        await resume_hook(token, n, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == [1, 2, 3]


async def test_iteration_spans_deliveries(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.three_payloads, world=world)
    worker = Worker(world)
    await worker.drain()
    token = await _token(world, run.run_id)
    for n in ("a", "b", "c"):
        await resume_hook(token, n, world=world)
        await worker.drain()
    assert await run.result() == ["a", "b", "c"]
    check_cold_replay(await run.events())
    types = [e.type for e in await run.events()]
    assert types.count(EventType.HOOK_DISPOSED) == 1  # the with block disposed it


async def test_a_duplicate_resume_id_lands_once(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.three_payloads, world=world)
    await Worker(world).drain()
    token = await _token(world, run.run_id)
    first = await resume_hook(token, "x", world=world, resume_id="req-1")
    again = await resume_hook(token, "x", world=world, resume_id="req-1")
    assert again.seq == first.seq
    received = [e for e in await run.events() if e.type is EventType.HOOK_RECEIVED]
    assert len(received) == 1


async def test_an_unknown_token_raises_and_writes_nothing(world: World) -> None:
    run = await start(wf_hooks.one_payload, "mine", world=world)
    await Worker(world).drain()
    before = len(await run.events())
    with pytest.raises(HookNotFoundError, match="no live hook holds token 'other'") as info:
        await resume_hook("other", 1, world=world)
    assert isinstance(info.value, HookNotFound)  # the World's error, for generic handlers
    assert len(await run.events()) == before


async def test_a_token_held_by_another_run_is_a_conflict(world: World, clock: FixedClock) -> None:
    holder = await start(wf_hooks.one_payload, "shared", world=world)
    await Worker(world).drain()
    loser = await start(wf_hooks.conflicted, "shared", world=world)
    await run_to_end(world, clock, loser)
    result = await loser.result()
    assert result["conflict_run"] == holder.run_id
    # A hook made with a token is identified by the token (its digest), in both runs.
    assert "held by hook hook=" in result["error"]
    assert f"of run {holder.run_id}" in result["error"]
    types = [e.type for e in await loser.events()]
    assert EventType.HOOK_CONFLICT in types
    assert EventType.HOOK_CREATED not in types
    # The holder still owns it, and gets the payload.
    await resume_hook("shared", "for the holder", world=world)
    await run_to_end(world, clock, holder)
    assert await holder.result() == "for the holder"


async def test_a_token_is_free_again_once_its_run_ends(world: World, clock: FixedClock) -> None:
    first = await start(wf_hooks.one_payload, "reused", world=world)
    await Worker(world).drain()
    await resume_hook("reused", 1, world=world)
    await run_to_end(world, clock, first)
    second = await start(wf_hooks.one_payload, "reused", world=world)
    await Worker(world).drain()
    await resume_hook("reused", 2, world=world)
    await run_to_end(world, clock, second)
    assert (await first.result(), await second.result()) == (1, 2)


async def test_a_disposed_hook_frees_its_token(world: World, clock: FixedClock) -> None:
    run = await start(wf_hooks.three_payloads, world=world)
    await Worker(world).drain()
    token = await _token(world, run.run_id)
    for n in range(3):
        await resume_hook(token, n, world=world)
    await Worker(world).drain()
    assert await run.result() == [0, 1, 2]
    with pytest.raises(HookNotFoundError):
        await resume_hook(token, "after dispose", world=world)


async def test_a_hook_resumed_while_no_worker_runs_resumes_later(
    world: World, clock: FixedClock
) -> None:
    run = await start(wf_hooks.one_payload, world=world)
    await Worker(world).drain()  # this worker goes away
    await resume_hook(await _token(world, run.run_id), "while down", world=world)
    assert await run.status() is RunStatus.RUNNING
    await Worker(world).drain()  # a new one comes back
    assert await run.result() == "while down"


@pytest.mark.parametrize("first", ["payload", "timeout"])
async def test_hook_against_timeout_resolves_by_log_order(
    world: World, clock: FixedClock, first: str
) -> None:
    """asyncio.wait of a hook and a sleep: whichever the log holds first wins, on every replay."""
    run = await start(wf_hooks.hook_or_timeout, 60.0, world=world)
    worker = Worker(world)
    await worker.drain()
    if first == "payload":
        await resume_hook("race", "early", world=world)
        clock.current += dt.timedelta(seconds=120)  # the timer is due too, but later in the log
    else:
        clock.current += dt.timedelta(seconds=120)
        await worker.drain()  # the wait completes first
        with pytest.raises(HookNotFoundError):  # the run ended: its hook was released
            await resume_hook("race", "too late", world=world)
    await run_to_end(world, clock, run)
    expected = "payload early" if first == "payload" else "timeout"
    assert await run.result() == expected
    check_cold_replay(await run.events())


async def test_a_delivery_that_reads_before_its_wake_up_gives_the_message_back(
    world: World, clock: FixedClock
) -> None:
    """A World may serve a stale prefix (protocol.md §8): the wake-up names what it is for."""
    from durasim.runtime.lowlevel import engine_for

    engine = engine_for(world)
    run = await start(wf_hooks.one_payload, world=world)
    await Worker(world).drain()
    event = await resume_hook(await _token(world, run.run_id), "late", world=world)
    report = await engine.deliver(run.run_id, min_seq=event.seq + 1)  # as if not yet visible
    assert report.status == "unavailable"
    assert await run.status() is RunStatus.RUNNING
    report = await engine.deliver(run.run_id, min_seq=event.seq)
    assert report.status == "finished"
    assert await run.result() == "late"
