"""The PostgreSQL World's connection for one-statement writes: its socket stays watched.

The connection (``PostgresWorld._direct``) waits for results on one future per
statement, its socket registered with the event loop once.  These pin that the
registration lives exactly as long as the connection, and that a write
cancelled mid-statement leaves neither a busy connection nor a stale memory
behind.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

import psycopg
import pytest
from _postgres_support import new_schema, require_postgres

from durasim.worlds import EventRequest, EventType, PostgresWorld, World

req = EventRequest.of


@pytest.fixture
def dsn() -> str:
    return require_postgres()


async def _start_run(world: World, run_id: str) -> None:
    await world.events.create(run_id, req("run_created", workflow_name="wf", input=b""))
    await world.events.create(run_id, req("run_started"))


def _watched(fd: int) -> selectors.SelectorKey | None:
    """The running loop's registration of ``fd``, if any."""
    selector: selectors.BaseSelector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    return selector.get_map().get(fd)


async def _step(world: PostgresWorld, run_id: str, k: int) -> Any:
    return await world.events.create_batch(
        run_id,
        [
            req("step_created", f"s#{k}", step_name="s", input=b"%d" % k),
            req("step_started", f"s#{k}"),
        ],
    )


async def test_the_socket_is_watched_once_while_open_and_released_on_close(dsn: str) -> None:
    world = await PostgresWorld(dsn, schema=new_schema(), pool_size=2).open()
    try:
        await _start_run(world, "r")
        await _step(world, "r", 0)
        direct = world._direct
        assert direct is not None, "the write did not take the one-statement path"
        fd = direct.pgconn.socket
        key = _watched(fd)
        assert key is not None
        for k in range(1, 6):
            await _step(world, "r", k)
            assert world._direct is direct
            assert _watched(fd) is key  # registered once, not per statement
        page = await world.events.list("r")
        assert [e.seq for e in page.events] == list(range(1, 15))
        world._check()
    finally:
        await world.close()
    assert direct.closed
    assert _watched(fd) is None


async def test_a_write_cancelled_mid_statement_drops_its_connection(dsn: str) -> None:
    """The statement may or may not land; either way the next writes are right."""
    world = await PostgresWorld(dsn, schema=new_schema(), pool_size=2).open()
    try:
        await _start_run(world, "r")
        await _step(world, "r", 0)
        direct = world._direct
        assert direct is not None
        fd = direct.pgconn.socket
        task = asyncio.ensure_future(_step(world, "r", 1))
        for _ in range(1000):  # until the statement is sent and its result awaited
            if direct._waiter is not None:
                break
            await asyncio.sleep(0)
        assert direct._waiter is not None, "the write never waited on the server"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert world._direct is None
        assert direct.closed
        assert _watched(fd) is None
        for k in range(2, 5):
            await _step(world, "r", k)
        page = await world.events.list("r")
        created = [e.correlation_id for e in page.events if e.type is EventType.STEP_CREATED]
        assert created in (["s#0", "s#2", "s#3", "s#4"], ["s#0", "s#1", "s#2", "s#3", "s#4"])
        assert [e.seq for e in page.events] == list(range(1, len(page.events) + 1))
        world._check()
    finally:
        await world.close()


async def test_a_server_hanging_up_between_writes_is_noticed_and_replaced(dsn: str) -> None:
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema, pool_size=2).open()
    try:
        await _start_run(world, "r")
        await _step(world, "r", 0)
        direct = world._direct
        assert direct is not None
        with psycopg.connect(dsn, autocommit=True) as conn:
            pid = direct.pgconn.backend_pid
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for k in range(1, 4):
            await _step(world, "r", k)
        assert world._direct is not direct
        assert direct.closed
        page = await world.events.list("r")
        assert [e.seq for e in page.events] == list(range(1, 11))
        world._check()
    finally:
        await world.close()
