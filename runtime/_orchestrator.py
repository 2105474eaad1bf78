"""One orchestrator delivery: load, replay, write what the workflow waits for, run steps.

A delivery (one queue message for a run) does, in order:

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

import asyncio
import contextlib
import json
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from durasim.worlds import (
    CorruptedLog,
    EntityConflict,
    Event,
    EventRequest,
    EventType,
    InBandSuperseded,
    Payload,
    Run,
    RunExpired,
    RunNotFound,
    StaleView,
    World,
)

from ._authoring import find_workflow
from ._children import notify_parent
from ._errors import ReplayDivergence
from ._metadata import STEP_WORLD, WorkflowMetadata
from ._replay import (
    BATCHABLE,
    AttrCommand,
    Command,
    DisposeCommand,
    HookCommand,
    Replay,
    StepCommand,
    StepState,
    WaitCommand,
    WaitState,
)
from ._signals import mark_cancelled
from ._steps import StepOutcome, execute_step, exhausted
from ._wake import ORCHESTRATOR_QUEUE, QUEUE_PREFIX, STEP_QUEUE, enqueue_wake, wake_message
from .serialization import FatalError, SerializationError, serialize

__all__ = [
    "ORCHESTRATOR_QUEUE",
    "QUEUE_PREFIX",
    "STEP_QUEUE",
    "DeliveryReport",
    "Limits",
    "deliver",
    "enqueue_wake",
    "wake_message",
]

log = logging.getLogger("durasim.runtime")

T = EventType


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
        sync_steps: ``"thread"`` runs sync step bodies in a thread, keeping the
            worker's loop (and its lease renewals) responsive; ``"inline"`` runs
            them on the loop, saving the hop (~25-60 us a step here) but a body
            longer than the lease lets another worker take the run over (the fence
            keeps the log right; the body then runs twice).
        queue_steps: new steps beyond ``inline_steps`` go through the queue, to
            be run by any worker (nested steps always run inline).
        keep_replays: keep a suspended run's live replay in this process, so its
            next delivery here reads only the new events and continues it
            instead of replaying the log from the top (up to
            :data:`KEPT_REPLAYS` runs per World).
    """

    max_events: int = 25_000
    max_deliveries: int = 48
    max_divergences: int = 3
    inline_steps: int = 8
    replay_budget: float = 240.0
    sync_steps: str = attrs.field(default="thread")
    queue_steps: bool = False
    keep_replays: bool = True

    @sync_steps.validator
    def _check_sync_steps(self, attribute: object, value: str) -> None:
        if value not in ("thread", "inline"):
            raise ValueError(f"sync_steps={value!r}: pass 'thread' or 'inline'")


@attrs.define
class DeliveryReport:
    """What one delivery did (for workers, tests and benchmarks)."""

    run_id: str
    status: str = "suspended"  # suspended | finished | superseded | retry | unavailable
    events_written: int = 0
    steps_run: int = 0
    full_replays: int = 0
    wake_at: datetime | None = None
    divergences: int = 0
    divergence: str = ""  # what the last divergence said (both sides, the likely causes)


class _Superseded(Exception):
    """Another delivery owns the run: stop without writing anything more."""


class _Writer:
    """This delivery's in-band writes, with the log and the live replay kept in step."""

    def __init__(self, world: World, run_id: str, events: list[Event], seq_in_band: int) -> None:
        self.world = world
        self.run_id = run_id
        self.events = events
        self.expected = seq_in_band
        self.replay: Replay | None = None
        self.stale = False  # another writer's events landed amid ours, past the replay
        self.ended = False  # the log holds a terminal event (e.g. a cancel landed)
        self.written = 0
        self.lock = asyncio.Lock()

    async def write(self, request: EventRequest) -> Event | None:
        """One in-band event; ``None`` if the World appended nothing (a tolerated repeat)."""
        written = await self._commit([request], batch=False)
        return written[0] if written else None

    async def write_batch(
        self,
        requests: list[EventRequest],
        *,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> list[Event]:
        """In-band events at consecutive positions, atomically."""
        return await self._commit(
            requests, batch=True, occurred_at=occurred_at, expected_seq=expected_seq
        )

    async def _commit(
        self,
        requests: list[EventRequest],
        *,
        batch: bool,
        occurred_at: datetime | None = None,
        expected_seq: int | None = None,
    ) -> list[Event]:
        async with self.lock:
            expected, seen = self.expected, len(self.events)
            try:
                if batch:
                    many = await self.world.events.create_batch(
                        self.run_id,
                        requests,
                        in_band=True,
                        expected_seq_in_band=expected,
                        seen_seq=seen,
                        occurred_at=occurred_at,
                        expected_seq=expected_seq,
                    )
                    unseen, mine = many.unseen, list(many.events)
                else:
                    one = await self.world.events.create(
                        self.run_id,
                        requests[0],
                        in_band=True,
                        expected_seq_in_band=expected,
                        seen_seq=seen,
                    )
                    unseen = one.unseen
                    mine = [one.event] if one.allocated and one.event is not None else []
            except InBandSuperseded as exc:
                raise _Superseded(str(exc)) from exc
            self.expected += len(mine)
            self._absorb(unseen, mine)
            return mine

    def _absorb(self, unseen: tuple[Event, ...], mine: list[Event]) -> None:
        if unseen:
            self.ended = self.ended or any(e.type in _TERMINAL for e in unseen)
            # Another writer's events landed first.  A replay that has consumed
            # only what this delivery had seen takes them in log order, as a cold
            # replay would; one that ran ahead (fed an event provisionally) cannot.
            if self.replay is None or self.replay.consumed > len(self.events) or self.ended:
                self.stale = True
        self.written += len(mine)
        for event in (*unseen, *mine):
            self.events.append(event)
            # Events the replay already consumed were handed to it ahead of their
            # commit (run-ahead); the caller compares them with what committed.
            if self.replay is not None and not self.stale and event.seq > self.replay.consumed:
                self.replay.deliver(event)


@attrs.define(eq=False)
class _Kept:
    """A suspended run's live replay, kept by this process for its next delivery."""

    replay: Replay
    events: list[Event]
    in_band: int
    run: Run


#: Suspended runs whose replay a process keeps, per World (least recently used dropped).
KEPT_REPLAYS = 256
_kept: weakref.WeakKeyDictionary[World, OrderedDict[str, _Kept]] = weakref.WeakKeyDictionary()


def _take_kept(world: World, run_id: str) -> _Kept | None:
    try:
        return _kept.get(world, OrderedDict()).pop(run_id, None)
    except TypeError:  # a World that cannot be weakly referenced: nothing is kept
        return None


def _keep(world: World, run_id: str, kept: _Kept) -> None:
    try:
        runs = _kept.setdefault(world, OrderedDict())
    except TypeError:
        return
    runs[run_id] = kept
    while len(runs) > KEPT_REPLAYS:
        runs.popitem(last=False)


def forget_kept_replays(world: World) -> None:
    """Drop every replay this process keeps for ``world`` (tests, memory pressure)."""
    with contextlib.suppress(TypeError):
        _kept.pop(world, None)


async def load_log(world: World, run_id: str, *, after_seq: int = 0) -> tuple[list[Event], int]:
    """The run's events after ``after_seq``, in order, and how many of them are in-band."""
    page = await world.events.list(run_id, after_seq=after_seq, limit=5000)
    events = list(page.events)
    while page.has_more:
        page = await world.events.list(run_id, after_seq=page.next_after, limit=5000)
        events.extend(page.events)
    # The fence count is the in-band events of exactly the prefix we hold: if
    # another orchestrator wrote past it, our first write is refused, as it must be.
    return events, sum(1 for e in events if e.in_band)


_TERMINAL = frozenset({T.RUN_COMPLETED, T.RUN_FAILED, T.RUN_CANCELLED})


def _terminal(events: list[Event]) -> Event | None:
    return next((e for e in events if e.type in _TERMINAL), None)


async def deliver(
    world: World,
    run_id: str,
    *,
    limits: Limits | None = None,
    attempt: int = 1,
    divergences: int = 0,
    min_seq: int = 0,
) -> DeliveryReport:
    """Run one orchestrator delivery for ``run_id`` (see the module docstring).

    ``min_seq``: the position the message's sender wrote (a hook payload, a
    queued step's outcome); if the log read ends before it, the World served a
    stale prefix, and the delivery gives the message back (``unavailable``)
    instead of suspending without having seen what it was woken for.
    """
    limits = limits or Limits()
    report = DeliveryReport(run_id=run_id, divergences=divergences)
    try:
        await _deliver(world, run_id, limits, report, attempt=attempt, min_seq=min_seq)
    except _Superseded as exc:
        log.info("run %s: this delivery was superseded (%s); stopping", run_id, exc)
        report.status = "superseded"
        # Another delivery may own the run, or this one read a stale prefix and
        # nobody does: a wake-up that must read the log at least as far as the
        # refusal saw it makes sure the run goes on either way (deduplicated).
        seen = int(getattr(exc.__cause__, "seq", 0) or 0)
        await enqueue_wake(world, run_id, key=f"superseded:{run_id}:{seen}", delay=1.0, seq=seen)
    except ReplayDivergence as exc:
        # Met while feeding this delivery's own writes to the live replay.
        log.warning("%s", exc)
        report.divergences += 1
        report.divergence = str(exc)
        report.status = "retry"
    except RunExpired:
        report.status = "finished"
    except RunNotFound:
        log.warning("run %s does not exist; dropping its message", run_id)
        report.status = "finished"
        return report
    if report.status == "finished":
        # Also on a redelivery of an ended run: a crash between the end and this
        # hand-over must not leave a parent waiting forever.
        await notify_parent(world, run_id)
    return report


async def _deliver(
    world: World,
    run_id: str,
    limits: Limits,
    report: DeliveryReport,
    *,
    attempt: int,
    min_seq: int = 0,
) -> None:
    kept = _take_kept(world, run_id) if limits.keep_replays else None
    if kept is not None:
        run = kept.run  # its name and input never change; the log read below shows an end
    else:
        run = await world.runs.get(run_id)
        if run.status.terminal:
            # Ended (a redelivery, a wake-up queued before the end, a cancel): the
            # run row is the fold of the log, so the log need not be read.
            report.status = "finished"
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
        await _fail_unfenced(world, run_id, exc, "CORRUPTED_EVENT_LOG")
        report.status = "finished"
        return
    if _terminal(new) is not None:  # a kept prefix holds no end: it was kept suspended
        report.status = "finished"
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
            _keep(world, run_id, kept)  # still valid: it covers a prefix of what was read
        report.status = "unavailable"
        return
    writer = _Writer(world, run_id, events, seq_in_band)
    if attempt > limits.max_deliveries:
        await _fail(
            writer,
            FatalError(f"run {run_id} exceeded {limits.max_deliveries} deliveries of one message"),
            "MAX_DELIVERIES_EXCEEDED",
        )
        report.status = "finished"
        return
    try:
        definition = find_workflow(run.workflow_name)
    except LookupError as exc:
        # Another worker may have the code: give the message back (after
        # max_deliveries the run fails above, MAX_DELIVERIES_EXCEEDED).
        log.error("run %s: %s; leaving it to a worker that has it", run_id, exc)
        report.status = "unavailable"
        return
    if not any(e.type is T.RUN_STARTED for e in events):
        await writer.write(EventRequest.of("run_started"))
    started = next(e for e in events if e.type is T.RUN_STARTED).created_at
    metadata = WorkflowMetadata(
        run_id=run_id, workflow_id=definition.workflow_id, started_at=started
    )
    while True:
        replay: Replay | ReplayDivergence | None = _resume_kept(kept, definition, writer)
        kept = None
        if replay is None:
            replay = _replay_cold(definition, run, writer, started)
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
                await _fail(writer, error, "CORRUPTED_EVENT_LOG")
                report.status = "finished"
            else:
                report.status = "retry"
            return
        writer.replay = replay
        writer.stale = False
        written_before = writer.written
        outcome = await _drive(world, writer, replay, limits, report, metadata)
        if outcome != "stale":
            report.events_written = writer.written
            if limits.keep_replays and report.status == "suspended" and _settled(writer, replay):
                _keep(world, run_id, _Kept(replay, writer.events, writer.expected, run))
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
            report.status = "finished"
            return
        if not landed and writer.written == written_before:
            # Refused, yet the log shows nothing new (a World whose reads lag its
            # refusals): give the message back rather than spin on one prefix.
            log.info(
                "run %s: a write was refused and the log shows why not; retrying later", run_id
            )
            report.events_written = writer.written
            report.status = "retry"
            return
        log.info(
            "run %s: events from another writer landed amid this delivery's writes; "
            "replaying the log from the top (full replay #%d)",
            run_id,
            report.full_replays + 1,
        )


def _settled(writer: _Writer, replay: Replay) -> bool:
    """Whether the replay has consumed exactly the log this delivery holds."""
    return not writer.stale and not writer.ended and replay.consumed == len(writer.events)


def _resume_kept(kept: _Kept | None, definition: Any, writer: _Writer) -> Replay | None:
    """The kept replay fed the events since it was kept, or ``None`` (replay cold)."""
    if kept is None or kept.replay.definition is not definition:
        return None
    replay = kept.replay
    replay.busy_seconds = 0.0  # the budget is per delivery
    try:
        for event in writer.events[replay.consumed :]:
            if event.type in _TERMINAL:
                break
            replay.deliver(event)
    except ReplayDivergence as exc:
        log.info("run %s: the kept replay diverged (%s); replaying cold", writer.run_id, exc)
        return None
    return replay


def _replay_cold(
    definition: Any, run: Any, writer: _Writer, started: datetime
) -> Replay | ReplayDivergence:
    replay = Replay(definition, run_id=writer.run_id, input=run.input, started_at=started)
    replay.preload(writer.events)
    try:
        replay.begin()
        for event in writer.events:
            if event.type in (T.RUN_COMPLETED, T.RUN_FAILED, T.RUN_CANCELLED):
                break
            replay.deliver(event)
    except ReplayDivergence as exc:
        log.warning("%s", exc)
        writer.replay = None
        return exc
    return replay


async def _drive(  # noqa: PLR0917 -- one private call site
    world: World,
    writer: _Writer,
    replay: Replay,
    limits: Limits,
    report: DeliveryReport,
    metadata: WorkflowMetadata,
) -> str:
    running: dict[asyncio.Task[StepOutcome | None], StepState] = {}
    starts: list[tuple[StepState, Event]] = []

    def launch(written: list[Event]) -> None:
        """Note the steps these events created running: their bodies start below."""
        for event in written:
            if event.type is T.STEP_STARTED and not writer.stale:
                starts.append((replay.steps[event.correlation_id or ""], event))
                report.steps_run += 1

    async def handle(outcome: StepOutcome | None, *, last: bool) -> bool:
        """Record a body's outcome; whether the run ended."""
        if outcome is None or writer.stale:
            return False
        if last and replay.busy_seconds <= limits.replay_budget:
            # Nothing else in flight: hand the outcome to the workflow first
            # and commit it with whatever the workflow does next (one commit).
            return await _commit_ahead(world, writer, replay, outcome.request, limits, launch)
        await _write_outcome(writer, outcome.request)
        return False

    written_before = writer.written
    due = _due_waits(world, writer, replay)
    if len(due) == 1 and replay.busy_seconds <= limits.replay_budget:
        # One timer fired (a sleep): its completion commits with what follows.
        request = EventRequest.of("wait_completed", due[0].correlation_id)
        # The World stamps the completion with the wait's resume_at.
        data = request.data.replace(resume_at=due[0].resume_at)
        if await _commit_ahead(world, writer, replay, request, limits, launch, data=data):
            report.status = "finished"
            return "done"
    else:
        for wait in due:
            if not writer.stale:
                await writer.write(EventRequest.of("wait_completed", wait.correlation_id))
    try:
        while True:
            if writer.ended:
                report.status = "finished"  # cancelled meanwhile: stop at this boundary
                return "done"
            if writer.stale:
                return "stale"
            if (
                not running
                and writer.written > written_before
                and replay.busy_seconds > limits.replay_budget
                and not replay.done
            ):
                # Over budget, and this delivery made progress: a fresh delivery
                # (replaying cold, with a fresh budget) takes over at once.
                log.info(
                    "run %s: %.1f s of replay in this delivery; handing over",
                    writer.run_id,
                    replay.busy_seconds,
                )
                await enqueue_wake(
                    world, writer.run_id, key=f"handover:{writer.run_id}:{len(writer.events)}"
                )
                report.wake_at = world.clock.now()
                report.status = "suspended"
                return "done"
            if len(writer.events) >= limits.max_events:
                await _fail(
                    writer,
                    FatalError(f"run {writer.run_id} reached {limits.max_events} events"),
                    "MAX_EVENTS_EXCEEDED",
                )
                report.status = "finished"
                return "done"
            if replay.done:
                await _finish(writer, replay)
                report.status = "finished"
                return "done"
            commands = replay.new_commands()
            if commands:
                await _write_commands(
                    world, writer, commands, limits.inline_steps - len(running), limits, launch
                )
                continue
            if len(starts) == 1 and not running:
                # The one step in flight (a sequential workflow): run its body in
                # this task, with no task to create and no wait to wake from.
                state, started = starts.pop()
                outcome = await _run_step(writer, state, metadata, world, limits, started=started)
                if await handle(outcome, last=True):
                    report.status = "finished"
                    return "done"
                continue
            for state, started in starts:
                task = asyncio.ensure_future(
                    _run_step(writer, state, metadata, world, limits, started=started)
                )
                running[task] = state
            starts.clear()
            now = world.clock.now()
            busy = set(running.values())
            for state in replay.open_steps():
                if len(running) >= limits.inline_steps:
                    break
                if not state.inline or state in busy:
                    continue  # queued steps are run by whichever worker claims them
                if state.retry_after is not None and state.retry_after > now:
                    continue
                task = asyncio.ensure_future(_run_step(writer, state, metadata, world, limits))
                running[task] = state
                report.steps_run += 1
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            finished = sorted(done, key=lambda t: running[t].created_seq)
            for task in finished:
                del running[task]
            for task in finished:
                outcome = task.result()  # re-raises _Superseded and infrastructure errors
                if await handle(outcome, last=task is finished[-1] and not running):
                    report.status = "finished"
                    return "done"
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    # A queued step not started yet may have lost its message (at-least-once
    # queues lose none, but a crashed enqueue or an operator can): dispatch it
    # again; the idempotency key makes this a no-op while the message exists.
    await _dispatch(
        world,
        writer.run_id,
        [s.correlation_id for s in replay.open_steps() if not s.inline and s.attempts == 0],
    )
    report.wake_at = await _schedule_wake(world, writer, replay)
    report.status = "suspended"
    return "done"


async def _run_step(
    writer: _Writer,
    state: StepState,
    metadata: WorkflowMetadata,
    world: World,
    limits: Limits,
    *,
    started: Event | None = None,
) -> StepOutcome | None:
    """Run one attempt inline: ``step_started`` (unless ``started`` was batched), body, outcome."""
    if started is None:
        started = await writer.write(EventRequest.of("step_started", state.correlation_id))
    if started is None or writer.stale:
        return None
    attempt = int(started.data.get("attempt", 1))
    if attempt > state.definition.max_retries + 1:
        outcome = exhausted(state.definition, state.correlation_id, attempt)
    else:
        token = STEP_WORLD.set(world)
        try:
            outcome = await execute_step(
                state.definition,
                state.correlation_id,
                state.input,
                attempt=attempt,
                now=world.clock.now(),
                workflow=metadata,
                sync_in_thread=limits.sync_steps == "thread",
                payloads=writer.replay.payloads if writer.replay is not None else None,
            )
        finally:
            STEP_WORLD.reset(token)
    return outcome


async def _write_outcome(writer: _Writer, request: EventRequest) -> None:
    # EntityConflict: the step already has an outcome (a concurrent executor won).
    with contextlib.suppress(EntityConflict):
        await writer.write(request)


async def _commit_ahead(  # noqa: PLR0917 -- one private call site
    world: World,
    writer: _Writer,
    replay: Replay,
    request: EventRequest,
    limits: Limits,
    launch: Callable[[list[Event]], None],
    *,
    data: Payload | None = None,
) -> bool:
    """Run ahead: feed an outcome before it commits, commit it with what follows.

    ``request`` is a step's outcome or a due wait's ``wait_completed`` (``data``:
    what the event will carry, when the World adds to the request's).  It is
    delivered to the live workflow as the event it will become
    (next position, this moment as its time); the workflow's next commands (or
    its end) are batched behind it, and the batch is written strictly: with the
    time the workflow saw (``occurred_at``) and only if nothing else landed
    (``expected_seq``).  If something did, the outcome is written alone and the
    log replayed cold.  Returns whether the run ended.
    """
    at = world.clock.now()
    provisional = Event(
        run_id=writer.run_id,
        seq=len(writer.events) + 1,
        type=request.type,
        created_at=at,
        correlation_id=request.correlation_id,
        in_band=True,
        data=request.data if data is None else data,
    )
    try:
        replay.deliver(provisional)
    except ReplayDivergence as exc:
        log.warning("%s", exc)
        await _write_outcome(writer, request)
        writer.stale = True
        return False
    requests = [request]
    queued: list[str] = []
    if replay.done:
        requests.append(_terminal_request(replay))
    else:
        # Only what may share a batch rides along; a hook or an attribute change
        # (and everything after it) is written by the main loop, alone.
        commands = replay.new_commands()
        cut = next((i for i, c in enumerate(commands) if not isinstance(c, BATCHABLE)), None)
        batchable = [c for c in commands[:cut] if isinstance(c, BATCHABLE)]
        created, queued = _creations(batchable, limits.inline_steps, limits)
        requests += created
    try:
        written = await writer.write_batch(
            requests, occurred_at=at, expected_seq=provisional.seq - 1
        )
    except (StaleView, EntityConflict) as exc:
        log.info("run %s: could not run ahead (%s); writing the outcome alone", writer.run_id, exc)
        await _write_outcome(writer, request)
        writer.stale = True  # the replay saw the outcome at a position it may not have
        return False
    if not written or written[0] != provisional:
        writer.stale = True
        return False
    launch(written)
    await _dispatch(world, writer.run_id, queued)
    return replay.done


def _terminal_request(replay: Replay) -> EventRequest:
    ok, value = replay.outcome()
    if ok:
        try:
            return EventRequest.of("run_completed", output=serialize(value, root="workflow result"))
        except SerializationError as exc:
            value = exc
    return EventRequest.of("run_failed", error=_error_bytes(value), error_code="USER_ERROR")


async def _write_commands(  # noqa: PLR0917 -- one private call site
    world: World,
    writer: _Writer,
    commands: list[Command],
    capacity: int,
    limits: Limits,
    launch: Callable[[list[Event]], None],
) -> None:
    """Write the workflow's new commands in issue order.

    Runs of steps and waits go in one batch each (a new step that will run
    inline now is born running: its ``step_started`` rides along); hook
    creations, disposals and attribute changes are written alone (§7: their
    outcome must be seen alone, e.g. a ``hook_conflict`` in place of a
    ``hook_created``).
    """
    run: list[StepCommand | WaitCommand] = []

    async def flush() -> None:
        nonlocal capacity
        if not run:
            return
        requests, queued = _creations(run, capacity, limits)
        capacity -= sum(1 for r in requests if r.type is T.STEP_STARTED)
        launch(await writer.write_batch(requests))
        await _dispatch(world, writer.run_id, queued)
        run.clear()

    for command in commands:
        if isinstance(command, StepCommand | WaitCommand):
            run.append(command)
            continue
        await flush()
        if writer.stale or writer.ended:
            return
        await writer.write(_single_request(command))
        if isinstance(command, AttrCommand):
            for key, reason in command.changes:
                mark_cancelled(world, f"{writer.run_id}/{key}", reason or "")
    await flush()


def _single_request(command: HookCommand | DisposeCommand | AttrCommand) -> EventRequest:
    if isinstance(command, HookCommand):
        return EventRequest.of(
            "hook_created",
            command.correlation_id,
            token=command.token,
            metadata=command.metadata,
            is_webhook=command.is_webhook,
        )
    if isinstance(command, DisposeCommand):
        return EventRequest.of("hook_disposed", command.correlation_id)
    return EventRequest.of(
        "attr_set", command.correlation_id, changes=command.changes, writer="workflow"
    )


def _creations(
    commands: list[StepCommand | WaitCommand], capacity: int, limits: Limits
) -> tuple[list[EventRequest], list[str]]:
    """The writes that create ``commands``, and the steps among them to queue.

    Up to ``capacity`` new steps are born running (``step_started`` in the same
    batch) for this delivery to run inline; with ``queue_steps`` the others go
    to the queue, else they wait here for a free slot.
    """
    requests: list[EventRequest] = []
    queued: list[str] = []
    for command in commands:
        if not isinstance(command, StepCommand):
            requests.append(_request(command))
        elif capacity > 0:
            requests.append(_request(command))
            requests.append(EventRequest.of("step_started", command.correlation_id))
            capacity -= 1
        elif limits.queue_steps and command.definition.kind != "nested":
            requests.append(_request(command, inline=False))
            queued.append(command.correlation_id)
        else:
            requests.append(_request(command))
    return requests, queued


async def _dispatch(world: World, run_id: str, correlation_ids: list[str]) -> None:
    """Queue a message for each step created with ``inline=False``."""
    for correlation_id in correlation_ids:
        await world.queue.enqueue(
            STEP_QUEUE,
            json.dumps({"run": run_id, "step": correlation_id}, sort_keys=True).encode(),
            run_id=run_id,
            idempotency_key=f"step:{run_id}:{correlation_id}",
        )


def _request(command: StepCommand | WaitCommand, *, inline: bool = True) -> EventRequest:
    if isinstance(command, StepCommand):
        return EventRequest.of(
            "step_created",
            command.correlation_id,
            step_name=command.definition.step_id,
            input=command.input,
            inline=inline,
        )
    return EventRequest.of("wait_created", command.correlation_id, resume_at=command.resume_at)


def _due_waits(world: World, writer: _Writer, replay: Replay) -> list[WaitState]:
    """The due waits the workflow still awaits (the live replay says which), in order.

    A timer the workflow cancelled (a lost race, a timeout that no longer
    matters) is left alone: completing it would add an event no replay at a
    later time could reproduce.
    """
    if writer.stale:
        return []
    now = world.clock.now()
    return [
        wait
        for wait in sorted(replay.open_waits(), key=lambda w: (w.resume_at, w.order))
        if wait.resume_at <= now and not wait.handle.cancelled()
    ]


async def _schedule_wake(world: World, writer: _Writer, replay: Replay) -> datetime | None:
    """Queue the next delivery for the earliest due wait or step retry."""
    times = [w.resume_at for w in replay.open_waits() if not w.handle.cancelled()]
    times += [s.retry_after for s in replay.open_steps() if s.retry_after is not None]
    if not times:
        return None
    due = min(times)
    delay = max(0.0, (due - world.clock.now()).total_seconds())
    await enqueue_wake(
        world, writer.run_id, key=f"wake:{writer.run_id}:{due.isoformat()}", delay=delay
    )
    return due


async def _finish(writer: _Writer, replay: Replay) -> None:
    await writer.write(_terminal_request(replay))


async def _fail(writer: _Writer, error: BaseException, code: str) -> None:
    await writer.write(EventRequest.of("run_failed", error=_error_bytes(error), error_code=code))


async def _fail_unfenced(world: World, run_id: str, error: BaseException, code: str) -> None:
    """Fail a run whose log cannot be loaded (no fence count to write with)."""
    with contextlib.suppress(EntityConflict, RunExpired):
        await world.events.create(
            run_id, EventRequest.of("run_failed", error=_error_bytes(error), error_code=code)
        )


def _error_bytes(error: BaseException) -> bytes:
    try:
        return serialize(error, root="workflow error")
    except SerializationError:
        return serialize(FatalError(f"{type(error).__name__}: {error}"), root="workflow error")
