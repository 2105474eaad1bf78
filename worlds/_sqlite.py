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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from . import _sqlite_codec as codec
from . import _sqlite_schema as sql
from ._checks import (
    check_limit,
    check_request,
    decode_run_cursor,
    encode_run_cursor,
    event_time,
    normalize_statuses,
)
from ._entities import (
    BatchResult,
    Capabilities,
    EventPage,
    EventResult,
    Hook,
    Run,
    RunPage,
    RunStatus,
    Snapshot,
    Step,
    Wait,
)
from ._errors import (
    CorruptedLog,
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    RunNotFound,
    StepNotFound,
    WaitNotFound,
    WorldError,
)
from ._events import (
    STEP_TYPES,
    Event,
    EventRequest,
    EventType,
    check_run_id,
)
from ._fold import fold_log
from ._guards import Plan, plan_batch, plan_create_run, plan_write
from ._known import KnownRuns
from ._sqlite_queue import SQLiteQueue, SQLiteStreams
from ._time import Clock, IdSource, RandomIds, SystemClock, to_micros

__all__ = ["SQLiteWorld"]


class _View:
    """The fold's StateView, answered by queries inside the write transaction."""

    def __init__(
        self,
        db: sqlite3.Connection,
        run_id: str,
        run: Run | None,
        counters: Snapshot,
        *,
        known_steps: Mapping[str, Step] | None = None,
    ) -> None:
        self._db = db
        self._run_id = run_id
        self._run = run
        self._counters = counters
        # Steps as this connection last wrote them (valid: see SQLiteWorld._known).
        self._steps: dict[str, Step | None] = dict(known_steps) if known_steps else {}

    def prefetch_steps(self, step_ids: Sequence[str]) -> None:
        """Read every named step not known yet, in few queries (a batch would ask one by one).

        Most are new steps (``step_created``): a first query over the primary
        key finds which exist; only those are read in full.
        """
        wanted = [s for s in dict.fromkeys(step_ids) if s not in self._steps]
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            found = self._db.execute(
                f"SELECT step_id FROM steps WHERE run_id = ? AND step_id IN ({marks})",
                (self._run_id, *chunk),
            ).fetchall()
            self._steps.update(dict.fromkeys(chunk))
            if not found:
                continue
            rows = self._db.execute(
                f"{codec.STEP_SELECT} WHERE s.run_id = ? AND s.step_id IN "
                f"({', '.join('?' for _ in found)})",
                (self._run_id, *(row[0] for row in found)),
            ).fetchall()
            self._steps.update({row[1]: codec.step_from_row(row) for row in rows})

    def run(self) -> Run | None:
        return self._run

    def counters(self) -> Snapshot:
        return self._counters

    def has_step(self, step_id: str) -> bool:
        if step_id in self._steps:
            return self._steps[step_id] is not None
        row = self._db.execute(
            "SELECT 1 FROM steps WHERE run_id = ? AND step_id = ?", (self._run_id, step_id)
        ).fetchone()
        return row is not None

    def step(self, step_id: str) -> Step | None:
        if step_id in self._steps:
            return self._steps[step_id]
        row = self._db.execute(
            f"{codec.STEP_SELECT} WHERE s.run_id = ? AND s.step_id = ?",
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


_NO_REFS: tuple[None, None, None] = (None, None, None)
_STEP_REF_SLOT = {
    EventType.STEP_CREATED: 0,
    EventType.STEP_COMPLETED: 1,
    EventType.STEP_RETRYING: 2,
    EventType.STEP_FAILED: 2,
}


def _step_refs(plan: Plan) -> dict[str, tuple[int | None, int | None, int | None]]:
    """For each step the plan changes, the positions of its new input/output/error bytes."""
    refs: dict[str, list[int | None]] = {}
    for event in plan.events:
        slot = _STEP_REF_SLOT.get(event.type)
        if slot is not None and event.correlation_id is not None:
            refs.setdefault(event.correlation_id, [None, None, None])[slot] = event.seq
    return {step_id: (r[0], r[1], r[2]) for step_id, r in refs.items()}


class _WriteTransaction:
    """:meth:`SQLiteWorld._write`; a class, not a generator: every write enters one."""

    __slots__ = ("_db", "_world")

    def __init__(self, world: SQLiteWorld) -> None:
        self._world = world
        self._db = world._live()

    def __enter__(self) -> sqlite3.Connection:
        db, world = self._db, self._world
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise WorldError(
                f"SQLite World {str(world.path)!r}: could not take the write lock ({exc}); "
                "another process holds it longer than busy_timeout",
                path=str(world.path),
            ) from exc
        try:
            version = db.execute("PRAGMA data_version").fetchone()[0]
        except BaseException as exc:
            self._roll_back(exc)
            raise
        if version != world._data_version:
            world._known.clear()
            world._data_version = version
        return db

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is not None:
            self._roll_back(exc)
            return  # anything else propagates as it is
        try:
            self._db.execute("COMMIT")
        except BaseException as failed:
            self._roll_back(failed)
            raise

    def _roll_back(self, exc: BaseException) -> None:
        """Undo the write and drop the caches; a storage error is raised as a WorldError."""
        db, world = self._db, self._world
        if db.in_transaction:
            db.execute("ROLLBACK")
        world._known.clear()  # whatever happened, decide the next write afresh
        if isinstance(exc, sqlite3.Error):
            raise WorldError(
                f"SQLite World {str(world.path)!r}: the write failed and was rolled back "
                f"({exc}); nothing was committed",
                path=str(world.path),
            ) from exc


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
        # The runs and unfinished steps this connection wrote last: a write
        # usually touches the step the previous one started, and need not read
        # it back.  Dropped whenever another connection wrote (see _write).
        self._known = KnownRuns(runs=sql.CACHED_RUNS, step_runs=sql.CACHED_STEP_RUNS)
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
        self._closed = False
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise WorldError(
                f"cannot open {str(self.path)!r} as a SQLite World: {exc}; pass the path of a "
                "durasim World file or of a new file",
                path=str(self.path),
            ) from exc
        except BaseException:
            self._db.close()
            raise
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = SQLiteQueue(self)
        self.streams = SQLiteStreams(self)

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
            tables = {
                r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            version = None
            if tables and "meta" not in tables:
                raise WorldError(
                    f"{str(self.path)!r} is a SQLite database but not a durasim World (it has "
                    f"tables {', '.join(sorted(tables)[:5])}): pass the path of a new file",
                    path=str(self.path),
                )
            if tables:
                found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(found[0]) if found else None
            if version is not None and version > sql.SCHEMA_VERSION:
                raise WorldError(
                    f"{str(self.path)!r} has schema version {version}, newer than this "
                    f"durasim understands ({sql.SCHEMA_VERSION}): upgrade durasim",
                    path=str(self.path),
                )
            if version is None:
                for statement in sql.SCHEMA_SQL.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(sql.SCHEMA_VERSION),),
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
        self._closed = True
        self._db.close()

    def _live(self) -> sqlite3.Connection:
        if self._closed:
            raise WorldError(
                f"SQLite World {str(self.path)!r} is closed: open a new SQLiteWorld on the file",
                path=str(self.path),
            )
        return self._db

    def _write(self) -> _WriteTransaction:
        """One write transaction holding the database's write lock from the start.

        Under the lock, ``PRAGMA data_version`` tells whether another connection
        committed since this one last looked; if so the run cache is dropped, so
        every decision is made on the current state.  Whatever fails inside
        rolls the whole write back and drops the caches.
        """
        return _WriteTransaction(self)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same snapshot."""
        db = self._live()
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
        row = db.execute(sql.SELECT_RUN, (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        counters = db.execute(sql.SELECT_COUNTERS, (run_id,)).fetchone()
        if counters is None:
            raise CorruptedLog(f"run {run_id!r} has a row but no event", run_id=run_id)
        return codec.run_from_row(row), Snapshot(seq=counters[0], seq_in_band=counters[1])

    def _cached_run(self, db: sqlite3.Connection, run_id: str) -> tuple[Run, Snapshot]:
        """The run and its counters, from the cache when no other connection wrote.

        Only valid inside :meth:`_write`, which drops the cache when the
        database's ``data_version`` moved.
        """
        cached = self._known.run(run_id)
        if cached is not None:
            return cached
        return self._run_row(db, run_id)

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
        db.executemany(sql.INSERT_EVENT, rows)
        if original is None:
            db.execute(sql.INSERT_RUN, codec.run_to_row(run))
        elif run is not original:
            full = codec.run_to_row(run)
            db.execute(
                sql.UPDATE_RUN,
                (*full[2:3], *full[6:10], *full[10:11], *full[12:15], run.run_id),
            )
        # Hooks first release tokens, then take them, so a token freed and
        # re-taken in one plan never trips the live-token index.
        hooks = sorted(plan.hooks.values(), key=lambda h: h.status == "active")
        for hook in hooks:
            db.execute(sql.UPSERT_HOOK, codec.hook_to_row(hook))
        if plan.steps:
            refs = _step_refs(plan)
            db.executemany(
                sql.UPSERT_STEP,
                [codec.step_to_row(s, refs.get(s.step_id, _NO_REFS)) for s in plan.steps.values()],
            )
        if plan.waits:
            db.executemany(sql.UPSERT_WAIT, [codec.wait_to_row(w) for w in plan.waits.values()])

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
            f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
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
                    f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq",
                    (run_id,),
                ).fetchall()
                events = [codec.decode_event(*r) for r in rows]
                assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
                folded = fold_log(events)
                run, snapshot = self._run_row(db, run_id)
                assert folded.run == run, (folded.run, run)
                assert snapshot == Snapshot(seq=folded.seq, seq_in_band=folded.seq_in_band)
                steps = db.execute(f"{codec.STEP_SELECT} WHERE s.run_id = ?", (run_id,)).fetchall()
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
        rows = (
            self._w._live()
            .execute(
                f"SELECT {codec.RUN_COLUMNS} FROM runs {clause} "
                "ORDER BY created_at DESC, run_id DESC LIMIT ?",
                (*args, limit + 1),
            )
            .fetchall()
        )
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
                f"{codec.STEP_SELECT} WHERE s.run_id = ? ORDER BY s.input_seq", (run_id,)
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
        row = (
            self._w._live()
            .execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? AND status = 'active'",
                (token if isinstance(token, str) else "",),
            )
            .fetchone()
        )
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
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> EventResult:
        w = self._w
        request = check_request(request)
        if request.type is EventType.RUN_CREATED:
            run_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")
            with w._write() as db:
                row = db.execute(sql.SELECT_RUN, (run_id,)).fetchone()
                existing = None if row is None else codec.run_from_row(row)
                at = event_time(w._clock.now(), occurred_at, in_band=in_band)
                plan = plan_create_run(run_id, request, at, existing)
                w._store(db, plan, original=None)
            w._known.remember(plan)
            return EventResult(event=plan.events[0], run=plan.run, allocated=1)
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        check_run_id(run_id)
        with w._write() as db:
            run, counters = w._cached_run(db, run_id)
            plan = plan_write(
                _View(db, run_id, run, counters, known_steps=w._known.steps(run_id)),
                run_id,
                request,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = w._unseen(db, run_id, seen_seq, plan.before) if plan.events else ()
            if plan.events:
                w._store(db, plan, original=run)
        if plan.events:
            w._known.remember(plan)
        return plan.result(unseen)

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
        w = self._w
        checked = [check_request(r) for r in requests]
        check_run_id(run_id)
        with w._write() as db:
            run, counters = w._cached_run(db, run_id)
            view = _View(db, run_id, run, counters, known_steps=w._known.steps(run_id))
            view.prefetch_steps(
                [r.correlation_id for r in checked if r.type in STEP_TYPES and r.correlation_id]
            )
            plan = plan_batch(
                view,
                run_id,
                checked,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = w._unseen(db, run_id, seen_seq, plan.before)
            w._store(db, plan, original=run)
        w._known.remember(plan)
        return BatchResult(events=tuple(plan.events), run=plan.run, unseen=unseen)

    async def get(self, run_id: str, seq: int) -> Event:
        with self._w._read() as db:
            _, counters = self._w._run_row(db, run_id)
            row = None
            if type(seq) is int:
                row = db.execute(
                    f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq = ?",
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
                f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? "
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
