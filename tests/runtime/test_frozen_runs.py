"""Frozen values in the runtime: a growing history passed to a step each turn is stored O(n).

The workflow builds a chat history as a tuple of frozen messages and passes it to
a step on every turn.  Stored plainly, every step would store the whole history
again (O(n²) bytes); through the run's FrozenValues (runtime/_payloads.py) each
step input is a delta over the previous one, rewritten whole once it about
doubles.  These tests measure the log, decode every recorded input from the log
alone, replay cold, run steps through the queue and crash deliveries mid-run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest
from _drive import check_cold_replay, replay_cold, run_to_end

from durasim.checkers import verify_replay_log
from durasim.runtime import Limits, RetryableError, Worker, serializable, start, step, workflow
from durasim.runtime._payloads import refers_to_records
from durasim.runtime._replay import Replay
from durasim.runtime.lowlevel import RunPayloads, engine_for, step_definition
from durasim.runtime.serialization import serialize
from durasim.sim import FAULT_KINDS, Match, Sim
from durasim.worlds import Event, EventType, FixedClock, World

T = EventType


@serializable(class_id="tests.frozen.Message")
@attrs.frozen
class Message:
    role: str
    content: str


def question(turn: int) -> Message:
    return Message("user", f"question {turn}: " + "q" * 80)


def reply_to(history: tuple[Message, ...] | list[Message]) -> Message:
    return Message(
        "assistant", f"answer to {history[-1].content[:12]} of {len(history)} " + "a" * 80
    )


@step
def answer(history: tuple[Message, ...]) -> Message:
    assert type(history) is tuple
    assert all(type(m) is Message for m in history)
    return reply_to(history)


@step
def answer_list(history: list[Message]) -> Message:
    return reply_to(history)


@step
def count(history: tuple[Message, ...]) -> int:
    return len(history)


FLAKY: set[int] = set()


@step(max_retries=3)
def flaky_answer(history: tuple[Message, ...]) -> Message:
    if len(history) in FLAKY:
        FLAKY.discard(len(history))
        raise RetryableError("try again later", retry_after=60.0)
    return reply_to(history)


@workflow
async def chat(turns: int) -> tuple[Message, ...]:
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = (*history, question(turn))
        history = (*history, await answer(history))
    return history


@workflow
async def chat_list(turns: int) -> list[Message]:
    history: list[Message] = []
    for turn in range(turns):
        history.append(question(turn))
        history.append(await answer_list(history))
    return history


@workflow
async def chat_parallel(turns: int) -> tuple[tuple[Message, ...], list[int]]:
    """Two steps per turn get the same history: one inline, one through the queue."""
    history: tuple[Message, ...] = ()
    counts = []
    for turn in range(turns):
        history = (*history, question(turn))
        reply, length = await asyncio.gather(answer(history), count(history))
        history = (*history, reply)
        counts.append(length)
    return history, counts


@workflow
async def chat_flaky(turns: int) -> tuple[Message, ...]:
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = (*history, question(turn))
        history = (*history, await flaky_answer(history))
    return history


def expected_history(turns: int) -> tuple[Message, ...]:
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = (*history, question(turn))
        history = (*history, reply_to(history))
    return history


def stored_bytes(events: list[Event]) -> int:
    """Every payload byte the log holds."""
    return sum(len(v) for e in events for v in e.data.values() if isinstance(v, bytes))


def step_inputs(events: list[Event]) -> dict[str, bytes]:
    return {e.correlation_id or "": e.data["input"] for e in events if e.type is T.STEP_CREATED}


def recomputed_inputs(events: list[Event]) -> dict[str, bytes]:
    """The step inputs a cold replay of the finished log computes."""
    return {cid: state.computed for cid, state in replay_cold(events).steps.items()}


def check_inputs_decode_from_the_log(events: list[Event], turns: int) -> None:
    """Each recorded input decodes, from the log alone, to the history of its turn."""
    payloads = RunPayloads.from_log(events)
    history = expected_history(turns)
    inputs = [(cid, data) for cid, data in step_inputs(events).items() if "answer" in cid]
    assert len(inputs) == turns
    for turn, (cid, data) in enumerate(inputs):
        decoded = payloads.decode(data, record=cid)
        assert decoded["args"] == [history[: 2 * turn + 1]], cid
    # A fresh reader per input (a queued step's worker) decodes the same.
    for turn, (cid, data) in list(enumerate(inputs))[-3:]:
        fresh = RunPayloads.from_log(events).decode(data, record=cid)
        assert fresh["args"] == [history[: 2 * turn + 1]]


@pytest.mark.parametrize("turns", [50, 200])
async def test_a_growing_history_is_stored_under_3x_its_final_size(
    world: World, clock: FixedClock, turns: int
) -> None:
    run = await start(chat, turns, world=world)
    await run_to_end(world, clock, run)  # + cold replay, verify_replay, invariants
    history = await run.result()
    assert history == expected_history(turns)
    events = await run.events()
    final = len(serialize(history))
    assert stored_bytes(events) < 3 * final, (stored_bytes(events), final)
    inputs = step_inputs(events)
    assert sum(refers_to_records(data) for data in inputs.values()) > turns // 2
    # A cold replay computes the very bytes the run recorded.
    assert recomputed_inputs(events) == inputs
    check_inputs_decode_from_the_log(events, turns)


async def test_a_list_history_is_stored_whole_each_step_with_the_same_outputs(
    world: World, clock: FixedClock
) -> None:
    frozen = await start(chat, 50, world=world)
    plain = await start(chat_list, 50, world=world)
    await run_to_end(world, clock, frozen)
    await run_to_end(world, clock, plain)
    assert list(await frozen.result()) == await plain.result()
    plain_events = await plain.events()
    # A list is mutable: it is written whole every step (its frozen messages by
    # reference, a few bytes each), so the total stays quadratic.
    final = len(serialize(await plain.result()))
    assert stored_bytes(plain_events) > 5 * final
    assert stored_bytes(await frozen.events()) * 3 < stored_bytes(plain_events)


async def test_queued_steps_decode_inputs_that_refer_to_the_log(
    world: World, clock: FixedClock
) -> None:
    turns = 30
    run = await start(chat_parallel, turns, world=world)
    worker = Worker(world, limits=Limits(inline_steps=1, queue_steps=True))
    for _ in range(200):
        await worker.drain()
        if (await run.status()).terminal:
            break
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due)
    history, counts = await run.result()
    assert history == expected_history(turns)
    assert counts == [2 * turn + 1 for turn in range(turns)]
    events = await run.events()
    created = [e for e in events if e.type is T.STEP_CREATED]
    queued = [e for e in created if not e.data["inline"]]
    assert queued, "some steps should have gone through the queue"
    assert any(refers_to_records(e.data["input"]) for e in queued)
    assert recomputed_inputs(events) == step_inputs(events)
    check_cold_replay(events)
    verdict = await verify_replay_log(events)
    assert verdict.ok, verdict.render()


async def test_a_cold_delivery_mid_run_continues_with_the_same_references(
    world: World, clock: FixedClock
) -> None:
    # A retry suspends the run; the next delivery finds no kept replay (a new
    # process) and replays the log cold, then encodes the remaining inputs.
    turns = 40
    FLAKY.clear()
    FLAKY.update({21, 51})  # the answers of turns 10 and 25
    run = await start(chat_flaky, turns, world=world)
    for _ in range(20):
        engine_for(world).forget_kept_replays()
        await Worker(world).drain()
        if (await run.status()).terminal:
            break
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due)
    assert await run.result() == expected_history(turns)
    events = await run.events()
    assert sum(e.type is T.STEP_RETRYING for e in events) == 2
    assert recomputed_inputs(events) == step_inputs(events)
    assert stored_bytes(events) < 3 * len(serialize(expected_history(turns)))
    check_cold_replay(events)
    verdict = await verify_replay_log(events)
    assert verdict.ok, verdict.render()


async def test_an_old_log_with_plain_inputs_still_replays(world: World, clock: FixedClock) -> None:
    # A log written before frozen values: every step input stored whole.  The
    # replay computes other bytes (references) but the same values.
    run = await start(chat, 20, world=world)
    await run_to_end(world, clock, run)
    events = await run.events()
    payloads = RunPayloads.from_log(events)
    old = [
        attrs.evolve(
            e,
            data=e.data.replace(
                input=serialize(payloads.decode(e.data["input"], record=e.correlation_id))
            ),
        )
        if e.type is T.STEP_CREATED
        else e
        for e in events
    ]
    assert not any(refers_to_records(data) for data in step_inputs(old).values())
    recomputed = recomputed_inputs(old)
    old_reader = RunPayloads.from_log(old)
    for cid, data in step_inputs(old).items():
        # Refused as references (the log holds other bytes): decodes from the old log.
        assert old_reader.decode(recomputed[cid], record=cid) == old_reader.decode(data)
    check_cold_replay(old)
    verdict = await verify_replay_log(old)
    assert verdict.ok, verdict.render()


def test_a_replay_never_refers_to_an_input_the_log_holds_other_bytes_of() -> None:
    # The log's input of step 5 is the same value written another way (as a
    # replay with a set in another order would compute it): the replay must not
    # point into its own numbering of that record, which the log does not have.
    async def build() -> list[Event]:
        from durasim.worlds import CountingIds, MemoryWorld

        clock = FixedClock()
        world = MemoryWorld(clock=clock, ids=CountingIds())
        run = await start(chat, 12, world=world)
        await run_to_end(world, clock, run, replay=False)
        return await run.events()

    events = asyncio.run(build())
    cids = list(step_inputs(events))
    fifth = cids[4]
    payloads = RunPayloads.from_log(events)
    changed = [
        attrs.evolve(
            e,
            data=e.data.replace(input=serialize(payloads.decode(e.data["input"], record=fifth))),
        )
        if e.type is T.STEP_CREATED and e.correlation_id == fifth
        else e
        for e in events
    ]
    # The changed log is not one a World could hold (step 6's recorded input
    # numbers step 5's original bytes), so the replay's input check would
    # rightly call it a divergence; only what the replay computes is under test.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Replay, "_check_payload", lambda *args, **kwargs: None)
        recomputed = recomputed_inputs(changed)
    assert recomputed[fifth] != step_inputs(changed)[fifth]
    sixth = recomputed[cids[5]]
    assert refers_to_records(sixth)
    assert fifth.encode() not in sixth.split(b"\n")[0]
    # ... and what it computes decodes right from the changed log alone.
    reader = RunPayloads.from_log(changed)
    assert reader.decode(sixth)["args"] == [expected_history(12)[:11]]


def test_a_crashed_delivery_mid_run_is_replayed_and_finishes() -> None:
    async def script(sim: Sim) -> Any:
        sim.crash_at(Match(phase="before", event_type="step_completed", step="answer"))
        sim.crash_at(
            Match(
                phase="before",
                event_type="step_completed",
                correlation_id=f"{step_definition(answer).step_id}#17",
            )
        )
        outcome = await sim.run(chat, 30)
        page = await sim.store.events.list(outcome.run_id, limit=10_000)
        return outcome, list(page.events)

    outcome, events = Sim().run_sync(script)
    assert outcome.value == expected_history(30)
    assert sum(e.type is T.STEP_STARTED for e in events) > 30  # bodies ran again
    assert recomputed_inputs(events) == step_inputs(events)
    check_cold_replay(events)
    verdict = asyncio.run(verify_replay_log(events))
    assert verdict.ok, verdict.render()


@pytest.mark.parametrize("seed", range(6))
def test_faults_chosen_by_the_simulator_keep_frozen_inputs_decodable(seed: int) -> None:
    async def script(sim: Sim) -> Any:
        outcome = await sim.run(chat, 15)
        page = await sim.store.events.list(outcome.run_id, limit=10_000)
        return outcome, list(page.events)

    outcome, events = Sim(seed=seed, faults=FAULT_KINDS, fault_odds=4, max_faults=3).run_sync(
        script
    )
    if outcome.status.value != "completed":
        return  # a dropped message may stall the run: nothing to check
    assert outcome.value == expected_history(15)
    assert recomputed_inputs(events) == step_inputs(events)
    check_inputs_decode_from_the_log(events, 15)
    verdict = asyncio.run(verify_replay_log(events))
    assert verdict.ok, verdict.render()


@step
def take_turn(history: tuple[Message, ...], turn: int) -> tuple[Message, ...]:
    asked = (*history, question(turn))
    return (*asked, reply_to(asked))


@workflow
async def chat_returning(turns: int) -> tuple[Message, ...]:
    """The step returns the grown history: its result is a delta over its input."""
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = await take_turn(history, turn)
    return history


@pytest.mark.parametrize("queued", [False, True])
async def test_a_history_a_step_returns_grown_is_stored_under_3x(
    world: World, clock: FixedClock, queued: bool
) -> None:
    turns = 200 if not queued else 40
    run = await start(chat_returning, turns, world=world)
    limits = Limits(inline_steps=0, queue_steps=True) if queued else None
    worker = Worker(world, limits=limits)
    for _ in range(400):
        await worker.drain()
        if (await run.status()).terminal:
            break
        due = await world.queue.next_due()
        assert due is not None
        clock.current = max(clock.current, due)
    history = await run.result()
    assert history == expected_history(turns)
    events = await run.events()
    if queued:
        assert all(not e.data["inline"] for e in events if e.type is T.STEP_CREATED)
    results = [e.data["result"] for e in events if e.type is T.STEP_COMPLETED]
    assert sum(refers_to_records(data) for data in results) > turns // 2
    assert stored_bytes(events) < 3 * len(serialize(history))
    # Every result decodes from the log alone to the history of its turn.
    reader = RunPayloads.from_log(events)
    for turn, data in enumerate(results):
        assert reader.decode(data) == expected_history(turn + 1)
    assert recomputed_inputs(events) == step_inputs(events)
    check_cold_replay(events)
    verdict = await verify_replay_log(events)
    assert verdict.ok, verdict.render()


@step
def grow(history: tuple[Message, ...]) -> tuple[Message, ...]:
    return (*history, reply_to(history))


@workflow
async def chat_growing(turns: int) -> tuple[Message, ...]:
    """Input: the last result plus a question; result: that input plus a reply."""
    history: tuple[Message, ...] = ()
    for turn in range(turns):
        history = await grow((*history, question(turn)))
    return history


def test_a_result_that_refers_to_an_input_the_replay_computed_otherwise_decodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Step 5's result is a delta over step 5's input.  A replay that computes
    # other bytes for that input (as a set with no canonical order could make
    # it) numbers it otherwise, so it must read the result from the recorded
    # bytes, and never refer to its own copy of the input afterwards.
    async def build() -> list[Event]:
        from durasim.worlds import CountingIds, MemoryWorld

        clock = FixedClock()
        world = MemoryWorld(clock=clock, ids=CountingIds())
        run = await start(chat_growing, 12, world=world)
        await run_to_end(world, clock, run)
        assert await run.result() == expected_history(12)
        return await run.events()

    events = asyncio.run(build())
    cids = list(step_inputs(events))
    fifth = cids[4]
    results = {e.correlation_id: e.data["result"] for e in events if e.type is T.STEP_COMPLETED}
    assert fifth.encode() in results[fifth].split(b"\n")[0]  # the result refers to its input
    encode = RunPayloads.encode_step_input

    def other_bytes(self: RunPayloads, correlation_id: str, value: object, *, root: str) -> bytes:
        if correlation_id != fifth:
            return encode(self, correlation_id, value, root=root)
        data = self._writer.serialize(value, record=correlation_id, root=root, whole=True)
        self._computed[correlation_id] = data
        return data

    monkeypatch.setattr(RunPayloads, "encode_step_input", other_bytes)
    recomputed = recomputed_inputs(events)
    assert recomputed[fifth] != step_inputs(events)[fifth]
    check_cold_replay(events)  # the results decode right, so the run ends the same
    reader = RunPayloads.from_log(events)
    for turn, cid in list(enumerate(cids))[5:]:
        assert fifth.encode() not in recomputed[cid].split(b"\n")[0]
        assert reader.decode(recomputed[cid])["args"] == [expected_history(turn + 1)[:-1]]
