"""Planted-bug Worlds for the crash layer: SQLite Worlds that lose things at a kill.

Each is a small subclass of :class:`SQLiteWorld` with ONE bug of the kind a World
author writes to save an fsync or a round trip.  Every one of them answers
exactly like SQLiteWorld while its process lives, and survives a clean
``close()`` (the World model's restarts): only a process that dies inside or
between its calls shows the bug.  :data:`PLANTED` maps a name to the factory
(``make_xxx(setup) -> World``; module-level, so the crash layer's child process
imports them by ``module:qualname``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import attrs

from durasim.worlds import (
    BatchResult,
    Delivery,
    EventRequest,
    LeaseLost,
    Message,
    Snapshot,
    SQLiteWorld,
    World,
    WorldError,
    WorldSetup,
)
from durasim.worlds._sqlite import _WriteTransaction
from durasim.worlds._sqlite_facets import _Events
from durasim.worlds._sqlite_queue import SQLiteQueue, SQLiteStreams, _message_from_row
from durasim.worlds._sqlite_schema import MESSAGE_COLUMNS
from durasim.worlds._time import from_micros

__all__ = ["PLANTED"]


def _path(setup: WorldSetup) -> Any:
    return setup.directory / "planted.db"


def _options(setup: WorldSetup) -> dict[str, Any]:
    return {"clock": setup.clock, "ids": setup.ids, "max_deliveries": setup.max_deliveries}


class _Savepoint:
    """One write inside a longer transaction: a refusal undoes this write only."""

    def __init__(self, world: SQLiteWorld, *, commit: Callable[[], bool]) -> None:
        self._world = world
        self._db = world._live()
        self._commit = commit

    def __enter__(self) -> sqlite3.Connection:
        if not self._db.in_transaction:
            self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("SAVEPOINT planted_write")
        return self._db

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        db = self._db
        if exc is not None:
            db.execute("ROLLBACK TO planted_write")
            db.execute("RELEASE planted_write")
            self._world._known.clear()
            if isinstance(exc, sqlite3.Error):
                raise WorldError(f"planted World: the write failed ({exc})") from exc
            return
        db.execute("RELEASE planted_write")
        if self._commit():
            db.execute("COMMIT")


class _OpenTransactionReads(SQLiteWorld):
    """Reads that join a transaction left open between writes (plain SQLite BEGINs one)."""

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        db = self._live()
        if db.in_transaction:
            yield db
            return
        with super()._read() as inner:
            yield inner

    async def close(self) -> None:
        if not self._closed and self._db.in_transaction:
            self._db.execute("COMMIT")
        await super().close()


# --- 1. group commit: acknowledged before committed ----------------------------------


class GroupCommitWorld(_OpenTransactionReads):
    """Commits every 8 writes (one fsync per group) but answers each write at once.

    The bug: a write is acknowledged while its transaction is still open; a
    process killed before the group's COMMIT loses up to 7 acknowledged writes.
    """

    EVERY = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._pending = 0
        super().__init__(*args, **kwargs)

    def _write(self) -> Any:
        return _Savepoint(self, commit=self._group_full)

    def _group_full(self) -> bool:
        self._pending += 1
        if self._pending < self.EVERY:
            return False
        self._pending = 0
        return True


def make_group_commit(setup: WorldSetup) -> World:
    """Group commit every 8 writes: acknowledged writes are lost at a kill (crash.lost-write)."""
    return GroupCommitWorld(_path(setup), **_options(setup))


# --- 2. positions from a counter saved lazily ----------------------------------------


class _Upserting:
    """The connection, with the event insert made idempotent (INSERT OR REPLACE)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def execute(self, statement: str, *args: Any) -> sqlite3.Cursor:
        statement = statement.replace("INSERT INTO events", "INSERT OR REPLACE INTO events")
        return self._db.execute(statement, *args)

    def executemany(self, statement: str, rows: Any) -> sqlite3.Cursor:
        statement = statement.replace("INSERT INTO events", "INSERT OR REPLACE INTO events")
        return self._db.executemany(statement, rows)


class LazyCounterWorld(SQLiteWorld):
    """Takes each run's next position from a counter in memory, saved every 4 writes.

    Saves reading the log's tail per write; an event insert "replaces on
    conflict" so that a retried write is idempotent.  The bug: after a kill
    the counter read back is the last *saved* one, so the next writes reuse
    positions already returned, overwriting acknowledged events.
    """

    SAVE_EVERY = 4

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._counters: dict[str, Snapshot] = {}
        self._writes = 0
        super().__init__(*args, **kwargs)

    def _open(self) -> None:
        super()._open()
        with self._write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS positions "
                "(run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, seq_in_band INTEGER NOT NULL)"
            )

    def _cached_run(self, db: sqlite3.Connection, run_id: str) -> Any:
        run, seq, seq_in_band = super()._cached_run(db, run_id)
        known = self._counters.get(run_id)
        if known is None:
            saved = db.execute(
                "SELECT seq, seq_in_band FROM positions WHERE run_id = ?", (run_id,)
            ).fetchone()
            if saved is None:
                saved = (seq, seq_in_band)
            known = Snapshot(seq=saved[0], seq_in_band=saved[1])
        return run, known.seq, known.seq_in_band

    def _store(self, db: sqlite3.Connection, plan: Any, *, original: Any, **rest: Any) -> None:
        super()._store(_Upserting(db), plan, original=original, **rest)  # type: ignore[arg-type]
        self._counters[plan.run.run_id] = plan.after
        self._writes += 1
        if self._writes % self.SAVE_EVERY == 0:
            db.executemany(
                "INSERT OR REPLACE INTO positions VALUES (?, ?, ?)",
                [(r, s.seq, s.seq_in_band) for r, s in self._counters.items()],
            )

    async def close(self) -> None:
        if not self._closed:
            with self._write() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO positions VALUES (?, ?, ?)",
                    [(r, s.seq, s.seq_in_band) for r, s in self._counters.items()],
                )
        await super().close()


def make_lazy_counter(setup: WorldSetup) -> World:
    """Next position kept in memory, saved every 4 writes: positions reused after a kill."""
    return LazyCounterWorld(_path(setup), **_options(setup))


# --- 3. a batch committed event by event ---------------------------------------------


class _DryRun(_WriteTransaction):
    """A write transaction that is always rolled back: the batch is only checked."""

    def __exit__(self, kind: Any, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self._db.execute("ROLLBACK")
            self._world._known.clear()
            return
        super().__exit__(kind, exc, tb)


class _EventsOneByOne(_Events):
    async def create_batch(
        self,
        run_id: str,
        requests: Sequence[EventRequest],
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> BatchResult:
        world = self._w
        assert isinstance(world, RowPerTransactionWorld)
        world.dry_run = True
        try:  # check the whole batch first: a refusal still writes nothing
            checked = await super().create_batch(
                run_id,
                requests,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                seen_seq=seen_seq,
                occurred_at=occurred_at,
                expected_seq=expected_seq,
            )
        finally:
            world.dry_run = False
            world._known.clear()
        events = []
        for offset, request in enumerate(requests):
            result = await self.create(
                run_id,
                request,
                in_band=in_band,
                expected_seq_in_band=None
                if expected_seq_in_band is None
                else expected_seq_in_band + offset,
                occurred_at=occurred_at,
                expected_seq=None if expected_seq is None else expected_seq + offset,
            )
            assert result.event is not None
            events.append(result.event)
            await asyncio.sleep(0)  # keep the event loop responsive between rows
        return BatchResult(events=tuple(events), run=result.run, unseen=checked.unseen)


class RowPerTransactionWorld(SQLiteWorld):
    """Checks a batch as a whole, then commits it one event per transaction.

    Short transactions keep the write lock free for other processes.  The bug:
    a process killed between two of those commits leaves half a batch.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.dry_run = False
        super().__init__(*args, **kwargs)
        self.events = _EventsOneByOne(self)

    def _write(self) -> _WriteTransaction:
        return _DryRun(self) if self.dry_run else super()._write()


def make_batch_per_event(setup: WorldSetup) -> World:
    """A batch committed one event per transaction: half a batch after a kill."""
    return RowPerTransactionWorld(_path(setup), **_options(setup))


# --- 4. acks persisted lazily ----------------------------------------------------------


def _pick_unless(
    queue: SQLiteQueue,
    db: sqlite3.Connection,
    now_us: int,
    prefix: str,
    busy: set[str],
    *,
    hidden: Callable[[Message], bool],
) -> tuple[Message | None, list[tuple[Any, ...]]]:
    """SQLiteQueue._pick, skipping the messages ``hidden`` names."""
    limit = queue._w._max_deliveries
    dead: list[tuple[Any, ...]] = []
    rows = db.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE due_at <= ? "
        "AND substr(queue_name, 1, ?) = ? ORDER BY due_at, ord",
        (now_us, len(prefix), prefix),
    ).fetchall()
    for row in rows:
        message = _message_from_row(row)
        if hidden(message) or (message.orchestrator and message.run_id in busy):
            continue
        if limit is not None and message.attempt >= limit:
            dead.append(tuple(row))
            continue
        return message, dead
    return None, dead


class _LazyAckQueue(SQLiteQueue):
    FLUSH_EVERY = 4

    def __init__(self, world: SQLiteWorld) -> None:
        super().__init__(world)
        self.acked: set[str] = set()

    def _held(self, db: sqlite3.Connection, delivery: Delivery) -> None:
        if delivery.message_id in self.acked:
            raise LeaseLost(
                f"message {delivery.message_id!r} was acked", message_id=delivery.message_id
            )
        super()._held(db, delivery)

    async def ack(self, delivery: Delivery) -> None:
        with self._w._write() as db:
            self._held(db, delivery)
        self.acked.add(delivery.message_id)
        if len(self.acked) >= self.FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.acked:
            with self._w._write() as db:
                db.executemany(
                    "DELETE FROM messages WHERE message_id = ?", [(m,) for m in self.acked]
                )
            self.acked.clear()

    def _pick(self, db: sqlite3.Connection, now_us: int, prefix: str, busy: set[str]) -> Any:
        return _pick_unless(
            self, db, now_us, prefix, busy, hidden=lambda m: m.message_id in self.acked
        )

    async def enqueue(self, queue_name: str, payload: bytes, **options: Any) -> str:
        if options.get("idempotency_key") is not None:
            self.flush()  # an acked message frees its key
        return await super().enqueue(queue_name, payload, **options)

    async def messages(self) -> tuple[Message, ...]:
        return tuple(m for m in await super().messages() if m.message_id not in self.acked)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        self.flush()
        return await super().next_due(queue_prefix=queue_prefix)


class LazyAckWorld(SQLiteWorld):
    """Answers an ack at once and deletes acked messages 4 at a time.

    The bug: the acks not yet flushed live only in memory; after a kill the
    messages come back and are delivered again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue: _LazyAckQueue = _LazyAckQueue(self)

    async def close(self) -> None:
        if not self._closed:
            self.queue.flush()
        await super().close()


def make_lazy_ack(setup: WorldSetup) -> World:
    """Acks kept in memory, deleted 4 at a time: acked messages come back after a kill."""
    return LazyAckWorld(_path(setup), **_options(setup))


# --- 5. batches that are never saved on their own ---------------------------------------


class DeferredBatchWorld(_OpenTransactionReads):
    """Leaves a batch's transaction open; the next single write (or close) commits it.

    A batch is usually followed by more writes of the same orchestrator, so
    the fsync is shared.  The bug: the batch is acknowledged but not saved; a
    process killed before its next write loses it (a World declaring
    ``durable=True`` that never saves its batch writes by themselves).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.in_batch = False
        super().__init__(*args, **kwargs)
        self.events = _DeferringEvents(self)

    def _write(self) -> Any:
        return _Savepoint(self, commit=lambda: not self.in_batch)


class _DeferringEvents(_Events):
    async def create_batch(self, run_id: str, requests: Any, **options: Any) -> BatchResult:
        world = self._w
        assert isinstance(world, DeferredBatchWorld)
        world.in_batch = True
        try:
            return await super().create_batch(run_id, requests, **options)
        finally:
            world.in_batch = False


def make_unsaved_batch(setup: WorldSetup) -> World:
    """``durable=True``, but a batch is committed only by the next write: lost at a kill."""
    return DeferredBatchWorld(_path(setup), **_options(setup))


# --- 6. a released delay kept in memory ---------------------------------------------------


class _MemoryDelayQueue(SQLiteQueue):
    def __init__(self, world: SQLiteWorld) -> None:
        super().__init__(world)
        self.not_before: dict[str, datetime] = {}

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        await super().release(delivery, delay=0.0)  # due now on disk ...
        self.not_before.pop(delivery.message_id, None)
        if delay:  # ... and the back-off only here
            self.not_before[delivery.message_id] = self._w._clock.now() + timedelta(seconds=delay)

    async def claim(self, *, queue_prefix: str = "", lease_seconds: float = 30.0) -> Any:
        got = await super().claim(queue_prefix=queue_prefix, lease_seconds=lease_seconds)
        until = None if got is None else self.not_before.get(got.message_id)
        if got is None or until is None:
            return got
        return attrs.evolve(got, message=attrs.evolve(got.message, available_at=until))

    def _pick(self, db: sqlite3.Connection, now_us: int, prefix: str, busy: set[str]) -> Any:
        now = from_micros(now_us)

        def backing_off(message: Message) -> bool:
            return self.not_before.get(message.message_id, now) > now

        return _pick_unless(self, db, now_us, prefix, busy, hidden=backing_off)

    async def messages(self) -> tuple[Message, ...]:
        return tuple(
            attrs.evolve(m, available_at=self.not_before.get(m.message_id, m.available_at))
            for m in await super().messages()
        )

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        rows = self._w._live().execute("SELECT message_id, due_at FROM messages").fetchall()
        due = [
            max(from_micros(at), self.not_before.get(message_id, from_micros(at)))
            for message_id, at in rows
        ]
        return min(due) if due else None


class MemoryBackoffWorld(SQLiteWorld):
    """Writes a release at once but keeps its back-off delay in memory.

    The bug: after a kill the released message is due at once, ignoring the
    delay its release acknowledged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.queue: _MemoryDelayQueue = _MemoryDelayQueue(self)


def make_memory_backoff(setup: WorldSetup) -> World:
    """Release delays kept in memory: a released delay is lost at a kill (crash.delay-lost)."""
    return MemoryBackoffWorld(_path(setup), **_options(setup))


# --- 7. stream chunks buffered -------------------------------------------------------------


class _BufferedStreams(SQLiteStreams):
    FLUSH_AT = 4

    def __init__(self, world: SQLiteWorld) -> None:
        super().__init__(world)
        self.buffer: dict[tuple[str, str], list[bytes]] = {}
        self.tails: dict[tuple[str, str], int] = {}

    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = [chunks] if isinstance(chunks, bytes) else list(chunks)
        key = (run_id, name)
        if key not in self.tails:
            self.tails[key] = (await super().info(run_id, name)).tail_index
        if (await super().info(run_id, name)).closed:
            return await super().write(run_id, name, batch)  # raises StreamClosed
        self.buffer.setdefault(key, []).extend(batch)
        self.tails[key] += len(batch)
        if len(self.buffer[key]) >= self.FLUSH_AT:
            await self.flush(key)
        return self.tails[key]

    async def flush(self, key: tuple[str, str]) -> None:
        pending = self.buffer.pop(key, [])
        if pending:
            await super().write(key[0], key[1], pending)

    async def close(self, run_id: str, name: str) -> None:
        await self.flush((run_id, name))
        await super().close(run_id, name)

    async def read(self, run_id: str, name: str, **options: Any) -> Any:
        await self.flush((run_id, name))
        return await super().read(run_id, name, **options)

    async def info(self, run_id: str, name: str) -> Any:
        await self.flush((run_id, name))
        return await super().info(run_id, name)

    async def list(self, run_id: str) -> tuple[str, ...]:
        for key in [k for k in self.buffer if k[0] == run_id]:
            await self.flush(key)
        return await super().list(run_id)


class BufferedStreamWorld(SQLiteWorld):
    """Buffers stream chunks in memory and inserts them 4 at a time (or when read).

    The bug: a write's index is returned before its chunks are stored; a kill
    loses the buffered chunks.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streams: _BufferedStreams = _BufferedStreams(self)

    async def close(self) -> None:
        if not self._closed:
            for key in list(self.streams.buffer):
                await self.streams.flush(key)
        await super().close()


def make_buffered_stream(setup: WorldSetup) -> World:
    """Stream chunks buffered in memory: acknowledged chunks lost at a kill."""
    return BufferedStreamWorld(_path(setup), **_options(setup))


#: name -> factory; each factory's docstring says the bug.
PLANTED: dict[str, Callable[[WorldSetup], World]] = {
    "group_commit": make_group_commit,
    "lazy_counter": make_lazy_counter,
    "batch_per_event": make_batch_per_event,
    "lazy_ack": make_lazy_ack,
    "unsaved_batch": make_unsaved_batch,
    "memory_backoff": make_memory_backoff,
    "buffered_stream": make_buffered_stream,
}

#: The bug classes the crash layer may name for each; the first is the one seed 0 finds.
#: (A group commit loses whatever the last writes were: events, acks, releases.)
EXPECTED: dict[str, tuple[str, ...]] = {
    "group_commit": (
        "crash.lost-write",
        "crash.acked-message-back",
        "crash.message-lost",
        "crash.delay-lost",
        "crash.claim-lost",
    ),
    "lazy_counter": ("crash.position-reused",),
    "batch_per_event": ("crash.half-applied",),
    "lazy_ack": ("crash.acked-message-back",),
    "unsaved_batch": ("crash.lost-write",),
    "memory_backoff": ("crash.delay-lost",),
    "buffered_stream": ("crash.lost-write",),
}
