"""The guards' views for the PostgreSQL World: what a write is decided from.

:class:`_View` answers from rows a write prefetched under the run's row lock;
:class:`_KnownView` answers from what this process remembers of a run
(:class:`KnownRuns`) and raises :class:`_Unknown` for anything it does not
remember, so the write is decided under the lock instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _postgres_codec as codec
from ._entities import HookRecord, RunRecord, Snapshot, StepRecord, WaitRecord
from ._events import (
    HOOK_TYPES,
    RUN_TERMINAL_TYPES,
    STEP_TYPES,
    WAIT_TYPES,
    Event,
    EventRequest,
    EventType,
)
from ._postgres_codec import EVENT_COLUMNS, RUN_SELECT

if TYPE_CHECKING:
    from ._postgres import Conn

__all__: list[str] = []


class _RunView:
    """What both of the guards' views answer alike: the run, its counters, whether a step exists."""

    def __init__(self, run: RunRecord | None, counters: Snapshot) -> None:
        self._run = run
        self._counters = counters

    def run(self) -> RunRecord | None:
        return self._run

    def counters(self) -> Snapshot:
        return self._counters

    def step(self, step_id: str) -> StepRecord | None:
        raise NotImplementedError

    def has_step(self, step_id: str) -> bool:
        return self.step(step_id) is not None


class _View(_RunView):
    """The guards' StateView over rows the write prefetched under the run's lock."""

    def __init__(self, run: RunRecord | None, counters: Snapshot) -> None:
        super().__init__(run, counters)
        self.steps: dict[str, StepRecord | None] = {}
        self.hooks: dict[str, HookRecord | None] = {}
        self.waits: dict[str, WaitRecord | None] = {}
        self.tokens: dict[str, HookRecord | None] = {}
        self.resumes: dict[str, Event | None] = {}
        self.active: list[HookRecord] | None = None
        self.waiting: list[WaitRecord] | None = None

    @classmethod
    async def load(cls, conn: Conn, run_id: str, requests: Iterable[EventRequest]) -> _View:
        """Lock the run's row and read everything ``requests`` may ask about."""
        cur = await conn.execute(f"{RUN_SELECT} FOR UPDATE", (run_id,))
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

    def step(self, step_id: str) -> StepRecord | None:
        return self._known(self.steps, step_id, "step")  # type: ignore[no-any-return]

    def hook(self, hook_id: str) -> HookRecord | None:
        return self._known(self.hooks, hook_id, "hook")  # type: ignore[no-any-return]

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        return self._known(self.tokens, token, "token")  # type: ignore[no-any-return]

    def wait(self, wait_id: str) -> WaitRecord | None:
        return self._known(self.waits, wait_id, "wait")  # type: ignore[no-any-return]

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        return self._known(self.resumes, resume_id, "resume id")  # type: ignore[no-any-return]

    def active_hooks(self) -> Sequence[HookRecord]:
        assert self.active is not None, "PostgresWorld did not prefetch the active hooks"
        return self.active

    def waiting_waits(self) -> Sequence[WaitRecord]:
        assert self.waiting is not None, "PostgresWorld did not prefetch the waiting waits"
        return self.waiting


class _Unknown(Exception):
    """The remembered state cannot answer: decide the write under the row lock instead."""


class _KnownView(_RunView):
    """The guards' StateView over what this process remembers of a run (:class:`KnownRuns`).

    A step it does not remember is taken to be new; the write then inserts it
    without ``ON CONFLICT``, so if it existed after all the statement fails and
    nothing is written.  Hooks, waits and tokens are not remembered: a write
    that asks about them is decided under the row lock.
    """

    def __init__(
        self, run: RunRecord, counters: Snapshot, steps: dict[str, StepRecord] | None
    ) -> None:
        super().__init__(run, counters)
        self._steps = steps or {}
        self.assumed_new: set[str] = set()

    def step(self, step_id: str) -> StepRecord | None:
        step = self._steps.get(step_id)
        if step is None:
            self.assumed_new.add(step_id)
        return step

    def hook(self, hook_id: str) -> HookRecord | None:
        raise _Unknown(hook_id)

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        raise _Unknown(token)

    def wait(self, wait_id: str) -> WaitRecord | None:
        raise _Unknown(wait_id)

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        raise _Unknown(resume_id)

    def active_hooks(self) -> Sequence[HookRecord]:
        raise _Unknown("active hooks")

    def waiting_waits(self) -> Sequence[WaitRecord]:
        raise _Unknown("waiting waits")
