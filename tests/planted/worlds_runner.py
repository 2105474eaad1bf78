"""Planted-bug Worlds for the conformance runner (issue 17, items 4-7).

Each ``make_*`` factory builds a project World (SQLite or memory) wrapped with
ONE realistic bug, of the kind a third-party author writes on top of a store:
a read cache one write path forgets to invalidate, state shared by every
World of the process, a busy store surfaced as an error, an id check copied from
another field, a sanity check the runtime's writes break, a lenient World that
declares it validates.  The first three are missed by the suite as it was
before issue 17 (the World model's 50 examples; a runner that lost its whole
report when Hypothesis found the World's answers unrepeatable).  :data:`PLANTED`
maps each name to its factory; tests/planted/test_runner.py checks that
``durasim conformance`` with default options catches every one (and with
``stop_at_first_failure``), and that the unwrapped Worlds pass.

Module-level and importable: ``durasim conformance tests.planted.worlds_runner:make_x``
(and ``durasim reproduce`` of what the exploration finds) rebuild them by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from durasim.worlds import (
    BatchResult,
    Capabilities,
    Clock,
    EventRequest,
    EventResult,
    InvalidRequest,
    SQLiteWorld,
    World,
    WorldError,
    WorldSetup,
)

__all__ = ["PLANTED", "Wrapped", "make_sqlite"]


def make_sqlite(setup: WorldSetup) -> SQLiteWorld:
    """The unmodified SQLite World every planted World here wraps (the control)."""
    return SQLiteWorld(
        setup.directory / "world.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


class _Events:
    """The events facet, forwarding to the wrapped World's (a planted World overrides it)."""

    def __init__(self, owner: Wrapped) -> None:
        self.owner = owner
        self.inner = owner.inner.events

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        result: EventResult = await self.inner.create(run_id, request, **kw)
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        result: BatchResult = await self.inner.create_batch(run_id, requests, **kw)
        return result

    async def get(self, run_id: str, seq: int) -> Any:
        return await self.inner.get(run_id, seq)

    async def list(self, run_id: str, **kw: Any) -> Any:
        return await self.inner.list(run_id, **kw)


class Wrapped:
    """A World that forwards every facet to ``inner``; a planted World replaces one part."""

    events_class: type[_Events] = _Events

    def __init__(self, inner: World) -> None:
        self.inner = inner
        self.runs = inner.runs
        self.steps: Any = inner.steps
        self.hooks = inner.hooks
        self.waits = inner.waits
        self.queue = inner.queue
        self.streams = inner.streams
        self.events: Any = self.events_class(self)

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    async def close(self) -> None:
        await self.inner.close()

    def _check(self) -> None:
        check = getattr(self.inner, "_check", None)
        if check is not None:
            check()


# --- an id check copied from the run ids onto the resume ids ------------------------------

#: The characters this author allows in ids: the run-id alphabet, without ':' and '/'.
_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


class _StrictResumeIdEvents(_Events):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        data = getattr(request, "data", None) or {}
        received = getattr(request, "type", None) == "hook_received"
        resume_id = data.get("resume_id") if received else None
        if isinstance(resume_id, str) and not _ID.fullmatch(resume_id):
            # The bug: resume ids are any string (a webhook's request id, a client's
            # idempotency key); this World refuses the ones a run id could not be.
            raise InvalidRequest(
                f"resume_id {resume_id!r} is malformed: use 1-128 characters from [A-Za-z0-9_.-]"
            )
        return await super().create(run_id, request, **kw)


class _StrictResumeIds(Wrapped):
    events_class = _StrictResumeIdEvents


def make_strict_resume_ids(setup: WorldSetup) -> World:
    """Refuses resume ids with ':' (the explored hook sender's ids have them): a WorldError
    raised inside the exploration, which the runner used to lose its report over."""
    return _StrictResumeIds(make_sqlite(setup))  # type: ignore[return-value]


# --- a World that declares input validation and validates nothing of the queue ----------


class _LenientQueue:
    """The queue facet, with the author's own checks in place of the World's: none.

    The bug: the author "normalizes" input instead of refusing it (a str payload is
    encoded, a negative delay is zero, a page size is clamped), while the World
    still declares ``input_validation``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def enqueue(self, queue_name: str, payload: Any, **kw: Any) -> str:
        if isinstance(payload, str):
            payload = payload.encode()
        delay = kw.get("delay", 0.0)
        if isinstance(delay, int | float) and not isinstance(delay, bool) and delay < 0:
            kw["delay"] = 0.0
        message_id: str = await self.inner.enqueue(queue_name, payload, **kw)
        return message_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _LenientInput(Wrapped):
    def __init__(self, inner: World) -> None:
        super().__init__(inner)
        self.queue = _LenientQueue(inner.queue)  # type: ignore[assignment]


def make_lenient_input(setup: WorldSetup) -> World:
    """Declares ``input_validation`` but accepts malformed queue input (found by the contract)."""
    return _LenientInput(make_sqlite(setup))  # type: ignore[return-value]


def make_lenient_input_declared(setup: WorldSetup) -> World:
    """The same World, honest about it: ``input_validation=False`` (passes, not applicable)."""

    class Honest(_LenientInput):
        @property
        def capabilities(self) -> Capabilities:
            return attrs.evolve(self.inner.capabilities, input_validation=False)

    return Honest(make_sqlite(setup))  # type: ignore[return-value]


# --- a token cache that a cancelled run does not invalidate --------------------------------


class _CachedTokens:
    """``hooks.get_by_token`` from a cache: a hook found by its token is kept until a
    write says otherwise.

    The bug: :class:`_TokenCacheEvents` drops a run's tokens when the run completes or
    fails (its hooks are released), but not when it is cancelled: cancellation
    came later, and its path was not added to the invalidation.
    """

    def __init__(self, owner: _StaleTokenCache) -> None:
        self.owner = owner
        self.inner = owner.inner.hooks

    async def get_by_token(self, token: str) -> Any:
        cached = self.owner.tokens.get(token) if isinstance(token, str) else None
        if cached is None:
            cached = await self.inner.get_by_token(token)
            self.owner.tokens[token] = cached
        return cached

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _TokenCacheEvents(_Events):
    owner: _StaleTokenCache

    def _forget(self, run_id: str, types: set[str], tokens: set[str]) -> None:
        cache = self.owner.tokens
        for token in tokens:
            cache.pop(token, None)
        if types & {"run_completed", "run_failed"}:  # not run_cancelled: the bug
            for token in [t for t, hook in cache.items() if hook.run_id == run_id]:
                del cache[token]

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        result = await super().create(run_id, request, **kw)
        event = result.event
        if event is not None:
            token = event.data.get("token") if event.type.value.startswith("hook_") else None
            hook_token = result.hook.token if result.hook is not None else None
            tokens = {t for t in (token, hook_token) if isinstance(t, str)}
            self._forget(event.run_id, {event.type.value}, tokens)
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        result = await super().create_batch(run_id, requests, **kw)
        tokens = {str(e.data["token"]) for e in result.events if "token" in e.data}
        hook_ids = {e.correlation_id for e in result.events if e.type.value.startswith("hook_")}
        for hook_id in hook_ids:
            if hook_id is not None:
                tokens.add((await self.owner.inner.hooks.get(run_id, hook_id)).token)
        self._forget(run_id, {e.type.value for e in result.events}, tokens)
        return result


class _StaleTokenCache(Wrapped):
    events_class = _TokenCacheEvents

    def __init__(self, inner: World) -> None:
        self.tokens: dict[str, Any] = {}
        super().__init__(inner)
        self.hooks = _CachedTokens(self)  # type: ignore[assignment]


def make_stale_token_cache(setup: WorldSetup) -> World:
    """A token lookup cache that a cancelled run leaves stale (found by the model)."""
    return _StaleTokenCache(make_sqlite(setup))  # type: ignore[return-value]


# --- state shared by every World of the process ----------------------------------------------

#: The author's "connection-level" cache of run rows, at module level: every World
#: of the process shares it.
_RUN_ROWS: dict[str, Any] = {}


class _SharedRuns:
    """``runs.get`` through a process-wide cache keyed by run id alone.

    The bug: two Worlds (two stores, or one store closed and a new one opened)
    holding a run of the same id see each other's rows.  One World alone never shows
    it, so each test of one World passes; which stale row a read sees depends on
    what ran before, so a failure may not come back when replayed.
    """

    def __init__(self, owner: _SharedRunCache) -> None:
        self.owner = owner
        self.inner = owner.inner.runs

    async def get(self, run_id: str) -> Any:
        cached = _RUN_ROWS.get(run_id) if isinstance(run_id, str) else None
        if cached is None:
            cached = await self.inner.get(run_id)
            if cached.status.terminal:
                _RUN_ROWS[run_id] = cached  # ended runs never change: cached for good
        return cached

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _SharedRunCache(Wrapped):
    def __init__(self, inner: World) -> None:
        super().__init__(inner)
        self.runs = _SharedRuns(self)  # type: ignore[assignment]


def make_shared_run_cache(setup: WorldSetup) -> World:
    """Ended runs cached by id across every World of the process."""
    return _SharedRunCache(make_sqlite(setup))  # type: ignore[return-value]


# --- a sanity check that an event never predates the one before it --------------------------


class _MonotonicEvents(_Events):
    """Refuses a write whose ``occurred_at`` is before the run's last event.

    The bug: an orchestrator that ran ahead records the time its workflow saw
    (``occurred_at``), which may be earlier than an event another writer committed
    meanwhile (a hook payload, a redelivered orchestrator's write); protocol.md
    allows it.  This author's "the log never goes back in time" check refuses it,
    so the runtime's write fails under the right interleaving only.
    """

    async def _check(self, run_id: str | None, kw: dict[str, Any]) -> None:
        at = kw.get("occurred_at")
        if at is None or run_id is None:
            return
        page = await self.inner.list(run_id, limit=1)
        last = page.snapshot.seq
        if last:
            previous = await self.inner.get(run_id, last)
            if at < previous.created_at:
                raise InvalidRequest(
                    f"occurred_at {at.isoformat()} is before #{last} of run {run_id!r} "
                    f"({previous.created_at.isoformat()}): a log never goes back in time"
                )

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        await self._check(run_id, kw)
        return await super().create(run_id, request, **kw)

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        await self._check(run_id, kw)
        return await super().create_batch(run_id, requests, **kw)


class _Monotonic(Wrapped):
    events_class = _MonotonicEvents


def make_monotonic_log(setup: WorldSetup) -> World:
    """Refuses an in-band write dated before the run's last event (the runtime's writes)."""
    return _Monotonic(make_sqlite(setup))  # type: ignore[return-value]


# --- a busy store surfaced as an error instead of retried -------------------------------------

#: Writes made by every World of the process (a stand-in for the load on a shared store).
_WRITES = [0]
#: One write in this many finds the store busy.
_BUSY_EVERY = 61


class _BusyEvents(_Events):
    """Every 61st write of the process fails with a ``WorldError`` ("database is locked").

    The bug: the store's busy signal (SQLITE_BUSY, a lock timeout, a serialization
    failure) is raised to the caller as a refusal instead of being retried inside
    the World, which protocol.md requires for anything but a definite refusal.  Which
    write hits it depends on everything that ran before in the process.
    """

    def _busy(self) -> None:
        _WRITES[0] += 1
        if _WRITES[0] % _BUSY_EVERY == 0:
            raise WorldError("database is locked: try again")

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        self._busy()
        return await super().create(run_id, request, **kw)

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        self._busy()
        return await super().create_batch(run_id, requests, **kw)


class _Busy(Wrapped):
    events_class = _BusyEvents


def make_busy_store(setup: WorldSetup) -> World:
    """Raises "database is locked" on every 61st write of the process, instead of retrying."""
    return _Busy(make_sqlite(setup))  # type: ignore[return-value]


#: Every planted World of this module, by name.
PLANTED: dict[str, Callable[[WorldSetup], World]] = {
    "stale-token-cache": make_stale_token_cache,
    "shared-run-cache": make_shared_run_cache,
    "busy-store": make_busy_store,
    "strict-resume-ids": make_strict_resume_ids,
    "monotonic-log": make_monotonic_log,
    "lenient-input": make_lenient_input,
}
