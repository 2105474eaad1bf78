"""One orchestrator delivery: load, replay, write what the workflow waits for, run steps.

:meth:`Engine.deliver <durasim.runtime.lowlevel.Engine.deliver>` runs one
(:func:`run_delivery` is its steps).  A delivery (one queue message for a run) does, in order:

1. load the whole log (paged) with its snapshot ``(seq, seq_in_band)``;
2. stop if the run is terminal; write ``run_started`` if the log has none;
3. complete every wait that is due (``wait_completed``);
4. replay the workflow over the log (:class:`Replay`);
5. then, until nothing is runnable: write the commands the workflow issued past
   the end of the log (``step_created`` / ``wait_created``, one batch, where a
   step about to run inline is created running: ``step_started`` rides along),
   run open steps inline (the body, then its outcome), and feed every event it
   writes to the SAME live replay — the workflow is never replayed from
   the top again within a delivery, so an n-step loop costs O(n);
6. finish with ``run_completed`` / ``run_failed``, or suspend: queue a wake-up
   for the earliest due wait or retry, and return.

Every write is in-band: it carries the count of in-band events this delivery
has seen, so a delivery that lost the run to another (its lease expired) is
refused (:class:`InBandSuperseded`) before it writes anything, and stops.  If a
write reports events the delivery had not seen (an out-of-band writer landed
first), the live replay is dropped and the log replayed cold: it is logged, with
its reason, and counted in :attr:`DeliveryReport.full_replays`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

import attrs

from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    CorruptedLog,
    Event,
    EventRequest,
    Types,
    World,
)

from ._authoring import find_workflow
from ._children import PARENT_ATTR
from ._delivery import RunDelivery
from ._errors import ReplayDivergence
from ._metadata import WorkflowMetadata
from ._replay import Replay
from ._settlement import DeliveryStatus
from ._versions import VersionPolicy, run_deployment
from ._wake import enqueue_wake
from ._writer import InBandWriter, Kept, fail_unfenced
from .serialization import FatalError

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["DeliveryReport", "Limits", "load_log", "run_delivery"]

log = logging.getLogger("durasim.runtime")

#: The statuses as module globals: an enum member read through its class is slow.
_FINISHED = DeliveryStatus.FINISHED
_RETRY = DeliveryStatus.RETRY
_SUPERSEDED = DeliveryStatus.SUPERSEDED
_SUSPENDED = DeliveryStatus.SUSPENDED
_UNAVAILABLE = DeliveryStatus.UNAVAILABLE


@attrs.frozen(kw_only=True)
class Limits:
    """Per-run limits; each failure writes ``run_failed`` with its error code.

    Attributes:
        max_events: events a run may hold (``MAX_EVENTS_EXCEEDED``).
        max_deliveries: deliveries of one message before the run fails
            (``MAX_DELIVERIES_EXCEEDED``).
        max_divergences: recovery replays after a divergence before the run fails
            (``CORRUPTED_EVENT_LOG``).
        inline_steps: step bodies a delivery runs at once.
        replay_budget: seconds of workflow code (replay, not step bodies) one
            delivery may spend; past it, once it has made progress, the delivery
            hands the run over to a fresh one (a new message, due now).
        sync_steps: ``"auto"`` (the default) runs sync step bodies in a step
            thread, except the bodies of a function whose last
            :data:`~durasim.runtime._step_threads.INLINE_AFTER` bodies each ended
            within :data:`~durasim.runtime._step_threads.INLINE_BELOW` (0.5 ms):
            those run on the loop, with no hand-off, while no other body is out in
            a thread; one that then takes longer sends its function back to the
            thread.  ``"thread"`` always hands sync bodies to a thread, keeping
            the worker's loop responsive whatever they do; ``"inline"`` always runs
            them on the loop.  Leases are renewed off the loop either way (the
            heartbeat thread); a body that blocks the loop only delays the other
            deliveries on it, and is named in a warning after
            ``warn_blocked_after``.
        queue_steps: new steps beyond ``inline_steps`` go through the queue, to
            be run by any worker (nested steps always run inline).
        keep_replays: keep a suspended run's live replay in this process, so its
            next delivery here reads only the new events and continues it
            instead of replaying the log from the top (up to
            :data:`~durasim.runtime.lowlevel.KEPT_REPLAYS` runs per World).
    """

    max_events: int = 25_000
    max_deliveries: int = 48
    max_divergences: int = 3
    inline_steps: int = 8
    replay_budget: float = 240.0
    sync_steps: str = attrs.field(default="auto")
    queue_steps: bool = False
    keep_replays: bool = True

    @sync_steps.validator
    def _check_sync_steps(self, attribute: object, value: str) -> None:
        if value not in ("auto", "thread", "inline"):
            raise ValueError(f"sync_steps={value!r}: pass 'auto', 'thread' or 'inline'")


@attrs.define
class DeliveryReport:
    """What one delivery did (for workers, tests and benchmarks)."""

    run_id: str
    status: DeliveryStatus = DeliveryStatus.SUSPENDED
    events_written: int = 0
    steps_run: int = 0
    full_replays: int = 0
    wake_at: datetime | None = None
    divergences: int = 0
    divergence: str = ""  # what the last divergence said (both sides, the likely causes)
    #: The run's parent as this delivery read the run (or kept it) before replaying:
    #: ``""`` when it has none, ``None`` when the run was not read.  Only ``run_created``
    #: sets it.  (Not the run itself: a worker keeps its last reports.)
    parent: str | None = None


async def load_log(world: World, run_id: str, *, after_seq: int = 0) -> tuple[list[Event], int]:
    """The run's events after ``after_seq``, in order, and how many of them are in-band."""
    page = await world.events.list(run_id, after_seq=after_seq, limit=5000)
    events = list(page.events)
    while page.has_more:
        page = await world.events.list(run_id, after_seq=page.next_after, limit=5000)
        events.extend(page.events)
    # The fence count is the in-band events of exactly the prefix we hold: if
    # another orchestrator wrote past it, our first write is refused, as it must be.
    in_band = 0
    for event in events:
        if event.in_band:
            in_band += 1
    return events, in_band


def _terminal(events: list[Event]) -> Event | None:
    for event in events:
        if event.type in RUN_TERMINAL_TYPES:
            return event
    return None


def _first_started(events: list[Event]) -> Event | None:
    """The log's ``run_started`` (second in a log the runtime wrote), if it holds one."""
    for event in events:
        if event.type is Types.RUN_STARTED:
            return event
    return None


async def run_delivery(
    engine: Engine,
    run_id: str,
    limits: Limits,
    report: DeliveryReport,
    *,
    attempt: int,
    min_seq: int = 0,
    versions: VersionPolicy | None = None,
) -> None:
    """The steps of one delivery (the module docstring), filling in ``report``.

    ``versions``: the versions this delivery's worker serves; a run of another
    one (migrated since its message was queued) is not delivered: its wake-up
    moves to its version's queue.

    Raises what ends a delivery early (:class:`Superseded`, a divergence met while
    writing, :class:`RunExpired`, :class:`RunNotFound`); :meth:`Engine.deliver`
    turns those into the report's status.
    """
    world = engine.world
    kept = engine.take_kept(run_id) if limits.keep_replays else None
    if kept is not None:
        run = kept.run  # its name and input never change; the log read below shows an end
    else:
        run = await world.runs.get(run_id)
    report.parent = run.attributes.get(PARENT_ATTR) or ""
    if kept is None and run.status.terminal:
        # Ended (a redelivery, a wake-up queued before the end, a cancel): the run
        # row is the fold of the log, so the log need not be read.
        report.status = _FINISHED
        return
    held = len(kept.events) if kept is not None else 0
    try:
        if kept is not None:
            # Only the events since the last delivery: the log is append-only,
            # and the kept list is this delivery's to extend (it was taken).
            new, new_in_band = await load_log(world, run_id, after_seq=held)
            events, seq_in_band = kept.events, kept.in_band + new_in_band
            events.extend(new)
        else:
            new, seq_in_band = await load_log(world, run_id)
            events = new
    except CorruptedLog as exc:
        await fail_unfenced(world, run_id, exc, "CORRUPTED_EVENT_LOG")
        report.status = _FINISHED
        return
    if _terminal(new) is not None:  # a kept prefix holds no end: it was kept suspended
        report.status = _FINISHED
        return
    if versions is not None:
        if kept is not None and versions.moved(new):
            run = await world.runs.get(run_id)  # migrated since it was kept
        if not versions.serves(run):
            pinned = run_deployment(run)
            log.warning(
                "run %s is pinned to version %s; this worker serves %s: leaving it to that "
                "version's workers",
                run_id,
                pinned,
                ", ".join(versions.served()) or "no version",
            )
            await enqueue_wake(
                world, run_id, key=f"moved:{run_id}:{len(events)}", seq=min_seq, deployment=pinned
            )
            report.status = _FINISHED
            return
    if len(events) < min_seq:
        log.info(
            "run %s: the log read ends at #%d, before #%d this delivery was woken for (a stale "
            "read); giving the message back",
            run_id,
            len(events),
            min_seq,
        )
        if kept is not None:
            del events[held:]
            engine.keep(run_id, kept)  # still valid: it covers a prefix of what was read
        report.status = _UNAVAILABLE
        return
    writer = InBandWriter(world, run_id, events, seq_in_band)
    delivery = RunDelivery(world, writer, limits, report)
    delivery.deployment = run_deployment(run)  # its wake-ups go to its version's queue
    if attempt > limits.max_deliveries:
        await delivery.fail(
            FatalError(f"run {run_id} exceeded {limits.max_deliveries} deliveries of one message"),
            "MAX_DELIVERIES_EXCEEDED",
        )
        report.status = _FINISHED
        return
    try:
        definition = find_workflow(run.workflow_name)
    except LookupError as exc:
        # Another worker may have the code: give the message back (after
        # max_deliveries the run fails above, MAX_DELIVERIES_EXCEEDED).
        log.error("run %s: %s; leaving it to a worker that has it", run_id, exc)
        report.status = _UNAVAILABLE
        return
    begun = _first_started(events)
    if begun is None:
        await writer.write(EventRequest.of("run_started"))
        begun = next(e for e in events if e.type is Types.RUN_STARTED)
    started = begun.created_at
    delivery.metadata = WorkflowMetadata(
        run_id=run_id,
        workflow_id=definition.workflow_id,
        started_at=started,
        execution_context=run.execution_context,
    )
    while True:
        replay: Replay | ReplayDivergence | None = delivery.resume_kept(kept, definition)
        kept = None
        if replay is None:
            replay = delivery.replay_cold(definition, run, started)
            report.full_replays += 1
        if isinstance(replay, ReplayDivergence):
            report.divergences += 1
            report.divergence = str(replay)
            if report.divergences > limits.max_divergences:
                error = FatalError(
                    f"replay of run {run_id} diverged {report.divergences} times "
                    f"({limits.max_divergences} recovery replays): {replay}"
                )
                error.__cause__ = replay
                await delivery.fail(error, "CORRUPTED_EVENT_LOG")
                report.status = _FINISHED
            else:
                report.status = _RETRY
            return
        writer.replay = replay
        writer.stale = False
        written_before = writer.written
        outcome = await delivery.drive(replay)
        if outcome != "stale":
            report.events_written = writer.written
            if limits.keep_replays and report.status == "suspended" and delivery.settled(replay):
                engine.keep(run_id, Kept(replay, writer.events, writer.expected, run))
            return
        # A write was refused or met another writer's events: read what landed
        # since, so the cold replay starts from the log as it is now.  (A refused
        # write absorbs nothing: replaying the same prefix again would make the
        # same write and meet the same refusal, forever.)
        landed, landed_in_band = await load_log(world, run_id, after_seq=len(writer.events))
        writer.events.extend(landed)
        writer.expected += landed_in_band
        if _terminal(landed) is not None:
            report.events_written = writer.written
            report.status = _FINISHED
            return
        if not landed and writer.written == written_before:
            # Refused, yet the log shows nothing new (a World whose reads lag its
            # refusals): give the message back rather than spin on one prefix.
            log.info(
                "run %s: a write was refused and the log shows why not; retrying later", run_id
            )
            report.events_written = writer.written
            report.status = _RETRY
            return
        log.info(
            "run %s: events from another writer landed amid this delivery's writes; "
            "replaying the log from the top (full replay #%d)",
            run_id,
            report.full_replays + 1,
        )
