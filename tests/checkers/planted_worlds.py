"""Worlds with one planted bug each, for the World model machine to find.

Each wraps a :class:`MemoryWorld` and forwards every facet to it, except where
the bug is planted.  The factories are classes so a test can build a fresh one
(their state, e.g. the "durable" stores, lives per factory) and read how many
examples they served and in which one the bug first fired.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from durasim.worlds import (
    BatchResult,
    Capabilities,
    Clock,
    EventRequest,
    EventResult,
    EventType,
    MemoryWorld,
    RunNotFound,
    WorldSetup,
)


def memory_world(setup: WorldSetup) -> MemoryWorld:
    """The reference itself (the machine must pass against it)."""
    return MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)


class Wrapped:
    """A World forwarding every facet to ``inner``; ``events`` goes through ``self``."""

    def __init__(self, inner: MemoryWorld, planted: Planted) -> None:
        self.inner = inner
        self.planted = planted
        self.runs = inner.runs
        self.steps = inner.steps
        self.hooks = inner.hooks
        self.waits = inner.waits
        self.queue = inner.queue
        self.streams = inner.streams
        self.events: Any = self

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    async def close(self) -> None:
        await self.inner.close()

    def _check(self) -> None:
        self.inner._check()

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        return await self.inner.events.create(run_id, request, **kw)

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        return await self.inner.events.create_batch(run_id, requests, **kw)

    async def get(self, run_id: str, seq: int) -> Any:
        return await self.inner.events.get(run_id, seq)

    async def list(self, run_id: str, **kw: Any) -> Any:
        return await self.inner.events.list(run_id, **kw)


@attrs.define
class Planted:
    """A factory of wrapped memory Worlds; counts examples and when the bug first fired."""

    examples: int = 0
    fired_in: int | None = None

    def fired(self) -> None:
        if self.fired_in is None:
            self.fired_in = self.examples

    def __call__(self, setup: WorldSetup) -> Wrapped:
        self.examples += 1
        return self.wrapper(memory_world(setup), self)

    wrapper: Any = Wrapped


class _SharesTokens(Wrapped):
    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if request.type is not EventType.HOOK_CREATED:
            return await self.inner.events.create(run_id, request, **kw)
        # The bug: the create does not see the token's live holder, so it never
        # conflicts; the holder stays active, and the token index points to the
        # newcomer.  (Restored if the create is refused for another reason.)
        token = request.data["token"]
        holder = self.inner._tokens.pop(token, None)
        try:
            result = await self.inner.events.create(run_id, request, **kw)
        finally:
            if holder is not None and token not in self.inner._tokens:
                self.inner._tokens[token] = holder
        if holder is not None and result.event is not None:
            self.planted.fired()
        return result


@attrs.define
class SharesHookTokens(Planted):
    """Lets a second live hook take a token another live hook holds."""

    wrapper: Any = _SharesTokens


class _AcceptsStale(Wrapped):
    async def _current(self, run_id: str, kw: dict[str, Any]) -> dict[str, Any]:
        if kw.get("in_band") and kw.get("expected_seq_in_band") is not None:
            try:
                page = await self.inner.events.list(run_id, limit=1)
            except RunNotFound:
                return kw
            if page.snapshot.seq_in_band != kw["expected_seq_in_band"]:
                # The bug: the fence is checked against whatever count is current.
                self.planted.fired()
                return kw | {"expected_seq_in_band": page.snapshot.seq_in_band}
        return kw

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        if run_id is not None:
            kw = await self._current(run_id, kw)
        return await self.inner.events.create(run_id, request, **kw)

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        kw = await self._current(run_id, kw)
        return await self.inner.events.create_batch(run_id, requests, **kw)


@attrs.define
class AcceptsStaleInBand(Planted):
    """Ignores ``expected_seq_in_band``: a superseded orchestrator's write lands."""

    wrapper: Any = _AcceptsStale


class _Durable(Wrapped):
    """Claims durability: the store outlives a close, kept by its factory per directory."""

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(self.inner.capabilities, durable=True)

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> EventResult:
        result = await self.inner.events.create(run_id, request, **kw)
        if result.allocated:
            assert isinstance(self.planted, DurableMemory)
            self.planted.last_written[self.inner] = result.run.run_id
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **kw: Any
    ) -> BatchResult:
        result = await self.inner.events.create_batch(run_id, requests, **kw)
        assert isinstance(self.planted, DurableMemory)
        self.planted.last_written[self.inner] = run_id
        return result


@attrs.define
class DurableMemory(Planted):
    """A memory World that survives restarts (the store is kept per directory).

    With ``reuse_position``, a restart loses the position counter of the run
    written last: it goes back one, so the next write to that run takes the
    last committed position again (a lost counter update after a crash).
    Without it, this is a correct durable World: the control.
    """

    reuse_position: bool = False
    stores: dict[Path, MemoryWorld] = attrs.field(factory=dict)
    last_written: dict[MemoryWorld, str] = attrs.field(factory=dict)

    def __call__(self, setup: WorldSetup) -> Wrapped:
        inner = self.stores.get(setup.directory)
        if inner is None:
            self.examples += 1
            inner = self.stores[setup.directory] = memory_world(setup)
        elif self.reuse_position and inner in self.last_written:
            state = inner._runs[self.last_written.pop(inner)].state
            state.seq -= 1
            self.fired()
        return _Durable(inner, self)


@attrs.define
class ReusesPositionAfterCrash(DurableMemory):
    """:class:`DurableMemory` with the bug planted."""

    reuse_position: bool = True
