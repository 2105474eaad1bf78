"""The simulated deliveries: claim a message, hand it to the engine, settle it.

The simulator is the worker: :meth:`Deliveries.launch` claims a message from
the recording queue and runs it as a task working for its own
:class:`~durasim.sim.SimWorld` actor, through the World's engine
(:meth:`Engine.handle_message`, the call a ``Worker`` makes after parsing),
then applies the settlement the engine returns to the queue.  Meanwhile its
lease is kept by the runtime's lease keeper (``_leases.py``); a delivery that
claims a message whose lease lapsed while its holder still runs *takes it
over*.  A crash stops a delivery where it is.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from typing import TYPE_CHECKING, Any

import attrs

from durasim.runtime.lowlevel import (
    ORCHESTRATOR_QUEUE,
    REQUEUE_DELAY,
    StepMessage,
    WakeMessage,
    parse_message,
)
from durasim.worlds import WorldError
from durasim.worlds._memory_queue import QueueSlot

from ._errors import Crashed, QueueContractBroken, WallBudgetInterrupt
from ._leases import Leases
from ._points import ORCHESTRATOR, STEP, Point, Writer, step_short_name
from ._world import ACTOR, Actor

if TYPE_CHECKING:
    from ._scheduler import Scheduler

__all__ = ["Deliveries", "DeliveryRecord"]


@attrs.define(eq=False)
class DeliveryRecord:
    """One simulated delivery (a claimed message being handled)."""

    number: int
    message_id: str
    run_id: str | None
    actor: Actor
    task: asyncio.Task[None] | None = None
    status: str = "running"


class Deliveries:
    """Every delivery of one simulation, by number (d1, d2, ...).

    Args:
        core: the scheduler (its queue, trace, engine, limits and loop).
        max_deliveries: the delivery budget; launching past it halts the scheduler.
        leases: where each delivery's lease is kept and renewed.
    """

    def __init__(self, core: Scheduler, *, max_deliveries: int, leases: Leases) -> None:
        self.core = core
        self.max_deliveries = max_deliveries
        self.leases = leases
        #: Every delivery launched, by number.
        self.records: dict[int, DeliveryRecord] = {}

    def __len__(self) -> int:
        return len(self.records)

    def launch(self, slot: QueueSlot, *, duplicate: bool = False) -> DeliveryRecord:
        """Deliver ``slot``'s message now as a new task (a duplicate reuses its lease)."""
        core = self.core
        if len(self.records) >= self.max_deliveries:
            core.halt(f"delivery budget of {self.max_deliveries} exceeded")
        message = slot.message
        number = len(self.records) + 1
        if duplicate and slot.lease_id is not None:
            delivery = None
        else:
            delivery = core.queue.take(
                message.message_id, lease_seconds=self.leases.policy.lease_seconds
            )
            message = delivery.message
        payload = message.payload
        if type(payload) is bytes:
            parsed = _parse(message.queue_name, payload)
        else:  # (a World's own queue may hand back another buffer type: not hashable)
            parsed = parse_message(message.queue_name, payload)
        run_id = parsed.run_id
        if isinstance(parsed, StepMessage):
            writer = _writer(STEP, run_id, parsed.correlation_id, number)
        else:
            writer = _writer(ORCHESTRATOR, run_id, "", number)
        actor = Actor(writer=writer, message_id=message.message_id, duplicate=delivery is None)
        record = DeliveryRecord(
            number=number, message_id=message.message_id, run_id=run_id, actor=actor
        )
        self.records[number] = record
        what = "duplicate delivery" if delivery is None else "deliver"
        core.trace.add(
            "delivery",
            f"d{number} {what} {message.message_id} {message.queue_name} run={run_id} "
            f"attempt={message.attempt}",
        )
        if delivery is not None:
            previous = self.leases.hold(number, delivery)
            if previous is not None:
                core.trace.add(
                    "delivery",
                    f"d{number} takes over {message.message_id} from d{previous}, which still "
                    "runs (its lease ran out)",
                )
        coro = self._deliver(record, message.attempt, parsed, delivery)
        context = contextvars.copy_context()
        context.run(ACTOR.set, actor)
        record.task = core.loop.create_task(coro, context=context)
        return record

    async def _deliver(
        self,
        record: DeliveryRecord,
        attempt: int,
        message: WakeMessage | StepMessage,
        delivery: Any,
    ) -> None:
        # The engine runs the message and decides its settlement, as for a Worker;
        # the simulator only applies it to its queue (without a choice point).
        core = self.core
        try:
            if delivery is not None:
                await core.queue.claimed(delivery)  # the World's own claim (queue="world")
            handled = await core.engine.handle_message(
                message,
                attempt=attempt,
                limits=core.limits,
                sync_in_thread=False,
                log_failures=False,
            )
        except Crashed:
            record.status = "crashed"
            core.trace.add("delivery", f"d{record.number} crashed")
            return
        except QueueContractBroken:
            record.status = "queue broken"
            return
        settlement = handled.settlement
        if handled.error is not None:
            status = f"failed ({type(handled.error).__name__})"
        elif handled.step:
            delay = settlement.release_after
            status = "step done" if delay is None else f"step retry in {delay:g} s"
        elif handled.report is not None:
            status = str(handled.report.status)
        else:
            status = "done"
        if settlement.wake is not None:
            await core.queue.put_async(
                ORCHESTRATOR_QUEUE,
                settlement.wake.encode(),
                run_id=settlement.wake.run_id,
                orchestrator=True,
                delay=REQUEUE_DELAY,
            )
        record.status = status
        core.trace.add("delivery", f"d{record.number} ended: {status}")
        if delivery is None or record.actor.crashed:
            return
        self.leases.release(record.number)
        try:
            # As the worker does, without a choice point (with queue="world", the
            # World's ack or release, checked against what the queue was asked).
            await core.queue.settle_async(delivery, release_after=settlement.release_after)
        except WorldError:
            core.trace.add("note", f"d{record.number} could not settle {record.message_id}")
        except QueueContractBroken:
            record.status = "queue broken"

    def crash(self, actor: Actor, point: Point | None = None, *, where: str = "") -> None:
        """Crash ``actor``'s delivery: it stops at once; its lease lapses (no more renewals).

        ``where`` says where in the trace (default: the point's description); a
        scripted crash names the commit and event its match selected.
        """
        if actor.crashed:
            return
        core = self.core
        actor.crashed = True
        if not where and point is not None:
            where = f"at {point.describe()}"
        core.trace.add("fault", f"crash {actor.writer.label}" + (f" {where}" if where else ""))
        if actor.message_id is not None and not actor.duplicate:
            self.leases.crash(actor.writer.delivery)
        for parked in core.parked():
            if parked.actor is actor:
                core.resume(parked)

    def expire(self, message_id: str, *, redeliver: bool) -> None:
        """End the lease of an in-flight message now (its delivery keeps running, unrenewed)."""
        core = self.core
        holder = self.leases.holder(message_id)
        if holder is not None:
            self.leases.stop(holder)
        if redeliver:
            core.queue.expire(message_id)
        else:
            core.queue.open_gate(message_id)
        core.trace.add("fault", f"lease of {message_id} expired (redeliver={redeliver})")

    def interrupted(self) -> None:
        """Mark the deliveries the watchdog's interrupt ended (their task died of it)."""
        for record in self.records.values():
            task = record.task
            if record.status != "running" or task is None or not task.done():
                continue
            if not task.cancelled() and isinstance(task.exception(), WallBudgetInterrupt):
                record.status = "interrupted"
                self.core.trace.add("delivery", f"d{record.number} interrupted")


@functools.lru_cache(maxsize=1024)
def _writer(kind: str, run_id: str, step: str, delivery: int) -> Writer:
    """A delivery's writer (``step``: the step's correlation id, or ""); shared, immutable
    (each Sim of an exploration numbers its deliveries alike)."""
    if kind == STEP:
        return Writer(kind=STEP, run_id=run_id, name=step_short_name(step), delivery=delivery)
    return Writer(kind=kind, run_id=run_id, delivery=delivery)


@functools.lru_cache(maxsize=1024)
def _parse(queue_name: str, payload: bytes) -> WakeMessage | StepMessage:
    """:func:`parse_message`, once per (queue, payload): the parsed messages are frozen
    values, and the same payloads recur in every Sim of an exploration (counted ids).
    A malformed payload raises each time (exceptions are not cached)."""
    return parse_message(queue_name, payload)
