"""The World model machine's queue and stream rules (a part of :class:`WorldModel`).

A mixin, not a machine: :class:`WorldModel` inherits these rules, and Hypothesis
collects a machine's rules by name across its bases, so they run exactly as if
they were written in the class.  The state they use (both Worlds, the clock,
the claimed deliveries) is :class:`WorldModel`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from durasim.worlds import Capabilities, Delivery, FixedClock, World

from . import _model_ops as ops
from ._model_ops import recorded

__all__: list[str] = []


class _QueueRules:
    """Queue claims and lease expiry, settlements, and stream writes."""

    if TYPE_CHECKING:  # WorldModel's state and methods, which these rules use
        caps: Capabilities
        clock: FixedClock
        deliveries: list[Delivery]

        def both(self, call: Callable[[World], Awaitable[Any]], what: str) -> Any: ...

    # -- the queue -----------------------------------------------------------------------

    @precondition(lambda self: self.caps.queue)
    @rule(
        queue=st.sampled_from(ops.QUEUES),
        payload=ops.blobs,
        run_id=st.sampled_from([None, "ra", "rb"]),
        orchestrator=st.booleans(),
        key=st.sampled_from([None, None, "k1", "k2"]),
        delay=st.sampled_from([0, 0, 5, 0.25, 1.5]),
    )
    @recorded
    def enqueue(
        self,
        *,
        queue: str,
        payload: bytes,
        run_id: str | None,
        orchestrator: bool,
        key: str | None,
        delay: float,
    ) -> None:
        """Enqueue (idempotency keys, delays, orchestrator messages)."""
        self.both(
            lambda w: w.queue.enqueue(
                queue,
                payload,
                run_id=run_id,
                orchestrator=orchestrator and run_id is not None,
                idempotency_key=key,
                delay=delay,
            ),
            "queue.enqueue",
        )

    @precondition(lambda self: self.caps.queue)
    @rule(prefix=st.sampled_from(["", "flow/", "step/"]), lease=st.sampled_from([5, 30]))
    @recorded
    def claim(self, prefix: str, lease: float) -> None:
        """Claim the next due message."""
        delivery = self.both(
            lambda w: w.queue.claim(queue_prefix=prefix, lease_seconds=lease), "queue.claim"
        )
        if delivery is not None:
            self.deliveries.append(delivery)

    @precondition(lambda self: self.caps.queue)
    @rule(
        queue=st.sampled_from(ops.QUEUES),
        run_id=st.sampled_from([None, "ra", "rb"]),
        key=st.sampled_from([None, "k1", "k2"]),
        then=st.sampled_from(["ack", "release", "release5", "release.25", "expire", "keep"]),
    )
    @recorded
    def drive_queue(self, queue: str, run_id: str | None, key: str | None, then: str) -> None:
        """Enqueue, claim what is due, then settle it (or let its lease run out)."""
        self.both(
            lambda w: w.queue.enqueue(
                queue, b"m", run_id=run_id, orchestrator=run_id is not None, idempotency_key=key
            ),
            "queue.enqueue",
        )
        delivery = self.both(lambda w: w.queue.claim(lease_seconds=5), "queue.claim")
        if delivery is None:
            return
        self.deliveries.append(delivery)
        if then == "ack":
            self.both(lambda w: w.queue.ack(delivery), "queue.ack")
        elif then.startswith("release"):
            delay = {"release5": 5.0, "release.25": 0.25}.get(then, 0.0)
            self.both(lambda w: w.queue.release(delivery, delay=delay), "queue.release")
        elif then == "expire":
            self.clock.advance(5)
        self.both(lambda w: w.queue.next_due(), "queue.next_due")

    @precondition(lambda self: self.caps.queue)
    @rule(
        lease=st.sampled_from([5, 30]),
        slack=st.sampled_from([-1, 0, 1]),
        then=st.sampled_from(["ack", "release", "extend"]),
    )
    @recorded
    def lease_expiry(self, lease: float, slack: float, then: str) -> None:
        """Claim, let the lease run out (or almost), claim again, settle the first claim.

        A second claim may take the message only once the lease has expired (the
        same message id, one more attempt, or the dead letters); the first
        claim's settlement then fails with ``LeaseLost``.
        """
        first = self.both(
            lambda w: w.queue.claim(queue_prefix="step/", lease_seconds=lease), "queue.claim"
        )
        if first is None:
            self.both(lambda w: w.queue.enqueue("step/x", b"l"), "queue.enqueue")
            first = self.both(
                lambda w: w.queue.claim(queue_prefix="step/", lease_seconds=lease), "queue.claim"
            )
            if first is None:
                return
        self.deliveries.append(first)
        self.clock.advance(lease + slack)
        second = self.both(
            lambda w: w.queue.claim(queue_prefix="step/", lease_seconds=lease), "queue.claim"
        )
        if second is not None:
            self.deliveries.append(second)
        if then == "ack":
            self.both(lambda w: w.queue.ack(first), "queue.ack of an expired lease")
        elif then == "release":
            self.both(lambda w: w.queue.release(first), "queue.release of an expired lease")
        else:
            renewed = self.both(
                lambda w: w.queue.extend(first, lease_seconds=lease), "queue.extend"
            )
            if renewed is not None:
                self.deliveries.append(renewed)

    @precondition(lambda self: self.caps.queue)
    @rule(
        then=st.sampled_from(["ack", "release", "release.25", "extend"]),
        first=st.sampled_from(["settle", "claim"]),
        key=st.sampled_from([None, "k1"]),
        tick=st.sampled_from([0.0, 0.25, 1.5]),
    )
    @recorded
    def reclaim_race(self, then: str, first: str, key: str | None, tick: float) -> None:
        """A holder settles while another worker re-claims after its lease expired.

        Both orders of arrival, then an enqueue with the message's idempotency
        key (whatever state the message is in now), ``next_due``, a short
        (maybe sub-second) tick of the clock and a claim: an acked message never
        comes back, a re-claimed one stays the new holder's, a delay is exact.
        """
        self.both(lambda w: w.queue.enqueue("race/q", b"r", idempotency_key=key), "queue.enqueue")
        old = self.both(
            lambda w: w.queue.claim(queue_prefix="race/", lease_seconds=5), "queue.claim"
        )
        if old is None:
            return
        self.deliveries.append(old)
        self.clock.advance(5)

        def settle(w: World) -> Awaitable[Any]:
            if then == "ack":
                return w.queue.ack(old)
            if then == "extend":
                return w.queue.extend(old, lease_seconds=5)
            return w.queue.release(old, delay=0.25 if then == "release.25" else 0.0)

        def reclaim() -> None:
            new = self.both(
                lambda w: w.queue.claim(queue_prefix="race/", lease_seconds=5),
                "queue.claim after the lease expired",
            )
            if new is not None:
                self.deliveries.append(new)

        if first == "claim":
            reclaim()
        self.both(settle, f"queue.{then} by the holder whose lease expired")
        if first == "settle":
            reclaim()
        self.both(
            lambda w: w.queue.enqueue("race/q", b"again", idempotency_key=key), "queue.enqueue"
        )
        self.both(lambda w: w.queue.next_due(), "queue.next_due")
        self.clock.advance(tick)
        again = self.both(
            lambda w: w.queue.claim(queue_prefix="race/", lease_seconds=5), "queue.claim"
        )
        if again is not None:
            self.deliveries.append(again)

    @precondition(lambda self: self.caps.queue and self.deliveries)
    @rule(
        index=st.integers(0, 7),
        action=st.sampled_from(["ack", "release", "release5", "release.25", "extend"]),
    )
    @recorded
    def settle(self, index: int, action: str) -> None:
        """Ack, release or extend a delivery claimed earlier (its lease may be gone)."""
        delivery = self.deliveries[index % len(self.deliveries)]
        if action == "ack":
            self.both(lambda w: w.queue.ack(delivery), "queue.ack")
        elif action == "extend":
            renewed = self.both(lambda w: w.queue.extend(delivery, lease_seconds=10), "extend")
            if renewed is not None:
                self.deliveries.append(renewed)
        else:
            delay = {"release5": 5.0, "release.25": 0.25}.get(action, 0.0)
            self.both(lambda w: w.queue.release(delivery, delay=delay), "queue.release")

    # -- streams ---------------------------------------------------------------------------

    @precondition(lambda self: self.caps.streams)
    @rule(
        run_id=ops.targets,
        name=st.sampled_from(ops.STREAMS),
        chunks=ops.blobs | st.lists(ops.blobs, max_size=3),
        close=st.booleans(),
    )
    @recorded
    def stream_write(self, run_id: str, name: str, chunks: Any, close: bool) -> None:
        """Write chunks, maybe close the stream."""
        self.both(lambda w: w.streams.write(run_id, name, chunks), "streams.write")
        if close:
            self.both(lambda w: w.streams.close(run_id, name), "streams.close")
