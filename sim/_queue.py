"""The simulation's recording queue.

It keeps the queue contract of docs/protocol.md §11 (leases, stable message
ids, idempotency keys, delays, one orchestrator delivery per run), so a real
:class:`~durasim.runtime.Worker` could be pointed at it, and adds what a
scheduler and a fault injector need and no World queue offers: claim a chosen
message, drop one, delay one, expire a lease, and mark a lease *renewed*.  A
simulated delivery's lease is renewed by the runtime's own lease keeper as
virtual time moves (``_leases.py``); while its renewal is healthy nothing can
claim the message, so the queue treats the lease as held whatever its expiry
(the clock need not stop at every renewal).  Once renewal stops (a crash, a
stalled or failing heartbeat) the lease expires at its last renewal plus its
length, as in any World.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from operator import attrgetter

import attrs

from durasim.worlds import Delivery, LeaseLost, Message
from durasim.worlds._build import builder, copier
from durasim.worlds._checks import check_delay, check_message, check_queue_name
from durasim.worlds._memory_queue import NEVER, QueueSlot
from durasim.worlds._time import IdSource

from ._clock import SimClock
from ._errors import QueueContractBroken

__all__ = ["SimQueue"]


class SimQueue:
    """A :class:`~durasim.worlds.QueueFacet` on the virtual clock.

    Args:
        clock: the virtual clock.
        ids: where message and lease ids come from.
    """

    #: A breach of the World's queue contract (only a mirror of the World's own queue,
    #: ``_world_queue.py``, finds one).
    broken: QueueContractBroken | None = None

    def __init__(self, clock: SimClock, ids: IdSource) -> None:
        self._clock = clock
        self._ids = ids
        self._slots: dict[str, QueueSlot] = {}
        self._keys: dict[str, str] = {}
        self._order = 0
        self._dead: list[Message] = []
        #: Called after every enqueue (the scheduler's wake-up).
        self.on_change: Callable[[], None] | None = None
        # The scheduler asks claimable() and next_due_micros() at every point of
        # every World call; the answers change only with the slots or the clock.
        self._version = 0
        self._memo: dict[tuple[object, ...], object] = {}
        self._memo_at = (0, -1)  # (version, clock micros) the memo holds answers for
        self._due: tuple[int, int, int | None] = (0, -1, None)  # next_due_micros() memo
        self._due_slots: tuple[int, int, tuple[QueueSlot, ...]] = (0, -1, ())  # claimable()'s

    # --- the QueueFacet contract -------------------------------------------

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
        """Record a message (see :class:`~durasim.worlds.QueueFacet`)."""
        return self.put(
            queue_name,
            payload,
            run_id=run_id,
            orchestrator=orchestrator,
            idempotency_key=idempotency_key,
            delay=delay,
        )

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        """Lease the next due message (a lease that expires, as in any World)."""
        for slot in self.claimable(queue_prefix=queue_prefix):
            return self.take(slot.message.message_id, lease_seconds=lease_seconds, live=False)
        return None

    async def ack(self, delivery: Delivery) -> None:
        """Delete the message; :class:`LeaseLost` if another claim took it."""
        self.settle(delivery)

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        """Give the message back, due after ``delay`` seconds."""
        self.settle(delivery, release_after=delay)

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        """Renew the lease from now."""
        slot = self._held(delivery)
        slot.lease_expires_at = self._clock.micros + round(check_delay(lease_seconds) * 1_000_000)
        if not slot.lease_live:  # a live lease's expiry changes no answer
            self._changed()
        at = self._clock.now() + timedelta(seconds=lease_seconds)
        return attrs.evolve(delivery, lease_expires_at=at)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        """When the earliest message becomes claimable."""
        micros = self.next_due_micros(queue_prefix=queue_prefix)
        if micros is None:
            return None
        return self._clock.now() + timedelta(microseconds=micros - self._clock.micros)

    async def messages(self) -> tuple[Message, ...]:
        """Every unacked message in enqueue order."""
        return self.pending()

    async def dead_letters(self) -> tuple[Message, ...]:
        """Messages given up on (the simulator dead-letters none by itself)."""
        return tuple(self._dead)

    # --- what the scheduler and the faults use ------------------------------

    def put(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        idempotency_key: str | None = None,
        delay: float = 0.0,
        message_id: str | None = None,
    ) -> str:
        """Enqueue synchronously; returns the message id (``message_id``: the one to use)."""
        check_queue_name(queue_name)
        check_message(payload, run_id, orchestrator, idempotency_key)
        delay = check_delay(delay)
        if idempotency_key is not None and idempotency_key in self._keys:
            return self._keys[idempotency_key]
        now = self._clock.now()
        message = _build_message(
            message_id=message_id or self._ids.new_id("msg"),
            queue_name=queue_name,
            payload=payload,
            available_at=now + timedelta(seconds=delay),
            enqueued_at=now,
            run_id=run_id,
            orchestrator=orchestrator,
            idempotency_key=idempotency_key,
        )
        self._order += 1
        self._slots[message.message_id] = QueueSlot(message=message, order=self._order)
        self._changed()
        if idempotency_key is not None:
            self._keys[idempotency_key] = message.message_id
        if self.on_change is not None:
            self.on_change()
        return message.message_id

    def pending(self) -> tuple[Message, ...]:
        """Every unacked message in enqueue order."""
        if not self._slots:
            return ()
        return tuple([s.message for s in sorted(self._slots.values(), key=_order)])

    def slot(self, message_id: str) -> QueueSlot | None:
        """The message's slot, if it is still queued."""
        return self._slots.get(message_id)

    def slots(self) -> list[QueueSlot]:
        """Every slot, in enqueue order."""
        return sorted(self._slots.values(), key=_order)

    def _busy_runs(self, now: int) -> set[str | None]:
        return {s.message.run_id for s in self._slots.values() if s.gates_run(now)}

    def _changed(self) -> None:
        self._version += 1

    def _answers(self) -> dict[tuple[object, ...], object]:
        at = (self._version, self._clock.micros)
        if at != self._memo_at:
            self._memo.clear()
            self._memo_at = at
        return self._memo

    def claimable(
        self, *, queue_prefix: str = "", ignore_leases: bool = False
    ) -> tuple[QueueSlot, ...]:
        """Slots claimable now, in claim order (due time, then enqueue order)."""
        if not queue_prefix and not ignore_leases:
            # The scheduler's question at every choice: one memo of its own (the
            # answers' memo's rule: good while the slots and the clock stay put).
            version, micros, slots = self._due_slots
            if version == self._version and micros == self._clock._micros:
                return slots
            slots = self._claimable("", False)
            self._due_slots = (self._version, self._clock._micros, slots)
            return slots
        answers, key = self._answers(), ("claimable", queue_prefix, ignore_leases)
        if key not in answers:
            answers[key] = self._claimable(queue_prefix, ignore_leases)
        return answers[key]  # type: ignore[return-value]

    def _claimable(self, queue_prefix: str, ignore_leases: bool) -> tuple[QueueSlot, ...]:
        now = self._clock.micros
        busy = set() if ignore_leases else self._busy_runs(now)
        due = [
            s
            for s in self._slots.values()
            if s.message.queue_name.startswith(queue_prefix) and s.claimable_at() <= now
        ]
        due.sort(key=lambda s: (s.claimable_at(), s.order))
        return tuple(s for s in due if not (s.message.orchestrator and s.message.run_id in busy))

    def next_due_micros(self, *, queue_prefix: str = "") -> int | None:
        """The earliest time (micros) a message becomes claimable, per-run rule included.

        An orchestrator message of a run whose orchestrator lease is held is due
        only once that lease expires (never, while it is live): a due time in
        the past that the gate keeps closed would make the clock stand still.
        """
        if not queue_prefix:
            # The scheduler's question at every interception point: one memo of its own.
            version, micros, due = self._due
            if version == self._version and micros == self._clock._micros:
                return due
            due = self._next_due("")
            self._due = (self._version, self._clock._micros, due)
            return due
        answers, key = self._answers(), ("next_due", queue_prefix)
        if key not in answers:
            answers[key] = self._next_due(queue_prefix)
        return answers[key]  # type: ignore[return-value]

    def _next_due(self, queue_prefix: str) -> int | None:
        now = self._clock.micros
        gates: dict[str, int] = {}
        for s in self._slots.values():
            if s.message.orchestrator and s.message.run_id is not None and s.lease_id is not None:
                if s.lease_live:
                    opens = NEVER
                elif s.lease_expires_at is not None and s.lease_expires_at > now:
                    opens = s.lease_expires_at
                else:
                    continue
                gates[s.message.run_id] = max(gates.get(s.message.run_id, 0), opens)
        times = []
        for s in self._slots.values():
            if not s.message.queue_name.startswith(queue_prefix):
                continue
            at = s.claimable_at()
            if s.message.orchestrator and s.message.run_id in gates:  # its own lease too
                at = max(at, gates[s.message.run_id])
            times.append(at)
        times = [t for t in times if t < NEVER]
        return min(times, default=None)

    def take(self, message_id: str, *, lease_seconds: float = 30.0, live: bool = True) -> Delivery:
        """Claim this message now (attempt + 1, a fresh lease)."""
        slot = self._slots[message_id]
        message = slot.message
        slot.set_message(_with_attempt(message, message.attempt + 1))
        slot.lease_id = self._ids.new_id("lease")
        slot.lease_live = live
        slot.lease_expires_at = self._clock.micros + round(lease_seconds * 1_000_000)
        self._changed()
        at = self._clock.now() + timedelta(seconds=lease_seconds)
        return _build_delivery(message=slot.message, lease_id=slot.lease_id, lease_expires_at=at)

    def expire(self, message_id: str, *, after: float = 0.0) -> None:
        """End a lease: the message is claimable again ``after`` seconds from now."""
        slot = self._slots.get(message_id)
        if slot is None or slot.lease_id is None:
            return
        slot.lease_live = False
        slot.lease_expires_at = self._clock.micros + round(after * 1_000_000)
        self._changed()

    def renewing(self, delivery: Delivery, *, live: bool) -> bool:
        """Mark ``delivery``'s lease renewed on time (``live``) or not; False if it is not held.

        A lease no longer renewed expires at its last claim or renewal plus its
        length; one renewed again (its heartbeat resumed before anyone claimed
        the message) is held again.
        """
        slot = self._slots.get(delivery.message_id)
        if slot is None or slot.lease_id != delivery.lease_id:
            return False
        if slot.lease_live != live:
            slot.lease_live = live
            self._changed()
        return True

    def open_gate(self, message_id: str) -> None:
        """Stop this lease from gating its run, without making the message claimable."""
        slot = self._slots.get(message_id)
        if slot is not None and slot.lease_id is not None:
            slot.lease_live = False
            slot.lease_expires_at = None
            self._changed()

    def drop(self, message_id: str) -> Message | None:
        """Lose a message, as a faulty queue would; returns it."""
        return self._remove(message_id)

    def _remove(self, message_id: str) -> Message | None:
        slot = self._slots.pop(message_id, None)
        if slot is None:
            return None
        self._changed()
        if slot.message.idempotency_key is not None:
            self._keys.pop(slot.message.idempotency_key, None)
        return slot.message

    def delay(self, message_id: str, seconds: float) -> None:
        """Push a pending message's due time ``seconds`` later."""
        slot = self._slots[message_id]
        slot.set_message(
            attrs.evolve(
                slot.message, available_at=slot.message.available_at + timedelta(seconds=seconds)
            )
        )
        self._changed()

    # --- what the deliveries await (the World's queue answers, with queue="world") --

    async def claimed(self, delivery: Delivery) -> None:
        """A delivery starts on ``delivery`` (taken by :meth:`take`): nothing more to do here."""

    async def put_async(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        delay: float = 0.0,
    ) -> str:
        """The simulator's own enqueue (a run's wake-up after a settlement)."""
        return self.put(queue_name, payload, run_id=run_id, orchestrator=orchestrator, delay=delay)

    async def settle_async(self, delivery: Delivery, *, release_after: float | None) -> None:
        """Ack or release, as the delivery's worker does once the engine settled."""
        self.settle(delivery, release_after=release_after)

    def _held(self, delivery: Delivery) -> QueueSlot:
        slot = self._slots.get(delivery.message_id)
        if slot is None or slot.lease_id != delivery.lease_id:
            raise LeaseLost(
                f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
                "held (acked, or re-claimed after it expired); the message is not yours to settle",
                message_id=delivery.message_id,
            )
        return slot

    def settle(self, delivery: Delivery, *, release_after: float | None = None) -> None:
        """Ack (``release_after=None``) or release the delivery's message."""
        slot = self._held(delivery)
        if release_after is None:
            self._remove(delivery.message_id)
            return
        slot.lease_id = None
        slot.lease_live = False
        slot.lease_expires_at = None
        available = self._clock.now() + timedelta(seconds=check_delay(release_after))
        slot.set_message(_with_available_at(slot.message, available))
        self._changed()
        if self.on_change is not None:
            self.on_change()


#: ``attrs.evolve(message, attempt=...)`` and ``(..., available_at=...)``, made once
#: (a claim and a release, every delivery).
_with_attempt = copier(Message, "attempt")
_with_available_at = copier(Message, "available_at")
#: ``Message(...)`` and ``Delivery(...)`` without ``__init__`` (plain fields, no validator;
#: every field given: see worlds/_build.py): an enqueue and a claim, every delivery.
_build_message = builder(Message)
_build_delivery = builder(Delivery)


#: A slot's enqueue order (a sort key).
_order = attrgetter("order")
