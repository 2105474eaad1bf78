"""The in-memory World: the reference fold plus dictionaries.

It is the reference every other World is compared against, so it does nothing
clever: each write builds a plan with :mod:`._guards` and stores it.  Nothing it
returns can change what it stores (every value is frozen).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import attrs

from ._build import builder
from ._checks import (
    _LAST_YEAR,
    check_limit,
    check_request,
    decode_run_cursor,
    encode_run_cursor,
    event_time,
    normalize_statuses,
    run_sort_key,
)
from ._entities import (
    BatchResult,
    Capabilities,
    EventPage,
    EventResult,
    HookRecord,
    HookStatuses,
    Message,
    RunPage,
    RunRecord,
    RunStatus,
    StepRecord,
    WaitRecord,
    WaitStatuses,
)
from ._errors import (
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    RunNotFound,
    StepNotFound,
    WaitNotFound,
)
from ._events import (
    Event,
    EventRequest,
    Types,
    check_correlation_id,
    check_run_id,
)
from ._facet import WorldFacet
from ._fold import FoldedRun, fold_log
from ._guards import (
    Plan,
    _snapshot,  # Snapshot(...) through its builder: the planners' own
    plan_batch,
    plan_create_run,
    plan_write,
)
from ._memory_queue import MemoryQueue, MemoryStreams, QueueSlot, StreamBuffer
from ._text import check_text, check_token
from ._time import Clock, IdSource, RandomIds, SystemClock

__all__ = ["MemoryWorld"]


_batch_result = builder(BatchResult)
_event_page = builder(EventPage)


@attrs.define
class _RunRecord:
    state: FoldedRun
    events: list[Event] = attrs.field(factory=list)


class _View:
    """The fold's StateView over one run of the memory World (made once per run).

    Kept in the World's ``_views``, beside the records: it reads its record and
    the World's token table, and nothing it reads points back to it (no cycle,
    issue 22).

    ``step`` and ``has_step`` are the steps dict's own bound methods (the guards call
    them every step: no Python call).  ``copy.deepcopy`` and pickle would keep a
    builtin method as it is, so a copied World's view would read the original's
    steps (the linearizability checker copies its reference World at every step of
    its search): the state they copy leaves them out, and a copy binds its own.
    """

    step: Callable[[str], StepRecord | None]
    has_step: Callable[[str], bool]

    def __init__(self, world: MemoryWorld, record: _RunRecord) -> None:
        self._runs = world._runs
        self._tokens = world._tokens
        self._record = record
        state = record.state
        self._state = state
        self._steps = state.steps
        self._bind()

    def _bind(self) -> None:
        steps = self._steps
        self.step = steps.get
        self.has_step = steps.__contains__

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["step"], state["has_step"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    def head(self) -> tuple[RunRecord | None, int, int]:
        state = self._state
        return state.run, state.seq, state.seq_in_band

    def hook(self, hook_id: str) -> HookRecord | None:
        return self._state.hooks.get(hook_id)

    def wait(self, wait_id: str) -> WaitRecord | None:
        return self._state.waits.get(wait_id)

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        owner = self._tokens.get(token)
        if owner is None:
            return None
        return self._runs[owner[0]].state.hooks[owner[1]]

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        return self._state.resume_ids.get(resume_id)

    def active_hooks(self) -> list[HookRecord]:
        return [h for h in self._state.hooks.values() if h.status is HookStatuses.ACTIVE]

    def waiting_waits(self) -> list[WaitRecord]:
        return [w for w in self._state.waits.values() if w.status is WaitStatuses.WAITING]


class MemoryWorld:
    """The reference World: every run in a dict, every rule from :mod:`._guards`.

    Args:
        clock: where every timestamp comes from (default: real time).
        ids: where run, message and lease ids come from (default: :mod:`secrets`).
        max_deliveries: a message claimed this many times without an ack goes
            to the dead letters on its next claim (``None``: never).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        max_deliveries: int | None = None,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._ids: IdSource = ids or RandomIds()
        self._max_deliveries = max_deliveries
        self._runs: dict[str, _RunRecord] = {}
        #: The guards' view of each run (apart from the records: see _View).
        self._views: dict[str, _View] = {}
        self._tokens: dict[str, tuple[str, str]] = {}
        # Every token's most recent holder, live or not (hooks.last_by_token).
        self._last_holders: dict[str, tuple[str, str]] = {}
        self._queue: dict[str, QueueSlot] = {}
        self._queue_order = 0
        self._idempotency: dict[str, str] = {}
        self._dead: list[Message] = []
        self._streams: dict[tuple[str, str], StreamBuffer] = {}
        self._closed = False
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = MemoryQueue(self)
        self.streams = MemoryStreams(self)

    @property
    def capabilities(self) -> Capabilities:
        """Everything but durability and sharing between processes."""
        return Capabilities()

    if TYPE_CHECKING:

        @property
        def clock(self) -> Clock:
            """The World's clock."""

    else:  # the same read-only property, its getter in C (the runtime reads it twice a step)
        clock = property(attrgetter("_clock"), doc="The World's clock.")

    async def close(self) -> None:
        """Nothing to release; idempotent."""
        self._closed = True

    # -- internals shared by the facets ---------------------------------------

    def _record(self, run_id: str) -> _RunRecord:
        # A key of ``_runs`` passed check_run_id when its run was created: only
        # an id the World does not hold is checked (and refused or not found).
        record = self._runs.get(run_id) if type(run_id) is str else None
        if record is None:
            check_run_id(run_id)
        if record is None or record.state.run is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        return record

    def _store(self, run_id: str, plan: Plan) -> None:
        record = self._runs.get(run_id)
        if record is None:
            record = self._runs[run_id] = _RunRecord(state=FoldedRun())
            self._views[run_id] = _View(self, record)
        state = record.state
        record.events.extend(plan.events)
        state.run = plan.run
        if plan.steps:
            state.steps.update(plan.steps)
        if plan.waits:
            state.waits.update(plan.waits)
        state.seq = plan.seq_after
        state.seq_in_band = plan.seq_in_band_after
        if not plan.hooks:
            return  # every hook_received changes its hook: no resume id to record either
        state.hooks.update(plan.hooks)
        for event in plan.events:
            if event.type is Types.HOOK_RECEIVED and "resume_id" in event.data:
                state.resume_ids.setdefault(event.data["resume_id"], event)
        for hook in plan.hooks.values():
            if hook.status is HookStatuses.ACTIVE:
                self._tokens[hook.token] = (hook.run_id, hook.hook_id)
                self._last_holders[hook.token] = (hook.run_id, hook.hook_id)
            elif self._tokens.get(hook.token) == (hook.run_id, hook.hook_id):
                del self._tokens[hook.token]

    def _unseen(self, run_id: str, seen_seq: int | None, before: int) -> tuple[Event, ...]:
        if seen_seq is None:
            return ()
        # Type first: a str would raise TypeError below, a float past the log pass unchecked.
        if type(seen_seq) is not int or seen_seq < 0:
            raise InvalidRequest(f"seen_seq must be a non-negative int, got {seen_seq!r}")
        if seen_seq >= before:
            return ()
        return tuple(self._runs[run_id].events[seen_seq:before])

    def _check(self) -> None:
        """Assert the internal invariants (property tests call this after every rule)."""
        live: dict[str, tuple[str, str]] = {}
        assert self._views.keys() == self._runs.keys()
        for run_id, record in self._runs.items():
            assert fold_log(record.events) == record.state, f"run {run_id!r}: rows differ from fold"
            assert [e.seq for e in record.events] == list(range(1, len(record.events) + 1))
            assert record.state.seq == len(record.events)
            assert record.state.seq_in_band == sum(e.in_band for e in record.events)
            view = self._views[run_id]
            assert view._record is record
            assert view._state is record.state
            assert view._steps is record.state.steps
            assert view.step.__self__ is view.has_step.__self__ is view._steps  # type: ignore[attr-defined]
            assert view._runs is self._runs
            assert view._tokens is self._tokens
            for hook in record.state.hooks.values():
                if hook.status is HookStatuses.ACTIVE:
                    assert hook.token not in live, f"token {hook.token!r} held twice"
                    live[hook.token] = (run_id, hook.hook_id)
        assert live == self._tokens
        for key, message_id in self._idempotency.items():
            assert self._queue[message_id].message.idempotency_key == key

    def load_checked_log(self, events: Sequence[Event]) -> None:
        """Store a whole run's log as it is, without a guard: a TRUSTED bulk load.

        Only for a log these same guards already accepted event by event, in this
        order, in a World holding no other run (the replay oracle's copy of a log a
        MemoryWorld wrote): the rows are its fold, as :meth:`_check` requires of
        every run.  Refuses a run that is here already or a token held by another run.
        """
        run_id = events[0].run_id
        if run_id in self._runs:
            raise InvalidRequest(f"run {run_id!r} is here already: a bulk load makes a new run")
        state = fold_log(events)
        taken = {h.token for h in state.hooks.values() if h.status is HookStatuses.ACTIVE}
        if taken & self._tokens.keys():
            raise InvalidRequest(f"tokens {sorted(taken & self._tokens.keys())} are held")
        record = _RunRecord(state=state, events=list(events))
        self._runs[run_id] = record
        self._views[run_id] = _View(self, record)
        for hook in state.hooks.values():
            self._last_holders[hook.token] = (run_id, hook.hook_id)
            if hook.status is HookStatuses.ACTIVE:
                self._tokens[hook.token] = (run_id, hook.hook_id)


class _Facet(WorldFacet["MemoryWorld"]):
    """A facet of the MemoryWorld (:mod:`._facet`: it holds its World weakly).

    ``WorldFacet.__init__`` itself, typed by the base's parameter: no ``__init__`` of
    its own to call through ``super()`` (seven facets a World, one World a Sim).
    """


class _Runs(_Facet):
    async def get(self, run_id: str) -> RunRecord:
        run = self._w._record(run_id).state.run
        assert run is not None
        return run

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
        after = decode_run_cursor(cursor) if cursor is not None else None
        runs = sorted(
            (r.state.run for r in self._w._runs.values() if r.state.run is not None),
            key=run_sort_key,
            reverse=True,
        )
        picked: list[RunRecord] = []
        for run in runs:
            if after is not None and run_sort_key(run) >= after:
                continue
            if workflow_name is not None and run.workflow_name != workflow_name:
                continue
            if statuses is not None and run.status not in statuses:
                continue
            picked.append(run)
            if len(picked) > limit:
                break
        has_more = len(picked) > limit
        page = tuple(picked[:limit])
        return RunPage(runs=page, cursor=encode_run_cursor(page[-1]) if has_more else None)


class _Steps(_Facet):
    async def get(self, run_id: str, step_id: str) -> StepRecord:
        check_run_id(run_id)
        check_correlation_id(step_id, what="step id")
        step = self._w._record(run_id).state.steps.get(step_id)
        if step is None:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return step

    async def list(self, run_id: str) -> tuple[StepRecord, ...]:
        return tuple(self._w._record(run_id).state.steps.values())


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> HookRecord:
        check_run_id(run_id)
        check_correlation_id(hook_id, what="hook id")
        hook = self._w._record(run_id).state.hooks.get(hook_id)
        if hook is None:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return hook

    async def get_by_token(self, token: str) -> HookRecord:
        check_token(token)
        owner = self._w._tokens.get(token) if isinstance(token, str) else None
        if owner is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return self._w._runs[owner[0]].state.hooks[owner[1]]

    async def last_by_token(self, token: str) -> HookRecord:
        """The hook that took ``token`` last, in any status; :class:`HookNotFound` if none."""
        owner = self._w._last_holders.get(token) if isinstance(token, str) else None
        if owner is None:
            raise HookNotFound(f"no hook ever held token {token!r}", token=token)
        return self._w._runs[owner[0]].state.hooks[owner[1]]

    async def list(self, run_id: str) -> tuple[HookRecord, ...]:
        return tuple(self._w._record(run_id).state.hooks.values())


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> WaitRecord:
        check_run_id(run_id)
        check_correlation_id(wait_id, what="wait id")
        wait = self._w._record(run_id).state.waits.get(wait_id)
        if wait is None:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return wait

    async def list(self, run_id: str) -> tuple[WaitRecord, ...]:
        return tuple(self._w._record(run_id).state.waits.values())


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
        now = event_time(w._clock.now(), occurred_at, in_band=in_band)
        if request.type is Types.RUN_CREATED:
            run_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")
            existing = w._runs.get(run_id)
            plan = plan_create_run(run_id, request, now, existing.state.run if existing else None)
            w._store(run_id, plan)
            return EventResult(event=plan.events[0], run=plan.run, allocated=1)
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        w._record(run_id)  # refuses an id that is not a run of this World
        plan = plan_write(
            w._views[run_id],
            run_id,
            request,
            now,
            in_band=in_band,
            expected_seq_in_band=expected_seq_in_band,
            expected_seq=expected_seq,
        )
        unseen = w._unseen(run_id, seen_seq, plan.seq) if plan.events else ()
        w._store(run_id, plan)
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
        w: MemoryWorld = self._ref() or self._w  # self._w without its call (it raises if dropped)
        # The runtime's requests come validated (``EventRequest.of``): taken as they are
        # (the guards only read the sequence, and keep nothing of it).
        checked = requests
        for r in requests:
            if not (type(r) is EventRequest and r._validated):
                checked = [
                    r if type(r) is EventRequest and r._validated else check_request(r)
                    for r in requests
                ]
                break
        # w._record(run_id), its common case inlined (it raises for any other)
        view = w._views.get(run_id) if type(run_id) is str else None
        if view is None or view._state.run is None:
            w._record(run_id)  # raises: no such run here, or not a run id
            view = w._views[run_id]
        record = view._record
        now = w._clock.now()
        plan = plan_batch(
            view,
            run_id,
            checked,
            # event_time(now, occurred_at, in_band=in_band), its common cases inlined
            now
            if occurred_at is None
            else occurred_at
            if occurred_at is now
            and in_band
            and isinstance(now, datetime)
            and now.tzinfo is not None
            and now.year < _LAST_YEAR
            else event_time(now, occurred_at, in_band=in_band),
            in_band=in_band,
            expected_seq_in_band=expected_seq_in_band,
            expected_seq=expected_seq,
        )
        # w._unseen(...), its common case inlined: a writer that has seen the whole log
        before = plan.seq
        unseen = (
            ()
            if seen_seq is None or (type(seen_seq) is int and seen_seq >= before)
            else w._unseen(run_id, seen_seq, before)
        )
        if plan.hooks or plan.waits:
            w._store(run_id, plan)
        else:  # w._store(run_id, plan), inlined for a plan that changes steps at most
            events = plan.events
            record.events.extend(events)
            state = record.state
            state.run = plan.run
            if plan.steps:
                state.steps.update(plan.steps)
            state.seq = plan.seq_after
            state.seq_in_band = plan.seq_in_band_after
        return _batch_result(events=tuple(plan.events), run=plan.run, unseen=unseen)

    async def get(self, run_id: str, seq: int) -> Event:
        events = self._w._record(run_id).events
        if type(seq) is not int or not 1 <= seq <= len(events):
            raise EventNotFound(
                f"run {run_id!r} has no event #{seq} (its log has {len(events)})", run_id=run_id
            )
        return events[seq - 1]

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        check_limit(limit)
        if type(after_seq) is not int or after_seq < 0:
            raise InvalidRequest(f"after_seq must be a non-negative int, got {after_seq!r}")
        record = self._w._record(run_id)
        snapshot = _snapshot(seq=record.state.seq, seq_in_band=record.state.seq_in_band)
        events = record.events[after_seq : after_seq + limit]
        return _event_page(
            events=tuple(events),
            snapshot=snapshot,
            has_more=after_seq + len(events) < len(record.events),
        )
