"""Planted-bug Worlds for the concurrency layer: one realistic race each.

Each World is the reference :class:`MemoryWorld` with one facet call split the
way a third-party World over a remote store splits it: a check and a write in
two round trips (each an ``await``), a page and its counters in two queries, a
batch written one event at a time, reads served by a replica that lags.  Called
one at a time, every one of them answers exactly like the reference (so the
contract tests and the World model, which call one at a time, pass); two calls
in flight at once expose the bug.  ``durasim conformance`` catches each with
its default options::

    durasim conformance tests.planted.worlds_concurrency:make_terminal_twice --layers concurrency

``PLANTED`` maps each name to its factory ``make_<name>(setup) -> World``; the
factory's docstring says the bug.  ``CONTROL`` is the unmodified World.
"""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from durasim.worlds import (
    BatchResult,
    EntityConflict,
    EventPage,
    EventRequest,
    EventResult,
    EventType,
    HookNotFound,
    MemoryWorld,
    RunNotFound,
    RunStatus,
    SQLiteWorld,
    StepNotFound,
    World,
    WorldSetup,
)
from durasim.worlds._sqlite import _WriteTransaction


class _Facet:
    """Forwards every call to the reference facet it wraps, except those it defines."""

    def __init__(self, world: RemoteWorld, inner: Any) -> None:
        self.world = world
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("world", "inner"):  # copying: not set yet
            raise AttributeError(name)
        return getattr(self.inner, name)


class RemoteWorld(MemoryWorld):
    """The reference World as if its store were remote: ``round_trip()`` awaits once.

    Subclasses wrap one facet (``events``, ``streams``) to plant their bug.
    """

    events_facet: type[_Facet] | None = None
    streams_facet: type[_Facet] | None = None

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.events_facet is not None:
            self.events = self.events_facet(self, self.events)  # type: ignore[assignment]
        if self.streams_facet is not None:
            self.streams = self.streams_facet(self, self.streams)  # type: ignore[assignment]

    async def round_trip(self) -> None:
        """One request to the store: other calls run meanwhile."""
        await asyncio.sleep(0)

    @contextmanager
    def deciding_on(self, run_id: str, **read: Any) -> Iterator[None]:
        """Run the reference guards on a status an earlier round trip read.

        ``run_status=`` the run's, ``step=(step_id, status)`` a step's,
        ``resume_ids=`` the resume index: while the write is decided and stored
        (the reference does both without awaiting) the stored value is swapped
        for the one read earlier, as a write that trusts its earlier read does.
        """
        state = self._runs[run_id].state
        saved = (state.run, dict(state.steps), state.resume_ids)
        if "run_status" in read and state.run is not None:
            state.run = attrs.evolve(state.run, status=read["run_status"])
        if "step" in read:
            step_id, status = read["step"]
            state.steps[step_id] = attrs.evolve(state.steps[step_id], status=status)
        if "resume_ids" in read:
            state.resume_ids = dict(read["resume_ids"])
        try:
            yield
        except BaseException:
            state.run, state.steps, state.resume_ids = saved[0], saved[1], saved[2]
            raise
        if "resume_ids" in read:
            merged = dict(saved[2])
            for key, event in state.resume_ids.items():
                merged.setdefault(key, event)
            state.resume_ids = merged


def _options(setup: WorldSetup) -> dict[str, Any]:
    return {"clock": setup.clock, "ids": setup.ids, "max_deliveries": setup.max_deliveries}


# -- 1. the snapshot read after its page -----------------------------------------------------


class _PageThenCounters(_Facet):
    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        page: EventPage = await self.inner.list(run_id, after_seq=after_seq, limit=limit)
        await self.world.round_trip()  # the run's counters: a second query
        counters: EventPage = await self.inner.list(run_id, limit=1)
        return EventPage(events=page.events, snapshot=counters.snapshot, has_more=page.has_more)


class SnapshotAfterPage(RemoteWorld):
    events_facet = _PageThenCounters


def make_snapshot_after_page(setup: WorldSetup) -> World:
    """``events.list`` reads the page, then the run's counters in a second query.

    A write landing between the two makes the snapshot count an event the page,
    which says it is the end of the log (``has_more=False``), does not have.
    """
    return SnapshotAfterPage(**_options(setup))


# -- 2. stream writers overwriting each other ------------------------------------------------


class _TailThenPut(_Facet):
    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = [chunks] if isinstance(chunks, bytes) else chunks
        if not isinstance(batch, (list, tuple)) or not all(type(c) is bytes for c in batch):
            return int(await self.inner.write(run_id, name, chunks))  # the refusal
        info = await self.inner.info(run_id, name)  # where the stream ends
        if info.closed or not batch:
            return int(await self.inner.write(run_id, name, chunks))
        await self.world.round_trip()
        stream = self.world._streams.get((run_id, name))
        if stream is None:  # the first chunk creates the stream
            await self.inner.write(run_id, name, [])
            stream = self.world._streams[(run_id, name)]
        start = info.tail_index + 1
        stream.chunks[start : start + len(batch)] = list(batch)  # a put by index
        return start + len(batch) - 1


class StreamOverwrite(RemoteWorld):
    streams_facet = _TailThenPut


def make_stream_overwrite(setup: WorldSetup) -> World:
    """``streams.write`` reads the stream's tail, then puts its chunks at the next index.

    Two writers that read the same tail put their chunks at the same index: the
    last one overwrites the first, and both are told their chunk is there.
    """
    return StreamOverwrite(**_options(setup))


# -- 3. hook tokens held twice ---------------------------------------------------------------


class _TokenLookupThenInsert(_Facet):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if request.type is not EventType.HOOK_CREATED or run_id is None:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        token = request.data["token"]
        try:
            await self.world.hooks.get_by_token(token)  # round trip 1: is the token free?
        except HookNotFound:
            pass
        else:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        await self.world.round_trip()
        # Round trip 2: the insert trusts the lookup (no unique index on the token).
        tokens = self.world._tokens
        holder = tokens.pop(token, None)
        try:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        finally:
            if holder is not None and token not in tokens:
                tokens[token] = holder


class TokenCheckThenInsert(RemoteWorld):
    events_facet = _TokenLookupThenInsert


def make_token_check_then_insert(setup: WorldSetup) -> World:
    """``hook_created`` looks the token up, then inserts the hook in a second round trip.

    Two runs creating a hook with one token both find it free: both hooks are
    created live, and the token has two holders (no ``hook_conflict``).
    """
    return TokenCheckThenInsert(**_options(setup))


# -- 4. a refused write that commits --------------------------------------------------------

_STEP_ENDS = (EventType.STEP_COMPLETED, EventType.STEP_FAILED)


class _InsertThenVerify(_Facet):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if request.type not in _STEP_ENDS or run_id is None:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        step_id = request.correlation_id or ""
        try:
            step = await self.world.steps.get(run_id, step_id)  # round trip 1
        except (RunNotFound, StepNotFound):
            step = None
        if step is None or step.status.terminal:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        await self.world.round_trip()
        # Round trip 2 inserts the outcome, trusting round trip 1 that the step has none.
        now = self.world._runs[run_id].state.steps[step_id]
        read = {"step": (step_id, step.status)} if now.status.terminal else {}
        with self.world.deciding_on(run_id, **read):
            result: EventResult = await self.inner.create(run_id, request, **kw)
        await self.world.round_trip()  # round trip 3: read the outcomes back
        events = self.world._runs[run_id].events
        first = next(e for e in events if e.type in _STEP_ENDS and e.correlation_id == step_id)
        if result.event is not None and first.seq != result.event.seq:
            # Lost the race: refuse, but the inserted row is never deleted.
            raise EntityConflict(
                f"step {step_id!r} of run {run_id!r} already has an outcome", run_id=run_id
            )
        return result


class RefusedWriteCommits(RemoteWorld):
    events_facet = _InsertThenVerify


def make_refused_write_commits(setup: WorldSetup) -> World:
    """A step outcome is inserted, then verified; the loser of a race is refused, not undone.

    Two outcomes of one running step both pass the first check and both are
    inserted; the second is then refused with ``EntityConflict`` but its event
    stays in the log.
    """
    return RefusedWriteCommits(**_options(setup))


# -- 5. two terminal events ------------------------------------------------------------------


_RUN_OUTCOMES = (EventType.RUN_COMPLETED, EventType.RUN_FAILED)


class _RunCheckThenAppend(_Facet):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if request.type not in _RUN_OUTCOMES or run_id is None:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        try:
            run = await self.world.runs.get(run_id)  # round trip 1: is the run still live?
        except RunNotFound:
            run = None
        if run is None or run.status is not RunStatus.RUNNING:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        await self.world.round_trip()
        with self.world.deciding_on(run_id, run_status=run.status):  # round trip 2: append
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]


class TerminalTwice(RemoteWorld):
    events_facet = _RunCheckThenAppend


def make_terminal_twice(setup: WorldSetup) -> World:
    """A run's outcome checks the run is running, then is appended in a second round trip.

    Two outcomes (complete and fail, or two completes) in flight at once both
    find the run running: both are accepted and the log gets two terminal
    events.
    """
    return TerminalTwice(**_options(setup))


# -- 6. resume dedup as check-then-write --------------------------------------------------------


class _ResumeLookupThenAppend(_Facet):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        resume_id = request.data.get("resume_id")
        if request.type is not EventType.HOOK_RECEIVED or resume_id is None or run_id is None:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        record = self.world._runs.get(run_id)
        if record is None or resume_id in record.state.resume_ids:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        seen = dict(record.state.resume_ids)  # round trip 1: look the resume id up
        await self.world.round_trip()
        with self.world.deciding_on(run_id, resume_ids=seen):  # round trip 2: append
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]


class ResumeCheckThenWrite(RemoteWorld):
    events_facet = _ResumeLookupThenAppend


def make_resume_check_then_write(setup: WorldSetup) -> World:
    """``hook_received`` looks its ``resume_id`` up, then appends in a second round trip.

    Two resumes with one ``resume_id`` in flight at once both miss the lookup:
    both are appended, and the workflow sees one payload twice.
    """
    return ResumeCheckThenWrite(**_options(setup))


# -- 7. a batch applied one event at a time ------------------------------------------------------


class _BatchOneByOne(_Facet):
    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        # Round trip 1: validate the whole batch against the current state.
        await copy.deepcopy(self.world).events.inner.create_batch(run_id, requests, **kw)
        in_band = kw.get("in_band", False)
        expected = kw.get("expected_seq_in_band")
        events = []
        results: list[EventResult] = []
        for n, request in enumerate(requests):
            await self.world.round_trip()  # one insert per event, no transaction
            options = dict(kw)
            if in_band and expected is not None:
                options["expected_seq_in_band"] = expected + n
            if n:
                options.pop("seen_seq", None)
            result: EventResult = await self.inner.create(run_id, request, **options)
            results.append(result)
            events.append(result.event)
        return BatchResult(events=tuple(events), run=results[-1].run, unseen=results[0].unseen)


class BatchNotAtomic(RemoteWorld):
    events_facet = _BatchOneByOne


def make_batch_not_atomic(setup: WorldSetup) -> World:
    """``create_batch`` validates the batch, then inserts its events one round trip each.

    A concurrent reader sees the log end in the middle of the batch, and a
    concurrent write can make a later event of the batch fail after the earlier
    ones landed.
    """
    return BatchNotAtomic(**_options(setup))


# -- 8. a lost update: positions read, then put ---------------------------------------------------


class _CounterThenPut(_Facet):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if run_id is None or request.type is EventType.RUN_CREATED or kw:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        record = self.world._runs.get(run_id)
        if record is None:
            return await self.inner.create(run_id, request, **kw)  # type: ignore[no-any-return]
        state = record.state
        counters = (state.seq, state.seq_in_band)  # round trip 1: the run's next position
        await self.world.round_trip()
        now = (state.seq, state.seq_in_band)
        kept = record.events[counters[0] :]
        state.seq, state.seq_in_band = counters
        del record.events[counters[0] :]
        try:
            result: EventResult = await self.inner.create(run_id, request, **kw)
        except BaseException:
            record.events += kept
            state.seq, state.seq_in_band = now
            raise
        # Round trip 2 was a put keyed by (run, seq): it replaced whatever was there.
        record.events += kept[1:] if result.allocated else kept
        state.seq = max(now[0], state.seq)
        state.seq_in_band = max(now[1], state.seq_in_band)
        return result


class LostUpdate(RemoteWorld):
    events_facet = _CounterThenPut


def make_lost_update(setup: WorldSetup) -> World:
    """An out-of-band write reads the run's next position, then puts its event there.

    Two writers that read the same position both put their event at it: the
    last put replaces the first, whose writer was told it is in the log.
    """
    return LostUpdate(**_options(setup))


# -- 9. reads from a replica that lags -------------------------------------------------


class _ReplicaEvents(_Facet):
    def __init__(self, world: RemoteWorld, inner: Any) -> None:
        super().__init__(world, inner)
        self.replica: dict[str, tuple[Any, ...]] = {}
        self.pending: set[asyncio.Task[None]] = set()

    def _ship(self, run_id: str) -> None:
        """Copy the run's log to the replica, one round trip after the write returned."""

        async def ship() -> None:
            await self.world.round_trip()
            record = self.world._runs.get(run_id)
            if record is not None:
                self.replica[run_id] = (tuple(record.events), copy.copy(record.state))

        task = asyncio.get_running_loop().create_task(ship())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        result: EventResult = await self.inner.create(run_id, request, **kw)
        self._ship(result.run.run_id)
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        result: BatchResult = await self.inner.create_batch(run_id, requests, **kw)
        self._ship(run_id)
        return result

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        shipped = self.replica.get(run_id)
        if shipped is None:
            return await self.inner.list(run_id, after_seq=after_seq, limit=limit)  # type: ignore[no-any-return]
        page: EventPage = await self.inner.list(run_id, after_seq=after_seq, limit=limit)
        events, state = shipped
        picked = events[after_seq : after_seq + limit]
        snapshot = attrs.evolve(page.snapshot, seq=state.seq, seq_in_band=state.seq_in_band)
        return EventPage(
            events=picked, snapshot=snapshot, has_more=after_seq + len(picked) < len(events)
        )


class StaleReplica(RemoteWorld):
    events_facet = _ReplicaEvents


def make_stale_replica(setup: WorldSetup) -> World:
    """``events.list`` is served by a replica that receives each write one round trip late.

    A reader that starts just after a write returned may not see it, nor an
    event another reader already saw.
    """
    return StaleReplica(**_options(setup))


# -- 10. a per-process cache that never hears of the other processes ----------------------------


class _TrustingTransaction(_WriteTransaction):
    def __enter__(self) -> sqlite3.Connection:
        db: sqlite3.Connection = self._db
        db.execute("BEGIN IMMEDIATE")  # no PRAGMA data_version: the cache is never doubted
        return db


class SQLiteTrustsItsCache(SQLiteWorld):
    def _write(self) -> _WriteTransaction:
        return _TrustingTransaction(self)


def make_sqlite_trusts_its_cache(setup: WorldSetup) -> World:
    """A SQLite World that decides writes from what its own connection wrote last.

    It never asks whether another connection (another worker process) wrote
    the run since: the second worker's writes are invisible to the first one's
    decisions, which take positions already taken or refuse legal writes.
    Opened twice on one file, as two workers do.
    """
    return SQLiteTrustsItsCache(setup.directory / "world.db", clock=setup.clock, ids=setup.ids)


def make_control(setup: WorldSetup) -> World:
    """The unmodified reference World (no bug): the concurrency layer passes it."""
    return MemoryWorld(**_options(setup))


#: Every planted World: name -> factory (the factory's docstring says the bug).
PLANTED: dict[str, Callable[[WorldSetup], World]] = {
    "snapshot_after_page": make_snapshot_after_page,
    "stream_overwrite": make_stream_overwrite,
    "token_check_then_insert": make_token_check_then_insert,
    "refused_write_commits": make_refused_write_commits,
    "terminal_twice": make_terminal_twice,
    "resume_check_then_write": make_resume_check_then_write,
    "batch_not_atomic": make_batch_not_atomic,
    "lost_update": make_lost_update,
    "stale_replica": make_stale_replica,
    "sqlite_trusts_its_cache": make_sqlite_trusts_its_cache,
}

#: The anomaly the concurrency layer names for each.
ANOMALY: dict[str, str] = {
    "snapshot_after_page": "read ahead of its page",
    "stream_overwrite": "overwritten stream chunk",
    "token_check_then_insert": "duplicate token holder",
    "refused_write_commits": "refused write that committed",
    "terminal_twice": "two terminal events",
    "resume_check_then_write": "duplicate resume",
    "batch_not_atomic": "non-atomic batch",
    "lost_update": "lost update",
    "stale_replica": "stale read",
    "sqlite_trusts_its_cache": "not linearizable",
}

__all__ = [
    "ANOMALY",
    "PLANTED",
    "make_batch_not_atomic",
    "make_control",
    "make_lost_update",
    "make_refused_write_commits",
    "make_resume_check_then_write",
    "make_snapshot_after_page",
    "make_sqlite_trusts_its_cache",
    "make_stale_replica",
    "make_stream_overwrite",
    "make_terminal_twice",
    "make_token_check_then_insert",
]
