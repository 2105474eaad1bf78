"""The PostgreSQL World: many workers on many machines share one database.

psycopg 3 (async) over an ``AsyncConnectionPool``.  Every write is one
transaction that starts by locking the run's row (``SELECT ... FOR UPDATE``):
the fence (``seq_in_band``) is checked and advanced, positions are assigned and
every entity row is written under that lock, so of N writers holding the same
count exactly one is accepted, in whatever process they run.  The rules are the
reference guards (:mod:`._guards`), fed by a view the write prefetches inside
the same transaction; refusals therefore come in the same order, with the same
errors, as in every other World.

Step writes usually skip the read: a process remembers each run as it last
wrote it (:class:`KnownRuns`) and sends a write it can decide from that memory
as one autocommit statement that writes only if the run's counters are still
the remembered ones (:func:`_fast_write`); otherwise the write is decided
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
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import _postgres_codec as codec
from . import _postgres_schema as schema_mod
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
    HOOK_TYPES,
    RUN_TERMINAL_TYPES,
    STEP_TYPES,
    WAIT_TYPES,
    Event,
    EventRequest,
    EventType,
    check_run_id,
)
from ._fold import fold_log
from ._guards import Plan, plan_batch, plan_create_run, plan_write
from ._known import KnownRuns
from ._postgres_queue import PostgresQueue, PostgresStreams
from ._time import Clock, IdSource, RandomIds, SystemClock, housekeeping, to_micros

__all__ = ["PostgresWorld", "redact_dsn"]

T = TypeVar("T")
Conn = psycopg.AsyncConnection[tuple[Any, ...]]

EVENT_COLUMNS = "run_id, seq, type, created_at, correlation_id, in_band, data, blob"
_RUN_SELECT = f"SELECT {codec.RUN_COLUMNS}, seq, seq_in_band FROM runs WHERE run_id = %s"
_EVENT_INSERT_COLUMNS = (
    "run_id, seq, type, created_at, correlation_id, in_band, data, blob, resume_id, write_id"
)
_INSERT_EVENT = (
    f"INSERT INTO events ({_EVENT_INSERT_COLUMNS}) VALUES ({codec.marks(_EVENT_INSERT_COLUMNS)})"
)
_INSERT_RUN = (
    f"INSERT INTO runs ({codec.RUN_COLUMNS}, seq, seq_in_band) "
    f"VALUES ({codec.marks(codec.RUN_COLUMNS)}, %s, %s)"
)
_UPDATE_RUN = (
    "UPDATE runs SET status = %s, output = %s, error = %s, error_code = %s, cancel_reason = %s, "
    "attributes = %s, updated_at = %s, started_at = %s, completed_at = %s, seq = %s, "
    "seq_in_band = %s WHERE run_id = %s"
)


def _upsert(table: str, columns: str, keys: str) -> str:
    key_set = {k.strip() for k in keys.split(",")}
    updates = ", ".join(
        f"{c} = excluded.{c}" for c in (n.strip() for n in columns.split(",")) if c not in key_set
    )
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({codec.marks(columns)}) "
        f"ON CONFLICT ({keys}) DO UPDATE SET {updates}"
    )


_UPSERT_STEP = _upsert("steps", codec.STEP_COLUMNS, "run_id, step_id")
_UPSERT_HOOK = _upsert("hooks", codec.HOOK_COLUMNS, "run_id, hook_id")
_UPSERT_WAIT = _upsert("waits", codec.WAIT_COLUMNS, "run_id, wait_id")

_EVENT_TYPES = (
    "text", "bigint", "text", "bigint", "text", "boolean", "text", "bytea", "text", "text",
)  # fmt: skip
_STEP_TYPES = (
    "text", "text", "text", "text", "bytea", "integer", "bytea", "bytea",
    "bigint", "bigint", "bigint", "bigint", "bigint", "boolean",
)  # fmt: skip
_STEP_SETS = ", ".join(
    f"{c} = excluded.{c}" for c in (n.strip() for n in codec.STEP_COLUMNS.split(",")[2:])
)


def _values(types: Sequence[str], rows: int, columns: str) -> str:
    """``(VALUES (%s::t1, ...), (%s, ...)) AS u(columns)``: ``rows`` rows of parameters."""
    first = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
    rest = "(" + ", ".join("%s" for _ in types) + ")"
    return f"(VALUES {', '.join([first, *[rest] * (rows - 1)])}) AS u({columns})"


@functools.lru_cache(maxsize=64)
def _fast_write(events: int, new: int, known: int) -> str:
    """The one statement of a write decided from what this process remembers (:class:`KnownRuns`).

    One round trip and one commit: the run's row is updated only if its
    counters are still the remembered ones (``g`` is then one row, else none);
    the ``events`` go in; the ``new`` steps the write creates are plain INSERTs
    (a unique violation means one existed after all, and the statement fails
    whole); the ``known`` (remembered) steps are upserted, found by their
    primary key whatever plan the statement gets.  Every part reads ``g``, so
    nothing is written unless the check held.  The text depends only on the
    three counts, so the server keeps one prepared plan per shape.
    """
    parts = [
        """WITH g AS (
    UPDATE runs SET status = %s, output = %s, error = %s, error_code = %s,
        cancel_reason = %s, attributes = %s, updated_at = %s, started_at = %s,
        completed_at = %s, seq = %s, seq_in_band = %s
    WHERE run_id = %s AND seq = %s AND seq_in_band = %s
    RETURNING run_id
)""",
        f""", e AS (
    INSERT INTO events ({_EVENT_INSERT_COLUMNS})
    SELECT u.* FROM g, {_values(_EVENT_TYPES, events, _EVENT_INSERT_COLUMNS)}
)""",
    ]
    if new:
        parts.append(
            f""", n AS (
    INSERT INTO steps ({codec.STEP_COLUMNS})
    SELECT u.* FROM g, {_values(_STEP_TYPES, new, codec.STEP_COLUMNS)}
)"""
        )
    if known:
        parts.append(
            f""", k AS (
    INSERT INTO steps ({codec.STEP_COLUMNS})
    SELECT u.* FROM g, {_values(_STEP_TYPES, known, codec.STEP_COLUMNS)}
    ON CONFLICT (run_id, step_id) DO UPDATE SET {_STEP_SETS}
)"""
        )
    parts.append("\nSELECT count(*) FROM g")
    # Numbered placeholders, sent through a raw cursor: psycopg parses (and
    # caches) only short statements with few parameters, and this one is neither.
    numbers = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(numbers)}", "".join(parts))


#: Errors after which a whole transaction is simply run again.
_RETRY_CONFLICTS = (
    psycopg.errors.SerializationFailure,
    psycopg.errors.DeadlockDetected,
    psycopg.errors.UniqueViolation,
)
_MAX_CONFLICT_RETRIES = 20


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    if "password" in params:
        params["password"] = "***"  # noqa: S105 -- a mask, not a password
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


class _RunView:
    """What both of the guards' views answer alike: the run, its counters, whether a step exists."""

    def __init__(self, run: Run | None, counters: Snapshot) -> None:
        self._run = run
        self._counters = counters

    def run(self) -> Run | None:
        return self._run

    def counters(self) -> Snapshot:
        return self._counters

    def step(self, step_id: str) -> Step | None:
        raise NotImplementedError

    def has_step(self, step_id: str) -> bool:
        return self.step(step_id) is not None


class _View(_RunView):
    """The guards' StateView over rows the write prefetched under the run's lock."""

    def __init__(self, run: Run | None, counters: Snapshot) -> None:
        super().__init__(run, counters)
        self.steps: dict[str, Step | None] = {}
        self.hooks: dict[str, Hook | None] = {}
        self.waits: dict[str, Wait | None] = {}
        self.tokens: dict[str, Hook | None] = {}
        self.resumes: dict[str, Event | None] = {}
        self.active: list[Hook] | None = None
        self.waiting: list[Wait] | None = None

    @classmethod
    async def load(cls, conn: Conn, run_id: str, requests: Iterable[EventRequest]) -> _View:
        """Lock the run's row and read everything ``requests`` may ask about."""
        cur = await conn.execute(f"{_RUN_SELECT} FOR UPDATE", (run_id,))
        row = await cur.fetchone()
        if row is None:
            return cls(None, Snapshot(seq=0, seq_in_band=0))
        view = cls(codec.run_from_row(row), Snapshot(seq=row[15], seq_in_band=row[16]))
        steps: list[str] = []
        hooks: list[str] = []
        waits: list[str] = []
        tokens: list[str] = []
        resumes: list[str] = []
        ending = False
        for request in requests:
            kind, cid = request.type, request.correlation_id
            if kind in STEP_TYPES and cid:
                steps.append(cid)
            elif kind in HOOK_TYPES and cid:
                hooks.append(cid)
                if kind is EventType.HOOK_CREATED:
                    tokens.append(request.data["token"])
                elif (resume_id := request.data.get("resume_id")) is not None:
                    resumes.append(resume_id)
            elif kind in WAIT_TYPES and cid:
                waits.append(cid)
            elif kind in RUN_TERMINAL_TYPES:
                ending = True
        if steps:
            view.steps = dict.fromkeys(steps)
            cur = await conn.execute(
                f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s AND step_id = ANY(%s)",
                (run_id, steps),
            )
            view.steps.update({r[1]: codec.step_from_row(r) for r in await cur.fetchall()})
        if hooks:
            view.hooks = dict.fromkeys(hooks)
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s AND hook_id = ANY(%s)",
                (run_id, hooks),
            )
            view.hooks.update({r[1]: codec.hook_from_row(r) for r in await cur.fetchall()})
        if waits:
            view.waits = dict.fromkeys(waits)
            cur = await conn.execute(
                f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s AND wait_id = ANY(%s)",
                (run_id, waits),
            )
            view.waits.update({r[1]: codec.wait_from_row(r) for r in await cur.fetchall()})
        if tokens:
            view.tokens = dict.fromkeys(tokens)
            # FOR SHARE: a holder being disposed right now is waited for, then re-read.
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ANY(%s) "
                "AND status = 'active' FOR SHARE",
                (tokens,),
            )
            view.tokens.update({r[2]: codec.hook_from_row(r) for r in await cur.fetchall()})
        if resumes:
            view.resumes = dict.fromkeys(resumes)
            cur = await conn.execute(
                f"SELECT {EVENT_COLUMNS}, resume_id FROM events WHERE run_id = %s "
                "AND resume_id = ANY(%s)",
                (run_id, resumes),
            )
            view.resumes.update({r[8]: codec.decode_event(*r[:8]) for r in await cur.fetchall()})
        if ending:
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s AND status = 'active' "
                "ORDER BY ord",
                (run_id,),
            )
            view.active = [codec.hook_from_row(r) for r in await cur.fetchall()]
            cur = await conn.execute(
                f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s "
                "AND status = 'waiting' ORDER BY ord",
                (run_id,),
            )
            view.waiting = [codec.wait_from_row(r) for r in await cur.fetchall()]
        return view

    @staticmethod
    def _known(table: dict[str, Any], key: str, what: str) -> Any:
        if key not in table:
            raise AssertionError(f"PostgresWorld did not prefetch {what} {key!r}")
        return table[key]

    def step(self, step_id: str) -> Step | None:
        return self._known(self.steps, step_id, "step")  # type: ignore[no-any-return]

    def hook(self, hook_id: str) -> Hook | None:
        return self._known(self.hooks, hook_id, "hook")  # type: ignore[no-any-return]

    def live_hook_by_token(self, token: str) -> Hook | None:
        return self._known(self.tokens, token, "token")  # type: ignore[no-any-return]

    def wait(self, wait_id: str) -> Wait | None:
        return self._known(self.waits, wait_id, "wait")  # type: ignore[no-any-return]

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        return self._known(self.resumes, resume_id, "resume id")  # type: ignore[no-any-return]

    def active_hooks(self) -> Sequence[Hook]:
        assert self.active is not None, "PostgresWorld did not prefetch the active hooks"
        return self.active

    def waiting_waits(self) -> Sequence[Wait]:
        assert self.waiting is not None, "PostgresWorld did not prefetch the waiting waits"
        return self.waiting


def _event_rows(plan: Plan, write_id: str) -> list[tuple[Any, ...]]:
    """The plan's events as ``events`` rows; the first carries the write id (see _landed_check)."""
    rows = []
    for i, event in enumerate(plan.events):
        data, blob = codec.encode_event(event)
        resume_id = event.data.get("resume_id") if event.type is EventType.HOOK_RECEIVED else None
        rows.append(
            (
                event.run_id,
                event.seq,
                event.type.value,
                to_micros(event.created_at),
                event.correlation_id,
                event.in_band,
                data,
                blob,
                resume_id,
                write_id if i == 0 else None,
            )
        )
    return rows


class _Unknown(Exception):
    """The remembered state cannot answer: decide the write under the row lock instead."""


class _Stale(Exception):
    """The remembered state was out of date: the one-statement write wrote nothing."""


class _KnownView(_RunView):
    """The guards' StateView over what this process remembers of a run (:class:`KnownRuns`).

    A step it does not remember is taken to be new; the write then inserts it
    without ``ON CONFLICT``, so if it existed after all the statement fails and
    nothing is written.  Hooks, waits and tokens are not remembered: a write
    that asks about them is decided under the row lock.
    """

    def __init__(self, run: Run, counters: Snapshot, steps: dict[str, Step] | None) -> None:
        super().__init__(run, counters)
        self._steps = steps or {}
        self.assumed_new: set[str] = set()

    def step(self, step_id: str) -> Step | None:
        step = self._steps.get(step_id)
        if step is None:
            self.assumed_new.add(step_id)
        return step

    def hook(self, hook_id: str) -> Hook | None:
        raise _Unknown(hook_id)

    def live_hook_by_token(self, token: str) -> Hook | None:
        raise _Unknown(token)

    def wait(self, wait_id: str) -> Wait | None:
        raise _Unknown(wait_id)

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        raise _Unknown(resume_id)

    def active_hooks(self) -> Sequence[Hook]:
        raise _Unknown("active hooks")

    def waiting_waits(self) -> Sequence[Wait]:
        raise _Unknown("waiting waits")


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
        pool_size: most connections the World opens.
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
        self._run_locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        # Runs as this process last wrote them: the next write to one of them
        # is decided from here and sent as one statement (see _fast_batch).
        self._known = KnownRuns(runs=4096, step_runs=256)
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
        if pool is None:
            return
        if self._loop is asyncio.get_running_loop():
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
        await conn.execute(f"SET search_path TO {self.schema}")
        if not autocommit:
            await conn.commit()
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
            min_size=1,
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
            pool = await self._ready()
            committing = False
            result: T | None = None  # stays None in single mode (see the docstring)
            try:
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

    async def _run_row(self, conn: Conn, run_id: str) -> tuple[Run, Snapshot]:
        check_run_id(run_id)
        cur = await conn.execute(_RUN_SELECT, (run_id,))
        row = await cur.fetchone()
        if row is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        return codec.run_from_row(row), Snapshot(seq=row[15], seq_in_band=row[16])

    async def _require_run(self, conn: Conn, run_id: str) -> None:
        check_run_id(run_id)
        cur = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,))
        if await cur.fetchone() is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)

    async def _store(self, conn: Conn, plan: Plan, *, write_id: str, new: bool) -> None:
        rows = _event_rows(plan, write_id)
        async with conn.cursor() as cur:
            await cur.executemany(_INSERT_EVENT, rows)
            run = plan.run
            full = codec.run_to_row(run)
            if new:
                await cur.execute(_INSERT_RUN, (*full, plan.after.seq, plan.after.seq_in_band))
            else:
                await cur.execute(
                    _UPDATE_RUN,
                    (
                        full[2],
                        *full[6:11],
                        *full[12:15],
                        plan.after.seq,
                        plan.after.seq_in_band,
                        run.run_id,
                    ),
                )
            # Release tokens before taking them: a token freed and re-taken in one
            # plan must never trip the live-token index.
            for hook in sorted(plan.hooks.values(), key=lambda h: h.status == "active"):
                await cur.execute(_UPSERT_HOOK, codec.hook_to_row(hook))
            if plan.steps:
                await cur.executemany(
                    _UPSERT_STEP, [codec.step_to_row(s) for s in plan.steps.values()]
                )
            if plan.waits:
                await cur.executemany(
                    _UPSERT_WAIT, [codec.wait_to_row(w) for w in plan.waits.values()]
                )

    @staticmethod
    def _landed_check(run_id: str, seq: int, write_id: str) -> Callable[[Conn], Awaitable[bool]]:
        async def landed(conn: Conn) -> bool:
            cur = await conn.execute(
                "SELECT 1 FROM events WHERE run_id = %s AND seq = %s AND write_id = %s",
                (run_id, seq, write_id),
            )
            return await cur.fetchone() is not None

        return landed

    def _checked_known(self, view: _View) -> None:
        """Under the run's row lock: forget the run if the remembered counters are not its own."""
        run = view.run()
        known = self._known.run(run.run_id) if run is not None else None
        if known is not None and known[1] != view.counters():
            self._known.forget(known[0].run_id)

    async def _fast_batch(
        self,
        run_id: str,
        requests: Sequence[EventRequest],
        at: datetime,
        write_id: str,
        *,
        in_band: bool,
        expected_seq_in_band: int | None,
        expected_seq: int | None,
        seen_seq: int | None,
    ) -> BatchResult | None:
        """A step write decided from the remembered run, in one statement; ``None``: not here.

        Taken when this process wrote the run last and the write only touches
        steps: no read, no BEGIN, one round trip and one commit.  The statement
        (:func:`_fast_write`) writes only if the run's counters are still the
        remembered ones, so a write by anyone else in between makes it write
        nothing; then, or when the guards refuse (the refusal is re-decided on
        the stored rows), the caller takes the locked path.
        """
        known = self._known.run(run_id)
        if known is None or any(r.type not in STEP_TYPES for r in requests):
            return None
        run, counters = known
        if seen_seq is not None and (type(seen_seq) is not int or seen_seq < counters.seq):
            return None
        view = _KnownView(run, counters, self._known.steps(run_id))
        try:
            plan = plan_batch(
                view,
                run_id,
                requests,
                at,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
        except (WorldError, _Unknown):
            return None
        if not plan.events or not view.assumed_new <= plan.steps.keys():
            return None
        events = _event_rows(plan, write_id)
        new = [codec.step_to_row(s) for k, s in plan.steps.items() if k in view.assumed_new]
        old = [codec.step_to_row(s) for k, s in plan.steps.items() if k not in view.assumed_new]
        full = codec.run_to_row(plan.run)
        params = (
            full[2],
            *full[6:11],
            *full[12:15],
            plan.after.seq,
            plan.after.seq_in_band,
            run_id,
            plan.before.seq,
            plan.before.seq_in_band,
            *(value for row in (*events, *new, *old) for value in row),
        )
        statement = _fast_write(len(events), len(new), len(old))

        async def write(conn: Conn) -> None:
            try:
                cur = await psycopg.AsyncRawCursor(conn).execute(statement, params)
            except psycopg.errors.UniqueViolation as exc:
                raise _Stale from exc
            row = await cur.fetchone()
            if row is None or row[0] != 1:
                raise _Stale

        try:
            await self._transact(
                write, landed=self._landed_check(run_id, plan.events[0].seq, write_id), single=True
            )
        except _Stale:
            self._known.forget(run_id)
            return None
        self._known.remember(plan)
        return BatchResult(events=tuple(plan.events), run=plan.run, unseen=())

    async def _unseen(
        self, conn: Conn, run_id: str, seen_seq: int | None, before: Snapshot
    ) -> tuple[Event, ...]:
        if seen_seq is None:
            return ()
        if type(seen_seq) is not int or seen_seq < 0:
            raise InvalidRequest(f"seen_seq must be a non-negative int, got {seen_seq!r}")
        if seen_seq >= before.seq:
            return ()
        cur = await conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = %s AND seq > %s AND seq <= %s "
            "ORDER BY seq",
            (run_id, seen_seq, before.seq),
        )
        return tuple(codec.decode_event(*r) for r in await cur.fetchall())

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
                    row = conn.execute(_RUN_SELECT, (run_id,)).fetchone()
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


class _Facet:
    def __init__(self, world: PostgresWorld) -> None:
        self._w = world

    async def _of_run(self, run_id: str, query: str, args: tuple[Any, ...]) -> list[Any]:
        """The rows ``query`` returns, once the run is known to exist (else RunNotFound)."""

        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            await self._w._require_run(conn, run_id)
            cur = await conn.execute(query, args)
            return await cur.fetchall()

        return await self._w._read(body)


class _Runs(_Facet):
    async def get(self, run_id: str) -> Run:
        async def body(conn: Conn) -> Run:
            return (await self._w._run_row(conn, run_id))[0]

        return await self._w._read(body)

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
            where.append("(created_at, run_id) < (%s, %s)")
            args += [micros, run_id]
        if workflow_name is not None:
            where.append("workflow_name = %s")
            args.append(workflow_name)
        if statuses is not None:
            where.append("status = ANY(%s)")
            args.append(sorted(s.value for s in statuses))
        clause = f"WHERE {' AND '.join(where)}" if where else ""

        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            # COLLATE "C": run ids order by code point, as in every other World.
            cur = await conn.execute(
                f"SELECT {codec.RUN_COLUMNS} FROM runs {clause} "
                'ORDER BY created_at DESC, run_id COLLATE "C" DESC LIMIT %s',
                (*args, limit + 1),
            )
            return await cur.fetchall()

        rows = await self._w._read(body)
        runs = tuple(codec.run_from_row(r) for r in rows[:limit])
        return RunPage(runs=runs, cursor=encode_run_cursor(runs[-1]) if len(rows) > limit else None)


class _Steps(_Facet):
    async def get(self, run_id: str, step_id: str) -> Step:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s AND step_id = %s",
            (run_id, step_id),
        )
        if not rows:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return codec.step_from_row(rows[0])

    async def list(self, run_id: str) -> tuple[Step, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
        return tuple(codec.step_from_row(r) for r in rows)


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> Hook:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s AND hook_id = %s",
            (run_id, hook_id),
        )
        if not rows:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return codec.hook_from_row(rows[0])

    async def get_by_token(self, token: str) -> Hook:
        async def body(conn: Conn) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = %s AND status = 'active'",
                (token if isinstance(token, str) else "",),
            )
            return await cur.fetchone()

        row = await self._w._read(body)
        if row is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return codec.hook_from_row(row)

    async def list(self, run_id: str) -> tuple[Hook, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
        return tuple(codec.hook_from_row(r) for r in rows)


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> Wait:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s AND wait_id = %s",
            (run_id, wait_id),
        )
        if not rows:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return codec.wait_from_row(rows[0])

    async def list(self, run_id: str) -> tuple[Wait, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
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
        at = event_time(w._clock.now(), occurred_at, in_band=in_band)
        write_id = secrets.token_hex(8)
        if request.type is EventType.RUN_CREATED:
            new_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")

            created: list[Plan] = []

            async def create_run(conn: Conn) -> EventResult:
                cur = await conn.execute(_RUN_SELECT, (new_id,))
                row = await cur.fetchone()
                plan = plan_create_run(
                    new_id, request, at, None if row is None else codec.run_from_row(row)
                )
                await w._store(conn, plan, write_id=write_id, new=True)
                created[:] = [plan]
                return EventResult(event=plan.events[0], run=plan.run, allocated=1)

            result = await w._transact(create_run, landed=w._landed_check(new_id, 1, write_id))
            w._known.remember(created[-1])
            return result
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        check_run_id(run_id)
        target = run_id
        planned: list[Plan] = []

        async def write(conn: Conn) -> EventResult:
            view = await _View.load(conn, target, [request])
            if view.run() is None:
                raise RunNotFound(f"run {target!r} does not exist", run_id=target)
            w._checked_known(view)
            plan = plan_write(
                view,
                target,
                request,
                at,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = await w._unseen(conn, target, seen_seq, plan.before) if plan.events else ()
            if plan.events:
                await w._store(conn, plan, write_id=write_id, new=False)
            planned[:] = [plan]
            return plan.result(unseen)

        async def landed(conn: Conn) -> bool:
            plan = planned[-1]
            if not plan.events:
                return True
            return await w._landed_check(target, plan.events[0].seq, write_id)(conn)

        async def decide() -> EventResult:
            result = await w._transact(write, landed=landed)
            if planned[-1].events:
                w._known.remember(planned[-1])
            return result

        return await w._serialized(target, decide)

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
        write_id = secrets.token_hex(8)
        planned: list[Plan] = []

        async def write(conn: Conn) -> BatchResult:
            view = await _View.load(conn, run_id, checked)
            if view.run() is None:
                raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
            w._checked_known(view)
            plan = plan_batch(
                view,
                run_id,
                checked,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = await w._unseen(conn, run_id, seen_seq, plan.before)
            await w._store(conn, plan, write_id=write_id, new=False)
            planned[:] = [plan]
            return BatchResult(events=tuple(plan.events), run=plan.run, unseen=unseen)

        async def landed(conn: Conn) -> bool:
            return await w._landed_check(run_id, planned[-1].events[0].seq, write_id)(conn)

        async def decide() -> BatchResult:
            fast = await w._fast_batch(
                run_id,
                checked,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                write_id,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
                seen_seq=seen_seq,
            )
            if fast is not None:
                return fast
            result = await w._transact(write, landed=landed)
            w._known.remember(planned[-1])
            return result

        return await w._serialized(run_id, decide)

    async def get(self, run_id: str, seq: int) -> Event:
        async def body(conn: Conn) -> tuple[Snapshot, tuple[Any, ...] | None]:
            _, counters = await self._w._run_row(conn, run_id)
            if type(seq) is not int:
                return counters, None
            cur = await conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = %s AND seq = %s",
                (run_id, seq),
            )
            return counters, await cur.fetchone()

        counters, row = await self._w._read(body)
        if row is None:
            raise EventNotFound(
                f"run {run_id!r} has no event #{seq} (its log has {counters.seq})", run_id=run_id
            )
        return codec.decode_event(*row)

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        check_limit(limit)
        if type(after_seq) is not int or after_seq < 0:
            raise InvalidRequest(f"after_seq must be a non-negative int, got {after_seq!r}")

        async def body(conn: Conn) -> tuple[Snapshot, list[tuple[Any, ...]]]:
            # Counters first: events are only appended, so every position up to
            # the snapshot's seq is already there when the events are read.
            _, snapshot = await self._w._run_row(conn, run_id)
            cur = await conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = %s AND seq > %s "
                "ORDER BY seq LIMIT %s",
                (run_id, after_seq, limit),
            )
            return snapshot, await cur.fetchall()

        snapshot, rows = await self._w._read(body)
        events = tuple(codec.decode_event(*r) for r in rows if r[1] <= max(snapshot.seq, after_seq))
        expected = after_seq + 1
        for event in events:
            if event.seq != expected:
                raise CorruptedLog(
                    f"run {run_id!r}: the stored log has a hole at #{expected} (next stored "
                    f"event is #{event.seq}); the database was changed outside durasim",
                    run_id=run_id,
                    seq=expected,
                )
            expected += 1
        return EventPage(
            events=events, snapshot=snapshot, has_more=after_seq + len(events) < snapshot.seq
        )
