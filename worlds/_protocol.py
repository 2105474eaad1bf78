"""The World contract as small protocols, one per facet.

A World is seven facets plus its capabilities.  Every facet method is async:
each call is a point where the simulator can intercept, hold, fail or reorder.
docs/protocol.md is the normative text; these docstrings summarize it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from ._entities import (
    BatchResult,
    Capabilities,
    ChunkPage,
    Delivery,
    EventPage,
    EventResult,
    HookRecord,
    Message,
    RunPage,
    RunRecord,
    RunStatus,
    StepRecord,
    StreamInfo,
    WaitRecord,
)
from ._events import Event, EventRequest
from ._time import Clock

__all__ = [
    "EventsFacet",
    "HooksFacet",
    "QueueFacet",
    "RunsFacet",
    "StepsFacet",
    "StreamsFacet",
    "WaitsFacet",
    "World",
]


class RunsFacet(Protocol):
    """Read runs (folds of their logs)."""

    async def get(self, run_id: str) -> RunRecord:
        """The run; :class:`RunNotFound` if absent."""
        ...

    async def list(
        self,
        *,
        workflow_name: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs newest first (``created_at``, then ``run_id``, descending), filtered.

        An empty ``status`` sequence matches nothing.  Pass the page's ``cursor``
        back to get the next page; ``None`` means there is no next page.
        """
        ...


class StepsFacet(Protocol):
    """Read a run's steps."""

    async def get(self, run_id: str, step_id: str) -> StepRecord:
        """The step; :class:`StepNotFound` (or :class:`RunNotFound`) if absent."""
        ...

    async def list(self, run_id: str) -> tuple[StepRecord, ...]:
        """The run's steps in creation order (``RunNotFound`` if the run is absent)."""
        ...


class EventsFacet(Protocol):
    """Append to and read a run's log."""

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
        """Append one event at the next free position, or refuse with a typed error.

        ``run_id`` may be ``None`` only for ``run_created`` (the World mints one).
        ``in_band`` marks an orchestrator write, which must carry the
        ``expected_seq_in_band`` of the snapshot it loaded; a stale one raises
        :class:`InBandSuperseded` and allocates nothing.  ``seen_seq`` is how
        many events the writer has seen: the result's ``unseen`` holds the events
        after it that precede the new one (bump and report).  ``expected_seq``
        makes the write strict instead: refused with :class:`StaleView` unless the
        log holds exactly that many events.  ``occurred_at`` (in-band only) is
        recorded as the events' ``created_at`` instead of the World's clock.
        """
        ...

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
        """Append every request at consecutive positions, atomically, or none of them."""
        ...

    async def get(self, run_id: str, seq: int) -> Event:
        """The event at position ``seq``; :class:`EventNotFound` if there is none."""
        ...

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        """Events with ``seq > after_seq`` in position order, at most ``limit``.

        The page's snapshot is read before its events, so ``snapshot.seq`` is at
        most the last position the page could show.
        """
        ...


class HooksFacet(Protocol):
    """Read hooks."""

    async def get(self, run_id: str, hook_id: str) -> HookRecord:
        """The hook in any status; :class:`HookNotFound` if it never existed."""
        ...

    async def get_by_token(self, token: str) -> HookRecord:
        """The ACTIVE hook holding ``token``; :class:`HookNotFound` if none does."""
        ...

    async def list(self, run_id: str) -> tuple[HookRecord, ...]:
        """The run's hooks in creation order, any status."""
        ...


class WaitsFacet(Protocol):
    """Read waits (durable sleeps)."""

    async def get(self, run_id: str, wait_id: str) -> WaitRecord:
        """The wait; :class:`WaitNotFound` if absent."""
        ...

    async def list(self, run_id: str) -> tuple[WaitRecord, ...]:
        """The run's waits in creation order."""
        ...


class QueueFacet(Protocol):
    """At-least-once, pull-based message queue with leases."""

    async def enqueue(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        idempotency_key: str | None = None,
        delay: float = 0.0,
    ) -> str:
        """Queue a message; returns its id.

        With ``idempotency_key``, a second enqueue while the first message is
        still pending or leased returns the first message's id and queues
        nothing.  ``orchestrator=True`` (with ``run_id``) marks a delivery of the
        run's orchestrator: at most one such delivery per run is leased at a time.
        """
        ...

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        """Lease the next due message whose queue name starts with ``queue_prefix``.

        Order: ``available_at``, then enqueue order.  The attempt count grows by
        one per claim; the message id never changes.  ``None`` if nothing is due.
        """
        ...

    async def ack(self, delivery: Delivery) -> None:
        """Done: delete the message.

        A lease holds the message until another claim takes it (which it may
        once the lease has expired); :class:`LeaseLost` if that happened.
        """
        ...

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        """Give the message back, due again after ``delay`` seconds (same message id).

        :class:`LeaseLost` if another claim took the message.
        """
        ...

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        """Renew the lease from now; :class:`LeaseLost` if another claim took the message."""
        ...

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        """When the earliest message (pending, or leased until expiry) becomes claimable."""
        ...

    async def messages(self) -> tuple[Message, ...]:
        """Every message not yet acked, in enqueue order (for inspection and checks)."""
        ...

    async def dead_letters(self) -> tuple[Message, ...]:
        """Messages that exhausted the World's ``max_deliveries``."""
        ...


class StreamsFacet(Protocol):
    """Per-run named chunk streams (not part of the log)."""

    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        """Append one chunk or several, in order; returns the index of the last one."""
        ...

    async def close(self, run_id: str, name: str) -> None:
        """Close the stream (idempotent); later writes raise :class:`StreamClosed`."""
        ...

    async def read(self, run_id: str, name: str, *, start: int = 0, limit: int = 100) -> ChunkPage:
        """Chunks from index ``start`` (negative: from the end, clamped to 0)."""
        ...

    async def info(self, run_id: str, name: str) -> StreamInfo:
        """The stream's tail index (-1 if empty) and whether it is closed."""
        ...

    async def list(self, run_id: str) -> tuple[str, ...]:
        """The run's stream names, sorted."""
        ...


class World(Protocol):
    """A storage and queue backend.  See docs/protocol.md."""

    @property
    def runs(self) -> RunsFacet:
        """Run reads."""
        ...

    @property
    def steps(self) -> StepsFacet:
        """Step reads."""
        ...

    @property
    def events(self) -> EventsFacet:
        """The log."""
        ...

    @property
    def hooks(self) -> HooksFacet:
        """Hook reads."""
        ...

    @property
    def waits(self) -> WaitsFacet:
        """Wait reads."""
        ...

    @property
    def queue(self) -> QueueFacet:
        """The message queue."""
        ...

    @property
    def streams(self) -> StreamsFacet:
        """Chunk streams."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What this World supports."""
        ...

    @property
    def clock(self) -> Clock:
        """The clock every timestamp of this World comes from."""
        ...

    async def close(self) -> None:
        """Release the World's resources; idempotent."""
        ...
