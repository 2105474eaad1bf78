"""Streams end to end on both Worlds: writing from steps, reading live and later, retries."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _drive import run_to_end

import durasim.runtime._streams as streams_module
from durasim.runtime import (
    FatalError,
    StepMetadata,
    StreamRewriteError,
    Writable,
    get_writable,
    read_stream,
    start,
    step,
    workflow,
)
from durasim.runtime._streams import _ATTEMPTS, FRAME_PREFIX, _state
from durasim.runtime.serialization import deserialize, serialize
from durasim.worlds import (
    CountingIds,
    DurasimError,
    FixedClock,
    InvalidRequest,
    RunStatus,
    SQLiteWorld,
    World,
)

HERE = Path(__file__).parent


async def read_all(world: World, run_id: str, namespace: str | None = None, **kw: Any) -> list[Any]:
    return [chunk async for chunk in read_stream(world, run_id, namespace, **kw)]


async def headers(world: World, run_id: str, namespace: str) -> list[list[Any]]:
    """The frame headers (writer, attempt, position) of every chunk, in stream order."""
    page = await world.streams.read(run_id, namespace, limit=1000)
    found = []
    for chunk in page.chunks:
        assert chunk.data.startswith(FRAME_PREFIX)
        found.append(json.loads(chunk.data[len(FRAME_PREFIX) : chunk.data.index(b"\n")]))
    return found


# -- writing in a step, reading afterwards ------------------------------------------------------


@step
async def produce(count: int) -> int:
    writable = get_writable()
    for i in range(count):
        await writable.write({"i": i, "square": i * i})
    await writable.close()
    return count


@workflow
async def producing(count: int) -> int:
    return await produce(count)


async def test_a_step_writes_and_the_stream_is_read_after_the_run(
    world: World, clock: FixedClock
) -> None:
    run = await start(producing, 5, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == 5
    assert await read_all(world, run.run_id) == [{"i": i, "square": i * i} for i in range(5)]
    # the default namespace is the World's stream name: the stream is visible as such
    assert await world.streams.list(run.run_id) == ("default",)
    assert (await world.streams.info(run.run_id, "default")).closed


async def test_a_reader_starts_at_any_index(world: World, clock: FixedClock) -> None:
    run = await start(producing, 5, world=world)
    await run_to_end(world, clock, run)
    assert [c["i"] for c in await read_all(world, run.run_id, start=3)] == [3, 4]
    assert [c["i"] for c in await read_all(world, run.run_id, start=-2)] == [3, 4]
    assert await read_all(world, run.run_id, start=5) == []
    assert await read_all(world, run.run_id, start=99) == []


# -- a handle made by the workflow, written by a step --------------------------------------------


@step
async def report(writable: Writable, items: list[str]) -> int:
    for item in items:
        await writable.write(item)
    await writable.close()
    return len(items)


@workflow
async def reporting(items: list[str]) -> tuple[int, Writable]:
    progress = get_writable("progress/items")  # no I/O here: a value the step receives
    return await report(progress, items), progress


async def test_a_handle_passes_from_the_workflow_to_a_step(world: World, clock: FixedClock) -> None:
    run = await start(reporting, ["a", "b", "c"], world=world)
    await run_to_end(world, clock, run)
    count, handle = await run.result()
    assert count == 3
    assert handle == Writable(run_id=run.run_id, namespace="progress/items")
    assert await read_all(world, run.run_id, "progress/items") == ["a", "b", "c"]
    assert await read_all(world, run.run_id) == []  # the default stream was never written
    # the handle travelled in the step's recorded input, as a value
    created = next(e for e in await run.events() if e.type.value == "step_created")
    assert deserialize(created.data["input"])["args"] == [handle, ["a", "b", "c"]]


# -- live reading while a worker runs the step --------------------------------------------------

LIVE: dict[str, asyncio.Event] = {}


@step
async def produce_slowly(count: int) -> str:
    writable = get_writable("live")
    for i in range(count):
        await writable.write(i)
        LIVE["written"].set()
        await LIVE[f"seen-{i}"].wait()  # the next chunk waits until the reader saw this one
    await writable.close()
    LIVE["written"].set()
    await LIVE["finish"].wait()
    return "finished"


@workflow
async def producing_slowly(count: int) -> str:
    return await produce_slowly(count)


async def test_a_live_reader_sees_each_chunk_while_the_step_runs_and_ends_at_close(
    world: World, clock: FixedClock
) -> None:
    LIVE.clear()
    LIVE.update({name: asyncio.Event() for name in ("written", "finish")})
    LIVE.update({f"seen-{i}": asyncio.Event() for i in range(3)})

    async def poll() -> None:  # woken by the step's writes, never by the wall clock
        await LIVE["written"].wait()
        LIVE["written"].clear()

    run = await start(producing_slowly, 3, world=world)
    worker = asyncio.create_task(run_to_end(world, clock, run))
    received = []
    async with asyncio.timeout(60):  # a safety net against a hang, not a wait
        async for chunk in read_stream(world, run.run_id, "live", poll=poll):
            received.append(chunk)
            assert await run.status() is RunStatus.RUNNING
            LIVE[f"seen-{chunk}"].set()
        # the reader ended at close, while the step (and the run) still runs
        assert received == [0, 1, 2]
        assert await run.status() is RunStatus.RUNNING
        LIVE["finish"].set()
        await worker
    assert await run.result() == "finished"


async def test_the_default_poll_backs_off_until_close_ends_the_reader(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await start(producing, 0, world=world)  # no worker: the run stays pending
    await world.streams.write(run.run_id, "default", serialize("a bare serialized value"))
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:  # virtual: records the delay, waits for nothing
        slept.append(delay)
        if len(slept) == 4:
            await world.streams.close(run.run_id, "default")

    # only the reader's sleep: patching asyncio.sleep would fake every task's (PostgreSQL's pool)
    monkeypatch.setattr(streams_module, "_poll_sleep", fake_sleep)
    # chunks written without the runtime's frame are read as plain serialized values
    assert await read_all(world, run.run_id) == ["a bare serialized value"]
    assert slept == [0.02, 0.04, 0.08, 0.16]


@workflow
async def relaying(target: Writable, items: list[str]) -> int:
    return await report(target, items)


async def test_a_step_writes_another_runs_stream_with_a_handle_it_was_given(
    world: World, clock: FixedClock
) -> None:
    owner = await start(producing, 0, world=world)  # its stream is written by the other run
    target = Writable(run_id=owner.run_id, namespace="relayed")
    writer = await start(relaying, target, ["x", "y"], world=world)
    await run_to_end(world, clock, writer)
    assert await read_all(world, owner.run_id, "relayed") == ["x", "y"]
    step_id = "step//test_streams//report#1"
    assert await headers(world, owner.run_id, "relayed") == [
        [step_id, writer.run_id, 1, 0],
        [step_id, writer.run_id, 1, 1],
    ]


# -- a stream that is never closed ends with its run --------------------------------------------


@step
async def write_then_fail(count: int) -> None:
    writable = get_writable("partial")
    for i in range(count):
        await writable.write(i)
    raise FatalError("gave up before closing the stream")


@workflow
async def failing_writer(count: int) -> None:
    await write_then_fail(count)


async def test_a_reader_of_an_unclosed_stream_ends_when_the_run_ends(
    world: World, clock: FixedClock
) -> None:
    run = await start(failing_writer, 2, world=world)
    await run_to_end(world, clock, run)
    assert await run.status() is RunStatus.FAILED
    assert not (await world.streams.info(run.run_id, "partial")).closed

    async def poll() -> None:
        raise AssertionError("the run has ended: the reader must not wait")

    assert await read_all(world, run.run_id, "partial", poll=poll) == [0, 1]


# -- retries ------------------------------------------------------------------------------------

ATTEMPTS: Counter[str] = Counter()


@step(max_retries=3)
async def flaky_writer(key: str, mode: str) -> int:
    ATTEMPTS[key] += 1
    attempt = ATTEMPTS[key]
    writable = get_writable("tokens")
    if mode == "resume":
        skipped = await writable.resume()
        if skipped:
            await writable.write(f"<restarted after {skipped}>")
        tokens = [f"{attempt}:{i}" for i in range(4)]  # a fresh, different answer
    elif mode == "diverge":
        tokens = [f"{attempt}:{i}" for i in range(4)]
    else:  # deterministic: the same chunks on every attempt
        tokens = [f"t{i}" for i in range(5)]
    for i, token in enumerate(tokens):
        if attempt == 1 and i == 3:
            raise ConnectionError("the connection dropped mid-stream")
        await writable.write(token)
    await writable.close()
    return attempt


@workflow
async def retrying_writer(key: str, mode: str) -> Any:
    try:
        return await flaky_writer(key, mode)
    except StreamRewriteError as exc:
        return ["rewrite refused", exc.position, exc.namespace]


async def test_a_retry_that_rewrites_the_same_chunks_adds_none_twice(
    world: World, clock: FixedClock
) -> None:
    ATTEMPTS.clear()
    run = await start(retrying_writer, "same", "same", world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == 2
    assert await read_all(world, run.run_id, "tokens") == [f"t{i}" for i in range(5)]
    # chunks 0-2 come from attempt 1; attempt 2 skipped them and wrote 3-4
    step_id = "step//test_streams//flaky_writer#1"
    assert await headers(world, run.run_id, "tokens") == [
        [step_id, 1, 0],
        [step_id, 1, 1],
        [step_id, 1, 2],
        [step_id, 2, 3],
        [step_id, 2, 4],
    ]


async def test_a_retry_that_writes_other_chunks_fails_the_step_loudly(
    world: World, clock: FixedClock
) -> None:
    ATTEMPTS.clear()
    run = await start(retrying_writer, "diverge", "diverge", world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == ["rewrite refused", 0, "tokens"]
    assert ATTEMPTS["diverge"] == 2  # a StreamRewriteError is fatal: no third attempt
    # what readers saw stays as it was; nothing was silently replaced or appended
    assert await read_all(world, run.run_id, "tokens") == ["1:0", "1:1", "1:2"]
    failed = [e for e in await run.events() if e.type.value == "step_failed"]
    assert len(failed) == 1


async def test_a_retry_may_resume_after_the_earlier_attempts_chunks(
    world: World, clock: FixedClock
) -> None:
    ATTEMPTS.clear()
    run = await start(retrying_writer, "resume", "resume", world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == 2
    assert await read_all(world, run.run_id, "tokens") == [
        "1:0",
        "1:1",
        "1:2",
        "<restarted after 3>",
        "2:0",
        "2:1",
        "2:2",
        "2:3",
    ]


# -- several writers, and a cold replay in a fresh process -------------------------------------


@step
async def tagged(tag: str, writable: Writable, count: int) -> str:
    for i in range(count):
        await writable.write(f"{tag}{i}")
    return tag


@step
async def close_stream(writable: Writable) -> None:
    await writable.close()


@workflow
async def two_writers() -> list[str]:
    shared = get_writable("shared")
    tags = await asyncio.gather(tagged("a", shared, 3), tagged("b", shared, 3))
    await close_stream(shared)
    return list(tags)


async def test_steps_write_one_stream_concurrently(world: World, clock: FixedClock) -> None:
    run = await start(two_writers, world=world)
    await run_to_end(world, clock, run)
    chunks = await read_all(world, run.run_id, "shared")
    assert sorted(chunks) == ["a0", "a1", "a2", "b0", "b1", "b2"]
    assert [c for c in chunks if c[0] == "a"] == ["a0", "a1", "a2"]  # each writer in order
    assert [c for c in chunks if c[0] == "b"] == ["b0", "b1", "b2"]


_COLD = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import test_streams  # registers the workflows and steps
from _drive import check_cold_replay
from durasim.runtime import read_stream
from durasim.worlds import SQLiteWorld

async def main(path, run_id):
    world = SQLiteWorld(path)
    try:
        events = list((await world.events.list(run_id, limit=1000)).events)
        check_cold_replay(events)
        chunks = [c async for c in read_stream(world, run_id, "shared")]
    finally:
        await world.close()
    print(json.dumps(chunks))

asyncio.run(main(sys.argv[2], sys.argv[3]))
"""


def test_a_run_with_streams_replays_and_reads_in_a_fresh_process(tmp_path: Path) -> None:
    path = tmp_path / "w.db"

    async def run_it() -> tuple[str, list[Any]]:
        clock = FixedClock()
        world = SQLiteWorld(path, clock=clock, ids=CountingIds())
        try:
            run = await start(two_writers, world=world)
            await run_to_end(world, clock, run)
            return run.run_id, await read_all(world, run.run_id, "shared")
        finally:
            await world.close()

    run_id, chunks = asyncio.run(run_it())
    out = subprocess.run(
        [sys.executable, "-c", _COLD, str(HERE), str(path), run_id],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == chunks


# -- errors -------------------------------------------------------------------------------------


@step
async def write_after_close() -> str:
    writable = get_writable("once")
    await writable.write("only")
    await writable.close()
    try:
        await writable.write("late")
    except DurasimError as exc:
        return type(exc).__name__
    return "written"


@workflow
async def closing_early() -> str:
    return await write_after_close()


async def test_a_write_after_close_is_refused(world: World, clock: FixedClock) -> None:
    run = await start(closing_early, world=world)
    await run_to_end(world, clock, run)
    assert await run.result() == "StreamClosed"
    assert await read_all(world, run.run_id, "once") == ["only"]


@workflow
async def writing_in_workflow() -> str:
    try:
        await get_writable().write("from the workflow")
    except DurasimError as exc:
        return str(exc)
    return "written"


async def test_workflow_code_cannot_write_and_is_told_to_use_a_step(
    world: World, clock: FixedClock
) -> None:
    run = await start(writing_in_workflow, world=world)
    await run_to_end(world, clock, run)
    message = await run.result()
    assert "in workflow code" in message
    assert "pass the writable to a step" in message
    assert await world.streams.list(run.run_id) == ()


@workflow
async def bad_namespace() -> str:
    try:
        get_writable("no spaces allowed")
    except InvalidRequest as exc:
        return str(exc)
    return "accepted"


async def test_a_bad_namespace_is_refused_with_the_rule(world: World, clock: FixedClock) -> None:
    run = await start(bad_namespace, world=world)
    await run_to_end(world, clock, run)
    assert "use 1-128 characters from [A-Za-z0-9_.:/-]" in await run.result()
    with pytest.raises(InvalidRequest, match="malformed"):
        await read_all(world, run.run_id, "x" * 129)
    with pytest.raises(InvalidRequest, match="malformed"):
        await read_all(world, run.run_id, "")


async def test_get_writable_outside_a_run_is_refused() -> None:
    with pytest.raises(DurasimError, match="outside a workflow or step"):
        get_writable()
    with pytest.raises(DurasimError, match="outside a step body"):
        await Writable(run_id="r", namespace="default").write(1)
    with pytest.raises(DurasimError, match="outside a step body"):
        await Writable(run_id="r", namespace="default").close()


def test_attempt_state_follows_the_attempt_object_not_an_equal_value() -> None:
    # Two Worlds in one process may hold the same run id: equal metadata, different attempts.
    first = StepMetadata(run_id="run-1", step_id="s#1", step_name="s", attempt=2)
    second = StepMetadata(run_id="run-1", step_id="s#1", step_name="s", attempt=2)
    handle = Writable(run_id="run-1", namespace="default")
    state = _state(first, handle)
    assert _state(first, handle) is state
    assert _state(second, handle) is not state
    key = id(first)
    del first, state
    gc.collect()
    assert key not in _ATTEMPTS  # forgotten when the attempt ends
