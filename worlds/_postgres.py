"""The PostgreSQL World: many workers on many machines share one database.

psycopg 3 (async) over an ``AsyncConnectionPool``.  Every write is one
transaction that starts by locking the run's row (``SELECT ... FOR UPDATE``):
the fence (``seq_in_band``) is checked and advanced, positions are assigned and
every entity row is written under that lock, so of N writers holding the same
count exactly one is accepted, in whatever process they run.  The rules are the
reference guards (:mod:`._guards`), fed by a view the write prefetches inside
the same transaction; refusals therefore come in the same order, with the same
errors, as in every other World.

Writes usually skip the read: a process remembers each run as it last wrote
it (:class:`KnownRuns`, with its live hooks and waits) and sends a write of a
step, a sleep or a hook that it can decide from that memory as one autocommit
statement that writes only if the run's counters are still the remembered
ones (:func:`._postgres_events._fast_write`); otherwise the write is decided
again under the row lock.

Constraints back the guards where runs meet: a partial unique index keeps one
active hook per token across all runs (a writer that loses that race retries
and journals ``hook_conflict``), and one on ``(run_id, resume_id)`` keeps the
first resume canonical.

Connection loss: a write interrupted before COMMIT is rolled back by the server
and retried on another connection; one interrupted *during* COMMIT is looked up
by the write id stored on its first event, so it is reported once and never
applied twice.  Serialization failures, deadlocks and lost unique-index races are
retried too.

The World binds to the event loop it is first used on (a pool cannot move
between loops).  Used from a later loop after the first one ended (tests call
``asyncio.run`` several times), it drops the old pool's connections and opens a
new pool.  Never use one World from two running loops at once.

This module owns the World: its options, pool, connections and transactions.
The guards' views are :mod:`._postgres_views`, the events facet and its write
paths :mod:`._postgres_events`, the read facets :mod:`._postgres_facets`, the
queue and streams :mod:`._postgres_queue`, the schema :mod:`._postgres_schema`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import _postgres_codec as codec
from . import _postgres_schema as schema_mod
from ._entities import Capabilities, RunRecord, Snapshot
from ._errors import InvalidRequest, RunNotFound, WorldError
from ._events import check_run_id
from ._fold import fold_log
from ._postgres_codec import EVENT_COLUMNS, RUN_SELECT
from ._postgres_events import _Events
from ._postgres_facets import _Hooks, _Runs, _Steps, _Waits
from ._postgres_queue import PostgresQueue, PostgresStreams
from ._postgres_views import _KnownRuns
from ._postgres_wire import DirectStatements, wire_params
from ._time import Clock, IdSource, RandomIds, SystemClock, housekeeping

__all__ = ["PostgresWorld", "redact_dsn"]

T = TypeVar("T")
Conn = psycopg.AsyncConnection[tuple[Any, ...]]

#: Errors after which a whole transaction is simply run again.
_RETRY_CONFLICTS = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.UniqueViolation,
)
_MAX_CONFLICT_RETRIES = 20
_IDLE = TransactionStatus.IDLE


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in params:
        params["password"] = "***"  # noqa: S105 -- a mask, not a password
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


class PostgresWorld:
    """A World in a PostgreSQL database (docs/protocol.md, docs/worlds.md).

    Construction does no I/O: the World connects, creates or migrates its schema
    and opens its pool on first use.  ``await world.open()`` does that now, so an
    unreachable server is reported at start-up (a :class:`WorldError` naming the
    DSN without its password, and the fix).

    Args:
        dsn: a libpq connection string or URL (``postgresql://user@host:5432/db``).
        schema: the PostgreSQL schema holding the World's tables; several apps
            (or tests) share one database under different schema names.
        clock: source of every timestamp (default: the system clock).
        ids: source of run, message and lease ids (default: random).
        pool_size: most connections the World's pool opens (one more, outside
            it, carries the one-statement writes).
        max_deliveries: claims after which a message is dead-lettered.
        connect_timeout: seconds to wait for the server at start-up.
        retry_for: seconds a call keeps retrying after losing the server before
            it fails with :class:`WorldError`.
        durability: ``"power"`` (default) keeps the server's ``synchronous_commit``
            (on): a write returns once its commit is flushed.  ``"process"`` turns
            it off for this World's sessions: commits return before the flush, a
            killed worker still loses nothing, a crashed server may lose the last
            fraction of a second of commits (never a part of one).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "durasim",
        clock: Clock | None = None,
        ids: IdSource | None = None,
        pool_size: int = 10,
        max_deliveries: int | None = None,
        connect_timeout: float = 10.0,
        retry_for: float = 30.0,
        durability: Literal["power", "process"] = "power",
    ) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise InvalidRequest(f"dsn must be a non-empty connection string, got {dsn!r}")
        if type(pool_size) is not int or pool_size < 1:
            raise InvalidRequest(f"pool_size must be a positive int, got {pool_size!r}")
        if durability not in ("power", "process"):
            raise InvalidRequest(f"durability must be 'power' or 'process', got {durability!r}")
        self.dsn = dsn
        self._durability = durability
        self.schema = schema_mod.check_schema_name(schema)
        self._clock: Clock = clock or SystemClock()
        self._ids: IdSource = ids or RandomIds()
        self._pool_size = pool_size
        self._max_deliveries = max_deliveries
        self._connect_timeout = connect_timeout
        self._retry_for = retry_for
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Future[AsyncConnectionPool[Conn]] | None = None
        self._connections: weakref.WeakSet[Conn] = weakref.WeakSet()
        # One connection outside the pool for the one-statement writes (see
        # _transact): taking a pooled connection costs more CPU than the write.
        self._direct: Conn | None = None
        self._direct_wire: DirectStatements | None = None
        self._direct_busy = False
        self._run_locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        # Runs as this process last wrote them: the next write to one of them
        # is decided from here and sent as one statement (see _fast_batch).
        self._known = _KnownRuns(runs=4096, step_runs=256)
        # Write ids (see _postgres_events._landed_check): unique per World by a
        # random prefix, then counted (no urandom per write).
        self._write_ids = map(f"{secrets.token_hex(6)}{{:x}}".format, itertools.count())
        self._migrated = False
        self._power_safe = True
        self._closed = False
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = PostgresQueue(self)
        self.streams = PostgresStreams(self)

    def __repr__(self) -> str:
        return f"PostgresWorld({redact_dsn(self.dsn)!r}, schema={self.schema!r})"

    # -- life cycle ---------------------------------------------------------------------

    async def open(self) -> PostgresWorld:
        """Connect, migrate the schema and open the pool now; returns the World."""
        await self._ready()
        return self

    @property
    def capabilities(self) -> Capabilities:
        """Every feature; shared by processes and hosts; power-safe unless the server's
        ``fsync`` or ``synchronous_commit`` is off (read at start-up)."""
        return Capabilities(multi_process=True, durable=True, power_safe=self._power_safe)

    @property
    def clock(self) -> Clock:
        """The World's clock."""
        return self._clock

    async def close(self) -> None:
        """Close the pool and the listener; idempotent."""
        self._closed = True
        await self.queue._stop_listening()
        pool, self._pool, self._opening = self._pool, None, None
        direct, self._direct, self._direct_wire = self._direct, None, None
        same_loop = self._loop is asyncio.get_running_loop()
        if direct is not None and same_loop:
            with contextlib.suppress(psycopg.Error):
                await direct.close()
        if pool is None:
            if not same_loop:
                self._drop_connections()
            return
        if same_loop:
            await pool.close()
        else:
            self._drop_connections()

    def _drop_connections(self) -> None:
        """Close every connection of a pool whose event loop is gone (no await possible)."""
        for conn in list(self._connections):
            if not conn.closed:
                conn.pgconn.finish()
        self._connections = weakref.WeakSet()

    async def _ready(self) -> AsyncConnectionPool[Conn]:
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        if self._closed:
            raise WorldError(f"{self!r} is closed: build a new PostgresWorld", schema=self.schema)
        if self._opening is None or self._loop is not loop:
            if self._loop is not loop:
                self._pool = None
                self._direct, self._direct_wire, self._direct_busy = None, None, False
                self._run_locks = {}
                self.queue._forget_listener()
                self._drop_connections()
            self._loop = loop
            with housekeeping():  # the pool's tasks and timers: see housekeeping()
                self._opening = loop.create_task(self._open_pool())
        try:
            return await asyncio.shield(self._opening)
        except BaseException:
            if self._opening is not None and self._opening.done():
                self._opening = None
            raise

    def _unreachable(self, exc: BaseException) -> WorldError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return WorldError(
            f"cannot reach PostgreSQL at {redact_dsn(self.dsn)!r}: {reason}; start the server "
            "(e.g. pg_ctlcluster 15 main start) or fix the DSN",
            dsn=redact_dsn(self.dsn),
        )

    async def connect(self, *, autocommit: bool = True) -> Conn:
        """A new connection outside the pool, with the World's schema on its search path."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=autocommit, connect_timeout=max(1, int(self._connect_timeout))
            )
        except psycopg.OperationalError as exc:
            raise self._unreachable(exc) from exc
        try:
            await conn.execute(f"SET search_path TO {self.schema}")
            if not autocommit:
                await conn.commit()
        except BaseException:
            # Cancelled (a renewal's timeout, a worker stopping) or failed: nobody
            # holds the connection yet, so it is closed here, not left to the GC.
            with contextlib.suppress(psycopg.Error):
                await asyncio.shield(conn.close())
            raise
        return conn

    async def _configure(self, conn: Conn) -> None:
        await conn.execute(f"SET search_path TO {self.schema}")
        if self._durability == "process":
            await conn.execute("SET synchronous_commit TO off")
        self._connections.add(conn)

    async def _open_pool(self) -> AsyncConnectionPool[Conn]:
        if not self._migrated:
            conn = await self.connect()
            async with conn:
                await schema_mod.migrate(conn, self.schema)
                cur = await conn.execute(
                    "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
                )
                row = await cur.fetchone()
                self._power_safe = (
                    row is not None
                    and row[0] == "on"
                    and row[1] != "off"
                    and self._durability == "power"
                )
            self._migrated = True
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.dsn,
            # Connections for two or more calls in flight exist before the first call:
            # a pool that grows mid-race leaves a half-opened connection's task that
            # a loop ending then waits for (the contract's race tests hung on it).
            min_size=min(self._pool_size, 4),
            max_size=self._pool_size,
            # The application name lets an operator find (or end) this World's sessions.
            kwargs={"autocommit": True, "application_name": f"durasim:{self.schema}"},
            configure=self._configure,
            open=False,
            name=f"durasim-{self.schema}",
            timeout=self._retry_for,
        )
        try:
            await pool.open(wait=True, timeout=self._connect_timeout)
        except PoolTimeout as exc:
            await pool.close()
            raise self._unreachable(exc) from exc
        self._pool = pool
        return pool

    # -- transactions -------------------------------------------------------------------

    def _lost(self, exc: BaseException) -> WorldError:
        return WorldError(
            f"lost PostgreSQL at {redact_dsn(self.dsn)!r} for more than {self._retry_for:g} s: "
            f"{exc}; check the server, then retry the call (nothing was written twice)",
            dsn=redact_dsn(self.dsn),
        )

    async def _transact(
        self,
        body: Callable[[Conn], Awaitable[T]],
        *,
        landed: Callable[[Conn], Awaitable[bool]] | None = None,
        single: bool = False,
    ) -> T:
        """Run ``body`` in one transaction, retried on conflicts and lost connections.

        ``landed`` tells, on a fresh connection, whether a transaction whose COMMIT
        was interrupted did commit; then its result is returned instead of running
        ``body`` again.  ``single``: ``body`` sends one autocommit statement (no
        BEGIN/COMMIT round trips); if it was interrupted and did land, the result
        is ``None``, so such a body returns ``None`` when it wrote.
        """
        deadline = time.monotonic() + self._retry_for
        conflicts = 0
        backoff = 0.02
        while True:
            pool = self._pool
            if pool is None or self._loop is not asyncio.get_running_loop():
                pool = await self._ready()
            committing = False
            result: T | None = None  # stays None in single mode (see the docstring)
            try:
                if single and not self._direct_busy:  # the dedicated connection is free
                    self._direct_busy = True
                    try:
                        direct = self._direct or await self._open_direct()
                        if direct is not None:
                            committing = True
                            try:
                                return await body(direct)
                            finally:
                                self._check_direct(direct)
                    finally:
                        self._direct_busy = False
                async with pool.connection() as conn:
                    if single:  # one autocommit statement: it commits as it runs
                        committing = True
                        return await body(conn)
                    async with conn.transaction():
                        result = await body(conn)
                        committing = True
                    return result
            except _RETRY_CONFLICTS as exc:
                conflicts += 1
                if conflicts > _MAX_CONFLICT_RETRIES:
                    raise WorldError(
                        f"PostgreSQL kept refusing a write ({exc}) after {conflicts} tries: "
                        "report this with the server log",
                        schema=self.schema,
                    ) from exc
            except (psycopg.OperationalError, PoolTimeout) as exc:
                if committing and landed is not None and await self._landed(landed, deadline):
                    return result  # type: ignore[return-value]  # a single-mode body's None
                if time.monotonic() > deadline:
                    raise self._lost(exc) from exc
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)

    async def _open_direct(self) -> Conn | None:
        """Open the connection for one-statement writes; ``None`` (use the pool) if it fails."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.dsn,
                autocommit=True,
                application_name=f"durasim:{self.schema}",
                connect_timeout=max(1, int(self._connect_timeout)),
            )
        except psycopg.OperationalError:
            return None
        try:
            await self._configure(conn)
        except BaseException:
            with contextlib.suppress(psycopg.Error):
                await asyncio.shield(conn.close())
            raise
        if self._closed:  # closed while connecting
            await conn.close()
            return None
        wire = DirectStatements(conn) if DirectStatements.usable_on(conn) else None
        self._direct, self._direct_wire = conn, wire
        return conn

    async def _count(
        self, conn: Conn, statement: str, params: Sequence[Any], types: tuple[str, ...]
    ) -> int:
        """The one integer a one-statement write returns (0: no row), sent on ``conn``.

        On the dedicated connection it goes through libpq itself
        (:class:`DirectStatements`, about 100k instructions a step less);
        elsewhere, or with a parameter not of its SQL type in ``types``, through
        a raw cursor.
        """
        wire = self._direct_wire
        if wire is not None and wire.conn is conn:
            sendable = wire_params(params, types)
            if sendable is not None:
                value = await wire.first_value(statement, *sendable)
                return 0 if value is None else int(value)
        cur = await psycopg.AsyncRawCursor(conn).execute(statement, params)
        row = await cur.fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def _check_direct(self, conn: Conn) -> None:
        """After a write on the dedicated connection: drop it unless it is idle and usable.

        A write interrupted mid-statement (cancelled, connection lost) leaves it
        busy or broken; the next write opens a new one.
        """
        if conn.closed or conn.pgconn.transaction_status != _IDLE:
            if self._direct is conn:
                self._direct = self._direct_wire = None
            if not conn.closed:
                conn.pgconn.finish()

    async def _landed(self, landed: Callable[[Conn], Awaitable[bool]], deadline: float) -> bool:
        return await self._read(landed, deadline=deadline)

    async def _serialized(self, run_id: str, write: Callable[[], Awaitable[T]]) -> T:
        """Run this process's writes to one run one at a time, in call order.

        The row lock alone decides between processes; inside one process the
        writers queue here first (FIFO), so concurrent calls are answered in the
        order they were made, as in every other World, and do not pile up on the
        row lock holding pooled connections.
        """
        entry = self._run_locks.get(run_id)
        if entry is None:
            entry = self._run_locks[run_id] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                return await write()
        finally:
            users[0] -= 1
            if not users[0] and self._run_locks.get(run_id) is entry:
                del self._run_locks[run_id]

    async def _read(
        self, body: Callable[[Conn], Awaitable[T]], *, deadline: float | None = None
    ) -> T:
        """Run a read-only ``body`` (autocommit statements), retried on lost connections."""
        deadline = time.monotonic() + self._retry_for if deadline is None else deadline
        backoff = 0.02
        while True:
            pool = await self._ready()
            try:
                async with pool.connection() as conn:
                    return await body(conn)
            except (psycopg.OperationalError, PoolTimeout) as exc:
                if time.monotonic() > deadline:
                    raise self._lost(exc) from exc
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)

    async def _run_row(self, conn: Conn, run_id: str) -> tuple[RunRecord, Snapshot]:
        check_run_id(run_id)
        cur = await conn.execute(RUN_SELECT, (run_id,))
        row = await cur.fetchone()
        if row is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        return codec.run_from_row(row), Snapshot(seq=row[15], seq_in_band=row[16])

    async def _require_run(self, conn: Conn, run_id: str) -> None:
        check_run_id(run_id)
        cur = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,))
        if await cur.fetchone() is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)

    def _check(self) -> None:
        """Assert the stored state equals the fold of every log (tests call this).

        Synchronous, on its own connection: callable from inside a running loop.
        """
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"SET search_path TO {self.schema}")
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                run_ids = [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")]
                for run_id in run_ids:
                    rows = conn.execute(
                        f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = %s ORDER BY seq",
                        (run_id,),
                    ).fetchall()
                    events = [codec.decode_event(*r) for r in rows]
                    assert [e.seq for e in events] == list(range(1, len(events) + 1)), run_id
                    folded = fold_log(events)
                    row = conn.execute(RUN_SELECT, (run_id,)).fetchone()
                    assert row is not None
                    assert folded.run == codec.run_from_row(row), (folded.run, row)
                    assert (row[15], row[16]) == (folded.seq, folded.seq_in_band), run_id
                    steps = conn.execute(
                        f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s", (run_id,)
                    ).fetchall()
                    assert {s.step_id: s for s in map(codec.step_from_row, steps)} == folded.steps
                    hooks = conn.execute(
                        f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s", (run_id,)
                    ).fetchall()
                    assert {h.hook_id: h for h in map(codec.hook_from_row, hooks)} == folded.hooks
                    waits = conn.execute(
                        f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s", (run_id,)
                    ).fetchall()
                    assert {w.wait_id: w for w in map(codec.wait_from_row, waits)} == folded.waits
