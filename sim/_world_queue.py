"""The World's own queue under the simulated runtime (``Sim(queue="world")``).

:class:`WorldQueue` is the simulator's recording queue (the *mirror*: what the
queue was asked, kept to docs/protocol.md section 11 by construction) that also
asks the World under test everything, at the same virtual time and in the same
order, and checks each answer (``_queue_checks.py``):

* the runtime's ``enqueue`` (an intercepted World call, as every other) goes to
  the World, and the mirror records the message under the World's id;
* a delivery the scheduler launches claims from the World first thing
  (``claim(queue_prefix=<its queue>)``): the scheduler offers, per queue, only
  the message the World's claim order gives (due time, then enqueue order);
* a delivery's ``ack`` / ``release`` go to the World as intercepted calls
  (crash and failure points around them); a holder whose message was re-claimed
  after its lease lapsed must be refused (``LeaseLost``) by the World too;
* the runtime's lease keeper renews leases as the clock moves; the World's
  lease is extended to match before anyone else asks the World's queue
  (a healthy lease never expires there; a stopped one expires when the mirror's
  does);
* after every change, the World's unacked messages and ``next_due()`` are
  compared with the mirror's.

The first contradiction raises :class:`QueueContractBroken` (and halts the
simulation); :meth:`Sim.run_sync` raises it at the end.  Faults that only a
simulated queue can inject (dropping or delaying a queued message) do not apply.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from durasim.worlds import Delivery, LeaseLost, Message, QueueFacet
from durasim.worlds._memory_queue import QueueSlot
from durasim.worlds._time import IdSource, to_micros

from ._clock import SimClock
from ._errors import QueueContractBroken, QueueModeUnsupported
from ._queue import SimQueue
from ._queue_checks import (
    check_claim,
    check_enqueue,
    check_extend,
    check_messages,
    check_next_due,
    describe_slot,
)

__all__ = ["QUEUE_MODES", "WorldQueue"]

#: ``Sim(queue=...)``: the simulator's own queue, or the World's under test.
QUEUE_MODES = ("sim", "world")

#: How many times a claim that found another message of the same due time gives it back.
_REORDERS = 8


class WorldQueue(SimQueue):
    """The recording queue as a mirror of the World's own queue (see the module docstring).

    Args:
        clock: the virtual clock (the World's).
        ids: the id source for the mirror's lease ids.
        world: the World's queue facet.
        lease_seconds: how long a delivery's lease lasts without renewal.
    """

    def __init__(
        self, clock: SimClock, ids: IdSource, world: QueueFacet, *, lease_seconds: float
    ) -> None:
        super().__init__(clock, ids)
        self.world = world
        self.lease_seconds = lease_seconds
        #: The World's delivery for each lease the mirror granted (by mirror lease id).
        self._granted: dict[str, Delivery] = {}
        #: The first breach found (raised again by ``Sim.run_sync``).
        self.broken: QueueContractBroken | None = None
        #: Told the first breach (the scheduler halts).
        self.on_broken: Callable[[QueueContractBroken], None] | None = None

    # --- breaches ----------------------------------------------------------------------

    def _breach(self, found: QueueContractBroken | None) -> None:
        if found is None:
            return
        if self.broken is None:
            self.broken = found
            if self.on_broken is not None:
                self.on_broken(found)
        raise found

    # --- the runtime's calls ---------------------------------------------------------

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
        """Enqueue in the World; the mirror records the message under the World's id."""
        await self.sync_leases()
        returned = await self.world.enqueue(
            queue_name,
            payload,
            run_id=run_id,
            orchestrator=orchestrator,
            idempotency_key=idempotency_key,
            delay=delay,
        )
        known = None if idempotency_key is None else self._keys.get(idempotency_key)
        state = describe_slot(self.slot(known), self._clock.micros) if known else ""
        self._breach(
            check_enqueue(
                returned,
                key=idempotency_key,
                known=known,
                state=state,
                exists=returned in self._slots,
            )
        )
        if known is None:
            self.put(
                queue_name,
                payload,
                run_id=run_id,
                orchestrator=orchestrator,
                idempotency_key=idempotency_key,
                delay=delay,
                message_id=returned,
            )
        await self.compare(f"enqueue({queue_name!r}, delay={delay:g}) of {returned}")
        return returned

    async def put_async(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        delay: float = 0.0,
    ) -> str:
        """The simulator's own enqueue goes to the World as well."""
        return await self.enqueue(
            queue_name, payload, run_id=run_id, orchestrator=orchestrator, delay=delay
        )

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        """The World's ``next_due`` (checked against the mirror when unfiltered)."""
        await self.sync_leases()
        answer = await self.world.next_due(queue_prefix=queue_prefix)
        if not queue_prefix:
            self._breach(
                check_next_due(answer, self.slots(), self._world_leases(), self._clock.micros)
            )
        return answer

    async def messages(self) -> tuple[Message, ...]:
        """The World's unacked messages."""
        return await self.world.messages()

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        """Refused: the simulator is the only worker of the World's queue here."""
        raise QueueModeUnsupported(
            "with queue='world' the simulator claims from the World's queue itself"
        )

    # --- the deliveries -----------------------------------------------------------------

    def _claimable(self, queue_prefix: str, ignore_leases: bool) -> tuple[QueueSlot, ...]:
        slots = super()._claimable(queue_prefix, ignore_leases)
        if ignore_leases:
            return slots
        # Per queue, only the message the World's claim(queue_prefix=<its name>) gives.
        kept = []
        for index, slot in enumerate(slots):
            name = slot.message.queue_name
            if any(t.message.queue_name.startswith(name) for t in slots[:index]):
                continue
            kept.append(slot)
        return tuple(kept)

    def world_next(self, message_id: str) -> bool:
        """Whether the World's claim of this message's queue gives this message now."""
        return any(s.message.message_id == message_id for s in self.claimable())

    async def claimed(self, delivery: Delivery) -> None:
        """Claim ``delivery``'s message from the World (the mirror took it already)."""
        for _ in range(_REORDERS):
            await self.sync_leases()
            slot = self._slots.get(delivery.message_id)
            if slot is None or slot.lease_id != delivery.lease_id:
                return  # re-claimed or settled meanwhile: nothing of ours to claim
            got = await self.world.claim(
                queue_prefix=delivery.message.queue_name, lease_seconds=self.lease_seconds
            )
            other = None if got is None else self._slots.get(got.message_id)
            if (
                got is not None
                and got.message_id != delivery.message_id
                and other is not None
                and other.claimable_at() <= self._clock.micros
            ):
                # Another message due at the same moment came first (it was settled
                # or enqueued after the scheduler chose): give it back in both queues.
                self.take(got.message_id, lease_seconds=self.lease_seconds, live=False)
                await self.world.release(got)
                self.settle_mirror_release(got.message_id)
                continue
            self._breach(check_claim(got, slot, self._slots, self._clock.micros))
            assert got is not None
            self._granted[delivery.lease_id] = got
            return
        self._breach(
            QueueContractBroken(
                f"claim(queue_prefix={delivery.message.queue_name!r}) kept delivering other "
                f"messages than {delivery.message_id}",
                check="order",
            )
        )

    def settle_mirror_release(self, message_id: str) -> None:
        """Release ``message_id`` in the mirror (due now), as it was in the World."""
        slot = self._slots[message_id]
        mirror = Delivery(  # the lease the mirror's take just granted
            message=slot.message,
            lease_id=slot.lease_id or "",
            lease_expires_at=self._clock.now(),
        )
        self.settle(mirror, release_after=0.0)

    async def settle_async(self, delivery: Delivery, *, release_after: float | None) -> None:
        """Ack or release in the World; a holder that lost its lease must be refused there too."""
        what = "ack" if release_after is None else f"release(delay={release_after:g})"
        granted = self._granted.pop(delivery.lease_id, None)
        try:
            self._held(delivery)
        except LeaseLost:
            if granted is not None:
                await self._refused(granted, what, release_after)
            raise
        if granted is None:
            raise QueueModeUnsupported(
                f"delivery of {delivery.message_id} was never claimed from the World's queue"
            )
        await self.sync_leases()
        try:
            if release_after is None:
                await self.world.ack(granted)
            else:
                await self.world.release(granted, delay=release_after)
        except LeaseLost as exc:
            self._breach(
                QueueContractBroken(
                    f"{what} of {delivery.message_id} (attempt {granted.attempt}) was refused "
                    f"({exc}), though no other claim took the message since",
                    check="lease",
                )
            )
        self.settle(delivery, release_after=release_after)
        await self.compare(f"{what} of {delivery.message_id} (attempt {granted.attempt})")

    async def _refused(self, granted: Delivery, what: str, release_after: float | None) -> None:
        """The mirror says the message was re-claimed: the World must refuse the old holder."""
        try:
            if release_after is None:
                await self.world.ack(granted)
            else:
                await self.world.release(granted, delay=release_after)
        except LeaseLost:
            return
        self._breach(
            QueueContractBroken(
                f"{what} of {granted.message_id} by attempt {granted.attempt} succeeded, "
                "though the message was re-claimed after that lease expired (the new "
                "holder's message is gone or its lease wiped)",
                check="lease",
            )
        )

    # --- faults only a simulated queue can inject -------------------------------------

    def drop(self, message_id: str) -> Message | None:
        """Not with the World's queue."""
        raise QueueModeUnsupported(
            "dropping a queued message needs the simulator's queue: use Sim(queue='sim')"
        )

    def delay(self, message_id: str, seconds: float) -> None:
        """Not with the World's queue."""
        raise QueueModeUnsupported(
            "delaying a queued message needs the simulator's queue: use Sim(queue='sim')"
        )

    def open_gate(self, message_id: str) -> None:
        """Not with the World's queue."""
        raise QueueModeUnsupported(
            "ending a lease without redelivery needs the simulator's queue: use Sim(queue='sim')"
        )

    # --- leases and comparisons --------------------------------------------------------

    def _world_leases(self) -> dict[str, int]:
        return {d.message_id: to_micros(d.lease_expires_at) for d in self._granted.values()}

    async def sync_leases(self) -> None:
        """Extend the World's leases to what the mirror holds (renewed, stopped, expired)."""
        now = self._clock.micros
        for lease_id, granted in list(self._granted.items()):
            slot = self._slots.get(granted.message_id)
            if slot is None:
                continue
            has = to_micros(granted.lease_expires_at)
            if slot.lease_id != lease_id:
                if slot.lease_id in self._granted or has <= now:
                    continue  # re-claimed in the World too, or lapsed there already
                # The mirror let this lease lapse and re-took the message; the World
                # claims it next: its lease lapses now there too.
                target = now
            elif slot.lease_live:
                if has > now:
                    continue
                target = now + round(self.lease_seconds * 1_000_000)
            else:
                target = slot.lease_expires_at if slot.lease_expires_at is not None else now
                if target <= now:
                    if has <= now:
                        continue
                    target = now
                elif has == target:
                    continue
            seconds = (target - now) / 1_000_000
            try:
                renewed = await self.world.extend(granted, lease_seconds=seconds)
            except LeaseLost as exc:
                self._breach(
                    QueueContractBroken(
                        f"extend of {granted.message_id} (attempt {granted.attempt}) was "
                        f"refused ({exc}), though no other claim took the message since",
                        check="lease",
                    )
                )
                raise
            at = self._clock.now() + timedelta(microseconds=target - now)
            self._breach(
                check_extend(renewed, message_id=granted.message_id, at=at, seconds=seconds)
            )
            self._granted[lease_id] = renewed

    async def compare(self, after: str) -> None:
        """The World's messages and ``next_due`` against the mirror's."""
        self._breach(check_messages(await self.world.messages(), self.slots(), after))
        answer = await self.world.next_due()
        self._breach(check_next_due(answer, self.slots(), self._world_leases(), self._clock.micros))
