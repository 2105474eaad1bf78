"""The in-memory World's queue and streams facets (docs/protocol.md §11, §12)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from ._build import copier
from ._checks import (
    check_chunks,
    check_delay,
    check_limit,
    check_message,
    check_queue_name,
    check_queue_prefix,
    clamp_start,
)
from ._entities import Chunk, ChunkPage, Delivery, Message, StreamInfo
from ._errors import LeaseLost, StreamClosed
from ._events import check_stream_name
from ._facet import WorldFacet
from ._time import from_micros, to_micros

#: Queue updates may come from a worker's heartbeat thread too (lease renewals).  One
#: lock for every MemoryWorld: a World stays picklable, and holders never wait long.
_QUEUE_LOCK = threading.Lock()

if TYPE_CHECKING:
    from ._memory import MemoryWorld  # noqa: F401 -- named as a string in _Facet's base

__all__ = [
    "NEVER",
    "MemoryLeaseRenewer",
    "MemoryQueue",
    "MemoryStreams",
    "QueueSlot",
    "StreamBuffer",
]


#: ``claimable_at()`` of a slot whose lease never expires by itself: never.
NEVER = 2**63


@attrs.define(eq=False)
class QueueSlot:
    """One unacked message of an in-memory queue and its lease.

    Shared by :class:`MemoryQueue` and the simulator's queue.  Times are
    microseconds since the Unix epoch (the simulator asks for due slots at every
    World call; integers compare fast).
    """

    message: Message
    order: int
    lease_id: str | None = None
    #: When the lease ends (micros); ``None`` while leased: it does not end by itself.
    lease_expires_at: int | None = None
    #: Held by a live simulated delivery, which renews it for free: the run stays
    #: gated while it lives (only the simulator's queue sets this).
    lease_live: bool = False
    #: ``message.available_at`` in micros (kept by the queue whenever it changes the message).
    available: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.available = to_micros(self.message.available_at)

    def set_message(self, message: Message) -> None:
        """Replace the message (a new attempt or due time), keeping ``available`` true."""
        self.message = message
        self.available = to_micros(message.available_at)

    def claimable_at(self) -> int:
        """When the message may be claimed (micros), ignoring the one-delivery-per-run rule."""
        if self.lease_id is not None:
            if self.lease_live or self.lease_expires_at is None:
                return NEVER
            return self.lease_expires_at
        return self.available

    def gates_run(self, now: int) -> bool:
        """Whether this slot's lease keeps its run's other orchestrator messages waiting."""
        return (
            self.message.orchestrator
            and self.lease_id is not None
            and (
                self.lease_live
                or (self.lease_expires_at is not None and self.lease_expires_at > now)
            )
        )


@attrs.define
class StreamBuffer:
    chunks: list[bytes] = attrs.field(factory=list)
    closed: bool = False


#: ``attrs.evolve(message, attempt=...)`` without its generic loop (once a claim).
_redelivered = copier(Message, "attempt")


class _Facet(WorldFacet["MemoryWorld"]):
    """A facet of the MemoryWorld (:mod:`._facet`: it holds its World weakly).

    ``WorldFacet.__init__`` itself, typed by the base's parameter: no ``__init__`` of
    its own to call through ``super()`` (seven facets a World, one World a Sim).
    """


class MemoryQueue(_Facet):
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
        w = self._w
        check_queue_name(queue_name)
        check_message(payload, run_id, orchestrator, idempotency_key)
        delay = check_delay(delay)
        if idempotency_key is not None and idempotency_key in w._idempotency:
            return w._idempotency[idempotency_key]
        now = w._clock.now()
        message = Message(
            message_id=w._ids.new_id("msg"),
            queue_name=queue_name,
            payload=payload,
            available_at=now + timedelta(seconds=delay),
            enqueued_at=now,
            run_id=run_id,
            orchestrator=orchestrator,
            idempotency_key=idempotency_key,
        )
        w._queue_order += 1
        w._queue[message.message_id] = QueueSlot(message=message, order=w._queue_order)
        if idempotency_key is not None:
            w._idempotency[idempotency_key] = message.message_id
        return message.message_id

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        with _QUEUE_LOCK:  # a heartbeat thread may extend meanwhile
            w = self._w
            lease = check_delay(lease_seconds, what="lease_seconds")
            check_queue_prefix(queue_prefix)
            moment = w._clock.now()
            now = to_micros(moment)
            busy = {s.message.run_id for s in w._queue.values() if s.gates_run(now)}
            due = sorted(
                (
                    s
                    for s in w._queue.values()
                    if s.message.queue_name.startswith(queue_prefix) and s.claimable_at() <= now
                ),
                key=lambda s: (s.claimable_at(), s.order),
            )
            for slot in due:
                message = slot.message
                if message.orchestrator and message.run_id in busy:
                    continue
                if w._max_deliveries is not None and message.attempt >= w._max_deliveries:
                    self._dead_letter(slot)
                    continue
                message = _redelivered(message, message.attempt + 1)
                slot.set_message(message)
                slot.lease_id = w._ids.new_id("lease")
                expires = moment + timedelta(seconds=lease)
                slot.lease_expires_at = to_micros(expires)
                return Delivery(message=message, lease_id=slot.lease_id, lease_expires_at=expires)
            return None

    def _dead_letter(self, slot: QueueSlot) -> None:
        w = self._w
        del w._queue[slot.message.message_id]
        if slot.message.idempotency_key is not None:
            w._idempotency.pop(slot.message.idempotency_key, None)
        w._dead.append(slot.message)

    def _held(self, delivery: Delivery) -> QueueSlot:
        slot = self._w._queue.get(delivery.message_id)
        if slot is None or slot.lease_id != delivery.lease_id:
            raise LeaseLost(
                f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
                "held (acked, or re-claimed after it expired); the message is not yours to settle",
                message_id=delivery.message_id,
            )
        return slot

    async def ack(self, delivery: Delivery) -> None:
        with _QUEUE_LOCK:  # a heartbeat thread may extend meanwhile
            slot = self._held(delivery)
            del self._w._queue[delivery.message_id]
            if slot.message.idempotency_key is not None:
                self._w._idempotency.pop(slot.message.idempotency_key, None)

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        with _QUEUE_LOCK:  # a heartbeat thread may extend meanwhile
            slot = self._held(delivery)
            delay = check_delay(delay)
            slot.lease_id = None
            slot.lease_expires_at = None
            slot.set_message(
                attrs.evolve(
                    slot.message, available_at=self._w._clock.now() + timedelta(seconds=delay)
                )
            )

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        with _QUEUE_LOCK:  # a heartbeat thread may extend meanwhile
            slot = self._held(delivery)
            lease = check_delay(lease_seconds, what="lease_seconds")
            expires = self._w._clock.now() + timedelta(seconds=lease)
            slot.lease_expires_at = to_micros(expires)
            return attrs.evolve(delivery, lease_expires_at=expires)

    def lease_renewer(self) -> MemoryLeaseRenewer:
        """An extender for another thread (the World's state is updated under its lock)."""
        return MemoryLeaseRenewer(self)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        check_queue_prefix(queue_prefix)
        times = [
            s.claimable_at()
            for s in self._w._queue.values()
            if s.message.queue_name.startswith(queue_prefix)
        ]
        return None if not times else from_micros(min(times))

    async def messages(self) -> tuple[Message, ...]:
        slots = sorted(self._w._queue.values(), key=lambda s: s.order)
        return tuple(s.message for s in slots)

    async def dead_letters(self) -> tuple[Message, ...]:
        return tuple(self._w._dead)


class MemoryLeaseRenewer:
    """Renews leases from another thread: check and update under the queue's lock."""

    def __init__(self, queue: MemoryQueue) -> None:
        self._queue = queue

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        return await self._queue.extend(delivery, lease_seconds=lease_seconds)

    async def close(self) -> None:
        pass


class MemoryStreams(_Facet):
    def _stream(self, run_id: str, name: str, *, create: bool) -> StreamBuffer | None:
        check_stream_name(name)
        self._w._record(run_id)
        key = (run_id, name)
        if create:
            return self._w._streams.setdefault(key, StreamBuffer())
        return self._w._streams.get(key)

    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = check_chunks(chunks)
        stream = self._stream(run_id, name, create=True)
        assert stream is not None
        if stream.closed:
            raise StreamClosed(
                f"stream {name!r} of run {run_id!r} is closed; open a new stream name",
                run_id=run_id,
            )
        stream.chunks.extend(batch)
        return len(stream.chunks) - 1

    async def close(self, run_id: str, name: str) -> None:
        stream = self._stream(run_id, name, create=True)
        assert stream is not None
        stream.closed = True

    async def read(self, run_id: str, name: str, *, start: int = 0, limit: int = 100) -> ChunkPage:
        check_limit(limit)
        stream = self._stream(run_id, name, create=False) or StreamBuffer()
        first = clamp_start(start, len(stream.chunks))
        picked = stream.chunks[first : first + limit]
        return ChunkPage(
            chunks=tuple(Chunk(index=first + i, data=d) for i, d in enumerate(picked)),
            next_index=first + len(picked),
            closed=stream.closed,
            has_more=first + len(picked) < len(stream.chunks),
        )

    async def info(self, run_id: str, name: str) -> StreamInfo:
        stream = self._stream(run_id, name, create=False) or StreamBuffer()
        return StreamInfo(tail_index=len(stream.chunks) - 1, closed=stream.closed)

    async def list(self, run_id: str) -> tuple[str, ...]:
        self._w._record(run_id)
        return tuple(sorted(name for (rid, name) in self._w._streams if rid == run_id))
