"""What the World's own queue must answer, given what it was asked (``queue="world"``).

The simulator's recording queue (:class:`~durasim.sim.SimQueue`) is the mirror:
it is asked everything the World's queue is asked, in the same order and at the
same virtual time, and it keeps docs/protocol.md section 11 by construction.
Each function here compares one answer of the World with the mirror and returns
the :class:`QueueContractBroken` to raise, or ``None``.
"""

from __future__ import annotations

from datetime import datetime

from durasim.worlds import Delivery, Message
from durasim.worlds._memory_queue import NEVER, QueueSlot
from durasim.worlds._time import from_micros, to_micros

from ._errors import QueueContractBroken

__all__ = [
    "check_claim",
    "check_enqueue",
    "check_extend",
    "check_messages",
    "check_next_due",
    "describe_slot",
]


def describe_slot(slot: QueueSlot | None, now: int) -> str:
    """A message's state in the mirror, in words."""
    if slot is None:
        return "acked (or never enqueued)"
    if slot.lease_id is not None:
        if slot.lease_live or (slot.lease_expires_at is not None and slot.lease_expires_at > now):
            return f"under a live lease (attempt {slot.message.attempt})"
        return f"leased, its lease expired (attempt {slot.message.attempt})"
    if slot.available > now:
        return f"delayed until {from_micros(slot.available).isoformat()}"
    return "queued and due"


def check_enqueue(
    returned: str, *, key: str | None, known: str | None, state: str, exists: bool
) -> QueueContractBroken | None:
    """An enqueue's id: the first message's while its key is held, else a new one."""
    if known is not None and returned != known:
        return QueueContractBroken(
            f"enqueue with idempotency key {key!r} while its message {known} is {state} "
            f"queued a second message {returned} (the key must return {known})",
            check="idempotency",
        )
    if known is None and exists:
        return QueueContractBroken(
            f"enqueue returned {returned}, the id of a message already queued "
            f"(with idempotency key {key!r}, which no pending message holds)",
            check="idempotency",
        )
    return None


def check_claim(
    got: Delivery | None, expected: QueueSlot, mirror: dict[str, QueueSlot], now: int
) -> QueueContractBroken | None:
    """A claim whose answer must be ``expected``'s message (the mirror took it: its attempt)."""
    want = expected.message
    if got is None:
        return QueueContractBroken(
            f"claim(queue_prefix={want.queue_name!r}) returned nothing, yet message "
            f"{want.message_id} ({describe_slot(expected, now)}) was claimable: the queue "
            "lost it or keeps it leased",
            check="lost",
        )
    if got.message_id != want.message_id:
        slot = mirror.get(got.message_id)
        state = describe_slot(slot, now)
        check = "order"
        if slot is None:
            check = "redelivered"
        elif slot.lease_id is not None:
            check = "lease"
        elif slot.available > now:
            check = "delay"
        return QueueContractBroken(
            f"claim(queue_prefix={want.queue_name!r}) delivered {got.message_id}, which is "
            f"{state}; the claimable message was {want.message_id}",
            check=check,
        )
    if got.attempt != want.attempt:
        return QueueContractBroken(
            f"claim of {want.message_id} gave attempt {got.attempt}; it was claimed "
            f"{want.attempt - 1} time(s) before",
            check="order",
        )
    return None


def check_extend(
    renewed: Delivery, *, message_id: str, at: datetime, seconds: float
) -> QueueContractBroken | None:
    """An extend renews the lease from now."""
    if renewed.lease_expires_at != at:
        return QueueContractBroken(
            f"extend of {message_id} by {seconds:g} s set the lease to expire at "
            f"{renewed.lease_expires_at.isoformat()}, not {at.isoformat()}",
            check="lease",
        )
    return None


def check_messages(
    seen: tuple[Message, ...], mirror: list[QueueSlot], after: str
) -> QueueContractBroken | None:
    """The World's unacked messages are the mirror's, each due when it was asked."""
    got = {m.message_id: m for m in seen}
    for slot in mirror:
        message = slot.message
        found = got.pop(message.message_id, None)
        if found is None:
            return QueueContractBroken(
                f"after {after}, message {message.message_id} ({message.queue_name}, attempt "
                f"{message.attempt}) is missing from the queue: nobody acked it",
                check="lost",
            )
        if slot.lease_id is None and to_micros(found.available_at) != slot.available:
            return QueueContractBroken(
                f"after {after}, message {message.message_id} is due at "
                f"{found.available_at.isoformat()}; it was asked to be due at "
                f"{message.available_at.isoformat()} (a delay not kept exactly)",
                check="delay",
            )
    for message_id in got:
        return QueueContractBroken(
            f"after {after}, message {message_id} is still queued, though it was acked",
            check="redelivered",
        )
    return None


def check_next_due(
    answer: datetime | None, mirror: list[QueueSlot], leases: dict[str, int], now: int
) -> QueueContractBroken | None:
    """``next_due()``: the earliest claimable time over every unacked message.

    ``leases`` holds the World-side expiry (micros) of every lease the World
    granted; an answer at or before now is right whenever something is due.
    """
    times = []
    for slot in mirror:
        if slot.lease_id is None:
            times.append(slot.available)
        else:
            at = leases.get(slot.message.message_id, slot.claimable_at())
            times.append(at if at < NEVER else slot.claimable_at())
    times = [t for t in times if t < NEVER]
    want = min(times, default=None)
    if want is None:
        if answer is None:
            return None
    elif answer is not None:
        got = to_micros(answer)
        if got == want or (want <= now and got <= now):
            return None
    shown = "None" if want is None else from_micros(want).isoformat()
    return QueueContractBroken(
        f"next_due() answered {answer.isoformat() if answer else None}; the earliest message "
        f"becomes claimable at {shown}",
        check="next_due",
    )
