"""The SQLite World's queue and streams facets (docs/protocol.md §11, §12).

Each call is one transaction on the World's connection, taken with the write lock
when it changes anything, so claims by several processes never hand one lease out
twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from . import _sqlite_schema as sql
from ._checks import (
    check_chunks,
    check_delay,
    check_limit,
    check_message,
    check_queue_name,
    check_queue_prefix,
    clamp_start,
)
from ._entities import Chunk, ChunkPage, Delivery, Message, StreamInfo
from ._errors import LeaseLost, StreamClosed, WorldError
from ._events import check_stream_name
from ._facet import WorldFacet
from ._time import from_micros, to_micros

if TYPE_CHECKING:
    from ._sqlite import SQLiteWorld

__all__ = ["SQLiteLeaseRenewer", "SQLiteQueue", "SQLiteStreams"]


def _message_from_row(row: Sequence[Any]) -> Message:
    return Message(
        message_id=row[0],
        queue_name=row[1],
        payload=bytes(row[2]),
        available_at=from_micros(row[3]),
        enqueued_at=from_micros(row[4]),
        attempt=row[5],
        run_id=row[6],
        orchestrator=bool(row[7]),
        idempotency_key=row[8],
    )


class _Facet(WorldFacet["SQLiteWorld"]):
    """A facet of the SQLiteWorld (:mod:`._facet`: it holds its World weakly)."""

    def __init__(self, world: SQLiteWorld) -> None:
        super().__init__(world)


class SQLiteQueue(_Facet):
    async def enqueue(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        idempotency_key: str | None = None,
        delay: float = 0.0,
    ) -> str:
        w = self._w
        check_queue_name(queue_name)
        check_message(payload, run_id, orchestrator, idempotency_key)
        delay = check_delay(delay)
        with w._write() as db:
            if idempotency_key is not None:
                row = db.execute(
                    "SELECT message_id FROM messages WHERE idempotency_key = ?", (idempotency_key,)
                ).fetchone()
                if row is not None:
                    return str(row[0])
            now = w._clock.now()
            message_id = w._ids.new_id("msg")
            available = to_micros(now + timedelta(seconds=delay))
            db.execute(
                f"INSERT INTO messages ({sql.MESSAGE_COLUMNS}, due_at) VALUES "
                "(?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
                (
                    message_id,
                    queue_name,
                    payload,
                    available,
                    to_micros(now),
                    run_id,
                    int(orchestrator),
                    idempotency_key,
                    available,
                ),
            )
        return message_id

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        w = self._w
        lease = check_delay(lease_seconds, what="lease_seconds")
        check_queue_prefix(queue_prefix)
        with w._write() as db:
            now = w._clock.now()
            now_us = to_micros(now)
            busy = {
                r[0]
                for r in db.execute(
                    "SELECT DISTINCT run_id FROM messages WHERE orchestrator = 1 "
                    "AND lease_expires_at > ?",
                    (now_us,),
                )
            }
            picked, dead = self._pick(db, now_us, queue_prefix, busy)
            for row in dead:
                db.execute(
                    f"INSERT INTO dead_letters ({sql.MESSAGE_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                db.execute("DELETE FROM messages WHERE message_id = ?", (row[0],))
            if picked is not None:
                lease_id = w._ids.new_id("lease")
                expires = now + timedelta(seconds=lease)
                db.execute(
                    "UPDATE messages SET attempt = attempt + 1, lease_id = ?, "
                    "lease_expires_at = ?, due_at = ? WHERE message_id = ?",
                    (lease_id, to_micros(expires), to_micros(expires), picked.message_id),
                )
                message = attrs.evolve(picked, attempt=picked.attempt + 1)
                return Delivery(message=message, lease_id=lease_id, lease_expires_at=expires)
        return None

    def _pick(
        self, db: sqlite3.Connection, now_us: int, prefix: str, busy: set[str]
    ) -> tuple[Message | None, list[tuple[Any, ...]]]:
        """The first claimable message, and the exhausted ones met before it.

        Reads due messages a few at a time in claim order, so a long queue
        costs a claim only the rows it has to look at.
        """
        limit = self._w._max_deliveries
        dead: list[tuple[Any, ...]] = []
        cursor = db.execute(
            f"SELECT {sql.MESSAGE_COLUMNS} FROM messages WHERE due_at <= ? "
            "AND substr(queue_name, 1, ?) = ? ORDER BY due_at, ord",
            (now_us, len(prefix), prefix),
        )
        try:
            while rows := cursor.fetchmany(64):
                for row in rows:
                    message = _message_from_row(row)
                    if message.orchestrator and message.run_id in busy:
                        continue
                    if limit is not None and message.attempt >= limit:
                        dead.append(tuple(row))
                        continue
                    return message, dead
        finally:
            cursor.close()
        return None, dead

    def _held(self, db: sqlite3.Connection, delivery: Delivery) -> None:
        row = db.execute(
            "SELECT lease_id FROM messages WHERE message_id = ?", (delivery.message_id,)
        ).fetchone()
        if row is None or row[0] != delivery.lease_id:
            raise LeaseLost(
                f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
                "held (acked, or re-claimed after it expired); the message is not yours to settle",
                message_id=delivery.message_id,
            )

    async def ack(self, delivery: Delivery) -> None:
        with self._w._write() as db:
            self._held(db, delivery)
            db.execute("DELETE FROM messages WHERE message_id = ?", (delivery.message_id,))

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        delay = check_delay(delay)
        with self._w._write() as db:
            self._held(db, delivery)
            available = to_micros(self._w._clock.now() + timedelta(seconds=delay))
            db.execute(
                "UPDATE messages SET lease_id = NULL, lease_expires_at = NULL, available_at = ?, "
                "due_at = ? WHERE message_id = ?",
                (available, available, delivery.message_id),
            )

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        lease = check_delay(lease_seconds, what="lease_seconds")
        with self._w._write() as db:
            self._held(db, delivery)
            expires = self._w._clock.now() + timedelta(seconds=lease)
            db.execute(
                "UPDATE messages SET lease_expires_at = ?, due_at = ? WHERE message_id = ?",
                (to_micros(expires), to_micros(expires), delivery.message_id),
            )
        return attrs.evolve(delivery, lease_expires_at=expires)

    def lease_renewer(self) -> SQLiteLeaseRenewer:
        """An extender for another thread: its own connection to the file (opened there)."""
        return SQLiteLeaseRenewer(self._w)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        check_queue_prefix(queue_prefix)
        row = (
            self._w._live()
            .execute(
                "SELECT min(due_at) FROM messages WHERE substr(queue_name, 1, ?) = ?",
                (len(queue_prefix), queue_prefix),
            )
            .fetchone()
        )
        return None if row[0] is None else from_micros(row[0])

    async def messages(self) -> tuple[Message, ...]:
        rows = (
            self._w._live()
            .execute(f"SELECT {sql.MESSAGE_COLUMNS} FROM messages ORDER BY ord")
            .fetchall()
        )
        return tuple(_message_from_row(r) for r in rows)

    async def dead_letters(self) -> tuple[Message, ...]:
        rows = (
            self._w._live()
            .execute(f"SELECT {sql.MESSAGE_COLUMNS} FROM dead_letters ORDER BY ord")
            .fetchall()
        )
        return tuple(_message_from_row(r) for r in rows)


class SQLiteLeaseRenewer:
    """Renews leases on a connection of its own, so a busy World loop cannot hold it back.

    The connection is opened by the first :meth:`extend`, in the calling thread
    (a heartbeat thread), and waits for the write lock at most a second: a
    renewal that cannot get it is retried at the next beat.
    """

    def __init__(self, world: SQLiteWorld) -> None:
        self._w = world
        self._db: sqlite3.Connection | None = None

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        lease = check_delay(lease_seconds, what="lease_seconds")
        w = self._w
        try:
            if self._db is None:
                self._db = sqlite3.connect(w.path, isolation_level=None, timeout=1.0)
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                w._check_file()
                expires = w._clock.now() + timedelta(seconds=lease)
                updated = db.execute(
                    "UPDATE messages SET lease_expires_at = ?, due_at = ? "
                    "WHERE message_id = ? AND lease_id = ?",
                    (
                        to_micros(expires),
                        to_micros(expires),
                        delivery.message_id,
                        delivery.lease_id,
                    ),
                ).rowcount
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise WorldError(
                f"SQLite World {str(w.path)!r}: renewing the lease of message "
                f"{delivery.message_id!r} failed ({exc}); it is retried",
                path=str(w.path),
            ) from exc
        if updated != 1:
            raise LeaseLost(
                f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
                "held (acked, or re-claimed after it expired); it cannot be renewed",
                message_id=delivery.message_id,
            )
        return attrs.evolve(delivery, lease_expires_at=expires)

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class SQLiteStreams(_Facet):
    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = check_chunks(chunks)
        check_stream_name(name)
        with self._w._write() as db:
            self._w._require_run(db, run_id)
            row = db.execute(
                "SELECT closed, length FROM streams WHERE run_id = ? AND name = ?", (run_id, name)
            ).fetchone()
            closed, length = row if row is not None else (0, 0)
            if closed:
                raise StreamClosed(
                    f"stream {name!r} of run {run_id!r} is closed; open a new stream name",
                    run_id=run_id,
                )
            db.executemany(
                "INSERT INTO chunks (run_id, name, idx, data) VALUES (?, ?, ?, ?)",
                [(run_id, name, length + i, c) for i, c in enumerate(batch)],
            )
            db.execute(
                "INSERT INTO streams (run_id, name, closed, length) VALUES (?, ?, 0, ?) "
                "ON CONFLICT (run_id, name) DO UPDATE SET length = excluded.length",
                (run_id, name, length + len(batch)),
            )
        return length + len(batch) - 1

    async def close(self, run_id: str, name: str) -> None:
        check_stream_name(name)
        with self._w._write() as db:
            self._w._require_run(db, run_id)
            db.execute(
                "INSERT INTO streams (run_id, name, closed, length) VALUES (?, ?, 1, 0) "
                "ON CONFLICT (run_id, name) DO UPDATE SET closed = 1",
                (run_id, name),
            )

    def _state(self, db: sqlite3.Connection, run_id: str, name: str) -> tuple[bool, int]:
        check_stream_name(name)
        self._w._require_run(db, run_id)
        row = db.execute(
            "SELECT closed, length FROM streams WHERE run_id = ? AND name = ?", (run_id, name)
        ).fetchone()
        return (False, 0) if row is None else (bool(row[0]), int(row[1]))

    async def read(self, run_id: str, name: str, *, start: int = 0, limit: int = 100) -> ChunkPage:
        check_limit(limit)
        with self._w._read() as db:
            closed, length = self._state(db, run_id, name)
            first = clamp_start(start, length)
            rows = db.execute(
                "SELECT idx, data FROM chunks WHERE run_id = ? AND name = ? AND idx >= ? "
                "ORDER BY idx LIMIT ?",
                (run_id, name, first, limit),
            ).fetchall()
        chunks = tuple(Chunk(index=r[0], data=bytes(r[1])) for r in rows)
        return ChunkPage(
            chunks=chunks,
            next_index=first + len(chunks),
            closed=closed,
            has_more=first + len(chunks) < length,
        )

    async def info(self, run_id: str, name: str) -> StreamInfo:
        with self._w._read() as db:
            closed, length = self._state(db, run_id, name)
        return StreamInfo(tail_index=length - 1, closed=closed)

    async def list(self, run_id: str) -> tuple[str, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                "SELECT name FROM streams WHERE run_id = ? ORDER BY name", (run_id,)
            ).fetchall()
        return tuple(r[0] for r in rows)
