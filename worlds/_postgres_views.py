"""The guards' views for the PostgreSQL World: what a write is decided from.

:class:`_View` answers from rows a write prefetched under the run's row lock;
:class:`_KnownView` answers from what this process remembers of a run
(:class:`_KnownRuns`: the run, its unfinished steps, live hooks and waiting
waits) and raises :class:`_Unknown` for anything it cannot answer, so the write
is decided under the lock instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _postgres_codec as codec
from ._entities import (
    HookRecord,
    HookStatuses,
    RunRecord,
    Snapshot,
    StepRecord,
    WaitRecord,
    WaitStatuses,
)
from ._events import (
    HOOK_TYPES,
    RUN_TERMINAL_TYPES,
    STEP_TYPES,
    WAIT_TYPES,
    Event,
    EventRequest,
    EventType,
)
from ._guards import Plan
from ._known import KnownRuns
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

    def head(self) -> tuple[RunRecord | None, int, int]:
        counters = self._counters
        return self._run, counters.seq, counters.seq_in_band

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


class _KnownRuns(KnownRuns):
    """:class:`KnownRuns` that also keeps each run's live hooks and waiting waits.

    What is kept of a run's entities is only ever trusted together with the
    run's remembered counters (the one-statement write checks them), so it is
    dropped whenever the run is: forgotten, or no longer remembered when a new
    plan comes in (evicted meanwhile: anyone may have written it since).
    """

    def __init__(self, *, runs: int, step_runs: int) -> None:
        super().__init__(runs=runs, step_runs=step_runs)
        self._max_entity_runs = step_runs
        self._entities: dict[str, tuple[dict[str, HookRecord], dict[str, WaitRecord]]] = {}

    def hooks(self, run_id: str) -> dict[str, HookRecord]:
        """The run's live hooks as of :meth:`run`'s counters (empty: none kept)."""
        entities = self._entities.get(run_id)
        return {} if entities is None else entities[0]

    def waits(self, run_id: str) -> dict[str, WaitRecord]:
        """The run's waiting waits as of :meth:`run`'s counters (empty: none kept)."""
        entities = self._entities.get(run_id)
        return {} if entities is None else entities[1]

    def remember(self, plan: Plan) -> None:
        """Take in a committed plan (call after COMMIT, before anyone else writes the run)."""
        run_id = plan.run.run_id
        if self.run(run_id) is None:
            self.forget(run_id)  # steps or entities kept from before it was evicted
        super().remember(plan)
        if not plan.hooks and not plan.waits:
            return
        hooks, waits = self._entities.pop(run_id, ({}, {}))  # re-inserted last: the newest
        for hook_id, hook in plan.hooks.items():
            if hook.status is HookStatuses.ACTIVE:
                hooks[hook_id] = hook
            else:
                hooks.pop(hook_id, None)
        for wait_id, wait in plan.waits.items():
            if wait.status is WaitStatuses.WAITING:
                waits[wait_id] = wait
            else:
                waits.pop(wait_id, None)
        if hooks or waits:
            self._entities[run_id] = (hooks, waits)
            if len(self._entities) > self._max_entity_runs:
                del self._entities[next(iter(self._entities))]

    def forget(self, run_id: str) -> None:
        """Drop one run (someone else wrote it)."""
        super().forget(run_id)
        self._entities.pop(run_id, None)

    def clear(self) -> None:
        """Drop everything."""
        super().clear()
        self._entities.clear()


class _KnownView(_RunView):
    """The guards' StateView over what this process remembers of a run (:class:`_KnownRuns`).

    A step, hook or wait it does not remember is taken to be new, and a token
    or resume id to be free; the write then inserts the new rows without
    ``ON CONFLICT``, so if one existed after all (or a live hook of any run
    holds the token, or the run already recorded the resume id) a unique index
    fails the statement and nothing is written.  :meth:`checked_by` says
    whether a plan's rows carry every such assumption to an index.  The run's
    active hooks and waiting waits as a whole (asked when the run ends) are not
    known: that write is decided under the row lock.
    """

    def __init__(
        self,
        run: RunRecord,
        counters: Snapshot,
        steps: dict[str, StepRecord] | None,
        hooks: dict[str, HookRecord] | None = None,
        waits: dict[str, WaitRecord] | None = None,
    ) -> None:
        super().__init__(run, counters)
        self._steps = steps or {}
        self._hooks = hooks or {}
        self._waits = waits or {}
        self.assumed_new: set[str] = set()
        self.assumed_new_hooks: set[str] = set()
        self.assumed_new_waits: set[str] = set()
        self.assumed_free_tokens: set[str] = set()
        self.assumed_resume_ids: set[str] = set()

    def step(self, step_id: str) -> StepRecord | None:
        step = self._steps.get(step_id)
        if step is None:
            self.assumed_new.add(step_id)
        return step

    def hook(self, hook_id: str) -> HookRecord | None:
        hook = self._hooks.get(hook_id)
        if hook is None:
            self.assumed_new_hooks.add(hook_id)
        return hook

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        for hook in self._hooks.values():  # only live hooks are kept
            if hook.token == token:
                return hook
        self.assumed_free_tokens.add(token)
        return None

    def wait(self, wait_id: str) -> WaitRecord | None:
        wait = self._waits.get(wait_id)
        if wait is None:
            self.assumed_new_waits.add(wait_id)
        return wait

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        self.assumed_resume_ids.add(resume_id)
        return None

    def active_hooks(self) -> Sequence[HookRecord]:
        raise _Unknown("active hooks")

    def waiting_waits(self) -> Sequence[WaitRecord]:
        raise _Unknown("waiting waits")

    def checked_by(self, plan: Plan) -> bool:
        """Whether ``plan``'s rows put every assumption this view made to a unique index.

        Each entity assumed new is written (as a plain INSERT), each token assumed
        free is taken by a new hook that stays active (``hooks_live_token``),
        each resume id assumed unrecorded is on one of the plan's events
        (``events_resume``).  A token released and taken again in one plan is
        not: the one statement cannot order the two (the locked path can).
        """
        if not plan.hooks and not self.assumed_resume_ids:  # a step's or a sleep's: no token
            return (
                self.assumed_new <= plan.steps.keys()
                and not self.assumed_new_hooks
                and not self.assumed_free_tokens
                and self.assumed_new_waits <= plan.waits.keys()
            )
        new_hooks = [h for k, h in plan.hooks.items() if k in self.assumed_new_hooks]
        kept_tokens = {h.token for k, h in plan.hooks.items() if k not in self.assumed_new_hooks}
        taken = {h.token for h in new_hooks if h.status is HookStatuses.ACTIVE}
        recorded = {e.data.get("resume_id") for e in plan.events}
        return (
            self.assumed_new <= plan.steps.keys()
            and self.assumed_new_hooks <= plan.hooks.keys()
            and self.assumed_new_waits <= plan.waits.keys()
            and self.assumed_free_tokens <= taken
            and self.assumed_resume_ids <= recorded
            and not kept_tokens & {h.token for h in new_hooks}
        )
