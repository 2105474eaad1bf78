"""A plausible third-party World with one subtle race, for ``durasim conformance`` to find.

``IndexedWorld`` keeps its log like the reference World but moves hook-resume
deduplication out of the log into a separate index, the way a store over a
key-value service with a secondary index often does: a ``hook_received`` with a
``resume_id`` first looks the id up in the index, and the index entry is written
after the event, each a round trip (an ``await``).  One at a time, a retried
resume finds its entry and collapses onto the first event, as the contract says
(docs/protocol.md: "the World collapses duplicates onto one event").  Two
resumes with one ``resume_id`` in flight at once both miss the index: both land,
and the workflow sees one payload twice.

Run ``durasim conformance examples.buggy_world:make`` from the repository root.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from durasim.worlds import (
    BatchResult,
    EventRequest,
    EventResult,
    EventType,
    MemoryWorld,
    WorldSetup,
)

__all__ = ["IndexedWorld", "make"]


class _IndexedEvents:
    """The events facet: resumes consult the index, and the index is written after the event."""

    def __init__(self, world: IndexedWorld, inner: Any) -> None:
        self._world = world
        self._inner = inner

    async def create(
        self, run_id: str | None, request: EventRequest, **options: Any
    ) -> EventResult:
        data = getattr(request, "data", None)  # a malformed request is the log's to refuse
        resume_id = data.get("resume_id") if isinstance(data, Mapping) else None
        if getattr(request, "type", None) is not EventType.HOOK_RECEIVED or resume_id is None:
            result: EventResult = await self._inner.create(run_id, request, **options)
            return result
        await self._world.round_trip()  # look the resume id up in the index
        result = await self._inner.create(run_id, request, **options)
        if result.allocated:
            await self._world.round_trip()  # write the index entry
            self._world.index(run_id, result.event)
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **options: Any
    ) -> BatchResult:
        result: BatchResult = await self._inner.create_batch(run_id, requests, **options)
        for event in result.events:
            self._world.index(run_id, event)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class IndexedWorld(MemoryWorld):
    """A MemoryWorld whose resume dedup lives in a lazily written index (the bug)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.events = _IndexedEvents(self, self.events)  # type: ignore[assignment]

    async def round_trip(self) -> None:
        """One request to the index service."""
        await asyncio.sleep(0)

    def index(self, run_id: str, event: Any) -> None:
        """Write the index entry of a recorded resume (the log itself keeps none)."""
        if event is not None and "resume_id" in event.data:
            state = self._runs[run_id].state
            state.resume_ids.setdefault(event.data["resume_id"], event)

    def _store(self, run_id: str, plan: Any) -> None:
        known = dict(self._runs[run_id].state.resume_ids) if run_id in self._runs else {}
        super()._store(run_id, plan)
        # The log keeps no resume index: only index() writes it, after the event.
        self._runs[run_id].state.resume_ids = known


def make(setup: WorldSetup) -> IndexedWorld:
    """The factory ``durasim conformance examples.buggy_world:make`` builds Worlds with."""
    return IndexedWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)
