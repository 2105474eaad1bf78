"""PostgreSQL: one statement sent through libpq itself (``_postgres_wire.DirectStatements``).

The one-statement write skips psycopg's cursor; these tests hold it to the
cursor's behaviour: every value of every SQL type the write uses is stored as
the cursor stores it, a value of another Python type is left to the cursor, a
server error is psycopg's own exception and leaves the connection usable.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pgload_flows
import psycopg
import psycopg.errors
import pytest
from _postgres_support import new_schema, require_postgres
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.pq import TransactionStatus

from durasim.runtime import Worker, start
from durasim.worlds import PostgresWorld
from durasim.worlds import _postgres_events as pe
from durasim.worlds import _postgres_wire as wire

TYPES = ("text", "bigint", "integer", "boolean", "bytea")
COLUMNS = ", ".join(f"c_{t} {t}" for t in TYPES)
INSERT = (
    "INSERT INTO wire_t (k, c_text, c_bigint, c_integer, c_boolean, c_bytea) "
    "VALUES ($1::bigint, $2::text, $3::bigint, $4::integer, $5::boolean, $6::bytea) RETURNING k"
)
ROW_TYPES = ("bigint", *TYPES)
# PostgreSQL's text holds no NUL character: neither path can store one.
TEXTS = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
ROWS = st.tuples(
    st.none() | TEXTS,
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.none() | st.booleans(),
    st.none() | st.binary(max_size=300),
)


@pytest.fixture
def dsn() -> str:
    return require_postgres()


def _sendable(
    params: tuple[Any, ...], types: tuple[str, ...]
) -> tuple[list[bytes | None], tuple[int, ...]]:
    sendable = wire.wire_params(params, types)
    assert sendable is not None
    return sendable


async def _connection(dsn: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await conn.execute(f"CREATE TEMPORARY TABLE wire_t (k bigint PRIMARY KEY, {COLUMNS})")
    return conn


def test_values_of_each_type_are_stored_as_the_cursor_stores_them(dsn: str) -> None:
    @settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(row=ROWS)
    def check(row: tuple[Any, ...]) -> None:
        async def both() -> None:
            conn = await _connection(dsn)
            try:
                direct = wire.DirectStatements(conn)
                assert await direct.first_value(INSERT, *_sendable((1, *row), ROW_TYPES)) == b"1"
                await psycopg.AsyncRawCursor(conn).execute(INSERT, (2, *row))
                cur = await conn.execute(
                    "SELECT c_text, c_bigint, c_integer, c_boolean, c_bytea FROM wire_t ORDER BY k"
                )
                by_wire, by_cursor = await cur.fetchall()
                assert by_wire == by_cursor
                assert by_wire == row
                assert conn.pgconn.transaction_status == TransactionStatus.IDLE
            finally:
                await conn.close()

        asyncio.run(both())

    check()


@pytest.mark.parametrize(
    ("value", "sql_type"),
    [
        (1.5, "bigint"),  # a float is not rounded into an integer column
        (True, "text"),
        (3, "text"),
        (bytearray(b"x"), "bytea"),
        (memoryview(b"x"), "bytea"),
        ("x", "bytea"),
        (2**31, "integer"),
        (2**63, "bigint"),
        (2, "boolean"),
    ],
)
def test_a_value_not_of_its_types_python_type_is_left_to_the_cursor(
    value: object, sql_type: str
) -> None:
    assert wire.wire_params(("k", value), ("text", sql_type)) is None


def test_a_parameter_count_unlike_the_types_is_refused() -> None:
    with pytest.raises(ValueError, match="2 parameters for 1 types"):
        wire.wire_params(("a", "b"), ("text",))


async def test_a_server_error_is_psycopgs_exception_and_the_connection_stays_usable(
    dsn: str,
) -> None:
    conn = await _connection(dsn)
    try:
        direct = wire.DirectStatements(conn)
        sendable = _sendable((7, "a", 1, 1, True, b"b"), ROW_TYPES)
        assert await direct.first_value(INSERT, *sendable) == b"7"
        with pytest.raises(psycopg.errors.UniqueViolation):
            await direct.first_value(INSERT, *sendable)
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
        with pytest.raises(psycopg.errors.UndefinedTable):
            await direct.first_value("SELECT k FROM no_such_table WHERE k = $1", [b"1"], [0])
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
        select = "SELECT k FROM wire_t WHERE k = $1"
        assert await direct.first_value(select, *_sendable((8,), ("bigint",))) is None
        assert await direct.first_value(select, *_sendable((7,), ("bigint",))) == b"7"
    finally:
        await conn.close()


async def test_statements_past_the_prepared_limit_still_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wire, "_MAX_PREPARED", 2)
    conn = await _connection(dsn)
    try:
        direct = wire.DirectStatements(conn)
        for n in range(5):  # 2 prepared, 3 sent unnamed; each twice
            for _ in range(2):
                value = await direct.first_value(f"SELECT {n} + $1::integer", [b"1"], [0])
                assert value == str(n + 1).encode()
        cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
        assert await cur.fetchone() == (2,)
    finally:
        await conn.close()


async def test_the_dedicated_connections_socket_is_watched_only_while_a_statement_waits(
    dsn: str,
) -> None:
    """Runs served together (step writes, claims and acks interleave on one World).

    The simulator's loop reads a watched socket as input or output in flight, so
    the socket must not stay watched between statements (a reader kept on it
    once made a simulation wait on it for ever).
    """
    world = await PostgresWorld(dsn, schema=new_schema(), pool_size=2).open()
    try:
        handles = [await start(pgload_flows.chain, 5, world=world) for _ in range(6)]
        worker = Worker(world, concurrency=3)
        # A guard against a lost wake-up, not a timed assertion.
        await asyncio.wait_for(worker.drain(), timeout=120)
        assert [await h.result() for h in handles] == [pgload_flows.expected(5)] * 6
        direct = world._direct
        assert direct is not None
        assert not asyncio.get_running_loop().remove_reader(direct.pgconn.socket)
    finally:
        await world.close()


@pytest.mark.parametrize("run_changed", [False, True])
@pytest.mark.parametrize("events", [1, 3])
@pytest.mark.parametrize("entities", [(0, 0, 0, 0, 0, 0), (1, 1, 0, 0, 0, 0), (1, 2, 2, 1, 1, 2)])
def test_the_one_statement_writes_types_follow_its_placeholders(
    run_changed: bool, events: int, entities: tuple[int, ...]
) -> None:
    """Every ``$n::type`` cast in the statement names the type ``_fast_types`` gives ``$n``."""
    statement = pe._fast_write(run_changed, events, *entities)
    types = pe._fast_types(run_changed, events, *entities)
    numbers = [int(n) for n in re.findall(r"\$(\d+)", statement)]
    assert sorted(numbers) == list(range(1, len(types) + 1))
    casts = re.findall(r"\$(\d+)::(\w+)", statement)
    assert casts, statement
    for number, cast in casts:
        assert types[int(number) - 1] == cast, (number, cast)


async def test_text_holding_a_nul_is_refused_by_the_server_not_cut_short(dsn: str) -> None:
    """libpq reads a text-format value up to its first NUL; text goes in binary instead."""
    conn = await _connection(dsn)
    try:
        direct = wire.DirectStatements(conn)
        with pytest.raises(psycopg.errors.CharacterNotInRepertoire):
            await direct.first_value(
                INSERT, *_sendable((9, "ab\x00cd", 1, 1, True, b""), ROW_TYPES)
            )
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
        cur = await conn.execute("SELECT count(*) FROM wire_t")
        assert await cur.fetchone() == (0,)
    finally:
        await conn.close()


async def test_a_connection_not_in_utf8_is_left_to_psycopg(dsn: str) -> None:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, client_encoding="LATIN1")
    try:
        assert not wire.DirectStatements.usable_on(conn)
        with pytest.raises(ValueError, match="DirectStatements sends UTF-8"):
            wire.DirectStatements(conn)
    finally:
        await conn.close()
