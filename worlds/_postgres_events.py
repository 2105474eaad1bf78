"""The PostgreSQL World's events facet: the write paths and the log reads.

A write to an existing run goes one of two ways.  The locked path takes the
run's row lock (:meth:`_View.load <._postgres_views._View.load>`), prefetches
what the guards may ask about, plans the write with the reference guards and
stores it in the same transaction.  A write this process can decide from its
memory of the run (:class:`._postgres_views._KnownRuns`: a step's, a sleep's, a
hook's; not the run's end) takes the fast path instead: one autocommit
statement (:func:`_fast_write`) that writes only if the run's counters are still
the remembered ones; otherwise it falls back to the locked path.  The first
event of every write carries a write id, so a write whose COMMIT was
interrupted is looked up (:meth:`_Events._landed_check`) and never applied
twice.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

import psycopg
import psycopg.errors

from . import _postgres_codec as codec
from ._checks import check_limit, check_request, event_time
from ._entities import BatchResult, EventPage, EventResult, Snapshot
from ._errors import CorruptedLog, EventNotFound, InvalidRequest, RunNotFound, WorldError
from ._events import Event, EventRequest, EventType, check_run_id
from ._guards import Plan, plan_batch, plan_create_run, plan_write
from ._postgres_codec import EVENT_COLUMNS, RUN_SELECT
from ._postgres_facets import _Facet
from ._postgres_views import _KnownView, _Unknown, _View
from ._time import to_micros

if TYPE_CHECKING:
    from ._postgres import Conn

__all__: list[str] = []

R = TypeVar("R")

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
_HOOK_TYPES = (
    "text", "text", "text", "text", "bytea", "boolean", "integer", "bigint", "bigint",
)  # fmt: skip
_WAIT_TYPES = ("text", "text", "text", "bigint", "bigint", "bigint", "bigint")
#: The run's columns a write that changes the run's record sets (:data:`_UPDATE_RUN_ROW`).
_RUN_HEAD_TYPES = ("text", "bytea", "bytea", "text", "text", "text", "bigint", "bigint", "bigint")
#: The counters set, then the run and the counters the write expects (:func:`_fast_write`).
_COUNTER_TYPES = ("bigint", "bigint", "text", "bigint", "bigint")


def _sets(columns: str) -> str:
    """``c = excluded.c`` for every column but the two of the key."""
    return ", ".join(f"{c} = excluded.{c}" for c in (n.strip() for n in columns.split(",")[2:]))


#: Per entity table, in the order its rows follow the events' in the statement:
#: (table, columns, their types, the primary key).
_ENTITY_TABLES = (
    ("steps", codec.STEP_COLUMNS, _STEP_TYPES, "run_id, step_id"),
    ("hooks", codec.HOOK_COLUMNS, _HOOK_TYPES, "run_id, hook_id"),
    ("waits", codec.WAIT_COLUMNS, _WAIT_TYPES, "run_id, wait_id"),
)


def _values(types: Sequence[str], rows: int, columns: str) -> str:
    """``(VALUES (%s::t1, ...), (%s, ...)) AS u(columns)``: ``rows`` rows of parameters."""
    first = "(" + ", ".join(f"%s::{t}" for t in types) + ")"
    rest = "(" + ", ".join("%s" for _ in types) + ")"
    return f"(VALUES {', '.join([first, *[rest] * (rows - 1)])}) AS u({columns})"


_UPDATE_RUN_ROW = """UPDATE runs SET status = %s, output = %s, error = %s, error_code = %s,
        cancel_reason = %s, attributes = %s, updated_at = %s, started_at = %s,
        completed_at = %s, seq = %s, seq_in_band = %s"""
#: A write that leaves the run's record as it was (a step's, most often) moves its counters only.
_UPDATE_RUN_COUNTERS = "UPDATE runs SET seq = %s, seq_in_band = %s"


@functools.lru_cache(maxsize=128)
def _fast_write(run_changed: bool, events: int, *entities: int) -> str:
    """The one statement of a write decided from what this process remembers (:class:`KnownRuns`).

    One round trip and one commit: the run's row is updated only if its
    counters are still the remembered ones (``g`` is then one row, else none);
    the ``events`` go in; then, per entity table (:data:`_ENTITY_TABLES`: steps,
    hooks, waits), two counts in ``entities``: the new rows the write creates,
    plain INSERTs (a unique violation means one existed after all, or a token
    or resume id was taken, and the statement fails whole), and the known
    (remembered) rows, upserted, found by their primary key whatever plan the
    statement gets.  Every part reads ``g``, so nothing is written unless the
    check held.  ``run_changed`` False: the run's record is the remembered one
    and only its counters are set.  The text depends only on the counts, so the
    server keeps one prepared plan per shape.
    """
    parts = [
        f"""WITH g AS (
    {_UPDATE_RUN_ROW if run_changed else _UPDATE_RUN_COUNTERS}
    WHERE run_id = %s AND seq = %s AND seq_in_band = %s
    RETURNING run_id
)""",
        f""", e AS (
    INSERT INTO events ({_EVENT_INSERT_COLUMNS})
    SELECT u.* FROM g, {_values(_EVENT_TYPES, events, _EVENT_INSERT_COLUMNS)}
)""",
    ]
    for i, (table, columns, types, key) in enumerate(_ENTITY_TABLES):
        new, known = entities[2 * i], entities[2 * i + 1]
        if new:
            parts.append(
                f""", n{i} AS (
    INSERT INTO {table} ({columns})
    SELECT u.* FROM g, {_values(types, new, columns)}
)"""
            )
        if known:
            parts.append(
                f""", k{i} AS (
    INSERT INTO {table} ({columns})
    SELECT u.* FROM g, {_values(types, known, columns)}
    ON CONFLICT ({key}) DO UPDATE SET {_sets(columns)}
)"""
            )
    parts.append("\nSELECT count(*) FROM g")
    # Numbered placeholders, sent through a raw cursor: psycopg parses (and
    # caches) only short statements with few parameters, and this one is neither.
    numbers = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(numbers)}", "".join(parts))


@functools.lru_cache(maxsize=128)
def _fast_types(run_changed: bool, events: int, *entities: int) -> tuple[str, ...]:
    """The SQL type of each parameter of :func:`_fast_write` of the same shape, in order."""
    types = [*(_RUN_HEAD_TYPES if run_changed else ()), *_COUNTER_TYPES, *_EVENT_TYPES * events]
    for i, (_, _, row_types, _) in enumerate(_ENTITY_TABLES):
        types += row_types * (entities[2 * i] + entities[2 * i + 1])
    return tuple(types)


_TYPE_TEXT: Final = {t: t.value for t in EventType}


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
                _TYPE_TEXT[event.type],
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


def _split(
    records: dict[str, R], to_row: Callable[[R], tuple[Any, ...]], new: set[str]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows of ``records``: those whose key is in ``new``, and the others."""
    if not records:
        return [], []
    return (
        [to_row(r) for k, r in records.items() if k in new],
        [to_row(r) for k, r in records.items() if k not in new],
    )


class _Stale(Exception):
    """The remembered state was out of date: the one-statement write wrote nothing."""


class _Taken(Exception):
    """An entity assumed new existed, or a token or resume id was taken: nothing written."""


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
        write_id = next(w._write_ids)
        if request.type is EventType.RUN_CREATED:
            new_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")

            created: list[Plan] = []

            async def create_run(conn: Conn) -> EventResult:
                cur = await conn.execute(RUN_SELECT, (new_id,))
                row = await cur.fetchone()
                plan = plan_create_run(
                    new_id, request, at, None if row is None else codec.run_from_row(row)
                )
                await self._store(conn, plan, write_id=write_id, new=True)
                created[:] = [plan]
                return EventResult(event=plan.events[0], run=plan.run, allocated=1)

            result = await w._transact(create_run, landed=self._landed_check(new_id, 1, write_id))
            w._known.remember(created[-1])
            return result
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        check_run_id(run_id)
        target = run_id
        planned: list[Plan] = []

        def plan_for(view: _View | _KnownView) -> Plan:
            """The write's plan on a view: the locked one, or the process's memory."""
            return plan_write(
                view,
                target,
                request,
                at,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )

        async def write(conn: Conn) -> EventResult:
            view = await _View.load(conn, target, [request])
            if view.run() is None:
                raise RunNotFound(f"run {target!r} does not exist", run_id=target)
            self._checked_known(view)
            plan = plan_for(view)
            unseen = await self._unseen(conn, target, seen_seq, plan.before) if plan.events else ()
            if plan.events:
                await self._store(conn, plan, write_id=write_id, new=False)
            planned[:] = [plan]
            return plan.result(unseen)

        async def landed(conn: Conn) -> bool:
            plan = planned[-1]
            if not plan.events:
                return True
            return await self._landed_check(target, plan.events[0].seq, write_id)(conn)

        async def decide() -> EventResult:
            fast = await self._fast(target, seen_seq, write_id, plan_for)
            if fast is not None:
                return fast.result(())
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
        write_id = next(w._write_ids)
        planned: list[Plan] = []

        async def write(conn: Conn) -> BatchResult:
            view = await _View.load(conn, run_id, checked)
            if view.run() is None:
                raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
            self._checked_known(view)
            plan = plan_batch(
                view,
                run_id,
                checked,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = await self._unseen(conn, run_id, seen_seq, plan.before)
            await self._store(conn, plan, write_id=write_id, new=False)
            planned[:] = [plan]
            return BatchResult(events=tuple(plan.events), run=plan.run, unseen=unseen)

        async def landed(conn: Conn) -> bool:
            return await self._landed_check(run_id, planned[-1].events[0].seq, write_id)(conn)

        async def decide() -> BatchResult:
            fast = await self._fast_batch(
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

    # -- the write paths -------------------------------------------------------------

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
        known = self._w._known.run(run.run_id) if run is not None else None
        counters = view.counters()
        if known is not None and known[1:] != (counters.seq, counters.seq_in_band):
            self._w._known.forget(known[0].run_id)

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
        """A batch decided from the remembered run, in one statement; ``None``: not here."""

        def decide(view: _KnownView) -> Plan:
            return plan_batch(
                view,
                run_id,
                requests,
                at,
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )

        plan = await self._fast(run_id, seen_seq, write_id, decide)
        if plan is None:
            return None
        return BatchResult(events=tuple(plan.events), run=plan.run, unseen=())

    async def _fast(
        self,
        run_id: str,
        seen_seq: int | None,
        write_id: str,
        decide: Callable[[_KnownView], Plan],
    ) -> Plan | None:
        """A write decided from the remembered run, in one statement; ``None``: not here.

        Taken when this process wrote the run last and the write does not end
        the run (a step's, a sleep's or a hook's write): no read, no BEGIN, one
        round trip and one commit.  The statement (:func:`_fast_write`) writes
        only if the run's counters are still the remembered ones, so a write by
        anyone else in between makes it write nothing; then, when an entity
        assumed new existed after all, or when the guards refuse (the refusal
        is re-decided on the stored rows), the caller takes the locked path.
        """
        known = self._w._known.run(run_id)
        if known is None:
            return None
        run, seq, seq_in_band = known
        if seen_seq is not None and (type(seen_seq) is not int or seen_seq < seq):
            return None
        counters = Snapshot(seq=seq, seq_in_band=seq_in_band)
        memory = self._w._known
        view = _KnownView(
            run, counters, memory.steps(run_id), memory.hooks(run_id), memory.waits(run_id)
        )
        try:
            plan = decide(view)
        except (WorldError, _Unknown):
            return None
        if not plan.events or not view.checked_by(plan):
            return None
        rows = _event_rows(plan, write_id)
        shape = [len(rows)]
        for split in (
            _split(plan.steps, codec.step_to_row, view.assumed_new),
            _split(plan.hooks, codec.hook_to_row, view.assumed_new_hooks),
            _split(plan.waits, codec.wait_to_row, view.assumed_new_waits),
        ):
            rows += split[0] + split[1]
            shape += [len(split[0]), len(split[1])]
        run_changed = plan.run is not run
        if run_changed:
            full = codec.run_to_row(plan.run)
            head: tuple[Any, ...] = (full[2], *full[6:11], *full[12:15])
        else:
            head = ()
        params = (
            *head,
            plan.after.seq,
            plan.after.seq_in_band,
            run_id,
            plan.before.seq,
            plan.before.seq_in_band,
            *itertools.chain.from_iterable(rows),
        )
        statement = _fast_write(run_changed, *shape)
        types = _fast_types(run_changed, *shape)

        async def write(conn: Conn) -> None:
            try:
                written = await self._w._count(conn, statement, params, types)
            except psycopg.errors.UniqueViolation as exc:
                raise _Taken from exc
            if written != 1:
                raise _Stale

        try:
            await self._w._transact(
                write, landed=self._landed_check(run_id, plan.events[0].seq, write_id), single=True
            )
        except _Stale:
            self._w._known.forget(run_id)
            return None
        except _Taken:
            # An assumption failed, not (as far as we know) the memory: the locked
            # path compares the remembered counters with the row's and forgets
            # the run only if someone else wrote it.
            return None
        self._w._known.remember(plan)
        return plan

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
