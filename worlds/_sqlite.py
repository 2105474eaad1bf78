"""The SQLite World: the embedded default.

One file, stdlib :mod:`sqlite3`, WAL mode.  Every write is one ``BEGIN
IMMEDIATE`` transaction holding the event rows and every entity row they change,
so a process killed at any instant leaves either the whole write or none of it.
The guards are the reference ones (:mod:`._fold`), read through a view that
queries the same transaction; several processes may share the file because the
write lock serializes their transactions and every decision is made under it.

Durability: ``durability="power"`` (default) runs ``synchronous=FULL``: a
committed event survives power loss.  ``durability="process"`` runs
``synchronous=NORMAL``: a committed event survives a killed process but the
last commits may be lost with the machine.

The facet methods are ``async`` but do their I/O inline (SQLite commits take
microseconds to a fraction of a millisecond); a call that waits for another
process's write lock blocks the event loop for at most ``busy_timeout``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import attrs

from . import _sqlite_codec as codec
from ._entities import (
    BatchResult,
    Capabilities,
    Chunk,
    ChunkPage,
    Delivery,
    EventPage,
    EventResult,
    Hook,
    Message,
    Run,
    RunPage,
    RunStatus,
    Snapshot,
    Step,
    StreamInfo,
    Wait,
)
from ._errors import (
    CorruptedLog,
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    LeaseLost,
    RunNotFound,
    StepNotFound,
    StreamClosed,
    WaitNotFound,
    WorldError,
)
from ._events import (
    STEP_TYPES,
    Event,
    EventRequest,
    EventType,
    check_run_id,
    check_stream_name,
)
from ._fold import Plan, fold_log, plan_batch, plan_create_run, plan_write
from ._memory import _check_chunks, _check_message, _clamp_start, check_delay, check_request
from ._paging import (
    check_limit,
    check_queue_name,
    decode_run_cursor,
    encode_run_cursor,
    normalize_statuses,
)
from ._time import Clock, IdSource, RandomIds, SystemClock, from_micros, to_micros

__all__ = ["SQLiteWorld"]

SCHEMA_VERSION = 1

_SCHEMA_SQL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL,
    input BLOB NOT NULL,
    deployment_id TEXT,
    execution_context BLOB,
    output BLOB,
    error BLOB,
    error_code TEXT,
    cancel_reason TEXT,
    attributes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER
);
CREATE INDEX IF NOT EXISTS runs_newest ON runs (created_at DESC, run_id DESC);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    correlation_id TEXT,
    in_band INTEGER NOT NULL,
    in_band_seq INTEGER NOT NULL,
    data TEXT,
    blob BLOB,
    resume_id TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS events_resume
    ON events (run_id, resume_id) WHERE resume_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS steps (
    {codec.STEP_COLUMNS.replace(", ", " ,")},
    UNIQUE (run_id, step_id)
);
CREATE TABLE IF NOT EXISTS hooks (
    {codec.HOOK_COLUMNS.replace(", ", " ,")},
    UNIQUE (run_id, hook_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS hooks_live_token ON hooks (token) WHERE status = 'active';
CREATE TABLE IF NOT EXISTS waits (
    {codec.WAIT_COLUMNS.replace(", ", " ,")},
    UNIQUE (run_id, wait_id)
);
CREATE TABLE IF NOT EXISTS messages (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    queue_name TEXT NOT NULL,
    payload BLOB NOT NULL,
    available_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    run_id TEXT,
    orchestrator INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    lease_id TEXT,
    lease_expires_at INTEGER,
    due_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_due ON messages (due_at, ord);
CREATE TABLE IF NOT EXISTS dead_letters (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    queue_name TEXT NOT NULL,
    payload BLOB NOT NULL,
    available_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    run_id TEXT,
    orchestrator INTEGER NOT NULL,
    idempotency_key TEXT
);
CREATE TABLE IF NOT EXISTS streams (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    closed INTEGER NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    idx INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_id, name, idx)
) WITHOUT ROWID;
"""

_MESSAGE_COLUMNS = (
    "message_id, queue_name, payload, available_at, enqueued_at, attempt, run_id, "
    "orchestrator, idempotency_key"
)


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


class _View:
    """The fold's StateView, answered by queries inside the write transaction."""

    def __init__(
        self, db: sqlite3.Connection, run_id: str, run: Run | None, counters: Snapshot
    ) -> None:
        self._db = db
        self._run_id = run_id
        self._run = run
        self._counters = counters
        self._steps: dict[str, Step | None] = {}

    def prefetch_steps(self, step_ids: Sequence[str]) -> None:
        """Read every named step in one query (a batch would otherwise ask one by one)."""
        wanted = list(dict.fromkeys(step_ids))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self._db.execute(
                f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = ? AND step_id IN "
                f"({', '.join('?' for _ in chunk)})",
                (self._run_id, *chunk),
            ).fetchall()
            self._steps.update(dict.fromkeys(chunk))
            self._steps.update({row[1]: codec.step_from_row(row) for row in rows})

    def run(self) -> Run | None:
        return self._run

    def counters(self) -> Snapshot:
        return self._counters

    def step(self, step_id: str) -> Step | None:
        if step_id in self._steps:
            return self._steps[step_id]
        row = self._db.execute(
            f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = ? AND step_id = ?",
            (self._run_id, step_id),
        ).fetchone()
        return None if row is None else codec.step_from_row(row)

    def hook(self, hook_id: str) -> Hook | None:
        row = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? AND hook_id = ?",
            (self._run_id, hook_id),
        ).fetchone()
        return None if row is None else codec.hook_from_row(row)

    def live_hook_by_token(self, token: str) -> Hook | None:
        row = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? AND status = 'active'",
            (token,),
        ).fetchone()
        return None if row is None else codec.hook_from_row(row)

    def wait(self, wait_id: str) -> Wait | None:
        row = self._db.execute(
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ? AND wait_id = ?",
            (self._run_id, wait_id),
        ).fetchone()
        return None if row is None else codec.wait_from_row(row)

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        row = self._db.execute(
            "SELECT run_id, seq, type, created_at, correlation_id, in_band, data, blob "
            "FROM events WHERE run_id = ? AND resume_id = ?",
            (self._run_id, resume_id),
        ).fetchone()
        return None if row is None else codec.decode_event(*row)

    def active_hooks(self) -> list[Hook]:
        rows = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? AND status = 'active' "
            "ORDER BY rowid",
            (self._run_id,),
        ).fetchall()
        return [codec.hook_from_row(r) for r in rows]

    def waiting_waits(self) -> list[Wait]:
        rows = self._db.execute(
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ? AND status = 'waiting' "
            "ORDER BY rowid",
            (self._run_id,),
        ).fetchall()
        return [codec.wait_from_row(r) for r in rows]


def _upsert_sql(table: str, columns: str, key: str) -> str:
    names = [c.strip() for c in columns.split(",")]
    keys = {k.strip() for k in key.split(",")}
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
    marks = ", ".join("?" for _ in names)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


_UPSERT_STEP = _upsert_sql("steps", codec.STEP_COLUMNS, "run_id, step_id")
_UPSERT_HOOK = _upsert_sql("hooks", codec.HOOK_COLUMNS, "run_id, hook_id")
_UPSERT_WAIT = _upsert_sql("waits", codec.WAIT_COLUMNS, "run_id, wait_id")
_INSERT_RUN = f"INSERT INTO runs ({codec.RUN_COLUMNS}) VALUES ({', '.join('?' for _ in range(15))})"
_UPDATE_RUN = (
    "UPDATE runs SET status = ?, output = ?, error = ?, error_code = ?, cancel_reason = ?, "
    "attributes = ?, updated_at = ?, started_at = ?, completed_at = ? "
    "WHERE run_id = ?"
)
_INSERT_EVENT = (
    "INSERT INTO events (run_id, seq, type, created_at, correlation_id, in_band, in_band_seq, "
    "data, blob, resume_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT_RUN = f"SELECT {codec.RUN_COLUMNS} FROM runs WHERE run_id = ?"
# The counters live on the last event: (seq, in-band events up to and including it).
_SELECT_COUNTERS = "SELECT seq, in_band_seq FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1"
#: Runs whose (row, counters) are cached between writes of this connection.
_CACHED_RUNS = 4096
_EVENT_COLUMNS = "run_id, seq, type, created_at, correlation_id, in_band, data, blob"


class SQLiteWorld:
    """The embedded World: one SQLite file, safe for several processes at once.

    Args:
        path: the database file (created if missing).
        clock: where every timestamp comes from (default: real time).
        ids: where run, message and lease ids come from (default: :mod:`secrets`).
        durability: ``"power"`` (``synchronous=FULL``, survives power loss) or
            ``"process"`` (``synchronous=NORMAL``, survives a killed process).
        max_deliveries: claims without an ack before a message is dead-lettered.
        busy_timeout: seconds to wait for another process's write lock.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        durability: Literal["power", "process"] = "power",
        max_deliveries: int | None = None,
        busy_timeout: float = 30.0,
    ) -> None:
        if durability not in ("power", "process"):
            raise InvalidRequest(
                f"durability={durability!r} is not known: pass 'power' (synchronous=FULL) "
                "or 'process' (synchronous=NORMAL)"
            )
        self.path = Path(path)
        self._clock: Clock = clock or SystemClock()
        self._ids: IdSource = ids or RandomIds()
        self._durability = durability
        self._max_deliveries = max_deliveries
        self._runs_cache: dict[str, tuple[Run, Snapshot]] = {}
        self._data_version: int | None = None
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, timeout=busy_timeout, cached_statements=256
            )
        except sqlite3.Error as exc:
            raise WorldError(
                f"cannot open SQLite World at {str(self.path)!r}: {exc}; check that the "
                "directory exists and is writable",
                path=str(self.path),
            ) from exc
        self._open()
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = _Queue(self)
        self.streams = _Streams(self)

    def _open(self) -> None:
        db = self._db
        mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise WorldError(
                f"SQLite World at {str(self.path)!r} could not switch to WAL mode (got "
                f"{mode!r}); use a local file system that supports shared memory",
                path=str(self.path),
            )
        sync = "FULL" if self._durability == "power" else "NORMAL"
        db.execute(f"PRAGMA synchronous = {sync}")
        with self._write():
            row = db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            version = None
            if row is not None:
                found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(found[0]) if found else None
            if version is not None and version > SCHEMA_VERSION:
                raise WorldError(
                    f"{str(self.path)!r} has schema version {version}, newer than this "
                    f"durasim understands ({SCHEMA_VERSION}): upgrade durasim",
                    path=str(self.path),
                )
            if version is None:
                for statement in _SCHEMA_SQL.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )

    @property
    def capabilities(self) -> Capabilities:
        """Every feature; durable and shared by processes; power-safe unless ``"process"``."""
        return Capabilities(
            multi_process=True, durable=True, power_safe=self._durability == "power"
        )

    @property
    def clock(self) -> Clock:
        """The World's clock."""
        return self._clock

    async def close(self) -> None:
        """Close the connection; idempotent."""
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the database's write lock from the start.

        Under the lock, ``PRAGMA data_version`` tells whether another connection
        committed since this one last looked; if so the run cache is dropped, so
        every decision is made on the current state.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise WorldError(
                f"SQLite World {str(self.path)!r}: could not take the write lock ({exc}); "
                "another process holds it longer than busy_timeout",
                path=str(self.path),
            ) from exc
        try:
            version = db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._runs_cache.clear()
                self._data_version = version
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same snapshot."""
        db = self._db
        db.execute("BEGIN")
        try:
            yield db
        finally:
            db.execute("COMMIT")

    def _require_run(self, db: sqlite3.Connection, run_id: str) -> None:
        check_run_id(run_id)
        if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)

    def _run_row(self, db: sqlite3.Connection, run_id: str) -> tuple[Run, Snapshot]:
        check_run_id(run_id)
        row = db.execute(_SELECT_RUN, (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        counters = db.execute(_SELECT_COUNTERS, (run_id,)).fetchone()
        if counters is None:
            raise CorruptedLog(f"run {run_id!r} has a row but no event", run_id=run_id)
        return codec.run_from_row(row), Snapshot(seq=counters[0], seq_in_band=counters[1])

    def _cached_run(self, db: sqlite3.Connection, run_id: str) -> tuple[Run, Snapshot]:
        """The run and its counters, from the cache when no other connection wrote.

        Only valid inside :meth:`_write`, which drops the cache when the
        database's ``data_version`` moved.
        """
        cached = self._runs_cache.get(run_id)
        if cached is not None:
            return cached
        return self._run_row(db, run_id)

    def _remember(self, plan: Plan) -> None:
        """Cache a committed plan's run and counters (called after COMMIT)."""
        cache = self._runs_cache
        cache[plan.run.run_id] = (plan.run, plan.after)
        if len(cache) > _CACHED_RUNS:
            del cache[next(iter(cache))]

    def _store(self, db: sqlite3.Connection, plan: Plan, *, original: Run | None) -> None:
        run = plan.run
        rows = []
        in_band_seq = plan.before.seq_in_band
        for event in plan.events:
            data, blob = codec.encode_event(event)
            resume_id = (
                event.data.get("resume_id") if event.type is EventType.HOOK_RECEIVED else None
            )
            in_band_seq += event.in_band
            rows.append(
                (
                    event.run_id,
                    event.seq,
                    event.type,
                    to_micros(event.created_at),
                    event.correlation_id,
                    int(event.in_band),
                    in_band_seq,
                    data,
                    blob,
                    resume_id,
                )
            )
        db.executemany(_INSERT_EVENT, rows)
        if original is None:
            db.execute(_INSERT_RUN, codec.run_to_row(run))
        elif run is not original:
            full = codec.run_to_row(run)
            db.execute(
                _UPDATE_RUN,
                (*full[2:3], *full[6:10], *full[10:11], *full[12:15], run.run_id),
            )
        # Hooks first release tokens, then take them, so a token freed and
        # re-taken in one plan never trips the live-token index.
        hooks = sorted(plan.hooks.values(), key=lambda h: h.status == "active")
        for hook in hooks:
            db.execute(_UPSERT_HOOK, codec.hook_to_row(hook))
        if plan.steps:
            db.executemany(_UPSERT_STEP, [codec.step_to_row(s) for s in plan.steps.values()])
        if plan.waits:
            db.executemany(_UPSERT_WAIT, [codec.wait_to_row(w) for w in plan.waits.values()])

    def _unseen(
        self, db: sqlite3.Connection, run_id: str, seen_seq: int | None, before: Snapshot
    ) -> tuple[Event, ...]:
        if seen_seq is None:
            return ()
        if type(seen_seq) is not int or seen_seq < 0:
            raise InvalidRequest(f"seen_seq must be a non-negative int, got {seen_seq!r}")
        if seen_seq >= before.seq:
            return ()
        rows = db.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
            "ORDER BY seq",
            (run_id, seen_seq, before.seq),
        ).fetchall()
        return tuple(codec.decode_event(*r) for r in rows)

    def _check(self) -> None:
        """Assert the stored state equals the fold of every log (tests call this)."""
        with self._read() as db:
            run_ids = [r[0] for r in db.execute("SELECT run_id FROM runs ORDER BY run_id")]
            for run_id in run_ids:
                rows = db.execute(
                    f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
                ).fetchall()
                events = [codec.decode_event(*r) for r in rows]
                assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
                folded = fold_log(events)
                run, snapshot = self._run_row(db, run_id)
                assert folded.run == run, (folded.run, run)
                assert snapshot == Snapshot(seq=folded.seq, seq_in_band=folded.seq_in_band)
                steps = db.execute(
                    f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = ?", (run_id,)
                ).fetchall()
                assert {s.step_id: s for s in map(codec.step_from_row, steps)} == folded.steps
                hooks = db.execute(
                    f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ?", (run_id,)
                ).fetchall()
                assert {h.hook_id: h for h in map(codec.hook_from_row, hooks)} == folded.hooks
                waits = db.execute(
                    f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ?", (run_id,)
                ).fetchall()
                assert {w.wait_id: w for w in map(codec.wait_from_row, waits)} == folded.waits


class _Facet:
    def __init__(self, world: SQLiteWorld) -> None:
        self._w = world


class _Runs(_Facet):
    async def get(self, run_id: str) -> Run:
        with self._w._read() as db:
            return self._w._run_row(db, run_id)[0]

    async def list(
        self,
        *,
        workflow_name: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        check_limit(limit)
        statuses = normalize_statuses(status)
        if statuses is not None and not statuses:
            return RunPage(runs=(), cursor=None)
        where: list[str] = []
        args: list[Any] = []
        if cursor is not None:
            micros, run_id = decode_run_cursor(cursor)
            where.append("(created_at, run_id) < (?, ?)")
            args += [micros, run_id]
        if workflow_name is not None:
            where.append("workflow_name = ?")
            args.append(workflow_name)
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            args += sorted(s.value for s in statuses)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._w._db.execute(
            f"SELECT {codec.RUN_COLUMNS} FROM runs {clause} "
            "ORDER BY created_at DESC, run_id DESC LIMIT ?",
            (*args, limit + 1),
        ).fetchall()
        runs = tuple(codec.run_from_row(r) for r in rows[:limit])
        return RunPage(runs=runs, cursor=encode_run_cursor(runs[-1]) if len(rows) > limit else None)


class _Steps(_Facet):
    async def get(self, run_id: str, step_id: str) -> Step:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            step = _View(db, run_id, None, Snapshot(seq=0, seq_in_band=0)).step(step_id)
        if step is None:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return step

    async def list(self, run_id: str) -> tuple[Step, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return tuple(codec.step_from_row(r) for r in rows)


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> Hook:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            hook = _View(db, run_id, None, Snapshot(seq=0, seq_in_band=0)).hook(hook_id)
        if hook is None:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return hook

    async def get_by_token(self, token: str) -> Hook:
        row = self._w._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? AND status = 'active'",
            (token if isinstance(token, str) else "",),
        ).fetchone()
        if row is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return codec.hook_from_row(row)

    async def list(self, run_id: str) -> tuple[Hook, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return tuple(codec.hook_from_row(r) for r in rows)


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> Wait:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            wait = _View(db, run_id, None, Snapshot(seq=0, seq_in_band=0)).wait(wait_id)
        if wait is None:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return wait

    async def list(self, run_id: str) -> tuple[Wait, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return tuple(codec.wait_from_row(r) for r in rows)


class _Events(_Facet):
    async def create(
        self,
        run_id: str | None,
        request: EventRequest,
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
    ) -> EventResult:
        w = self._w
        request = check_request(request)
        if request.type is EventType.RUN_CREATED:
            run_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")
            with w._write() as db:
                row = db.execute(_SELECT_RUN, (run_id,)).fetchone()
                existing = None if row is None else codec.run_from_row(row)
                plan = plan_create_run(run_id, request, w._clock.now(), existing)
                w._store(db, plan, original=None)
            w._remember(plan)
            return EventResult(event=plan.events[0], run=plan.run, allocated=1)
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        check_run_id(run_id)
        with w._write() as db:
            run, counters = w._cached_run(db, run_id)
            plan = plan_write(
                _View(db, run_id, run, counters),
                run_id,
                request,
                w._clock.now(),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
            )
            unseen = w._unseen(db, run_id, seen_seq, plan.before) if plan.events else ()
            if plan.events:
                w._store(db, plan, original=run)
        if plan.events:
            w._remember(plan)
        touched = plan.touched
        return EventResult(
            event=plan.events[0] if plan.events else plan.canonical,
            run=plan.run,
            step=touched if isinstance(touched, Step) else None,
            hook=touched if isinstance(touched, Hook) else None,
            wait=touched if isinstance(touched, Wait) else None,
            unseen=unseen,
            allocated=len(plan.events),
        )

    async def create_batch(
        self,
        run_id: str,
        requests: Sequence[EventRequest],
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
    ) -> BatchResult:
        w = self._w
        checked = [check_request(r) for r in requests]
        check_run_id(run_id)
        with w._write() as db:
            run, counters = w._cached_run(db, run_id)
            view = _View(db, run_id, run, counters)
            view.prefetch_steps(
                [r.correlation_id for r in checked if r.type in STEP_TYPES and r.correlation_id]
            )
            plan = plan_batch(
                view,
                run_id,
                checked,
                w._clock.now(),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
            )
            unseen = w._unseen(db, run_id, seen_seq, plan.before)
            w._store(db, plan, original=run)
        w._remember(plan)
        return BatchResult(events=tuple(plan.events), run=plan.run, unseen=unseen)

    async def get(self, run_id: str, seq: int) -> Event:
        with self._w._read() as db:
            _, counters = self._w._run_row(db, run_id)
            row = None
            if type(seq) is int:
                row = db.execute(
                    f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq = ?",
                    (run_id, seq),
                ).fetchone()
        if row is None:
            raise EventNotFound(
                f"run {run_id!r} has no event #{seq} (its log has {counters.seq})", run_id=run_id
            )
        return codec.decode_event(*row)

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        check_limit(limit)
        if type(after_seq) is not int or after_seq < 0:
            raise InvalidRequest(f"after_seq must be a non-negative int, got {after_seq!r}")
        with self._w._read() as db:
            _, snapshot = self._w._run_row(db, run_id)
            rows = db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit),
            ).fetchall()
        events = tuple(codec.decode_event(*r) for r in rows)
        expected = after_seq + 1
        for event in events:
            if event.seq != expected:
                raise CorruptedLog(
                    f"run {run_id!r}: the stored log has a hole at #{expected} (next stored "
                    f"event is #{event.seq}); the file was damaged outside durasim",
                    run_id=run_id,
                    seq=expected,
                )
            expected += 1
        return EventPage(
            events=events, snapshot=snapshot, has_more=after_seq + len(events) < snapshot.seq
        )


class _Queue(_Facet):
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
        _check_message(payload, run_id, orchestrator, idempotency_key)
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
                f"INSERT INTO messages ({_MESSAGE_COLUMNS}, due_at) VALUES "
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
        if not isinstance(queue_prefix, str):
            raise InvalidRequest(f"queue_prefix must be a str, got {queue_prefix!r}")
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
            rows = db.execute(
                f"SELECT {_MESSAGE_COLUMNS}, ord FROM messages WHERE due_at <= ? "
                "AND substr(queue_name, 1, ?) = ? ORDER BY due_at, ord",
                (now_us, len(queue_prefix), queue_prefix),
            ).fetchall()
            for row in rows:
                message = _message_from_row(row)
                if message.orchestrator and message.run_id in busy:
                    continue
                if w._max_deliveries is not None and message.attempt >= w._max_deliveries:
                    db.execute(
                        f"INSERT INTO dead_letters ({_MESSAGE_COLUMNS}) VALUES "
                        "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        row[:9],
                    )
                    db.execute("DELETE FROM messages WHERE message_id = ?", (message.message_id,))
                    continue
                lease_id = w._ids.new_id("lease")
                expires = now + timedelta(seconds=lease)
                db.execute(
                    "UPDATE messages SET attempt = attempt + 1, lease_id = ?, "
                    "lease_expires_at = ?, due_at = ? WHERE message_id = ?",
                    (lease_id, to_micros(expires), to_micros(expires), message.message_id),
                )
                message = attrs.evolve(message, attempt=message.attempt + 1)
                return Delivery(message=message, lease_id=lease_id, lease_expires_at=expires)
        return None

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

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        row = self._w._db.execute(
            "SELECT min(due_at) FROM messages WHERE substr(queue_name, 1, ?) = ?",
            (len(queue_prefix), queue_prefix),
        ).fetchone()
        return None if row[0] is None else from_micros(row[0])

    async def messages(self) -> tuple[Message, ...]:
        rows = self._w._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages ORDER BY ord"
        ).fetchall()
        return tuple(_message_from_row(r) for r in rows)

    async def dead_letters(self) -> tuple[Message, ...]:
        rows = self._w._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM dead_letters ORDER BY ord"
        ).fetchall()
        return tuple(_message_from_row(r) for r in rows)


class _Streams(_Facet):
    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = _check_chunks(chunks)
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
            first = _clamp_start(start, length)
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
