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

This module owns the World: its connection, transactions and stored rows.  The
guards' view is :mod:`._sqlite_view`, the facets :mod:`._sqlite_facets`, the
queue and streams :mod:`._sqlite_queue`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from . import _sqlite_codec as codec
from . import _sqlite_schema as sql
from ._entities import Capabilities, RunRecord, Snapshot
from ._errors import (
    CorruptedLog,
    InvalidRequest,
    RunNotFound,
    StorageFull,
    WorldError,
    WorldFileChanged,
)
from ._events import Event, check_run_id
from ._fold import fold_log
from ._guards import Plan
from ._known import KnownRuns
from ._sqlite_facets import _Events, _Hooks, _Runs, _Steps, _Waits
from ._sqlite_queue import SQLiteQueue, SQLiteStreams
from ._sqlite_view import _AssumedWrong
from ._time import Clock, IdSource, RandomIds, SystemClock

__all__ = ["SQLiteWorld"]


_ROWS = sql.ROWS_PER_STATEMENT


def _write_rows(
    cur: sqlite3.Cursor | sqlite3.Connection,
    statements: tuple[str, ...],
    params: list[Any],
    width: int,
) -> int:
    """Run ``statements[n]`` over ``params`` (rows of ``width`` values, flat), n rows at a time.

    Returns the rows changed.  ``cur``: the World's cursor (``Connection.execute``
    makes and registers a new cursor per call).
    """
    count = len(params) // width
    if count <= _ROWS:
        return cur.execute(statements[count], params).rowcount if count else 0
    changed = 0
    step = _ROWS * width
    for start in range(0, len(params), step):
        chunk = params[start : start + step]
        changed += cur.execute(statements[len(chunk) // width], chunk).rowcount
    return changed


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full (``SQLITE_FULL``, or ``ENOSPC``)."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code == sqlite3.SQLITE_FULL or (code is None and "is full" in str(exc))
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def _exists(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _identity(path: str | Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _probe(path: Path) -> sqlite3.Connection:
    """A read-only connection to ``path``, its schema checked; nothing is written.

    A WAL file whose directory this process cannot write (so no ``-shm`` can be
    made) is opened ``immutable`` when no ``-wal`` holds unmerged commits.
    """
    base = path.resolve().as_uri()
    try:
        db = sqlite3.connect(f"{base}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise WorldError(
            f"cannot open SQLite World at {str(path)!r}: {exc}; check that the file is readable",
            path=str(path),
        ) from exc
    try:
        _schema_version(db, path)
        return db
    except sqlite3.OperationalError as exc:
        db.close()
        wal = Path(f"{path}-wal")
        if _writable(path) or (wal.exists() and wal.stat().st_size > 0):
            raise WorldError(
                f"cannot read SQLite World at {str(path)!r}: {exc}; check that the file and "
                "its directory are readable",
                path=str(path),
            ) from exc
    except sqlite3.DatabaseError as exc:
        db.close()
        raise WorldError(
            f"cannot open {str(path)!r} as a SQLite World: {exc}; pass the path of a "
            "durasim World file or of a new file (nothing was changed in this one)",
            path=str(path),
        ) from exc
    except BaseException:
        db.close()
        raise
    db = sqlite3.connect(f"{base}?mode=ro&immutable=1", uri=True, isolation_level=None)
    try:
        _schema_version(db, path)
    except BaseException:
        db.close()
        raise
    return db


def _schema_version(db: sqlite3.Connection, path: Path) -> int | None:
    """The World's schema version; None for an empty database; refuses a foreign one."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if "meta" not in tables:
        raise WorldError(
            f"{str(path)!r} is a SQLite database but not a durasim World (it has tables "
            f"{', '.join(sorted(tables)[:5])}); nothing was changed in it: pass the path of a "
            "durasim World file or of a new file",
            path=str(path),
        )
    found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = int(found[0]) if found else None
    if version is not None and version > sql.SCHEMA_VERSION:
        raise WorldError(
            f"{str(path)!r} has schema version {version}, newer than this durasim "
            f"understands ({sql.SCHEMA_VERSION}): upgrade durasim",
            path=str(path),
        )
    return version


class _WriteTransaction:
    """:meth:`SQLiteWorld._write`; a class, not a generator: every write enters one."""

    __slots__ = ("_cur", "_db", "_world")

    def __init__(self, world: SQLiteWorld) -> None:
        self._world = world
        self._db = world._live()
        self._cur = world._cur

    def __enter__(self) -> sqlite3.Connection:
        cur, world = self._cur, self._world
        if world.read_only:
            world._check_writable()
        try:
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if is_full(exc):
                raise world._full(exc) from exc
            raise WorldError(
                f"SQLite World {str(world.path)!r}: could not take the write lock ({exc}); "
                "another process holds it longer than busy_timeout",
                path=str(world.path),
            ) from exc
        try:
            world._check_file()  # under the write lock: nothing is written into a lost file
            version = cur.execute("PRAGMA data_version").fetchone()[0]
        except BaseException as exc:
            self._roll_back(exc)
            raise
        if version != world._data_version:
            world._known.clear()
            world._data_version = version
        return self._db

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is not None:
            self._roll_back(exc)
            return  # anything else propagates as it is
        try:
            self._cur.execute("COMMIT")
        except BaseException as failed:
            self._roll_back(failed)
            raise

    def _roll_back(self, exc: BaseException) -> None:
        """Undo the write and drop the caches; a storage error is raised as a WorldError."""
        db, world = self._db, self._world
        if db.in_transaction:
            # SQLite may have rolled back itself (an I/O error, a full disk).
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        world._known.clear()  # whatever happened, decide the next write afresh
        if is_full(exc):
            raise world._full(exc) from exc
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
        # stat'ed before every write: as bytes, so no conversion each time
        self._file = os.fsencode(self.path)
        self._clock: Clock = clock or SystemClock()
        self._ids: IdSource = ids or RandomIds()
        self._durability = durability
        self._max_deliveries = max_deliveries
        # The runs and unfinished steps this connection wrote last: a write
        # usually touches the step the previous one started, and need not read
        # it back.  Dropped whenever another connection wrote (see _write).
        self._known = KnownRuns(runs=sql.CACHED_RUNS, step_runs=sql.CACHED_STEP_RUNS)
        self._data_version: int | None = None
        self._identity: tuple[int, int] | None = None
        self._ino = self._dev = -1  # self._identity's, apart
        self._lost: str | None = None
        #: True when the file or its directory is not writable: the World is
        #: opened read-only (it can be inspected) and every write is refused.
        self.read_only = _exists(self.path) and not _writable(self.path)
        # Read the schema read-only first: a file that is not a durasim World
        # is refused before anything (journal_mode=WAL rewrites the header)
        # could change a byte of it.
        probe = _probe(self.path) if _exists(self.path) else None
        self._closed = False
        self._db = probe if self.read_only and probe is not None else self._connect(busy_timeout)
        if probe is not None and probe is not self._db:
            probe.close()
        # One cursor for the statements whose rows are read at once (a cursor per call costs).
        self._cur = self._db.cursor()
        try:
            self._identity = _identity(self.path)
            self._dev, self._ino = self._identity
            if not self.read_only:
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

    def _connect(self, busy_timeout: float) -> sqlite3.Connection:
        try:
            return sqlite3.connect(
                self.path, isolation_level=None, timeout=busy_timeout, cached_statements=256
            )
        except sqlite3.Error as exc:
            raise WorldError(
                f"cannot open SQLite World at {str(self.path)!r}: {exc}; check that the "
                "directory exists and is writable",
                path=str(self.path),
            ) from exc

    def _open(self) -> None:
        db = self._db
        try:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if is_full(exc):
                raise self._full(exc) from exc
            raise
        if str(mode).lower() != "wal":
            raise WorldError(
                f"SQLite World at {str(self.path)!r} could not switch to WAL mode (got "
                f"{mode!r}); use a local file system that supports shared memory",
                path=str(self.path),
            )
        sync = "FULL" if self._durability == "power" else "NORMAL"
        db.execute(f"PRAGMA synchronous = {sync}")
        with self._write():
            version = _schema_version(db, self.path)
            if version is None:
                for statement in sql.SCHEMA_SQL.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(sql.SCHEMA_VERSION),),
                )
            elif db.execute(sql.HAS_HOOKS_BY_KEY_INDEX).fetchone() is None:
                db.execute(sql.HOOKS_BY_KEY_INDEX)  # a World made before the index existed

    def _check_writable(self) -> None:
        if self.read_only:
            raise WorldError(
                f"SQLite World {str(self.path)!r} is open read-only: this process cannot write "
                "the file or its directory (SQLite writes its -wal and -shm files beside it); "
                "reading works, to write make both writable by this user (chmod/chown, or "
                "mount the file system read-write)",
                path=str(self.path),
            )

    def _check_file(self) -> None:
        """Refuse to write when the file at ``path`` is no longer the one this World opened."""
        if self._lost is None:
            try:
                now = os.stat(self._file)
            except OSError:
                what = "deleted"
            else:
                if now.st_ino == self._ino and now.st_dev == self._dev:
                    return
                what = "replaced by another file"
            self._lost = (
                f"SQLite World {str(self.path)!r} was {what} while this process had it open: "
                "writes would go into the unlinked file and be lost, so none is made; stop "
                "this process, check the file (a backup restored? a cleanup job?) and restart"
            )
        raise WorldFileChanged(self._lost, path=str(self.path))

    def _full(self, exc: BaseException) -> StorageFull:
        return StorageFull(
            f"SQLite World {str(self.path)!r}: the disk is full ({exc}); nothing of this write "
            "was committed and nothing committed is lost: free space on the file system, the "
            "same call then succeeds",
            path=str(self.path),
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

    def _run_row(self, db: sqlite3.Connection, run_id: str) -> tuple[RunRecord, Snapshot]:
        check_run_id(run_id)
        row = db.execute(sql.SELECT_RUN, (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        counters = db.execute(sql.SELECT_COUNTERS, (run_id,)).fetchone()
        if counters is None:
            raise CorruptedLog(f"run {run_id!r} has a row but no event", run_id=run_id)
        return codec.run_from_row(row), Snapshot(seq=counters[0], seq_in_band=counters[1])

    def _cached_run(self, db: sqlite3.Connection, run_id: str) -> tuple[RunRecord, int, int]:
        """The run, its ``seq`` and ``seq_in_band``, from the cache when no other connection wrote.

        Only valid inside :meth:`_write`, which drops the cache when the
        database's ``data_version`` moved.
        """
        cached = self._known.run(run_id)
        if cached is not None:
            return cached
        run, counters = self._run_row(db, run_id)
        return run, counters.seq, counters.seq_in_band

    def _store(
        self,
        db: sqlite3.Connection,
        plan: Plan,
        *,
        original: RunRecord | None,
        assumed: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        """Write ``plan``'s rows; the steps in ``assumed`` (taken as absent unread) are INSERTed.

        Raises :class:`_AssumedWrong` when one of them existed after all, or is
        not among the plan's steps (so no INSERT checked it).
        """
        # The World's connection: its one cursor (Connection.execute makes a cursor per
        # statement); anything else (a wrapper a test passes) is written through as given.
        cur: Any = self._cur if db is self._db else db
        run = plan.run
        params: list[Any] = []
        # For each step the plan changes, the positions of its new input/output/error bytes.
        refs: dict[str, list[Any]] = {}
        codec.append_events(params, plan.events, plan.seq_in_band, refs)
        _write_rows(cur, sql.INSERT_EVENTS, params, codec.EVENT_WIDTH)
        if original is None:
            cur.execute(sql.INSERT_RUN, codec.run_to_row(run))
        elif run is not original:
            full = codec.run_to_row(run)
            cur.execute(
                sql.UPDATE_RUN,
                (*full[2:3], *full[6:10], *full[10:11], *full[12:15], run.run_id),
            )
        # Hooks first release tokens, then take them, so a token freed and
        # re-taken in one plan never trips the live-token index.
        if plan.hooks:
            for hook in sorted(plan.hooks.values(), key=lambda h: h.status == "active"):
                db.execute(sql.UPSERT_HOOK, codec.hook_to_row(hook))
        if plan.steps:
            params = []
            codec.append_steps(params, plan.steps, refs)
            if not assumed:
                _write_rows(cur, sql.UPSERT_STEPS, params, codec.STEP_WIDTH)
            elif not assumed <= plan.steps.keys():
                raise _AssumedWrong
            elif _write_rows(cur, sql.CHECKED_STEPS, params, codec.STEP_WIDTH) != len(plan.steps):
                raise _AssumedWrong  # a step assumed new exists (see CHECKED_STEPS)
        elif assumed:
            raise _AssumedWrong
        if plan.waits:
            db.executemany(sql.UPSERT_WAIT, [codec.wait_to_row(w) for w in plan.waits.values()])

    def _unseen(
        self, db: sqlite3.Connection, run_id: str, seen_seq: int | None, before: int
    ) -> tuple[Event, ...]:
        """The events after ``seen_seq`` up to ``before`` (the run's ``seq`` before the write)."""
        if seen_seq is None:
            return ()
        if type(seen_seq) is not int or seen_seq < 0:
            raise InvalidRequest(f"seen_seq must be a non-negative int, got {seen_seq!r}")
        if seen_seq >= before:
            return ()
        rows = db.execute(
            f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE run_id = ? AND seq > ? AND seq <= ? "
            "ORDER BY seq",
            (run_id, seen_seq, before),
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
