"""One statement on the World's dedicated connection, sent through libpq itself.

A step's write is one autocommit statement on a connection only the World uses
(see ``PostgresWorld._transact``).  psycopg's async ``execute`` wraps that round
trip in a cursor, a query converter, a generator and a waiting coroutine that
arms a timer for every wait: in a loop of one-row INSERTs it cost 228k
instructions a statement, against 7.5k for ``psycopg.pq``'s own blocking call
(callgrind, 2026-12-03).  :class:`DirectStatements` speaks the extended
protocol through ``psycopg.pq`` (the libpq binding psycopg publishes) instead:
each statement prepared once per connection, each parameter encoded for the
SQL type the statement gives it (in binary: UTF-8 text, integers, ``bytea``;
``boolean`` as text) with its type left to the statement's casts, and the
socket waited on with the event loop's reader.  A worker's PostgreSQL step
went from 753k to 638k instructions (``bench_postgres.py --instructions``,
medians of 3).  Errors come back as the exceptions psycopg itself raises
(``UniqueViolation``, ``OperationalError``, ...), so callers handle them alike;
a parameter not of its type's Python type is not sent here (:func:`wire_params`
answers ``None`` and the caller uses a cursor).

A statement interrupted midway (cancelled, connection lost) leaves the
connection busy; the World then drops it (``_check_direct``), as before.
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

import psycopg
import psycopg.errors
from psycopg.pq import ExecStatus
from psycopg.pq.abc import PGresult

__all__ = ["DirectStatements", "wire_params"]

_TUPLES_OK: Final = ExecStatus.TUPLES_OK
_COMMAND_OK: Final = ExecStatus.COMMAND_OK
#: Beyond this many prepared statements on one connection, the rest go unnamed
#: (parsed per call) rather than grow the server session without bound.
_MAX_PREPARED: Final = 128


#: How a value of each SQL type the one-statement writes use is sent, and in which
#: format (0 text, 1 binary).  Each is a C callable that refuses a value of another
#: Python type rather than convert it (``TypeError``; ``struct.error`` for a
#: non-integer or an integer out of the column's range; ``KeyError`` for a
#: ``boolean`` that is neither True nor False).
_ENCODERS: Final[dict[str, tuple[Callable[[Any], bytes], int]]] = {
    # In binary, as its length goes with it: libpq reads a text-format value up to
    # its first NUL (silently cutting it short), the server refuses a NUL in binary.
    "text": (str.encode, 1),
    "bigint": (struct.Struct("!q").pack, 1),
    "integer": (struct.Struct("!i").pack, 1),
    "boolean": ({True: b"t", False: b"f"}.__getitem__, 0),
    "bytea": (bytes.__bytes__, 1),
}


@functools.lru_cache(maxsize=128)
def _encoding(
    types: tuple[str, ...],
) -> tuple[tuple[Callable[[Any], bytes], ...], tuple[int, ...]]:
    # Tuples: the cache hands the same objects to every caller.
    return tuple(_ENCODERS[t][0] for t in types), tuple(_ENCODERS[t][1] for t in types)


def wire_params(
    params: Sequence[Any], types: tuple[str, ...]
) -> tuple[list[bytes | None], tuple[int, ...]] | None:
    """``params`` (of the SQL ``types``) as libpq values and formats; ``None``: send them otherwise.

    ``None`` when a value is not of its type's Python type (a ``bytearray`` for
    ``bytea``, a ``float`` for ``bigint``) or out of its range: the caller sends
    the statement through a cursor, which adapts any value psycopg knows.
    Values reach the server with no type of their own, so every parameter must
    take its type from the statement (a cast, or the column it lands in), as the
    one-statement writes' do.
    """
    encoders, formats = _encoding(types)
    if len(params) != len(encoders):
        raise ValueError(f"{len(params)} parameters for {len(encoders)} types")
    try:
        values = [
            None if v is None else encode(v) for encode, v in zip(encoders, params, strict=False)
        ]
    except (TypeError, KeyError, struct.error):
        return None
    return values, formats


class DirectStatements:
    """Prepared statements on one autocommit connection, answered through libpq.

    Text goes as UTF-8: only for a connection whose client encoding is UTF-8
    (:meth:`usable_on`).
    """

    @staticmethod
    def usable_on(conn: psycopg.AsyncConnection[Any]) -> bool:
        """Whether ``conn`` takes text as UTF-8 (psycopg encodes for any other encoding)."""
        return conn.info.encoding == "utf-8"

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if not self.usable_on(conn):
            raise ValueError(
                f"client encoding {conn.info.encoding!r}: DirectStatements sends UTF-8"
            )
        self.conn = conn
        self._pg = conn.pgconn
        self._encoding = conn.info.encoding
        self._names: dict[str, bytes] = {}

    async def first_value(
        self, statement: str, values: Sequence[bytes | None], formats: Sequence[int]
    ) -> bytes | None:
        """Run ``statement`` (``$n`` placeholders); its first row's first column, as text.

        ``None`` if it returned no row or a NULL.  Raises what psycopg raises for
        the server's error or a lost connection.
        """
        pg = self._pg
        name = self._names.get(statement)
        if name is None and len(self._names) < _MAX_PREPARED:
            name = f"durasim_{len(self._names)}".encode()
            pg.send_prepare(name, statement.encode(), None)
            await self._result(_COMMAND_OK)
            self._names[statement] = name
        if name is None:
            pg.send_query_params(statement.encode(), values, param_formats=formats)
        else:
            pg.send_query_prepared(name, values, formats)
        result = await self._result(_TUPLES_OK)
        if result is None or result.ntuples == 0:
            return None
        return result.get_value(0, 0)

    async def _result(self, expected: ExecStatus) -> PGresult | None:
        """Flush what was sent, wait for the answer; its one result (``None`` if none)."""
        pg = self._pg
        if pg.flush():
            await self._flushed()
        first: PGresult | None = None
        error: PGresult | None = None
        while True:
            while pg.is_busy():
                await self._readable()
                pg.consume_input()
            result = pg.get_result()
            if result is None:
                break
            if result.status != expected:
                error = error or result
            elif first is None:
                first = result
        if error is not None:
            raise psycopg.errors.error_from_result(error, encoding=self._encoding)
        return first

    async def _readable(self) -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = self._pg.socket
        loop.add_reader(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)

    async def _flushed(self) -> None:
        """Wait until libpq has sent everything (a statement larger than the socket's buffer)."""
        loop = asyncio.get_running_loop()
        pg = self._pg
        fd = pg.socket
        while True:
            ready = loop.create_future()
            loop.add_writer(fd, _wake, ready)
            loop.add_reader(fd, _wake, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
                loop.remove_reader(fd)
            pg.consume_input()  # what the server sent meanwhile (a notice), kept for later
            if not pg.flush():
                return


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)
