"""The PostgreSQL World's queue and streams facets (docs/protocol.md §11, §12).

Claims lock candidate rows with ``FOR UPDATE SKIP LOCKED``, so concurrent
workers never wait on each other and never lease one message twice.  One
orchestrator delivery per run: before leasing an orchestrator message the claim
takes a transaction-level advisory lock on the run (``pg_try_advisory_xact_lock``;
busy: skip the message) and only then looks for a live orchestrator lease of the
run, in a statement that starts after the lock, so it sees any lease committed
by the claimer that held the lock before.

Every enqueue and release notifies the schema's channel (``NOTIFY`` is sent at
commit).  :meth:`PostgresQueue.wait_for_work` sleeps on a dedicated ``LISTEN``
connection until a notification, the next due message, or the timeout, so an
idle worker wakes within milliseconds of new work and never misses due work if
a notification is lost (it re-reads ``next_due`` each time).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
import psycopg

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
from ._postgres_schema import channel
from ._time import from_micros, to_micros

if TYPE_CHECKING:
    from ._postgres import Conn, PostgresWorld

__all__ = ["PostgresLeaseRenewer", "PostgresQueue", "PostgresStreams"]

MESSAGE_COLUMNS = (
    "message_id, queue_name, payload, available_at, enqueued_at, attempt, run_id, "
    "orchestrator, idempotency_key"
)
#: Candidates a claim locks per round trip.
_CLAIM_BATCH = 4
#: A due message whose queue name starts with the prefix (parameters: now, the
#: prefix's length, the prefix): what a claim scans for and what it looks for again.
_DUE = "due_at <= %s AND left(queue_name, %s) = %s"
#: Times a claim that found nothing but a run another claim was deciding looks again.
_CONTENDED_RETRIES = 20
#: How long an idle worker waits before trying again when it cannot LISTEN.
_RELISTEN_SECONDS = 0.5


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


def _lease_lost(delivery: Delivery) -> LeaseLost:
    return LeaseLost(
        f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
        "held (acked, or re-claimed after it expired); the message is not yours to settle",
        message_id=delivery.message_id,
    )


class _Facet(WorldFacet["PostgresWorld"]):
    """A facet of the PostgresWorld (:mod:`._facet`: it holds its World weakly)."""

    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(world)


class PostgresQueue(_Facet):
    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(world)
        self._listener: Conn | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def _notify(self, conn: Conn, queue_name: str) -> None:
        await conn.execute("SELECT pg_notify(%s, %s)", (channel(self._w.schema), queue_name))

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
        minted: list[str] = []

        async def body(conn: Conn) -> str:
            if idempotency_key is not None:
                cur = await conn.execute(
                    "SELECT message_id FROM messages WHERE idempotency_key = %s",
                    (idempotency_key,),
                )
                row = await cur.fetchone()
                if row is not None:
                    return str(row[0])
            if not minted:  # a retried transaction keeps its id: ids are never wasted
                minted.append(w._ids.new_id("msg"))
            now = w._clock.now()
            available = to_micros(now + timedelta(seconds=delay))
            await conn.execute(
                f"INSERT INTO messages ({MESSAGE_COLUMNS}, due_at) VALUES "
                "(%s, %s, %s, %s, %s, 0, %s, %s, %s, %s)",
                (
                    minted[0],
                    queue_name,
                    payload,
                    available,
                    to_micros(now),
                    run_id,
                    orchestrator,
                    idempotency_key,
                    available,
                ),
            )
            await self._notify(conn, queue_name)
            return minted[0]

        async def landed(conn: Conn) -> bool:
            cur = await conn.execute(
                "SELECT 1 FROM messages WHERE message_id = %s UNION ALL "
                "SELECT 1 FROM dead_letters WHERE message_id = %s",
                (minted[0], minted[0]),
            )
            return await cur.fetchone() is not None

        return await w._transact(body, landed=landed)

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        w = self._w
        lease = check_delay(lease_seconds, what="lease_seconds")
        check_queue_prefix(queue_prefix)
        limit = w._max_deliveries
        contended = False

        async def body(conn: Conn) -> Delivery | None:
            nonlocal contended
            contended = False
            now = w._clock.now()
            now_us = to_micros(now)
            after: tuple[int, int] | None = None
            seen: list[str] = []
            while True:
                cur = await conn.execute(
                    f"SELECT {MESSAGE_COLUMNS}, due_at, ord FROM messages WHERE {_DUE} "
                    + ("AND (due_at, ord) > (%s, %s) " if after else "")
                    + "ORDER BY due_at, ord LIMIT %s FOR UPDATE SKIP LOCKED",
                    (now_us, len(queue_prefix), queue_prefix, *(after or ()), _CLAIM_BATCH),
                )
                rows = await cur.fetchall()
                for row in rows:
                    message = _message_from_row(row)
                    seen.append(message.message_id)
                    if message.orchestrator:
                        busy = await self._run_busy(conn, message, now_us)
                        if busy is not None:
                            contended = contended or busy == "deciding"
                            continue
                    if limit is not None and message.attempt >= limit:
                        await conn.execute(
                            f"INSERT INTO dead_letters ({MESSAGE_COLUMNS}) "
                            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE message_id = %s",
                            (message.message_id,),
                        )
                        await conn.execute(
                            "DELETE FROM messages WHERE message_id = %s", (message.message_id,)
                        )
                        continue
                    lease_id = w._ids.new_id("lease")
                    expires = now + timedelta(seconds=lease)
                    await conn.execute(
                        "UPDATE messages SET attempt = attempt + 1, lease_id = %s, "
                        "lease_expires_at = %s, due_at = %s WHERE message_id = %s",
                        (lease_id, to_micros(expires), to_micros(expires), message.message_id),
                    )
                    return Delivery(
                        message=attrs.evolve(message, attempt=message.attempt + 1),
                        lease_id=lease_id,
                        lease_expires_at=expires,
                    )
                if len(rows) < _CLAIM_BATCH:
                    if not contended:
                        contended = await self._skipped_locked(conn, now_us, queue_prefix, seen)
                    return None
                after = (rows[-1][9], rows[-1][10])

        # "Nothing due" must not be the answer while a due message was only skipped
        # because another claim was deciding for it or for its run at that instant
        # (that claim may leave it): look again once that short transaction has ended.
        for attempt in range(_CONTENDED_RETRIES + 1):
            delivery = await w._transact(body)
            if delivery is not None or not contended:
                return delivery
            await asyncio.sleep(0.001 * (attempt + 1))
        return None

    async def _skipped_locked(
        self, conn: Conn, now_us: int, queue_prefix: str, seen: list[str]
    ) -> bool:
        """Whether a due message the scan did not see is there: ``FOR UPDATE SKIP LOCKED``
        passed it over because another claim held its row while deciding (it may be
        deciding that the message's run is leased and leave it), or it was committed
        after the scan began. Either way "nothing due" would be wrong now.
        """
        cur = await conn.execute(
            f"SELECT 1 FROM messages WHERE {_DUE} AND NOT (message_id = ANY(%s)) LIMIT 1",
            (now_us, len(queue_prefix), queue_prefix, seen),
        )
        return await cur.fetchone() is not None

    async def _run_busy(self, conn: Conn, message: Message, now_us: int) -> str | None:
        """Why the message's run cannot take another orchestrator delivery now, or ``None``.

        ``"leased"``: another orchestrator delivery of the run holds a live lease;
        ``"deciding"``: another claim is deciding for the run right now.
        """
        cur = await conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"durasim-orchestrator:{self._w.schema}:{message.run_id}",),
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            return "deciding"
        # A new statement: its snapshot includes whatever the previous lock holder committed.
        cur = await conn.execute(
            "SELECT 1 FROM messages WHERE orchestrator AND run_id = %s "
            "AND lease_expires_at > %s AND message_id <> %s LIMIT 1",
            (message.run_id, now_us, message.message_id),
        )
        return "leased" if await cur.fetchone() is not None else None

    async def ack(self, delivery: Delivery) -> None:
        async def body(conn: Conn) -> int | None:
            cur = await conn.execute(
                "DELETE FROM messages WHERE message_id = %s AND lease_id = %s",
                (delivery.message_id, delivery.lease_id),
            )
            return None if cur.rowcount == 1 else cur.rowcount

        # One autocommit statement (no BEGIN/COMMIT round trips); None: it deleted
        # the message, or was cut off after the message was gone (_settled).
        if await self._w._transact(body, landed=self._settled(delivery), single=True) is not None:
            raise _lease_lost(delivery)

    def _settled(self, delivery: Delivery) -> Any:
        """Whether an ack or release whose COMMIT was cut off did commit."""

        async def landed(conn: Conn) -> bool:
            cur = await conn.execute(
                "SELECT 1 FROM messages WHERE message_id = %s AND lease_id = %s",
                (delivery.message_id, delivery.lease_id),
            )
            return await cur.fetchone() is None

        return landed

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        delay = check_delay(delay)

        async def body(conn: Conn) -> int:
            available = to_micros(self._w._clock.now() + timedelta(seconds=delay))
            cur = await conn.execute(
                "UPDATE messages SET lease_id = NULL, lease_expires_at = NULL, "
                "available_at = %s, due_at = %s WHERE message_id = %s AND lease_id = %s "
                "RETURNING queue_name",
                (available, available, delivery.message_id, delivery.lease_id),
            )
            row = await cur.fetchone()
            if row is None:
                return 0
            await self._notify(conn, row[0])
            return 1

        if await self._w._transact(body, landed=self._settled(delivery)) != 1:
            raise _lease_lost(delivery)

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        lease = check_delay(lease_seconds, what="lease_seconds")
        expires = self._w._clock.now() + timedelta(seconds=lease)

        async def body(conn: Conn) -> int:
            cur = await conn.execute(
                "UPDATE messages SET lease_expires_at = %s, due_at = %s "
                "WHERE message_id = %s AND lease_id = %s",
                (to_micros(expires), to_micros(expires), delivery.message_id, delivery.lease_id),
            )
            return cur.rowcount

        if await self._w._transact(body) != 1:
            raise _lease_lost(delivery)
        return attrs.evolve(delivery, lease_expires_at=expires)

    def lease_renewer(self) -> PostgresLeaseRenewer:
        """An extender for another thread: its own connection, opened in that thread's loop."""
        return PostgresLeaseRenewer(self._w)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        check_queue_prefix(queue_prefix)

        async def body(conn: Conn) -> Any:
            cur = await conn.execute(
                "SELECT min(due_at) FROM messages WHERE left(queue_name, %s) = %s",
                (len(queue_prefix), queue_prefix),
            )
            row = await cur.fetchone()
            return None if row is None else row[0]

        due = await self._w._read(body)
        return None if due is None else from_micros(due)

    async def messages(self) -> tuple[Message, ...]:
        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY ord")
            return await cur.fetchall()

        return tuple(_message_from_row(r) for r in await self._w._read(body))

    async def dead_letters(self) -> tuple[Message, ...]:
        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM dead_letters ORDER BY ord")
            return await cur.fetchall()

        return tuple(_message_from_row(r) for r in await self._w._read(body))

    # -- waking idle workers (LISTEN/NOTIFY) ------------------------------------------

    async def wait_for_work(self, max_seconds: float, *, queue_prefix: str = "") -> bool:
        """Sleep until a message may be claimable, at most ``max_seconds``.

        Returns at once if one is due now; else on a NOTIFY from an enqueue or
        release in any process, when the earliest message falls due (by the
        World's clock), or after ``timeout``.  ``True`` means "try a claim now";
        ``False`` means the timeout passed.  A lost notification only delays the
        wake-up to the next due time or the timeout: callers loop anyway.  When
        the server cannot be reached (a restart), it sleeps a moment and returns
        ``True``: the caller's claim then retries until the server is back.
        """
        timeout = max_seconds
        try:
            wake = await self._listen()
        except WorldError:
            # The server is down (restarting?): poll instead of failing the worker.
            # The caller's next claim retries until the server is back.
            await asyncio.sleep(min(max_seconds, _RELISTEN_SECONDS))
            return True
        wake.clear()
        due = await self.next_due(queue_prefix=queue_prefix)
        if due is not None:
            until_due = (due - self._w._clock.now()).total_seconds()
            if until_due <= 0:
                return True
            timeout = min(timeout, until_due)
        try:
            await asyncio.wait_for(wake.wait(), timeout=max(0.0, timeout))
        except TimeoutError:
            return due is not None and self._w._clock.now() >= due
        return True

    async def _listen(self) -> asyncio.Event:
        if self._wake is not None and self._listen_task is not None:
            return self._wake
        conn = await self._w.connect()
        try:
            await conn.execute(f"LISTEN {channel(self._w.schema)}")
        except BaseException:  # cancelled (a worker stopping) or failed: do not leak it
            await asyncio.shield(conn.close())
            raise
        self._listener = conn
        self._wake = asyncio.Event()
        self._listen_task = asyncio.get_running_loop().create_task(self._pump(conn, self._wake))
        return self._wake

    async def _pump(self, conn: Conn, wake: asyncio.Event) -> None:
        try:
            async for _ in conn.notifies():
                wake.set()
        except psycopg.OperationalError:
            pass  # connection lost: the next wait_for_work listens again
        finally:
            wake.set()
            if self._listener is conn:
                self._listener = None
                self._listen_task = None
                self._wake = None
            # Cancelled with its loop (asyncio.run ending) or lost: nobody else
            # holds this connection any more, so it is closed here.
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close())

    def _forget_listener(self) -> None:
        """Drop a listener whose event loop has ended."""
        if self._listener is not None and not self._listener.closed:
            self._listener.pgconn.finish()
        self._listener = None
        self._listen_task = None
        self._wake = None

    async def _stop_listening(self) -> None:
        task, conn = self._listen_task, self._listener
        if task is None or conn is None:
            return
        if task.get_loop() is not asyncio.get_running_loop():
            self._forget_listener()
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
            await task
        with contextlib.suppress(psycopg.Error):
            await conn.close()
        self._forget_listener()


class PostgresLeaseRenewer:
    """Renews leases on a connection of its own (autocommit), outside the World's pool.

    The pool belongs to the World's event loop; this connection belongs to the
    loop of the thread that calls :meth:`extend` (a worker's heartbeat), so a
    step that blocks the World's loop cannot hold renewals back.  A lost
    connection is reopened by the next call.
    """

    def __init__(self, world: PostgresWorld) -> None:
        self._w = world
        self._conn: Conn | None = None

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        lease = check_delay(lease_seconds, what="lease_seconds")
        expires = self._w._clock.now() + timedelta(seconds=lease)
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await self._w.connect()
            cur = await self._conn.execute(
                "UPDATE messages SET lease_expires_at = %s, due_at = %s "
                "WHERE message_id = %s AND lease_id = %s",
                (to_micros(expires), to_micros(expires), delivery.message_id, delivery.lease_id),
            )
        except psycopg.Error as exc:
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
            raise WorldError(
                f"PostgreSQL World {self._w.schema!r}: renewing the lease of message "
                f"{delivery.message_id!r} failed ({exc}); it is retried"
            ) from exc
        except BaseException:
            # Cancelled mid-statement (a renewal's timeout): the connection's state
            # is unknown, so it is closed and the next call opens another.
            conn, self._conn = self._conn, None
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await asyncio.shield(conn.close())
            raise
        if cur.rowcount != 1:
            raise _lease_lost(delivery)
        return attrs.evolve(delivery, lease_expires_at=expires)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()


class PostgresStreams(_Facet):
    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = check_chunks(chunks)
        check_stream_name(name)

        async def body(conn: Conn) -> int:
            await self._w._require_run(conn, run_id)
            await conn.execute(
                "INSERT INTO streams (run_id, name, closed, length) VALUES (%s, %s, false, 0) "
                "ON CONFLICT (run_id, name) DO NOTHING",
                (run_id, name),
            )
            cur = await conn.execute(
                "SELECT closed, length FROM streams WHERE run_id = %s AND name = %s FOR UPDATE",
                (run_id, name),
            )
            row = await cur.fetchone()
            assert row is not None
            closed, length = bool(row[0]), int(row[1])
            if closed:
                raise StreamClosed(
                    f"stream {name!r} of run {run_id!r} is closed; open a new stream name",
                    run_id=run_id,
                )
            async with conn.cursor() as many:
                await many.executemany(
                    "INSERT INTO chunks (run_id, name, idx, data) VALUES (%s, %s, %s, %s)",
                    [(run_id, name, length + i, c) for i, c in enumerate(batch)],
                )
            await conn.execute(
                "UPDATE streams SET length = %s WHERE run_id = %s AND name = %s",
                (length + len(batch), run_id, name),
            )
            return length + len(batch) - 1

        return await self._w._transact(body)

    async def close(self, run_id: str, name: str) -> None:
        check_stream_name(name)

        async def body(conn: Conn) -> None:
            await self._w._require_run(conn, run_id)
            await conn.execute(
                "INSERT INTO streams (run_id, name, closed, length) VALUES (%s, %s, true, 0) "
                "ON CONFLICT (run_id, name) DO UPDATE SET closed = true",
                (run_id, name),
            )

        await self._w._transact(body)

    async def _state(self, conn: Conn, run_id: str, name: str) -> tuple[bool, int]:
        check_stream_name(name)
        await self._w._require_run(conn, run_id)
        cur = await conn.execute(
            "SELECT closed, length FROM streams WHERE run_id = %s AND name = %s", (run_id, name)
        )
        row = await cur.fetchone()
        return (False, 0) if row is None else (bool(row[0]), int(row[1]))

    async def read(self, run_id: str, name: str, *, start: int = 0, limit: int = 100) -> ChunkPage:
        check_limit(limit)

        async def body(conn: Conn) -> tuple[bool, int, int, list[tuple[Any, ...]]]:
            closed, length = await self._state(conn, run_id, name)
            first = clamp_start(start, length)
            cur = await conn.execute(
                "SELECT idx, data FROM chunks WHERE run_id = %s AND name = %s AND idx >= %s "
                "AND idx < %s ORDER BY idx LIMIT %s",
                (run_id, name, first, length, limit),
            )
            return closed, length, first, await cur.fetchall()

        closed, length, first, rows = await self._w._read(body)
        found = tuple(Chunk(index=r[0], data=bytes(r[1])) for r in rows)
        return ChunkPage(
            chunks=found,
            next_index=first + len(found),
            closed=closed,
            has_more=first + len(found) < length,
        )

    async def info(self, run_id: str, name: str) -> StreamInfo:
        async def body(conn: Conn) -> tuple[bool, int]:
            return await self._state(conn, run_id, name)

        closed, length = await self._w._read(body)
        return StreamInfo(tail_index=length - 1, closed=closed)

    async def list(self, run_id: str) -> tuple[str, ...]:
        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            await self._w._require_run(conn, run_id)
            cur = await conn.execute(
                'SELECT name FROM streams WHERE run_id = %s ORDER BY name COLLATE "C"', (run_id,)
            )
            return await cur.fetchall()

        return tuple(r[0] for r in await self._w._read(body))
