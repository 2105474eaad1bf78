"""Keeping the leases of claimed messages alive, away from the loop that runs steps.

A worker holds a lease on every message it is delivering.  If the lease runs
out, another worker may claim the message and run the same delivery again, so
the lease must be renewed for as long as the delivery runs, however busy the
delivery keeps its event loop: an ``async def`` step that calls blocking code
(a sync HTTP client, CPU work) stops every task on that loop, a renewal task
included.  So renewal does not run there:

* :class:`LeasePolicy`: how long a lease lasts and how often it is renewed
  (validated: a lease that could lapse between two renewals is refused).
* :class:`LeaseKeeper`: the leases held now and which are due for renewal,
  with an injected clock and an ``extend`` callable.  It is plain logic: the
  :class:`~._heartbeat.Heartbeat` drives it in real time, and the simulator drives it in
  virtual time (``durasim.sim``: one keeper per simulated delivery, renewed
  through its recording queue as the clock moves, :meth:`LeaseKeeper.next_renewal`
  telling it when the next renewal falls due).
* :func:`running_steps`: the step bodies running on each thread's loop, named
  by the heartbeat's blocked-loop warning.

:mod:`._heartbeat` drives the keeper in real time for a :class:`Worker`: the
process's one heartbeat thread renews every held lease through the World's
off-loop renewer and watches each worker's loop.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Protocol

import attrs

from durasim.worlds import Delivery, DurasimError, LeaseLost, WorldError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_RENEW_EVERY",
    "STEPS_HERE",
    "LeaseKeeper",
    "LeaseOptionsError",
    "LeasePolicy",
    "LeaseRenewer",
    "running_steps",
]

#: A dead worker's messages are claimable again this long after its last renewal.
DEFAULT_LEASE_SECONDS = 5.0
#: A live worker renews each lease this often: four renewals may fail before it lapses.
DEFAULT_RENEW_EVERY = 1.0

log = logging.getLogger("durasim.runtime")


class LeaseOptionsError(DurasimError, ValueError):
    """Lease options that would let a live worker's message be taken from it."""


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise LeaseOptionsError(f"{name}={value!r}: pass a finite number of seconds")
    if value <= 0:
        raise LeaseOptionsError(
            f"{name}={value!r}: a lease option must be more than 0 seconds (a lease of 0 "
            "expires as it is taken, so another worker could run the same delivery); "
            f"pass e.g. {name}={DEFAULT_LEASE_SECONDS if 'lease' in name else DEFAULT_RENEW_EVERY}"
        )
    return float(value)


@attrs.frozen
class LeasePolicy:
    """How leases are held.

    Args:
        lease_seconds: how long a claimed message stays ours without renewal;
            also how soon a killed worker's messages can be claimed again.
        renew_every: seconds between renewals; must be less than
            ``lease_seconds`` (:meth:`of` derives it from the lease).
        warn_blocked_after: a step that blocks the worker's event loop longer
            than this is logged (its lease stays renewed regardless).
    """

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    renew_every: float = DEFAULT_RENEW_EVERY
    warn_blocked_after: float = 1.0

    def __attrs_post_init__(self) -> None:
        lease = _positive("lease_seconds", self.lease_seconds)
        every = _positive("renew_every", self.renew_every)
        _positive("warn_blocked_after", self.warn_blocked_after)
        if every >= lease:
            raise LeaseOptionsError(
                f"renew_every={self.renew_every!r} is not less than lease_seconds="
                f"{self.lease_seconds!r}: the lease would lapse before it is renewed; pass a "
                f"renewal interval of at most a third of the lease (e.g. {lease / 5:g})"
            )

    @classmethod
    def of(
        cls,
        lease_seconds: float | None,
        renew_every: float | None,
        *,
        warn_blocked_after: float = 1.0,
    ) -> LeasePolicy:
        """A policy from worker options; a missing ``renew_every`` is derived from the lease.

        The derived interval is :data:`DEFAULT_RENEW_EVERY`, or a third of a
        shorter lease's length, so several renewals can fail before it lapses.
        """
        # A Worker's defaults: one instance, validated once (frozen, so it can be shared).
        if (
            lease_seconds is None
            and renew_every is None
            and warn_blocked_after.__class__ is float  # not True, nor 1: validated as given
            and warn_blocked_after == 1.0
        ):
            return _DEFAULT_POLICY
        lease = DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds
        if renew_every is None:
            renew_every = min(DEFAULT_RENEW_EVERY, _positive("lease_seconds", lease) / 3)
        return cls(
            lease_seconds=lease, renew_every=renew_every, warn_blocked_after=warn_blocked_after
        )


_DEFAULT_POLICY = LeasePolicy.of(DEFAULT_LEASE_SECONDS, DEFAULT_RENEW_EVERY)


class LeaseRenewer(Protocol):
    """Extends leases from a thread other than the World's own (``queue.lease_renewer()``).

    Every call comes from one thread, in that thread's event loop.
    """

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        """Renew the lease from now; :class:`LeaseLost` if another claim took it."""
        ...

    async def close(self) -> None:
        """Release the renewer's resources (its connection)."""
        ...


Extend = Callable[[Delivery], Awaitable[Delivery]]


@attrs.define(eq=False)
class _Held:
    delivery: Delivery
    renewed_at: float
    lost: bool = False


class LeaseKeeper:
    """The leases a worker holds, and their renewal.

    Thread-safe: deliveries are held and dropped on the worker's loop while
    :meth:`renew_due` runs on the heartbeat's.

    Args:
        policy: lease length and renewal interval.
        clock: monotonic seconds (injected: a simulator passes virtual time).
    """

    def __init__(self, policy: LeasePolicy, *, clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def hold(self, delivery: Delivery, *, renewed_at: float | None = None) -> None:
        """Start renewing ``delivery``'s lease, claimed or renewed at ``renewed_at`` (now)."""
        at = self._clock() if renewed_at is None else renewed_at
        with self._lock:
            self._held[delivery.lease_id] = _Held(delivery, at)

    def drop(self, delivery: Delivery) -> None:
        """Stop renewing (the delivery is being settled)."""
        with self._lock:
            self._held.pop(delivery.lease_id, None)

    @contextlib.contextmanager
    def holding(self, delivery: Delivery) -> Iterator[None]:
        """Hold ``delivery`` for the ``with`` block."""
        self.hold(delivery)
        try:
            yield
        finally:
            self.drop(delivery)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def due(self) -> list[Delivery]:
        """The held leases whose renewal is due now."""
        now = self._clock()
        every = self.policy.renew_every
        with self._lock:
            # The same sum as next_renewal(): a driver that waits until then finds it due.
            return [
                h.delivery
                for h in self._held.values()
                if not h.lost and h.renewed_at + every <= now
            ]

    def next_renewal(self) -> float | None:
        """When the next renewal falls due (on the keeper's clock); ``None`` if none will.

        A driver in virtual time moves its clock there (a lost lease is never
        renewed again, so it counts for nothing).
        """
        every = self.policy.renew_every
        with self._lock:
            return min(
                (h.renewed_at + every for h in self._held.values() if not h.lost), default=None
            )

    async def renew_due(self, extend: Extend, *, log_failures: bool = True) -> int:
        """Renew every due lease with ``extend``; returns how many were renewed.

        A lost lease (another worker took the message after it expired) is
        logged and no longer renewed; the delivery's own writes are fenced by
        the log, so it cannot record anything over the new holder.  A World
        error leaves the lease to be retried at the next round.  A simulator
        that injects these failures passes ``log_failures=False`` (its trace
        records them).
        """
        renewed = 0
        for delivery in self.due():
            try:
                fresh = await extend(delivery)
            except LeaseLost:
                if log_failures:
                    log.warning(
                        "message %s: its lease expired and another worker claimed it; this "
                        "worker's delivery will be fenced off (lengthen lease_seconds if it "
                        "was alive)",
                        delivery.message_id,
                    )
                with self._lock:
                    held = self._held.get(delivery.lease_id)
                    if held is not None:
                        held.lost = True
                continue
            except WorldError as exc:
                if log_failures:
                    log.info(
                        "message %s: lease renewal failed (%s); retrying",
                        delivery.message_id,
                        exc,
                    )
                continue
            with self._lock:
                held = self._held.get(delivery.lease_id)
                if held is not None:
                    held.delivery, held.renewed_at = fresh, self._clock()
            renewed += 1
        return renewed


# -- which step is running on a loop (for the blocked-loop warning) ------------------

#: The step bodies running on each thread's loop, by thread id.  Lists and dicts are
#: updated atomically under the GIL, so the loop's thread needs no lock (hot path).
_running: dict[int, list[tuple[str, float]]] = {}


class _OnThread(threading.local):
    """Per thread: its list in ``_running`` (made the first time the thread asks)."""

    def __init__(self) -> None:
        self.steps = _running.setdefault(threading.get_ident(), [])


#: ``STEPS_HERE.steps`` is :func:`running_steps` without the call (once a step).
STEPS_HERE = _OnThread()


def running_steps() -> list[tuple[str, float]]:
    """This thread's running step bodies: append ``(name, time.monotonic())``, remove it after."""
    return STEPS_HERE.steps


def _steps_on(thread_id: int, *, since: float) -> list[str]:
    """The step bodies on the thread's loop that began before ``since`` and are still running."""
    return [name for name, began in list(_running.get(thread_id, ())) if began <= since]
