"""What a delivery ends as, and what becomes of its queue message.

One vocabulary for every driver: a delivery's :class:`DeliveryStatus`, the
:class:`Settlement` of its message (ack it, release it after a back-off,
re-queue the run with a divergence count, drop a malformed one) and the one
:func:`backoff`.  :func:`settle` is the one function that maps a delivery's end
to its settlement: the worker and the simulator both apply what it returns.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from ._wake import WakeMessage

if TYPE_CHECKING:
    from ._orchestrator import DeliveryReport

__all__ = [
    "MAX_BACKOFF",
    "REQUEUE_DELAY",
    "DeliveryStatus",
    "SettleAction",
    "Settlement",
    "backoff",
    "settle",
    "settle_step",
]

#: Seconds before a run re-queued after a divergence is delivered again.
REQUEUE_DELAY = 1.0
#: The longest back-off, in seconds.
MAX_BACKOFF = 60.0


class DeliveryStatus(enum.StrEnum):
    """How one orchestrator delivery ended (:attr:`DeliveryReport.status`)."""

    SUSPENDED = "suspended"  # waiting on a step, a wait or a hook: a later message goes on
    FINISHED = "finished"  # the run ended (or is gone): nothing more to do
    SUPERSEDED = "superseded"  # another delivery owns the run (a wake-up was queued)
    RETRY = "retry"  # the replay diverged, or a write was refused unexplained
    UNAVAILABLE = "unavailable"  # a stale read, or no worker here has the code


class SettleAction(enum.StrEnum):
    """What becomes of a claimed queue message."""

    ACK = "ack"  # done with: remove it
    RELEASE = "release"  # give it back, due again after ``delay`` (its attempt counts)
    REQUEUE = "requeue"  # ack it and queue ``wake`` (a fresh message, its attempts from 1)
    DROP = "drop"  # malformed: ack it without running anything


@attrs.frozen
class Settlement:
    """The settlement of one claimed message.

    Attributes:
        action: what to do with the message.
        delay: seconds before a released message is due again (``RELEASE``).
        wake: the message to queue (``REQUEUE``), due after :data:`REQUEUE_DELAY`.
    """

    action: SettleAction
    delay: float | None = None
    wake: WakeMessage | None = None

    @property
    def release_after(self) -> float | None:
        """The delay to release the message after, or ``None`` to ack it."""
        return self.delay if self.action is SettleAction.RELEASE else None


# Module globals: an enum member read through its class is slow (every delivery settles).
_UNAVAILABLE, _RETRY = DeliveryStatus.UNAVAILABLE, DeliveryStatus.RETRY
_RELEASE, _REQUEUE = SettleAction.RELEASE, SettleAction.REQUEUE
ACK = Settlement(SettleAction.ACK)
DROP = Settlement(SettleAction.DROP)


def backoff(attempt: int) -> float:
    """Seconds before delivery ``attempt`` of a message that failed is tried again."""
    return min(MAX_BACKOFF, 2.0**attempt)


def settle(report: DeliveryReport | None, attempt: int) -> Settlement:
    """The settlement of an orchestrator message whose delivery ended with ``report``.

    ``None``: the delivery raised (a World failure, or a bug): release with a back-off.
    """
    if report is None or report.status == _UNAVAILABLE:
        return Settlement(_RELEASE, delay=backoff(attempt))
    if report.status == _RETRY:
        return Settlement(_REQUEUE, wake=WakeMessage(report.run_id, divergences=report.divergences))
    return ACK


def settle_step(retry_in: float | None) -> Settlement:
    """The settlement of a queued step's message: ack it, or release it after ``retry_in``."""
    return ACK if retry_in is None else Settlement(_RELEASE, delay=retry_in)
