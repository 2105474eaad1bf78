"""The PostgreSQL World's read facets: runs, steps, hooks and waits.

Each read is a few autocommit statements on a pooled connection, retried on a
lost connection by :meth:`PostgresWorld._read`.  The events facet, which also
writes, is :mod:`._postgres_events`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _postgres_codec as codec
from ._checks import check_limit, decode_run_cursor, encode_run_cursor, normalize_statuses
from ._entities import HookRecord, RunPage, RunRecord, RunStatus, StepRecord, WaitRecord
from ._errors import HookNotFound, StepNotFound, WaitNotFound
from ._events import check_correlation_id, check_run_id
from ._facet import WorldFacet
from ._text import check_text, check_token

if TYPE_CHECKING:
    from ._postgres import Conn, PostgresWorld

__all__: list[str] = []


class _Facet(WorldFacet["PostgresWorld"]):
    """A facet of the PostgresWorld (:mod:`._facet`: it holds its World weakly)."""

    def __init__(self, world: PostgresWorld) -> None:
        super().__init__(world)

    async def _of_run(self, run_id: str, query: str, args: tuple[Any, ...]) -> list[Any]:
        """The rows ``query`` returns, once the run is known to exist (else RunNotFound)."""

        async def body(conn: Conn) -> list[tuple[Any, ...]]:
            await self._w._require_run(conn, run_id)
            cur = await conn.execute(query, args)
            return await cur.fetchall()

        return await self._w._read(body)


class _Runs(_Facet):
    async def get(self, run_id: str) -> RunRecord:
        async def body(conn: Conn) -> RunRecord:
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
        if workflow_name is not None:
            check_text(workflow_name, field="workflow_name")
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
    async def get(self, run_id: str, step_id: str) -> StepRecord:
        check_run_id(run_id)
        check_correlation_id(step_id, what="step id")
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s AND step_id = %s",
            (run_id, step_id),
        )
        if not rows:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return codec.step_from_row(rows[0])

    async def list(self, run_id: str) -> tuple[StepRecord, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.STEP_COLUMNS} FROM steps WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
        return tuple(codec.step_from_row(r) for r in rows)


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> HookRecord:
        check_run_id(run_id)
        check_correlation_id(hook_id, what="hook id")
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s AND hook_id = %s",
            (run_id, hook_id),
        )
        if not rows:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return codec.hook_from_row(rows[0])

    async def get_by_token(self, token: str) -> HookRecord:
        check_token(token)

        async def body(conn: Conn) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = %s AND status = 'active'",
                (token,),
            )
            return await cur.fetchone()

        row = await self._w._read(body)
        if row is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return codec.hook_from_row(row)

    async def last_by_token(self, token: str) -> HookRecord:
        """The hook that took ``token`` last, in any status; :class:`HookNotFound` if none."""

        async def body(conn: Conn) -> tuple[Any, ...] | None:
            cur = await conn.execute(
                f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = %s ORDER BY ord DESC "
                "LIMIT 1",
                (token if isinstance(token, str) else "",),
            )
            return await cur.fetchone()

        row = await self._w._read(body)
        if row is None:
            raise HookNotFound(f"no hook ever held token {token!r}", token=token)
        return codec.hook_from_row(row)

    async def list(self, run_id: str) -> tuple[HookRecord, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
        return tuple(codec.hook_from_row(r) for r in rows)


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> WaitRecord:
        check_run_id(run_id)
        check_correlation_id(wait_id, what="wait id")
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s AND wait_id = %s",
            (run_id, wait_id),
        )
        if not rows:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return codec.wait_from_row(rows[0])

    async def list(self, run_id: str) -> tuple[WaitRecord, ...]:
        rows = await self._of_run(
            run_id,
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = %s ORDER BY ord",
            (run_id,),
        )
        return tuple(codec.wait_from_row(r) for r in rows)
