"""Leases in virtual time: each delivery's lease kept by the runtime's own lease keeper.

Each simulated delivery stands for a worker process of its own.  The lease on
the message it claimed is held by a :class:`~durasim.runtime.lowlevel.LeaseKeeper`
with the simulation's :class:`~durasim.runtime.LeasePolicy` (a ``Worker``'s by
default: 5 s leases renewed every second), and renewed through the recording
queue: the keeper code a worker's heartbeat thread drives in real time, driven
here as virtual time moves (:meth:`Leases.renew`, which the scheduler calls
after every move of the clock).

The clock does not stop just to renew a healthy lease: nobody can claim a
message whose lease is renewed on time, so the queue treats it as held
(``SimQueue.renewing``) and the renewal at the next move of the clock pushes
its expiry.  A lease lapses only when its renewal stops or fails, as in
production:

* the delivery crashed (its process died, and its heartbeat with it);
* its heartbeat stalls (:meth:`Leases.stall`): nothing is renewed for a while
  and the step keeps running; when the heartbeat resumes, the keeper renews the
  lease, or learns that another delivery claimed the message (``LeaseLost``);
* its renewals fail (:meth:`Leases.fail`): the World's renewer raises a
  ``WorldError`` for a while (the keeper retries at every beat), or reports
  the lease lost (the keeper gives it up);
* the script ends it (``Sim.expire_lease``).

The lease then expires at its last renewal plus ``lease_seconds`` (the clock
can stop there) and another delivery may claim the message: a *takeover* while
the first delivery still runs.  The trace says so (``d2 takes over ... from
d1``), and the log's fence decides whose writes count.
"""

from __future__ import annotations

import functools
from collections.abc import Coroutine
from typing import Any, TypeVar

import attrs

from durasim.runtime import LeasePolicy
from durasim.runtime.lowlevel import LeaseKeeper
from durasim.worlds import Delivery, LeaseLost

from ._clock import SimClock
from ._errors import InjectedFault
from ._queue import SimQueue
from ._trace import Trace

__all__ = ["Leases"]

T = TypeVar("T")


@attrs.define(eq=False)
class _Lease:
    """The lease of one running delivery, and the state of its heartbeat.

    Its keeper is made when first needed (a renewal falls due, a fault strikes),
    holding the lease as claimed at ``claimed_at``: most deliveries end at the
    virtual instant they began, before any renewal is due.
    """

    number: int
    delivery: Delivery
    claimed_at: float
    policy: LeasePolicy
    clock: SimClock
    held: LeaseKeeper | None = None
    #: Renewed on time (a healthy heartbeat): the queue treats it as held.
    live: bool = True
    #: When a heartbeat that is not healthy tries next (micros); None: never again.
    next_round: int | None = None
    #: Renewals raise a WorldError until then (micros).
    failing_until: int | None = None
    #: The next renewal reports the lease lost.
    lose: bool = False
    #: How the last renewal attempt went: renewed, failed, lost, or "" (none made).
    result: str = ""

    @property
    def keeper(self) -> LeaseKeeper:
        """The lease's keeper (made now if it was not)."""
        keeper = self.held
        if keeper is None:
            keeper = self.held = LeaseKeeper(self.policy, clock=self.clock.seconds)
            keeper.hold(self.delivery, renewed_at=self.claimed_at)
        return keeper

    def next_renewal(self) -> float | None:
        """When the keeper renews next (clock seconds), without making one for it."""
        if self.held is None:
            return self.claimed_at + self.policy.renew_every
        return self.held.next_renewal()

    def drop(self) -> None:
        """The keeper stops renewing the lease (if it was ever made)."""
        if self.held is not None:
            self.held.drop(self.delivery)


class Leases:
    """The leases of the running deliveries, renewed in virtual time.

    Args:
        policy: lease length and renewal interval (a worker's).
        clock: the virtual clock (each keeper's clock, in its seconds).
        queue: the recording queue the leases are renewed through.
        trace: where lapses, takeovers and heartbeat faults are written.
    """

    def __init__(self, policy: LeasePolicy, clock: SimClock, queue: SimQueue, trace: Trace):
        self.policy = policy
        self._clock = clock
        self._queue = queue
        self._trace = trace
        self._every = round(policy.renew_every * 1_000_000)
        #: The leases of running deliveries, by delivery number.
        self.running: dict[int, _Lease] = {}
        self._holder: dict[str, int] = {}  # message id -> the delivery holding its lease now
        #: Every takeover: (the delivery still running, the delivery that claimed its message).
        self.takeovers: list[tuple[int, int]] = []

    # --- the deliveries' lifecycle ----------------------------------------------------

    def hold(self, number: int, delivery: Delivery) -> int | None:
        """Keep ``delivery``'s lease (delivery ``number`` just claimed it).

        Returns the delivery it was taken over from, if that one still runs.
        """
        self.running[number] = _Lease(
            number=number,
            delivery=delivery,
            claimed_at=self._clock.seconds(),
            policy=self.policy,
            clock=self._clock,
        )
        previous = self._holder.get(delivery.message_id)
        self._holder[delivery.message_id] = number
        if previous is None or previous not in self.running:
            return None
        self.takeovers.append((previous, number))
        return previous

    def release(self, number: int) -> None:
        """Stop renewing: the delivery ended and settles its message."""
        lease = self.running.pop(number, None)
        if lease is None:
            return
        lease.drop()
        message_id = lease.delivery.message_id
        if self._holder.get(message_id) == number:
            del self._holder[message_id]

    def crash(self, number: int) -> None:
        """The delivery's process died: its lease expires at its last renewal + its length."""
        lease = self.running.pop(number, None)
        if lease is not None:
            lease.drop()
            self._queue.renewing(lease.delivery, live=False)

    def holder(self, message_id: str) -> int | None:
        """The running delivery holding ``message_id``'s lease now, if any."""
        number = self._holder.get(message_id)
        return number if number in self.running else None

    def is_live(self, number: int) -> bool:
        """Whether delivery ``number`` holds a lease its heartbeat renews on time."""
        lease = self.running.get(number)
        return lease is not None and lease.live

    # --- faults ---------------------------------------------------------------------

    def stop(self, number: int) -> None:
        """Renewal ends for good (the lease was expired); the delivery runs on."""
        lease = self.running.get(number)
        if lease is not None:
            lease.drop()
            lease.live, lease.next_round = False, None

    def stall(self, number: int, seconds: float) -> bool:
        """The delivery's heartbeat stops for ``seconds`` (its step runs on); False if none."""
        lease = self.running.get(number)
        if lease is None or not lease.live:
            return False
        self._unrenewed(lease)
        lease.next_round = self._clock.micros + round(seconds * 1_000_000)
        self._trace.add(
            "fault",
            f"heartbeat of d{number} stalls for {seconds:g} s "
            f"(the lease of {lease.delivery.message_id} is not renewed)",
        )
        return True

    def fail(self, number: int, *, seconds: float = 0.0, lost: bool = False) -> bool:
        """Renewals of the delivery's lease fail: a WorldError for ``seconds``, or LeaseLost.

        False if the delivery holds no lease renewed on time.
        """
        lease = self.running.get(number)
        if lease is None or not lease.live:
            return False
        self._unrenewed(lease)
        due = lease.next_renewal()
        lease.next_round = None if due is None else self._clock.micros_at(due)
        message_id = lease.delivery.message_id
        if lost:
            lease.lose = True
            what = "reports the lease lost (LeaseLost)"
        else:
            lease.failing_until = self._clock.micros + round(seconds * 1_000_000)
            what = f"fails for {seconds:g} s (a World error)"
        self._trace.add("fault", f"renewal of {message_id} by d{number} {what}")
        return True

    def _unrenewed(self, lease: _Lease) -> None:
        lease.live = False
        self._queue.renewing(lease.delivery, live=False)

    # --- renewal, as the clock moves --------------------------------------------------

    def next_round(self) -> int | None:
        """When a heartbeat that is not healthy tries next (micros), if one will."""
        rounds = [lease.next_round for lease in self.running.values() if not lease.live]
        return min((r for r in rounds if r is not None), default=None)

    def renew(self) -> None:
        """The clock moved: renew every lease whose renewal is due (and resume heartbeats)."""
        now = self._clock.seconds()
        now_micros = self._clock.micros
        for lease in list(self.running.values()):
            if lease.live:
                due = lease.next_renewal()
                if due is not None and due <= now:
                    self._round(lease)
            elif lease.next_round is not None and lease.next_round <= now_micros:
                self._round(lease)

    def _round(self, lease: _Lease) -> None:
        """One beat of the delivery's heartbeat: the keeper renews what is due."""
        lease.result = ""
        extend = functools.partial(self._extend, lease)
        _run_now(lease.keeper.renew_due(extend, log_failures=False))
        number, message_id = lease.number, lease.delivery.message_id
        if lease.result == "renewed":
            if not lease.live:
                lease.live, lease.next_round, lease.failing_until = True, None, None
                self._queue.renewing(lease.delivery, live=True)
                self._trace.add("delivery", f"d{number} renews its lease of {message_id} again")
        elif lease.result == "failed":
            lease.next_round = self._clock.micros + self._every  # the heartbeat's next beat
        elif lease.result == "lost":
            lease.live, lease.next_round = False, None
            taker = self.holder(message_id)
            by = f" (d{taker} holds it)" if taker is not None and taker != number else ""
            self._trace.add(
                "delivery", f"d{number} lost its lease of {message_id}{by}: no longer renewed"
            )
        elif not lease.live:  # nothing was due: try when it is
            due = lease.next_renewal()
            lease.next_round = None if due is None else self._clock.micros_at(due)

    async def _extend(self, lease: _Lease, delivery: Delivery) -> Delivery:
        """The keeper's ``extend``: the recording queue's, unless a fault says otherwise."""
        if lease.lose:
            lease.lose, lease.result = False, "lost"
            raise LeaseLost(
                f"injected: the renewal of message {delivery.message_id!r} reports its lease lost",
                message_id=delivery.message_id,
            )
        until = lease.failing_until
        if until is not None and self._clock.micros < until:
            lease.result = "failed"
            raise InjectedFault(
                f"injected: the World's lease renewer failed for message {delivery.message_id!r}"
            )
        try:
            fresh = await self._queue.extend(delivery, lease_seconds=self.policy.lease_seconds)
        except LeaseLost:
            lease.result = "lost"
            raise
        lease.result = "renewed"
        return fresh


def _run_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits (the keeper over the recording queue) to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a lease renewal waited for something: the recording queue never waits")
