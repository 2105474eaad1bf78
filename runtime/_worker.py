"""Workers: claim orchestrator messages and run deliveries.

A :class:`Worker` serves one World through its engine: each claimed message is
handed to :meth:`Engine.handle`, which runs it and says how to settle it: acked
when the delivery ends, released with a back-off when the World failed under it,
and re-queued with a count when the replay diverged
(:func:`~durasim.runtime.lowlevel.settle`).  The lease is renewed meanwhile by a
heartbeat thread (:mod:`._heartbeat`), so a step that blocks the loop cannot let it
lapse.  Runs whose deliveries
died are recovered by the queue itself: an unacked message is redelivered, with
the same id, once its lease expires.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from durasim.worlds import Delivery, StorageFull, World, WorldError, WorldFileChanged

from ._client import Run
from ._engine import engine_for
from ._errors import RunNotFinished
from ._heartbeat import Heartbeat
from ._leases import LeaseKeeper, LeasePolicy
from ._orchestrator import DeliveryReport, Limits
from ._otel import span
from ._settlement import REQUEUE_DELAY, DeliveryStatus, SettleAction, Settlement
from ._versions import VersionPolicy, check_deployment_id
from ._wake import enqueue_wake

__all__ = ["FULL_BACKOFF", "REPORTS_KEPT", "Worker", "apply_settlement"]

#: Delivery reports a worker keeps (older ones are dropped).
REPORTS_KEPT = 1000

#: While the World's storage is full: the first and the longest wait (seconds)
#: before :meth:`Worker.serve` tries again, one delivery at a time.
FULL_BACKOFF = (0.5, 60.0)

log = logging.getLogger("durasim.runtime")

R = TypeVar("R")


class Worker:
    """Claims messages from a World's queue and runs them.

    Args:
        world: the World to serve.
        limits: per-run limits.
        lease_seconds: how long a claimed message stays ours without renewal, and so
            how soon a killed worker's runs move to another worker (default 5 s).
        renew_every: seconds between lease renewals (default: 1 s, or a third of a
            shorter lease); must be less than ``lease_seconds``.
        warn_blocked_after: a step that blocks the event loop longer than this
            many seconds is logged by name (default 1 s).
        concurrency: deliveries run at once by :meth:`serve`.
        on_report: called with the report of every delivery (e.g. to log it).
        deployment: the one code version this worker serves (docs/versioning.md);
            default: the version of each workflow's code here (``DURASIM_DEPLOYMENT``,
            else its module's source hash).  Runs pinned to another version are
            left alone (logged, their message moved to that version's queue).
        serve_all: serve every run whatever its version.

    Attributes:
        reports: the last :data:`REPORTS_KEPT` delivery reports, oldest first.
    """

    def __init__(
        self,
        world: World,
        *,
        limits: Limits | None = None,
        lease_seconds: float | None = None,
        renew_every: float | None = None,
        warn_blocked_after: float = 1.0,
        concurrency: int = 4,
        on_report: Callable[[DeliveryReport], None] | None = None,
        deployment: str | None = None,
        serve_all: bool = False,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(
                f"concurrency={concurrency!r}: a worker runs at least 1 delivery at once; "
                "pass an int of 1 or more"
            )
        policy = LeasePolicy.of(lease_seconds, renew_every, warn_blocked_after=warn_blocked_after)
        if deployment is not None:
            check_deployment_id(deployment)
        #: Which runs this worker serves (its code version).
        self.versions = VersionPolicy(deployment=deployment, serve_all=serve_all)
        self.world = world
        self.engine = engine_for(world)
        self.limits = limits or Limits()
        self.lease_seconds = policy.lease_seconds
        #: The leases held now; renewed by :attr:`heartbeat`'s thread.
        self.leases = LeaseKeeper(policy)
        self.heartbeat = Heartbeat(world, self.leases)
        self.concurrency = concurrency
        self.on_report = on_report
        #: The most recent delivery reports (bounded: a serving worker runs forever).
        self.reports: collections.deque[DeliveryReport] = collections.deque(maxlen=REPORTS_KEPT)
        #: The current wait while the World's storage is full (0: it is not).
        self.full_wait = 0.0
        self._fatal: WorldFileChanged | None = None

    async def _claim(self) -> Delivery | None:
        """The next due message of this worker's versions, then of the unversioned queues."""
        for prefix in self.versions.prefixes():
            delivery = await self.world.queue.claim(
                queue_prefix=prefix, lease_seconds=self.lease_seconds
            )
            if delivery is not None:
                return delivery
        return None

    async def run_one(self) -> bool:
        """Claim and run one due message (a delivery or a queued step); False if none is due."""
        delivery = await self._claim()
        if delivery is None:
            return False
        await self._handle(delivery)
        return True

    async def drain(self, *, max_messages: int | None = None) -> int:
        """Run due messages until none is due now; returns how many ran."""
        count = 0
        while max_messages is None or count < max_messages:
            if not await self.run_one():
                break
            count += 1
        return count

    async def run_until_complete(self, run: Run[R], *, poll: float = 1.0) -> R:
        """Serve until ``run`` ends, sleeping (real time) until the next due message.

        Returns the run's result or raises its failure, like :meth:`Run.result`.
        """
        while True:
            await self.drain()
            try:
                return await run.result()
            except RunNotFinished:
                pass
            await self._idle(poll)

    async def serve(self, *, stop: asyncio.Event, poll: float = 1.0) -> None:
        """Serve until ``stop`` is set; in-flight deliveries finish first (graceful).

        When the World's storage is full (:class:`StorageFull`) the worker keeps
        serving: it logs a warning, waits (:data:`FULL_BACKOFF`, doubling) and
        tries again one delivery at a time until space returns.  When the
        World's file was deleted or replaced (:class:`WorldFileChanged`) it stops
        and raises that error once the in-flight deliveries ended.
        """
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()

        async def one(delivery: Delivery) -> None:
            try:
                await self._handle(delivery)
            finally:
                slots.release()

        try:
            while not stop.is_set():
                if self._fatal is not None:
                    raise self._fatal
                if self.full_wait:
                    if running:  # while full, one delivery at a time
                        await asyncio.wait(set(running))
                        continue
                    await self._pause(self.full_wait, stop)
                    if stop.is_set():
                        break
                if not await _slot(slots, stop):
                    break
                try:
                    delivery = await self._claim()
                except StorageFull as exc:
                    slots.release()
                    self._storage_full(exc)
                    continue
                except BaseException:
                    slots.release()
                    raise
                if delivery is None:
                    slots.release()
                    await self._idle(poll, stop=stop)
                    continue
                task = asyncio.ensure_future(one(delivery))
                running.add(task)
                task.add_done_callback(running.discard)
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        if self._fatal is not None:
            raise self._fatal

    def _storage_full(self, exc: StorageFull) -> None:
        first, longest = FULL_BACKOFF
        self.full_wait = min(longest, self.full_wait * 2) if self.full_wait else first
        log.warning(
            "durasim worker: the World's storage is full; runs are kept, nothing committed is "
            "lost; retrying in %.1f s (%s)",
            self.full_wait,
            exc,
        )

    def _storage_ok(self) -> None:
        if self.full_wait:
            self.full_wait = 0.0
            log.warning("durasim worker: the World's storage accepts writes again; serving")

    @staticmethod
    async def _pause(seconds: float, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)

    async def _idle(self, poll: float, *, stop: asyncio.Event | None = None) -> None:
        """Wait for work: until the next due message, at most ``poll`` s, or ``stop``.

        A World whose queue can notify (``queue.wait_for_work``, e.g. PostgreSQL's
        LISTEN/NOTIFY) wakes the worker as soon as work is enqueued anywhere.
        """
        waiter = getattr(self.world.queue, "wait_for_work", None)
        if waiter is not None:
            sleep: asyncio.Future[Any] = asyncio.ensure_future(waiter(poll, queue_prefix="durasim"))
        else:
            dues = [
                await self.world.queue.next_due(queue_prefix=prefix)
                for prefix in self.versions.prefixes()
            ]
            due = min((d for d in dues if d is not None), default=None)
            now = self.world.clock.now()
            wait = poll if due is None else min(poll, max(0.0, (due - now).total_seconds()))
            sleep = asyncio.ensure_future(asyncio.sleep(wait))
        if stop is None:
            await sleep
            return
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({sleep, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (sleep, stopping):
                future.cancel()
            await asyncio.gather(sleep, stopping, return_exceptions=True)

    async def _handle(self, delivery: Delivery) -> DeliveryReport | None:
        renew = self._renew(delivery)
        try:
            with span(
                "durasim.delivery",
                run_id=delivery.message.run_id or "",
                attempt=delivery.attempt,
            ) as current:
                handled = await self.engine.handle(
                    delivery.message.queue_name,
                    delivery.payload,
                    attempt=delivery.attempt,
                    limits=self.limits,
                    sync_in_thread=self.limits.sync_steps != "inline",
                    quick_inline=self.limits.sync_steps == "auto",
                    versions=self.versions,
                )
                if handled.report is not None:
                    current.set("durasim.delivery.status", handled.report.status.value)
        finally:
            renew.cancel()
        if isinstance(handled.error, WorldFileChanged):
            self._fatal = handled.error
        elif isinstance(handled.error, StorageFull):
            self._storage_full(handled.error)
        elif handled.error is None:
            self._storage_ok()
        await apply_settlement(self.world, delivery, handled.settlement)
        if handled.step:
            return None
        if handled.settlement.action is SettleAction.DROP:
            return DeliveryReport(run_id="?", status=DeliveryStatus.FINISHED)
        if handled.report is None:  # the delivery raised: not reported, as before
            run_id = delivery.message.run_id or "?"
            return DeliveryReport(run_id=run_id, status=DeliveryStatus.RETRY)
        self._report(handled.report)
        return handled.report

    def _report(self, report: DeliveryReport) -> None:
        self.reports.append(report)
        if self.on_report is not None:
            self.on_report(report)

    def _renew(self, delivery: Delivery) -> _Renewal:
        """Keep ``delivery``'s lease renewed (off this loop) until ``.cancel()``."""
        self.heartbeat.acquire()
        self.leases.hold(delivery)
        return _Renewal(self, delivery)


class _Renewal:
    """A held lease; ``cancel()`` (idempotent) stops renewing it."""

    __slots__ = ("_delivery", "_worker")

    def __init__(self, worker: Worker, delivery: Delivery) -> None:
        self._worker: Worker | None = worker
        self._delivery = delivery

    def cancel(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.leases.drop(self._delivery)
            worker.heartbeat.release()


async def apply_settlement(world: World, delivery: Delivery, settlement: Settlement) -> None:
    """Do what ``settlement`` says with ``delivery``'s message on ``world``'s queue."""
    try:
        if settlement.wake is not None:
            wake = settlement.wake
            await enqueue_wake(
                world, wake.run_id, delay=REQUEUE_DELAY, divergences=wake.divergences
            )
        if settlement.release_after is None:
            await world.queue.ack(delivery)
        else:
            await world.queue.release(delivery, delay=settlement.release_after)
    except WorldError as exc:
        log.info("message %s could not be settled (%s)", delivery.message_id, exc)


async def _slot(slots: asyncio.Semaphore, stop: asyncio.Event) -> bool:
    """Take a delivery slot, or give up once ``stop`` is set (SIGTERM while every slot is busy)."""
    if not slots.locked():
        await slots.acquire()
        return True
    acquire = asyncio.ensure_future(slots.acquire())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({acquire, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not acquire.done():
        acquire.cancel()
    try:
        await acquire
    except asyncio.CancelledError:
        return False
    if stop.is_set():
        slots.release()
        return False
    return True
