"""Faults the choice source injects: which apply where, and what each one does.

At each choice the scheduler makes (see ``_scheduler.py``), while faults are
left, the choice source is asked ``choose(odds)``; only its last answer injects
a fault, and then ``choose(len(kinds))`` picks its kind among those that apply
to the chosen candidate (a task parked at an interception point, or a due
queue message).  The lease faults (a stalled heartbeat, failing renewals) act
through the runtime's lease keeper (``_leases.py``): the lease lapses while its
delivery runs on, as it does in production.  Stale reads (``withhold``) are
kept here too: a committed event armed to be hidden, and the reads it is still
hidden from.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

from durasim.worlds import Event, EventPage, Snapshot
from durasim.worlds._memory_queue import QueueSlot

from ._points import EXTERNAL, Writer

if TYPE_CHECKING:
    from ._scheduler import Parked, Scheduler

__all__ = ["FAULT_KINDS", "FaultKind", "Faults"]


class FaultKind(enum.StrEnum):
    """A fault the choice source may inject when enabled."""

    CRASH = "crash"  # a delivery's process dies at a World call
    FAIL = "fail"  # a World call raises a WorldError
    DUPLICATE = "duplicate"  # a message is delivered twice at once
    EXPIRE_LEASE = "expire_lease"  # a running delivery's lease ends
    WITHHOLD = "withhold"  # a log read misses the latest committed event (a stale read)
    DROP = "drop"  # a committed write is reported failed
    DELAY = "delay"  # a message is delivered later than due
    STALL_HEARTBEAT = "stall_heartbeat"  # a delivery's lease is not renewed for a while
    FAIL_RENEWAL = "fail_renewal"  # a delivery's lease renewals fail (WorldError or LeaseLost)


#: Fault kinds the choice source may inject when enabled (as plain strings, in a
#: fixed order: explorations draw from this tuple, so its order is part of a seed).
FAULT_KINDS: tuple[str, ...] = tuple(kind.value for kind in FaultKind)


class Faults:
    """The faults of one simulation: which are enabled, how many are left, what they did.

    Args:
        core: the scheduler (asked for choices; it launches and crashes deliveries).
        kinds: the enabled fault kinds (see :data:`FAULT_KINDS`).
        odds: a fault is injected when ``choose(odds)`` answers its last value.
        max_faults: at most this many faults.
    """

    def __init__(
        self, core: Scheduler, kinds: Sequence[str], *, odds: int, max_faults: int
    ) -> None:
        unknown = set(kinds).difference(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}: choose from {FAULT_KINDS}")
        self.core = core
        self.kinds = tuple(kinds)
        self.odds = max(2, odds)
        #: Faults the choice source may still inject.
        self.left = max_faults if kinds else 0
        #: Every fault the choice source injected, by kind, in order.
        self.injected: list[str] = []
        #: Stale reads armed: (reads to hide the next event from, its run or None).
        self.withhold_armed: list[tuple[int, str | None]] = []
        #: Events hidden from reads: (run id, seq) -> reads left.
        self.hidden: dict[tuple[str, int], int] = {}

    def strike(self, candidate: Parked | QueueSlot) -> bool:
        """Ask whether a fault hits ``candidate`` now, and inject it.

        True if the candidate must not also go ahead as chosen.
        """
        core = self.core
        if core._ask(self.odds, "fault") != self.odds - 1:
            return False
        kinds = self.applicable(candidate)
        if not kinds:
            return False
        kind = kinds[core._choose(len(kinds), "fault-kind", kinds)]
        self.left -= 1
        self.injected.append(kind)
        return self.inject(kind, candidate)

    def applicable(self, candidate: Parked | QueueSlot) -> list[FaultKind]:
        """The enabled kinds that can hit ``candidate``."""
        if isinstance(candidate, QueueSlot):
            kinds = [FaultKind.DUPLICATE]
            if self.core.queue_mode == "sim":  # a World's queue cannot be made to lose one
                kinds[:0] = [FaultKind.DROP, FaultKind.DELAY]
        else:
            kinds = [
                FaultKind.CRASH,
                FaultKind.EXPIRE_LEASE,
                FaultKind.WITHHOLD,
                FaultKind.DUPLICATE,
            ]
            if candidate.point.phase == "before":
                kinds.append(FaultKind.FAIL)
            if self.core.leases.is_live(candidate.actor.writer.delivery):
                kinds += [FaultKind.STALL_HEARTBEAT, FaultKind.FAIL_RENEWAL]
            if candidate.actor.writer.kind == EXTERNAL:
                kinds = [k for k in kinds if k in (FaultKind.FAIL, FaultKind.WITHHOLD)]
        return [k for k in kinds if k in self.kinds]

    def inject(self, kind: str, candidate: Parked | QueueSlot) -> bool:
        """Apply fault ``kind``; True if the candidate must not also go ahead."""
        core = self.core
        deliveries = core.deliveries
        if isinstance(candidate, QueueSlot):
            message = candidate.message
            if kind == FaultKind.DROP:
                core.queue.drop(message.message_id)
                core.trace.add("fault", f"dropped {message.message_id} ({message.run_id})")
                return True
            if kind == FaultKind.DELAY:
                seconds = float(1 + core._choose(60, "delay"))
                core.queue.delay(message.message_id, seconds)
                core.trace.add("fault", f"delayed {message.message_id} by {seconds:g} s")
                return True
            deliveries.launch(candidate)
            deliveries.launch(candidate, duplicate=True)
            return True
        actor, point = candidate.actor, candidate.point
        if kind == FaultKind.CRASH:
            deliveries.crash(actor, point)
            return False  # it resumes only to unwind
        if kind == FaultKind.FAIL:
            candidate.fail = True
            core.trace.add("fault", f"transient failure of {point.describe()}")
        elif kind == FaultKind.EXPIRE_LEASE and actor.message_id is not None:
            deliveries.expire(actor.message_id, redeliver=True)
        elif kind == FaultKind.WITHHOLD:
            self.withhold_armed.append((1, point.run_id))
            core.trace.add("fault", f"the next event of {point.run_id} is withheld from 1 read")
        elif kind == FaultKind.DUPLICATE and actor.message_id is not None:
            slot = core.queue.slot(actor.message_id)
            if slot is not None:
                deliveries.launch(slot, duplicate=True)
        elif kind == FaultKind.STALL_HEARTBEAT:
            core.leases.stall(actor.writer.delivery, self._outage("stall"))
        elif kind == FaultKind.FAIL_RENEWAL:
            if core._choose(2, "renewal-error") == 1:
                core.leases.fail(actor.writer.delivery, lost=True)
            else:
                core.leases.fail(actor.writer.delivery, seconds=self._outage("renewal-failure"))
        return False

    def _outage(self, what: str) -> float:
        """How long a heartbeat stalls or renewals fail: always long enough for the lease
        to lapse (its length and 1 to 10 renewal intervals more)."""
        policy = self.core.leases.policy
        return policy.lease_seconds + policy.renew_every * (1 + self.core._choose(10, what))

    # --- stale reads -------------------------------------------------------------

    def withhold(self, reads: int, run_id: str | None) -> None:
        """Hide the next committed event (of ``run_id``) from the next ``reads`` log reads."""
        self.withhold_armed.append((reads, run_id))

    def arm_withhold(self, event: Event) -> None:
        """Hide ``event`` from the next reads if a withhold is armed for its run."""
        for index, (reads, run_id) in enumerate(self.withhold_armed):
            if run_id is None or run_id == event.run_id:
                del self.withhold_armed[index]
                self.hidden[(event.run_id, event.seq)] = reads
                return

    def stale_read(self, writer: Writer, page: EventPage) -> EventPage:
        """``page`` as a stale read sees it: cut before the first hidden event."""
        if not page.events:
            return page
        run_id = page.events[0].run_id
        cut = None
        for (hidden_run, seq), reads in list(self.hidden.items()):
            if hidden_run != run_id or reads <= 0:
                continue
            self.hidden[(hidden_run, seq)] = reads - 1
            if reads - 1 <= 0:
                del self.hidden[(hidden_run, seq)]
            cut = seq if cut is None else min(cut, seq)
        if cut is None or page.events[-1].seq < cut:
            return page
        kept = tuple(e for e in page.events if e.seq < cut)
        dropped = page.events[len(kept) :]
        self.core.trace.add(
            "stale",
            f"stale read by {writer.label}: {run_id} #{cut} withheld "
            f"({len(dropped)} event(s) hidden)",
        )
        in_band = page.snapshot.seq_in_band - sum(1 for e in dropped if e.in_band)
        return EventPage(
            events=kept,
            snapshot=Snapshot(seq=cut - 1, seq_in_band=max(0, in_band)),
            has_more=False,
        )
