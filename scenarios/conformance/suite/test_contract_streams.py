"""Contract: per-run named chunk streams."""

from __future__ import annotations

import pytest

from durasim.worlds import (
    Chunk,
    InvalidRequest,
    RunNotFound,
    StreamClosed,
    StreamInfo,
    World,
)

from ._fixtures import clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import assert_refused, new_run


async def test_write_one_and_many(world: World) -> None:
    run_id = await new_run(world)
    assert await world.streams.write(run_id, "out", b"a") == 0
    assert await world.streams.write(run_id, "out", [b"b", b"c"]) == 2
    assert await world.streams.write(run_id, "out", (b"d",)) == 3
    page = await world.streams.read(run_id, "out")
    assert page.chunks == tuple(
        Chunk(index=i, data=d) for i, d in enumerate([b"a", b"b", b"c", b"d"])
    )
    assert page.next_index == 4
    assert not page.has_more
    assert not page.closed
    assert not page.done
    assert await world.streams.info(run_id, "out") == StreamInfo(tail_index=3, closed=False)


async def test_read_from_an_index_with_a_limit(world: World) -> None:
    run_id = await new_run(world)
    await world.streams.write(run_id, "out", [bytes([i]) for i in range(10)])
    page = await world.streams.read(run_id, "out", start=3, limit=4)
    assert [c.index for c in page.chunks] == [3, 4, 5, 6]
    assert [c.data for c in page.chunks] == [bytes([i]) for i in (3, 4, 5, 6)]
    assert page.next_index == 7
    assert page.has_more
    rest = await world.streams.read(run_id, "out", start=page.next_index)
    assert [c.index for c in rest.chunks] == [7, 8, 9]
    assert not rest.has_more
    past = await world.streams.read(run_id, "out", start=10)
    assert past.chunks == ()
    assert past.next_index == 10
    assert not past.has_more


async def test_read_from_a_negative_index(world: World) -> None:
    run_id = await new_run(world)
    await world.streams.write(run_id, "out", [b"0", b"1", b"2", b"3"])
    tail = await world.streams.read(run_id, "out", start=-2)
    assert [c.index for c in tail.chunks] == [2, 3]
    clamped = await world.streams.read(run_id, "out", start=-99)
    assert [c.index for c in clamped.chunks] == [0, 1, 2, 3]


async def test_empty_stream(world: World) -> None:
    run_id = await new_run(world)
    assert await world.streams.info(run_id, "nothing") == StreamInfo(tail_index=-1, closed=False)
    page = await world.streams.read(run_id, "nothing")
    assert page.chunks == ()
    assert page.next_index == 0
    assert not page.done
    assert await world.streams.list(run_id) == ()


async def test_close_is_idempotent_and_final(world: World) -> None:
    run_id = await new_run(world)
    await world.streams.write(run_id, "out", [b"a", b"b"])
    await world.streams.close(run_id, "out")
    await world.streams.close(run_id, "out")
    assert await world.streams.info(run_id, "out") == StreamInfo(tail_index=1, closed=True)
    exc = await assert_refused(
        world, StreamClosed, lambda: world.streams.write(run_id, "out", b"late")
    )
    assert exc.run_id == run_id  # type: ignore[attr-defined]
    page = await world.streams.read(run_id, "out")
    assert page.closed
    assert page.done
    partial = await world.streams.read(run_id, "out", limit=1)
    assert partial.closed
    assert not partial.done


async def test_close_of_an_empty_stream(world: World) -> None:
    run_id = await new_run(world)
    await world.streams.close(run_id, "never")
    assert await world.streams.info(run_id, "never") == StreamInfo(tail_index=-1, closed=True)
    assert (await world.streams.read(run_id, "never")).done
    await assert_refused(world, StreamClosed, lambda: world.streams.write(run_id, "never", b"x"))


async def test_list_names_sorted_per_run(world: World) -> None:
    run_a = await new_run(world)
    run_b = await new_run(world)
    for name in ("stdout", "events/2", "a.log"):
        await world.streams.write(run_a, name, b"x")
    await world.streams.write(run_b, "other", b"y")
    assert await world.streams.list(run_a) == ("a.log", "events/2", "stdout")
    assert await world.streams.list(run_b) == ("other",)
    assert (await world.streams.read(run_b, "stdout")).chunks == ()


async def test_streams_of_unknown_runs(world: World) -> None:
    for action in (
        lambda: world.streams.write("nope", "out", b"x"),
        lambda: world.streams.close("nope", "out"),
        lambda: world.streams.read("nope", "out"),
        lambda: world.streams.info("nope", "out"),
        lambda: world.streams.list("nope"),
    ):
        await assert_refused(world, RunNotFound, action)


@pytest.mark.parametrize(
    "chunks",
    ["text", bytearray(b"x"), memoryview(b"x"), [b"ok", "bad"], [b"ok", bytearray(b"x")], 7],
    ids=["str", "bytearray", "memview", "list-with-str", "list-with-bytearray", "int"],
)
async def test_chunks_must_be_bytes(world: World, chunks: object) -> None:
    run_id = await new_run(world)
    await world.streams.write(run_id, "out", b"first")
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.streams.write(run_id, "out", chunks),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("name", ["", "a b", "../x", "x'; DROP TABLE streams;--", "é"])
async def test_bad_stream_names(world: World, name: str) -> None:
    run_id = await new_run(world)
    for action in (
        lambda: world.streams.write(run_id, name, b"x"),
        lambda: world.streams.close(run_id, name),
        lambda: world.streams.read(run_id, name),
        lambda: world.streams.info(run_id, name),
    ):
        await assert_refused(world, InvalidRequest, action)


async def test_bad_read_arguments(world: World) -> None:
    run_id = await new_run(world)
    for kwargs in ({"limit": 0}, {"start": "0"}, {"start": 1.0}):
        await assert_refused(
            world,
            InvalidRequest,
            lambda kw=kwargs: world.streams.read(run_id, "out", **kw),  # type: ignore[misc]
        )
