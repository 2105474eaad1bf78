"""The SQLite World's facets: runs, steps, hooks, waits and events.

Reads run on the World's connection; writes enter :meth:`SQLiteWorld._write`
(one ``BEGIN IMMEDIATE`` transaction) and are decided by the reference guards
through :class:`._sqlite_view._View`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import _sqlite_codec as codec
from . import _sqlite_schema as sql
from ._build import builder
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
    EventPage,
    EventResult,
    HookRecord,
    RunPage,
    RunRecord,
    RunStatus,
    StepRecord,
    WaitRecord,
)
from ._errors import (
    CorruptedLog,
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    StepNotFound,
    WaitNotFound,
    WorldError,
)
from ._events import (
    STEP_TYPES,
    Event,
    EventRequest,
    EventType,
    check_correlation_id,
    check_run_id,
)
from ._facet import WorldFacet
from ._guards import plan_batch, plan_create_run, plan_write
from ._sqlite_view import _AssumedWrong, _View
from ._text import check_text, check_token

if TYPE_CHECKING:
    from ._sqlite import SQLiteWorld

__all__: list[str] = []

_STEP_CREATED = EventType.STEP_CREATED
#: ``BatchResult(**fields)`` without attrs' frozen ``__init__`` (see :mod:`._build`).
_batch_result = builder(BatchResult)


class _Facet(WorldFacet["SQLiteWorld"]):
    """A facet of the SQLiteWorld (:mod:`._facet`: it holds its World weakly)."""

    def __init__(self, world: SQLiteWorld) -> None:
        super().__init__(world)


class _Runs(_Facet):
    async def get(self, run_id: str) -> RunRecord:
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
        if workflow_name is not None:
            check_text(workflow_name, field="workflow_name")
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
    async def get(self, run_id: str, step_id: str) -> StepRecord:
        check_run_id(run_id)
        check_correlation_id(step_id, what="step id")
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            step = _View(db, run_id, None, 0, 0).step(step_id)
        if step is None:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return step

    async def list(self, run_id: str) -> tuple[StepRecord, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                f"{codec.STEP_SELECT} WHERE s.run_id = ? ORDER BY s.input_seq", (run_id,)
            ).fetchall()
        return tuple(codec.step_from_row(r) for r in rows)


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> HookRecord:
        check_run_id(run_id)
        check_correlation_id(hook_id, what="hook id")
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            hook = _View(db, run_id, None, 0, 0).hook(hook_id)
        if hook is None:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return hook

    async def get_by_token(self, token: str) -> HookRecord:
        check_token(token)
        row = (
            self._w._live()
            .execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? AND status = 'active'",
                (token,),
            )
            .fetchone()
        )
        if row is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return codec.hook_from_row(row)

    async def last_by_token(self, token: str) -> HookRecord:
        """The hook that took ``token`` last, in any status; :class:`HookNotFound` if none."""
        row = (
            self._w._live()
            .execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? ORDER BY rowid DESC "
                "LIMIT 1",
                (token if isinstance(token, str) else "",),
            )
            .fetchone()
        )
        if row is None:
            raise HookNotFound(f"no hook ever held token {token!r}", token=token)
        return codec.hook_from_row(row)

    async def list(self, run_id: str) -> tuple[HookRecord, ...]:
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            rows = db.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? ORDER BY rowid", (run_id,)
            ).fetchall()
        return tuple(codec.hook_from_row(r) for r in rows)


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> WaitRecord:
        check_run_id(run_id)
        check_correlation_id(wait_id, what="wait id")
        with self._w._read() as db:
            self._w._require_run(db, run_id)
            wait = _View(db, run_id, None, 0, 0).wait(wait_id)
        if wait is None:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return wait

    async def list(self, run_id: str) -> tuple[WaitRecord, ...]:
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
            run, seq, seq_in_band = w._cached_run(db, run_id)
            plan = plan_write(
                _View(db, run_id, run, seq, seq_in_band, known_steps=w._known.steps(run_id)),
                run_id,
                request,
                event_time(w._clock.now(), occurred_at, in_band=in_band),
                in_band=in_band,
                expected_seq_in_band=expected_seq_in_band,
                expected_seq=expected_seq,
            )
            unseen = w._unseen(db, run_id, seen_seq, plan.seq) if plan.events else ()
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
        checked: list[EventRequest] = []
        for request in requests:
            # check_request's answer for a request EventRequest.of built: the request itself
            checked.append(
                request
                if type(request) is EventRequest and request._validated
                else check_request(request)
            )
        check_run_id(run_id)
        args = (run_id, checked, in_band, expected_seq_in_band, seen_seq, occurred_at, expected_seq)
        try:
            return self._batch(*args, assume=True)
        except _AssumedWrong:
            return self._batch(*args, assume=False)

    def _batch(  # noqa: PLR0917 -- create_batch's arguments, passed twice
        self,
        run_id: str,
        checked: list[EventRequest],
        in_band: bool,
        expected_seq_in_band: int | None,
        seen_seq: int | None,
        occurred_at: datetime | None,
        expected_seq: int | None,
        *,
        assume: bool,
    ) -> BatchResult:
        """One try of :meth:`create_batch`.

        ``assume``: the steps the batch creates that this connection does not
        know are taken as absent without a read and INSERTed (a row already there
        fails the write: :class:`_AssumedWrong`, and the batch is decided again
        with every step read, so a refusal is the one the stored rows give).
        """
        w = self._w
        with w._write() as db:
            run, seq, seq_in_band = w._cached_run(db, run_id)
            view = _View(db, run_id, run, seq, seq_in_band, known_steps=w._known.steps(run_id))
            step_ids: list[str | None] = []
            created: list[str | None] = []
            for request in checked:
                if request.type in STEP_TYPES:
                    step_ids.append(request.correlation_id)
                    if request.type is _STEP_CREATED:
                        created.append(request.correlation_id)
            if assume:
                view.assume_new(created)
            view.prefetch_steps(step_ids)
            try:
                plan = plan_batch(
                    view,
                    run_id,
                    checked,
                    event_time(w._clock.now(), occurred_at, in_band=in_band),
                    in_band=in_band,
                    expected_seq_in_band=expected_seq_in_band,
                    expected_seq=expected_seq,
                )
            except WorldError as exc:
                if view.assumed:
                    raise _AssumedWrong from exc
                raise
            unseen = w._unseen(db, run_id, seen_seq, plan.seq)
            w._store(db, plan, original=run, assumed=view.assumed)
        w._known.remember(plan)
        return _batch_result(events=tuple(plan.events), run=plan.run, unseen=unseen)

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
