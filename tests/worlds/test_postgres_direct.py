"""The PostgreSQL World's connection for one-statement writes (``PostgresWorld._direct``).

A write cancelled mid-statement leaves neither a busy connection nor a stale
memory behind, and a server hanging up between writes is noticed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from _postgres_support import new_schema, require_postgres
from psycopg.pq import TransactionStatus

from durasim.worlds import EventRequest, EventType, PostgresWorld, World

req = EventRequest.of


@pytest.fixture
def dsn() -> str:
    return require_postgres()


async def _start_run(world: World, run_id: str) -> None:
    await world.events.create(run_id, req("run_created", workflow_name="wf", input=b""))
    await world.events.create(run_id, req("run_started"))


async def _step(world: PostgresWorld, run_id: str, k: int) -> Any:
    return await world.events.create_batch(
        run_id,
        [
            req("step_created", f"s#{k}", step_name="s", input=b"%d" % k),
            req("step_started", f"s#{k}"),
        ],
    )


async def test_a_write_cancelled_mid_statement_leaves_no_busy_connection(dsn: str) -> None:
    """The statement may or may not land; either way the next writes are right."""
    world = await PostgresWorld(dsn, schema=new_schema(), pool_size=2).open()
    try:
        await _start_run(world, "r")
        await _step(world, "r", 0)
        direct = world._direct
        assert direct is not None
        task = asyncio.ensure_future(_step(world, "r", 1))
        for _ in range(1000):  # until the statement is sent and its result awaited
            if direct.pgconn.transaction_status == TransactionStatus.ACTIVE:
                break
            await asyncio.sleep(0)
        assert direct.pgconn.transaction_status == TransactionStatus.ACTIVE, (
            "the write never waited on the server"
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # psycopg cancels the statement and keeps the connection idle, or the World drops it.
        kept = world._direct
        assert kept is None or kept.pgconn.transaction_status == TransactionStatus.IDLE
        assert kept is not None or direct.closed
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
