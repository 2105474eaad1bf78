"""A delivery under way: the steps of driving the workflow.

:class:`RunDelivery` is one orchestrator delivery after its log was loaded and
its workflow found (:func:`~durasim.runtime._orchestrator.run_delivery` does
that): it holds the delivery's :class:`~durasim.runtime._writer.InBandWriter`
(its fenced writes, see ``_writer``), limits and report, and its methods replay
the workflow, write what it issues, run its steps and schedule its next wake-up
(the module docstring of ``_orchestrator`` tells the whole story).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    EntityConflict,
    Event,
    EventRequest,
    EventType,
    Payload,
    StaleView,
    Types,
    World,
)
from durasim.worlds._events import (
    run_completed_request,
    step_created_request,
    step_started_request,
    wait_completed_request,
)

from ._errors import ReplayDivergence
from ._metadata import STEP_WORLD, WORKFLOW_METADATA, WorkflowMetadata
from ._replay import (
    BATCHABLE,
    AttrCommand,
    Command,
    DisposeCommand,
    HookCommand,
    PatchCommand,
    Replay,
    StepCommand,
    StepState,
    WaitCommand,
    WaitState,
)
from ._settlement import DeliveryStatus
from ._signals import mark_cancelled
from ._steps import StepOutcome, attempt_runner, exhausted, failures_log
from ._wake import enqueue_wake, pinned_queue
from ._writer import InBandWriter, Kept, error_bytes
from .serialization import FatalError, SerializationError, serialize
from .serialization._tracebacks import ErrorText

if TYPE_CHECKING:
    from ._orchestrator import DeliveryReport, Limits

__all__ = ["RunDelivery"]

log = logging.getLogger("durasim.runtime")

#: The statuses as module globals: an enum member read through its class is slow.
_FINISHED = DeliveryStatus.FINISHED
_SUSPENDED = DeliveryStatus.SUSPENDED


class _Provisional:
    """The event a run-ahead hands the live replay before it commits (once a step).

    What the replay reads of an :class:`Event` (its fields, its ``label``),
    without ``Event``'s construction: a frozen class sets each field through its
    slot's descriptor, about 7k instructions an event on CPython 3.11, against
    about 3.5k for this one.  The replay keeps nothing of it (its handlers note
    records by position); the event the World then commits must equal the
    ``Event`` of these fields (:func:`_same_as_provisional`).
    """

    __slots__ = ("correlation_id", "created_at", "data", "in_band", "run_id", "seq", "type")

    def __init__(  # noqa: PLR0917 -- positional: keywords cost a match each, once a step
        self,
        run_id: str,
        seq: int,
        type: EventType,
        created_at: datetime,
        correlation_id: str | None,
        data: Payload,
    ) -> None:
        self.run_id = run_id
        self.seq = seq
        self.type = type
        self.created_at = created_at
        self.correlation_id = correlation_id
        self.in_band = True
        self.data = data

    @property
    def label(self) -> str:
        """:attr:`Event.label`."""
        subject = f" {self.correlation_id}" if self.correlation_id else ""
        return f"#{self.seq} {self.type.value}{subject}"


class RunDelivery:
    """One orchestrator delivery of a run, under way.

    Args:
        world: the World written to.
        writer: the delivery's in-band writes (the log it holds, its fence count).
        limits: the run's limits.
        report: what the delivery did so far (filled in as it goes).
    """

    def __init__(
        self, world: World, writer: InBandWriter, limits: Limits, report: DeliveryReport
    ) -> None:
        self.world = world
        self.writer = writer
        self.limits = limits
        self.report = report
        #: The workflow's metadata, for step bodies (set once the run has started).
        self.metadata: WorkflowMetadata | None = None
        #: The version the run is pinned to: its messages go to that version's queues.
        self.deployment: str | None = None

    @property
    def workflow(self) -> WorkflowMetadata:
        """The workflow's metadata (steps run only after the run has started)."""
        if self.metadata is None:
            raise RuntimeError(f"run {self.writer.run_id}: a step ran before the run started")
        return self.metadata

    def settled(self, replay: Replay) -> bool:
        """Whether the replay has consumed exactly the log this delivery holds."""
        return (
            not self.writer.stale
            and not self.writer.ended
            and replay.consumed == len(self.writer.events)
        )

    def resume_kept(self, kept: Kept | None, definition: Any) -> Replay | None:
        """The kept replay fed the events since it was kept, or ``None`` (replay cold)."""
        if kept is None or kept.replay.definition is not definition:
            return None
        replay = kept.replay
        replay.busy_seconds = 0.0  # the budget is per delivery
        replay.preload(self.writer.events[replay.consumed :])  # tokens, patches, horizon
        try:
            for event in self.writer.events[replay.consumed :]:
                if event.type in RUN_TERMINAL_TYPES:
                    break
                replay.deliver(event)
        except ReplayDivergence as exc:
            log.info(
                "run %s: the kept replay diverged (%s); replaying cold", self.writer.run_id, exc
            )
            return None
        return replay

    def replay_cold(
        self, definition: Any, run: Any, started: datetime
    ) -> Replay | ReplayDivergence:
        replay = Replay(definition, run_id=self.writer.run_id, input=run.input, started_at=started)
        replay.preload(self.writer.events)
        try:
            replay.begin()
            for event in self.writer.events:
                if event.type in RUN_TERMINAL_TYPES:
                    break
                replay.deliver(event)
        except ReplayDivergence as exc:
            log.warning("%s", exc)
            self.writer.replay = None
            return exc
        return replay

    async def drive(self, replay: Replay) -> str:
        world, writer, limits, report = self.world, self.writer, self.limits, self.report
        running: dict[asyncio.Task[StepOutcome | None], StepState] = {}
        starts: list[tuple[StepState, Event]] = []

        step_started, steps = Types.STEP_STARTED, replay.steps
        # Constant for the delivery (Limits is frozen): read once.
        replay_budget, max_events = limits.replay_budget, limits.max_events
        sync_in_thread, quick_inline = limits.sync_steps != "inline", limits.sync_steps == "auto"

        def launch(written: Sequence[Event]) -> None:
            """Note the steps these events created running: their bodies start below."""
            if writer.stale:
                return
            for event in written:
                if event.type is step_started:
                    starts.append((steps[event.correlation_id or ""], event))
                    report.steps_run += 1

        async def handle(outcome: StepOutcome | None, *, last: bool) -> bool:
            """Record a body's outcome; whether the run ended."""
            if outcome is None or writer.stale:
                return False
            if last and replay.busy_seconds <= limits.replay_budget:
                # Nothing else in flight: hand the outcome to the workflow first
                # and commit it with whatever the workflow does next (one commit).
                return await self.commit_ahead(replay, outcome.request, launch)
            await self.write_outcome(outcome.request)
            return False

        # What every step body of this delivery reads (current_workflow(), the World),
        # set once for the whole drive, not per step: nothing but the runtime and the
        # World runs in this task between the bodies (workflow code runs in its own
        # task's context), and the tasks and threads made here copy it.
        world_token = STEP_WORLD.set(world)
        workflow_token = WORKFLOW_METADATA.set(self.metadata)
        try:
            written_before = writer.written
            due = self.due_waits(replay)
            if len(due) == 1 and replay.busy_seconds <= limits.replay_budget:
                # One timer fired (a sleep): its completion commits with what follows.
                request = wait_completed_request(due[0].correlation_id)
                # The World stamps the completion with the wait's resume_at.
                data = request.data.replace(resume_at=due[0].resume_at)
                if await self.commit_ahead(replay, request, launch, data=data):
                    report.status = _FINISHED
                    return "done"
            else:
                for wait in due:
                    if not writer.stale:
                        await writer.write(wait_completed_request(wait.correlation_id))
            try:
                while True:
                    if writer.ended:
                        # Cancelled meanwhile: stop at this boundary.
                        report.status = _FINISHED
                        return "done"
                    if writer.stale:
                        return "stale"
                    if (
                        not running
                        and writer.written > written_before
                        and replay.busy_seconds > replay_budget
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
                            world,
                            writer.run_id,
                            key=f"handover:{writer.run_id}:{len(writer.events)}",
                            deployment=self.deployment,
                        )
                        report.wake_at = world.clock.now()
                        report.status = _SUSPENDED
                        return "done"
                    if len(writer.events) >= max_events:
                        await self.fail(
                            FatalError(f"run {writer.run_id} reached {limits.max_events} events"),
                            "MAX_EVENTS_EXCEEDED",
                        )
                        report.status = _FINISHED
                        return "done"
                    if replay.done:
                        await self.finish(replay)
                        report.status = _FINISHED
                        return "done"
                    if replay._uncreated and (commands := replay.new_commands()):
                        capacity = limits.inline_steps - len(running)
                        await self.write_commands(commands, capacity, launch)
                        continue
                    if len(starts) == 1 and not running:
                        # The one step in flight (a sequential workflow): run its body in
                        # this task, with no task to create and no wait to wake from.
                        state, started = starts.pop()
                        # self.run_step(state, started=started), inlined: a coroutine less
                        # per step (the checks above left the writer fresh).
                        attempt = int(started.data.get("attempt", 1))
                        definition = state.definition
                        outcome: StepOutcome | None
                        if attempt > definition.max_retries + 1:
                            outcome = exhausted(definition, state.correlation_id, attempt)
                        else:
                            outcome = await attempt_runner()(
                                definition,
                                state.correlation_id,
                                state.input,
                                attempt=attempt,
                                now=world.clock.now(),
                                workflow=self.metadata or self.workflow,
                                sync_in_thread=sync_in_thread,
                                quick_inline=quick_inline,
                                payloads=(
                                    writer.replay.payloads if writer.replay is not None else None
                                ),
                            )
                        if (
                            outcome is not None
                            and not writer.stale
                            and replay.busy_seconds <= replay_budget
                        ):
                            ended = await self.commit_ahead(replay, outcome.request, launch)
                        else:
                            ended = await handle(outcome, last=True)
                        if ended:
                            report.status = _FINISHED
                            return "done"
                        continue
                    for state, started in starts:
                        task = asyncio.ensure_future(self.run_step(state, started=started))
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
                        task = asyncio.ensure_future(self.run_step(state))
                        running[task] = state
                        report.steps_run += 1
                    if not running:
                        break
                    done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    finished = sorted(done, key=lambda t: running[t].created_seq)
                    for task in finished:
                        del running[task]
                    for task in finished:
                        outcome = task.result()  # re-raises Superseded and infrastructure errors
                        if await handle(outcome, last=task is finished[-1] and not running):
                            report.status = _FINISHED
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
                self.deployment,
            )
            report.wake_at = await self.schedule_wake(replay)
            report.status = _SUSPENDED
            return "done"
        finally:
            WORKFLOW_METADATA.reset(workflow_token)
            STEP_WORLD.reset(world_token)

    async def run_step(
        self, state: StepState, *, started: Event | None = None
    ) -> StepOutcome | None:
        """Run one attempt inline: ``step_started`` (unless batched), body, outcome."""
        world, writer, limits = self.world, self.writer, self.limits
        if started is None:
            started = await writer.write(step_started_request(state.correlation_id))
        if started is None or writer.stale:
            return None
        attempt = int(started.data.get("attempt", 1))
        if attempt > state.definition.max_retries + 1:
            outcome = exhausted(state.definition, state.correlation_id, attempt)
        else:
            token = STEP_WORLD.set(world)
            try:
                # The attempt's coroutine function itself: execute_step's dispatch
                # without its frame (this runs once a step).
                outcome = await attempt_runner()(
                    state.definition,
                    state.correlation_id,
                    state.input,
                    attempt=attempt,
                    now=world.clock.now(),
                    workflow=self.workflow,
                    sync_in_thread=limits.sync_steps != "inline",
                    quick_inline=limits.sync_steps == "auto",
                    payloads=writer.replay.payloads if writer.replay is not None else None,
                )
            finally:
                STEP_WORLD.reset(token)
        return outcome

    async def write_outcome(self, request: EventRequest) -> None:
        # EntityConflict: the step already has an outcome (a concurrent executor won).
        with contextlib.suppress(EntityConflict):
            await self.writer.write(request)

    async def commit_ahead(
        self,
        replay: Replay,
        request: EventRequest,
        launch: Callable[[Sequence[Event]], None],
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
        world, writer, limits = self.world, self.writer, self.limits
        at = world.clock.now()
        provisional = _Provisional(
            writer.run_id,
            len(writer.events) + 1,
            request.type,
            at,
            request.correlation_id,
            request.data if data is None else data,
        )
        try:
            # Read as the Event it stands for (see _Provisional); no cast(): a call a step.
            replay.deliver(provisional)  # type: ignore[arg-type]
        except ReplayDivergence as exc:
            log.warning("%s", exc)
            await self.write_outcome(request)
            writer.stale = True
            return False
        requests = [request]
        queued: list[str] = []
        done = replay.done
        if done:
            requests.append(_terminal_request(replay))
        elif (step := replay.single_new_step()) is not None:
            # The commonest case: the workflow called its next step, nothing else.
            if limits.inline_steps > 0:
                # _creations([step], ...): born running, to run here
                correlation_id = step.correlation_id
                requests.append(
                    step_created_request(correlation_id, step.definition.step_id, step.input, True)
                )
                requests.append(step_started_request(correlation_id))
            else:
                created, queued = _creations([step], limits.inline_steps, limits)
                requests += created
        else:
            # Only what may share a batch rides along; a hook or an attribute change
            # (and everything after it) is written by the main loop, alone.
            batchable: list[StepCommand | WaitCommand] = []
            for command in replay.new_commands():
                if not isinstance(command, BATCHABLE):
                    break
                batchable.append(command)
            if batchable:
                created, queued = _creations(batchable, limits.inline_steps, limits)
                requests += created
        try:
            written = await writer.write_batch(
                requests, occurred_at=at, expected_seq=provisional.seq - 1
            )
        except (StaleView, EntityConflict) as exc:
            log.info(
                "run %s: could not run ahead (%s); writing the outcome alone",
                writer.run_id,
                exc,
            )
            await self.write_outcome(request)
            writer.stale = True  # the replay saw the outcome at a position it may not have
            return False
        if not written or (not _same_as_provisional(written[0], provisional)):
            writer.stale = True
            return False
        if requests[-1].type is Types.RUN_FAILED:
            _log_run_failed(writer.run_id, replay.outcome()[1], "USER_ERROR")
        launch(written)
        if queued:
            await _dispatch(world, writer.run_id, queued, self.deployment)
        return replay.done

    async def write_commands(
        self, commands: list[Command], capacity: int, launch: Callable[[Sequence[Event]], None]
    ) -> None:
        """Write the workflow's new commands in issue order.

        Runs of steps and waits go in one batch each (a new step that will run
        inline now is born running: its ``step_started`` rides along); hook
        creations, disposals and attribute changes are written alone (§7: their
        outcome must be seen alone, e.g. a ``hook_conflict`` in place of a
        ``hook_created``).
        """
        world, writer, limits = self.world, self.writer, self.limits
        run: list[StepCommand | WaitCommand] = []

        async def flush() -> None:
            nonlocal capacity
            if not run:
                return
            requests, queued = _creations(run, capacity, limits)
            capacity -= sum(1 for r in requests if r.type is Types.STEP_STARTED)
            launch(await writer.write_batch(requests))
            await _dispatch(world, writer.run_id, queued, self.deployment)
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

    def due_waits(self, replay: Replay) -> list[WaitState]:
        """The due waits the workflow still awaits (the live replay says which), in order.

        A timer the workflow cancelled (a lost race, a timeout that no longer
        matters) is left alone: completing it would add an event no replay at a
        later time could reproduce.
        """
        if self.writer.stale:
            return []
        now = self.world.clock.now()
        return [
            wait
            for wait in sorted(replay.open_waits(), key=lambda w: (w.resume_at, w.order))
            if wait.resume_at <= now and not wait.handle.cancelled()
        ]

    async def schedule_wake(self, replay: Replay) -> datetime | None:
        """Queue the next delivery for the earliest due wait or step retry."""
        times = [w.resume_at for w in replay.open_waits() if not w.handle.cancelled()]
        times += [s.retry_after for s in replay.open_steps() if s.retry_after is not None]
        if not times:
            return None
        due = min(times)
        delay = max(0.0, (due - self.world.clock.now()).total_seconds())
        await enqueue_wake(
            self.world,
            self.writer.run_id,
            key=f"wake:{self.writer.run_id}:{due.isoformat()}",
            delay=delay,
            deployment=self.deployment,
        )
        return due

    async def finish(self, replay: Replay) -> None:
        request = _terminal_request(replay)
        await self.writer.write(request)
        if request.type is Types.RUN_FAILED:
            _log_run_failed(self.writer.run_id, replay.outcome()[1], "USER_ERROR")

    async def fail(self, error: BaseException, code: str) -> None:
        await self.writer.write(
            EventRequest.of("run_failed", error=error_bytes(error), error_code=code)
        )
        _log_run_failed(self.writer.run_id, error, code)


def _same_event(event: Event, expected: Event) -> bool:
    """``event == expected``, field by field, the payload last and by identity first.

    (What ``Event.__eq__`` compares, without its two tuples; the World usually
    stores the very payload the request carried.)
    """
    return event is expected or _same_fields(event, expected, expected.__class__)


def _same_fields(event: Event, expected: Event | _Provisional, cls: type = Event) -> bool:
    """Whether ``event`` is a ``cls`` with ``expected``'s fields (``Event.__eq__``'s,
    the payload last)."""
    return (
        event.__class__ is cls
        and event.seq == expected.seq
        and event.type is expected.type
        and event.created_at == expected.created_at
        and event.correlation_id == expected.correlation_id
        and event.run_id == expected.run_id
        and event.in_band == expected.in_band
        and (event.data is expected.data or event.data == expected.data)
    )


#: :func:`_same_event` of an event and the ``Event`` of a provisional's fields: one
#: call, not two (once a step).
_same_as_provisional: Callable[[Event, _Provisional], bool] = _same_fields


def _log_run_failed(run_id: str, error: object, code: str) -> None:
    """The run's end, when it failed: its id, the code, the error with its traceback."""
    if not isinstance(error, BaseException) or not failures_log.isEnabledFor(logging.ERROR):
        return
    failures_log.error(
        "run %s failed (%s): %s: %s\n%s",
        run_id,
        code,
        type(error).__name__,
        error,
        ErrorText(error),
        extra={"run_id": run_id, "outcome": "failed", "error_code": code},
    )


def _terminal_request(replay: Replay) -> EventRequest:
    ok, value = replay.outcome()
    if ok:
        try:
            return run_completed_request(serialize(value, root="workflow result"))
        except SerializationError as exc:
            value = exc
    return EventRequest.of("run_failed", error=error_bytes(value), error_code="USER_ERROR")


def _single_request(
    command: HookCommand | DisposeCommand | AttrCommand | PatchCommand,
) -> EventRequest:
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
    commands: list[StepCommand | WaitCommand] | list[StepState],
    capacity: int,
    limits: Limits,
) -> tuple[list[EventRequest], list[str]]:
    """The writes that create ``commands``, and the steps among them to queue.

    Up to ``capacity`` new steps are born running (``step_started`` in the same
    batch) for this delivery to run inline; with ``queue_steps`` the others go
    to the queue, else they wait here for a free slot.  A step is given by its
    command or by the replay's state of it (the same three fields).
    """
    requests: list[EventRequest] = []
    queued: list[str] = []
    for command in commands:
        if isinstance(command, WaitCommand):
            requests.append(_request(command))
        elif capacity > 0:
            requests.append(_request(command))
            requests.append(step_started_request(command.correlation_id))
            capacity -= 1
        elif limits.queue_steps and command.definition.kind != "nested":
            requests.append(_request(command, inline=False))
            queued.append(command.correlation_id)
        else:
            requests.append(_request(command))
    return requests, queued


async def _dispatch(
    world: World, run_id: str, correlation_ids: list[str], deployment: str | None = None
) -> None:
    """Queue a message for each step created with ``inline=False`` (its version's queue)."""
    for correlation_id in correlation_ids:
        await world.queue.enqueue(
            pinned_queue(deployment, "step"),
            json.dumps({"run": run_id, "step": correlation_id}, sort_keys=True).encode(),
            run_id=run_id,
            idempotency_key=f"step:{run_id}:{correlation_id}",
        )


def _request(
    command: StepCommand | WaitCommand | StepState, *, inline: bool = True
) -> EventRequest:
    if isinstance(command, WaitCommand):
        return EventRequest.of("wait_created", command.correlation_id, resume_at=command.resume_at)
    return step_created_request(
        command.correlation_id, command.definition.step_id, command.input, inline
    )
