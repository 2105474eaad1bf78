"""Replay checks every command's parameters: step inputs, hook kinds and tokens, deadlines.

Each test runs a workflow, then changes what the workflow computes (a module
value standing for an edit or for nondeterminism) and replays: cold through
the oracle, or live through a fresh delivery.  What the log recorded is the
truth: a difference is a divergence naming both sides, and a step always runs
with its recorded input.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from durasim.checkers import verify_replay
from durasim.runtime import (
    Limits,
    RetryableError,
    Worker,
    WorkflowFailed,
    create_hook,
    get_run,
    resume_hook,
    start,
    step,
    workflow,
)
from durasim.runtime.serialization import serialize
from durasim.worlds import CountingIds, EventRequest, FixedClock, MemoryWorld, RunStatus, World

EDIT: dict[str, Any] = {}
SEEN: list[Any] = []
COLD = Limits(keep_replays=False)  # every delivery replays the log from the top


@pytest.fixture(autouse=True)
def _fresh_edits() -> None:
    EDIT.clear()
    SEEN.clear()


def _world() -> tuple[MemoryWorld, FixedClock]:
    clock = FixedClock()
    return MemoryWorld(clock=clock, ids=CountingIds()), clock


async def _serve(world: World, clock: FixedClock, run_id: str, *, rounds: int = 20) -> None:
    worker = Worker(world, limits=COLD)
    for _ in range(rounds):
        await worker.drain()
        if (await world.runs.get(run_id)).status.terminal:
            return
        due = await world.queue.next_due()
        if due is None:
            return  # suspended: waits for something from outside
        clock.current = max(clock.current, due)


@step(module="replaychecks")
def charge(amount: int, *, currency: str = "usd") -> str:
    SEEN.append(amount)
    return f"{amount} {currency}"


@step(module="replaychecks")
def ship(order: dict[str, int]) -> list[str]:
    return list(order)


@workflow(module="replaychecks")
async def pay() -> str:
    # An edit (or nondeterminism) that changes a step's argument: dollars to cents.
    return await charge(EDIT.get("amount", 30))


@workflow(module="replaychecks")
async def pack() -> list[str]:
    # A dict built by iterating something whose order is not the run's own.
    return await ship(dict.fromkeys(EDIT.get("items", ["apple", "pear", "fig"]), 1))


async def test_a_step_input_that_differs_on_replay_is_a_divergence_naming_both() -> None:
    world, clock = _world()
    run = await start(pay, world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == "30 usd"
    assert (await verify_replay(world, run.run_id)).ok
    EDIT["amount"] = 3000
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "replay.diverged", verdict.render()
    assert "the input of step charge (step//replaychecks//charge#1)" in verdict.detail
    assert "args[0]: recorded 30, now 3000" in verdict.detail
    # Both likely causes, neither assumed.
    assert "the workflow code changed" in verdict.detail
    assert "nondeterministic" in verdict.detail
    assert "@step(check_input=False)" in verdict.detail


async def test_a_dict_whose_key_order_differs_is_a_divergence() -> None:
    world, clock = _world()
    run = await start(pack, world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == ["apple", "pear", "fig"]
    EDIT["items"] = ["pear", "fig", "apple"]
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "replay.diverged", verdict.render()
    assert "the same keys in another order" in verdict.detail
    assert "args[0]" in verdict.detail


async def test_equal_values_encoded_differently_are_no_divergence() -> None:
    # A set's stored order is its hash order: the same set is the same input.
    world, clock = _world()
    run = await start(pack, world=world)
    await _serve(world, clock, run.run_id)
    events = await run.events()
    created = next(e for e in events if e.type.value == "step_created")
    assert created.data["input"] == serialize(
        {"args": [{"apple": 1, "pear": 1, "fig": 1}], "kwargs": {}, "closure": {}},
        root="ship(...)",
    )
    assert (await verify_replay(world, run.run_id)).ok


@step(module="replaychecks", max_retries=2)
def flaky_charge(key: str) -> str:
    SEEN.append(key)
    if len(SEEN) == 1:
        raise RetryableError("card network busy", retry_after=5)
    return key


@workflow(module="replaychecks")
async def pay_with_key() -> str:
    return await flaky_charge(f"key-{EDIT.get('key', 'first')}")


@step(module="replaychecks", max_retries=2, check_input=False)
def flaky_unchecked(key: str) -> str:
    SEEN.append(key)
    if len(SEEN) == 1:
        raise RetryableError("card network busy", retry_after=5)
    return key


@workflow(module="replaychecks")
async def pay_unchecked() -> str:
    return await flaky_unchecked(f"key-{EDIT.get('key', 'first')}")


async def test_a_retry_whose_input_is_computed_differently_fails_the_run_before_running() -> None:
    world, clock = _world()
    run = await start(pay_with_key, world=world)
    worker = Worker(world, limits=COLD)
    await worker.drain()  # first attempt fails, the retry is due in 5 s
    assert SEEN == ["key-first"]
    EDIT["key"] = "second"  # the replay now computes another idempotency key
    await _serve(world, clock, run.run_id)
    assert await run.status() is RunStatus.FAILED
    with pytest.raises(WorkflowFailed) as caught:
        await run.result()
    assert caught.value.error_code == "CORRUPTED_EVENT_LOG"  # type: ignore[attr-defined]
    assert "recorded 'key-first', now 'key-second'" in str(caught.value.__cause__)
    assert SEEN == ["key-first"]  # the body never ran with the other key


async def test_a_step_that_accepts_another_input_still_runs_with_the_recorded_one() -> None:
    world, clock = _world()
    run = await start(pay_unchecked, world=world)
    worker = Worker(world, limits=COLD)
    await worker.drain()
    EDIT["key"] = "second"
    await _serve(world, clock, run.run_id)
    assert await run.result() == "key-first"
    assert SEEN == ["key-first", "key-first"]  # the retry ran with what the log holds


# -- hooks and timers ------------------------------------------------------------------------


async def _sleeper() -> str:
    await asyncio.sleep(86_400)
    return "slept"


async def _approver() -> Any:
    return await create_hook(token=EDIT.get("token", "approve-1"))


async def _added() -> str:
    # Added by an edit while runs are in flight, and started before the others.
    if EDIT.get("extra_hook"):
        create_hook().dispose()  # a tokenless hook
    if EDIT.get("timeout"):
        try:
            await asyncio.wait_for(asyncio.Event().wait(), timeout=600)
        except TimeoutError:
            return "timed out"
    return "added"


@workflow(module="replaychecks")
async def approve_after_sleep() -> list[Any]:
    branches = [_sleeper(), _approver()]
    if EDIT:
        branches.insert(0, _added())
    return list(await asyncio.gather(*branches))[-2:]


@pytest.mark.parametrize("edit", ["extra_hook", "timeout"])
async def test_an_added_hook_or_timeout_shifts_no_other_hook_or_timer(edit: str) -> None:
    world, clock = _world()
    run = await start(approve_after_sleep, world=world)
    worker = Worker(world, limits=COLD)
    await worker.drain()  # suspended on the day-long sleep and the hook
    ids = [e.correlation_id for e in await run.events() if e.correlation_id]
    assert re.fullmatch(r"sleep/_sleeper:[0-9a-f]{6}#1", ids[0] or "")
    assert ids[1].startswith("hook=")
    EDIT[edit] = True  # the workflow is edited while the run is in flight
    await resume_hook("approve-1", "yes", world=world)
    await worker.drain()  # a cold replay under the new code: nothing diverges
    assert await run.status() is RunStatus.RUNNING
    # The payload reached the hook it was sent to (no hook_conflict against
    # itself), and the day-long sleep was neither restarted nor lost:
    # wake_up() still reaches it.
    assert await get_run(run.run_id, world=world).wake_up() >= 1
    await _serve(world, clock, run.run_id)
    assert await run.result() == ["slept", "yes"]
    kinds = [e.type.value for e in await run.events()]
    assert "hook_conflict" not in kinds
    assert kinds.count("wait_completed") == 1 + (edit == "timeout")


async def test_a_hook_whose_token_changed_is_a_divergence() -> None:
    world, clock = _world()
    run = await start(approve_after_sleep, world=world)
    await _serve(world, clock, run.run_id)
    await resume_hook("approve-1", "yes", world=world)
    await get_run(run.run_id, world=world).wake_up()
    await _serve(world, clock, run.run_id)
    assert (await verify_replay(world, run.run_id)).ok
    EDIT["token"] = "approve-2"
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "replay.diverged", verdict.render()
    assert "the workflow created no hook with this id" in verdict.detail


@workflow(module="replaychecks")
async def nap() -> str:
    await asyncio.sleep(EDIT.get("seconds", 60))
    return "rested"


async def test_a_timer_whose_deadline_changed_is_a_divergence() -> None:
    world, clock = _world()
    run = await start(nap, world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == "rested"
    EDIT["seconds"] = 3600
    verdict = await verify_replay(world, run.run_id)
    assert verdict.kind == "replay.diverged", verdict.render()
    assert re.search(r"the deadline of timer sleep/nap:[0-9a-f]{6}#1 differs", verdict.detail)


@workflow(module="replaychecks")
async def hook_then_nap() -> Any:
    payload = await create_hook(token="legacy-1")
    await asyncio.sleep(60)
    return payload


async def test_a_log_numbered_the_old_way_still_replays() -> None:
    # Written by a runtime that numbered hooks and timers per run (hook#1, sleep#1).
    world, clock = _world()
    run = await start(hook_then_nap, world=world)
    band = 1
    for request in (
        EventRequest.of("run_started"),
        EventRequest.of("hook_created", "hook#1", token="legacy-1", is_webhook=False),
    ):
        band += 1
        await world.events.create(run.run_id, request, in_band=True, expected_seq_in_band=band - 1)
    await resume_hook("legacy-1", "ok", world=world)
    await _serve(world, clock, run.run_id)
    assert await run.result() == "ok"
    ids = [e.correlation_id for e in await run.events() if e.type.value == "wait_created"]
    assert ids == ["sleep#1"]


@workflow(module="replaychecks")
async def tokenless_approval() -> Any:
    if EDIT.get("inserted"):
        receipt = create_hook()  # a hook added by an edit, before the existing one
        receipt.dispose()
    approval = create_hook()
    return await approval


async def test_a_tokenless_hook_inserted_before_another_in_one_function_shifts_nothing() -> None:
    world, clock = _world()
    run = await start(tokenless_approval, world=world)
    worker = Worker(world, limits=COLD)
    await worker.drain()
    (hook,) = await world.hooks.list(run.run_id)
    EDIT["inserted"] = True
    await resume_hook(hook.token, "approved", world=world)  # sent to the hook that existed
    await _serve(world, clock, run.run_id)
    assert await run.result() == "approved"  # and that hook got it
    kinds = [e.type.value for e in await run.events()]
    assert "hook_conflict" not in kinds
    assert (await verify_replay(world, run.run_id)).ok
