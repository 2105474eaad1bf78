"""Replay: events in, commands out.

A :class:`Replay` runs one workflow function on a fresh :class:`WorkflowLoop` and
feeds it its run's log one event at a time, in log order, running the loop to
quiescence after each.  Workflow code asks for things (a step, a durable sleep)
by calling a step or arming a timer; each request becomes a *command* with a
stable correlation id: ``<step id>#<n>`` for the n-th call of that step in the
run, ``sleep/<function>#<n>`` for the n-th sleep armed in that function (the
hook and timer ids: :mod:`._sites`).  Ids never depend on anything else the
workflow does, so adding an unrelated call does not shift them.

Each event must match a command the workflow has issued, with the parameters
the workflow gives it now: a step's input, a hook's token, kind and metadata, a
timer's deadline.  Anything else is a :class:`ReplayDivergence` naming both
sides.  The recorded values are the truth: a step always runs with its
recorded input, a hook keeps its recorded token.  When the log runs out, the commands
not yet in the log are what the orchestrator writes next.  A Replay never
touches a World: it is a pure function of the workflow code and the events fed
to it, which is what makes cold replays and the simulator possible.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from durasim.worlds import STRING_LIMITS, Event, EventType, Types, check_text, check_token
from durasim.worlds._build import builder

from ._authoring import STEP_CALLER, StepDef, WorkflowDef
from ._compare import first_difference, short
from ._determinism import RunDeterminism, ensure_installed, wall_perf_counter
from ._errors import ReplayDivergence
from ._hooks import HookConflict, HookState, new_token
from ._loop import WorkflowFuture, WorkflowLoop
from ._metadata import WORKFLOW_METADATA, WorkflowMetadata
from ._patches import PATCH_ATTR, PATCH_PREFIX
from ._payloads import RunPayloads
from ._sandbox_check import check_workflow
from ._signals import CANCEL_ATTR
from ._sites import hook_stem, timer_stem
from .serialization import FatalError, SerializationError, deserialize, serialize

__all__ = [
    "AttrCommand",
    "Command",
    "DisposeCommand",
    "HookCommand",
    "PatchCommand",
    "Replay",
    "StepCommand",
    "StepState",
    "WaitCommand",
    "WaitState",
]


@attrs.define(eq=False)
class StepState:
    """One step call of the workflow and what the log says about it."""

    correlation_id: str
    definition: StepDef
    input: bytes  # what every execution runs with: the recorded input once the log has it
    #: What the workflow awaits; None once settled with the step's outcome (the
    #: workflow holds it until it reads it: a finished step keeps no future alive).
    future: asyncio.Future[Any] | None
    order: int
    computed: bytes = b""  # the input as this replay computed it
    created: bool = False
    done: bool = False
    attempts: int = 0
    retry_after: datetime | None = None
    created_seq: int = 0
    inline: bool = True  # False: dispatched through the queue; another worker runs it


@attrs.define(eq=False)
class WaitState:
    """One durable timer of the workflow and what the log says about it."""

    correlation_id: str
    resume_at: datetime
    handle: asyncio.TimerHandle
    order: int
    created: bool = False
    done: bool = False


@attrs.frozen
class StepCommand:
    """Write ``step_created`` for this step."""

    correlation_id: str
    definition: StepDef
    input: bytes


@attrs.frozen
class WaitCommand:
    """Write ``wait_created`` for this durable sleep."""

    correlation_id: str
    resume_at: datetime


@attrs.frozen
class HookCommand:
    """Write ``hook_created`` for this hook (alone: the World may journal a conflict)."""

    correlation_id: str
    token: str
    metadata: bytes | None
    is_webhook: bool


@attrs.frozen
class DisposeCommand:
    """Write ``hook_disposed`` for this hook."""

    correlation_id: str


@attrs.frozen
class AttrCommand:
    """Write ``attr_set`` (a workflow-made cancellation: ``durasim.cancel.<id>``)."""

    correlation_id: str
    changes: tuple[tuple[str, str | None], ...]


@attrs.frozen
class PatchCommand:
    """Write the marker of a patch decision (``attr_set`` of ``durasim.patch.<id>``)."""

    correlation_id: str  # patch/<change id>
    change_id: str

    @property
    def changes(self) -> tuple[tuple[str, str | None], ...]:
        return ((PATCH_ATTR + self.change_id, "patched"),)


Command = StepCommand | WaitCommand | HookCommand | DisposeCommand | AttrCommand | PatchCommand

#: ``StepCommand(...)`` field by field (a frozen ``__init__`` costs several times as
#: much; one is made for every step the workflow calls).
_step_command = builder(StepCommand)

#: Commands that may share a batch (the others must be written alone, §7).
BATCHABLE = (StepCommand, WaitCommand)


@attrs.define(eq=False)
class _Pending:
    """A command that is not an entity's creation: a disposal or an attribute change."""

    command: DisposeCommand | AttrCommand | PatchCommand


#: Ids of hooks and timers written before they were named by site (``hook#3``).
_LEGACY_ID = re.compile(r"(hook|sleep)#\d+")

#: How far a recomputed timer deadline may be from the recorded one: Worlds
#: store time to the microsecond or (JavaScript stores) the millisecond.
_DEADLINE_SLACK = 0.001


def _seconds(moment: datetime) -> float:
    return moment.timestamp()


def _moment(seconds: float) -> datetime:
    # Round to the microsecond a World stores, so a recomputed resume_at equals
    # the recorded one byte for byte.
    return datetime.fromtimestamp(round(seconds * 1_000_000) / 1_000_000, UTC)


def _enter_run(replay: Replay, metadata: WorkflowMetadata) -> None:
    """Set the workflow task's context variables (in its context: one ``run`` for both).

    The task's context holds the replay weakly: the replay owns the task (and
    the loop, the step states, their futures), so nothing it owns points back
    to it and a finished or dropped replay is freed by reference counting alone
    (issue 22).  Workflow code runs only while its replay drives it.
    """
    STEP_CALLER.set(weakref.proxy(replay))
    WORKFLOW_METADATA.set(metadata)


def _timer_sink(replay: Replay) -> Callable[[asyncio.TimerHandle], None]:
    """What the loop calls with a timer the workflow arms: the replay's, held weakly."""
    ref = weakref.ref(replay)

    def armed(handle: asyncio.TimerHandle) -> None:
        owner = ref()
        if owner is not None:  # (none: the replay is gone, nothing to record)
            owner._timer_armed(handle)

    return armed


def _timer_dropped(handle: asyncio.TimerHandle) -> None:
    """A cancelled timer: its wait stays in the log if it is there; its completion is inert."""


class Replay:
    """A workflow run being replayed over its log (see the module docstring).

    Args:
        definition: the workflow.
        run_id: the run (seeds its randomness).
        input: the run's serialized input, ``{"args": [...], "kwargs": {...}}``.
        started_at: the run's start (the clock before the first delivered event).
    """

    def __init__(
        self,
        definition: WorkflowDef,
        *,
        run_id: str,
        input: bytes,
        started_at: datetime,
    ) -> None:
        self.definition = definition
        self.run_id = run_id
        self._input = input
        self._started_at = started_at
        # The loop reaches the replay weakly (the replay owns the loop: no cycle).
        self.loop = WorkflowLoop(  # type: ignore[abstract]  # I/O methods are set as refusals
            on_timer=_timer_sink(self),
            on_timer_cancelled=_timer_dropped,
            now=_seconds(started_at),
        )
        self._ready = self.loop.callbacks  # what the loop would run next
        self._run_ready = self.loop.run_ready  # bound once
        self.determinism = RunDeterminism(run_id=run_id, clock=self.loop.time)
        self.steps: dict[str, StepState] = {}
        self.waits: dict[str, WaitState] = {}
        self._step_counts: dict[str, int] = {}
        self._site_counts: dict[str, int] = {}  # hook and timer id stems
        self._legacy_ids = False  # the log numbers hooks and timers per run (hook#<n>)
        self._order = 0
        self._task: asyncio.Task[Any] | None = None
        #: Whether the workflow function returned or raised (kept by :meth:`_run`).
        self.done = False
        self._uncreated: dict[str, StepState | WaitState | HookState | _Pending] = {}
        self.hooks: dict[str, HookState] = {}
        self._recorded_tokens: dict[str, str] = {}
        self.cancellations: dict[str, str] = {}  # cancel#<n> -> reason, once issued
        self._cancel_count = 0
        self._open_steps: dict[str, StepState] = {}
        self._open_waits: dict[str, WaitState] = {}
        self.consumed = 0  # position of the last event delivered
        self.payloads = RunPayloads()  # step inputs refer to frozen values already stored
        self.busy_seconds = 0.0  # wall time spent running workflow code
        #: The last position of the log the caller holds that the workflow's own
        #: progress may have written (everything but run_created / run_started):
        #: ``patched()`` before it is a replay of code that went on without the patch.
        self.horizon = 0
        self.patches: dict[str, bool] = {}  # change id -> the run's decision
        self._recorded_patches: set[str] = set()  # markers anywhere in the log held
        self._hints: list[str] = []  # what a divergence should also say
        self._time_of: datetime | None = None  # the moment the loop's clock was last set to

    def __del__(self) -> None:
        # A replay dropped while its workflow waits (a suspended run's replay,
        # evicted or ended): each waiting task and the future it awaits hold each
        # other (asyncio's own cycle).  Cancel the waits (the futures let go of the
        # tasks) and close the coroutines now, while this replay still answers the
        # ``finally`` blocks they run (a hook's disposal); then drop the wake-ups
        # all that scheduled.  Tasks and futures are freed with the replay, by
        # reference counting alone (issue 22).
        if self._task is None:
            return
        waiting = self.loop.pending_tasks()
        if not waiting:
            return
        for task in waiting:
            task.cancel()
        for task in waiting:
            with contextlib.suppress(Exception):  # what a dropped workflow raises goes nowhere
                task.get_coro().close()
        self.loop.callbacks.clear()

    # -- driving --------------------------------------------------------------------

    def preload(self, events: Sequence[Event]) -> None:
        """Learn the tokens the log recorded, so a replayed ``create_hook()`` reuses them.

        A generated token is random; on replay the workflow must see the one it
        got the first time (it may have passed it to a step or a sender) before
        the ``hook_created`` event is delivered.
        """
        horizon = self.horizon
        for event in events:
            kind = event.type
            if kind not in _PRELOADED:  # a step's or a run's event: only its position
                if kind not in _NOT_PROGRESS and event.seq > horizon:
                    horizon = self.horizon = event.seq
                continue
            if event.seq > horizon:  # (no event read below is in _NOT_PROGRESS)
                horizon = self.horizon = event.seq
            if event.type is Types.ATTR_SET and (event.correlation_id or "").startswith(
                PATCH_PREFIX
            ):
                self._recorded_patches.add((event.correlation_id or "")[len(PATCH_PREFIX) :])
            if event.type in _HOOK_BIRTHS and event.correlation_id:
                self._recorded_tokens[event.correlation_id] = event.data["token"]
            if event.type in _NUMBERED and (_LEGACY_ID.fullmatch(event.correlation_id or "")):
                # Written by a runtime that numbered hooks and timers per run:
                # keep numbering them that way, so the run replays as it was.
                self._legacy_ids = True

    def take(self, events: Sequence[Event]) -> None:
        """Events just committed: learn what :meth:`preload` learns, deliver the new ones.

        Those already consumed were delivered ahead of their commit (run-ahead).
        The others are what :meth:`deliver` does with them: an event next in line,
        at the moment the loop's clock already shows, with a handler, goes to its
        handler here (a batch the runtime just wrote: a frame less per event);
        anything else goes through :meth:`deliver` itself, which judges it.
        """
        horizon = self.horizon
        for event in events:
            if event.type in _PRELOADED_OR_NOT_PROGRESS:
                self.preload(events)
                break
            # preload() of a step's or a wait's completion: only its position
            if event.seq > horizon:  # noqa: PLR1730 -- max() is a call more per event
                horizon = event.seq
        else:
            self.horizon = horizon
        for event in events:
            seq = event.seq
            if seq <= self.consumed:
                continue
            handler = _HANDLERS.get(event.type)
            if handler is None or seq != self.consumed + 1 or event.created_at is not self._time_of:
                self.deliver(event)
                continue
            self.consumed = seq
            handler(self, event)
            if self._ready:
                self._run()

    def begin(self) -> None:
        """Decode the input, start the workflow and run it until it waits."""
        try:
            payload = self.payloads.decode_run_input(self._input)
            args, kwargs = tuple(payload.get("args", ())), dict(payload.get("kwargs", {}))
        except (SerializationError, AttributeError, TypeError) as exc:
            args, kwargs = (), {}
            failure: BaseException | None = FatalError(
                f"the input of run {self.run_id!r} cannot be decoded: {exc}"
            )
        else:
            failure = None
        context = contextvars.copy_context()
        context.run(
            _enter_run,
            self,
            WorkflowMetadata(
                run_id=self.run_id,
                workflow_id=self.definition.workflow_id,
                started_at=self._started_at,
            ),
        )
        if failure is None:  # escapes the sandbox cannot catch while the code runs
            failure = check_workflow(self.definition.fn, workflow_name=self.definition.name)
        if failure is None:
            try:
                coro = self.definition.fn(*args, **kwargs)
            except TypeError as exc:  # the arguments do not fit the signature
                failure = exc
        if failure is not None:
            coro = _fail_with(failure)  # the run fails like any workflow that raises
        # The redirections the loop arms while workflow code runs (installed once
        # per process, the first time a workflow starts).
        ensure_installed()
        self._task = self.loop.create_task(coro, name="workflow", context=context)
        if self.loop.has_ready():
            self._run()

    def deliver(self, event: Event) -> None:
        """Feed the next event of the log and run the workflow to quiescence."""
        if event.seq != self.consumed + 1:
            raise ReplayDivergence(
                f"run {self.run_id!r}: event #{event.seq} delivered after #{self.consumed}; "
                "the log reached the replay with a hole",
                run_id=self.run_id,
                seq=event.seq,
            )
        self.consumed = event.seq
        # (The handler of an event that carries a record notes it first: _RECORD_TYPES.)
        at = event.created_at
        if at is not self._time_of:  # a batch's events share their time
            self._time_of = at
            self.loop.set_time(at.timestamp())
        handler = _HANDLERS.get(event.type)
        if handler is None:
            raise self._diverged(event, "this runtime does not handle it yet")
        handler(self, event)
        if self._ready:
            self._run()

    def _run(self) -> None:
        """Run the workflow until it waits (callers check that something is ready)."""
        # Measured outside the sandbox: inside it, perf_counter is the run's clock.
        began = wall_perf_counter()
        try:
            self._run_ready(self.determinism)  # the run's clock and randomness meanwhile
        finally:
            # Only running the loop ends the workflow's task.
            task = self._task
            self.done = task is not None and task.done()
        self.busy_seconds += wall_perf_counter() - began

    # -- outcome ------------------------------------------------------------------------

    def outcome(self) -> tuple[bool, Any]:
        """``(True, value)`` if the workflow returned, ``(False, exception)`` if it raised."""
        assert self._task is not None
        assert self._task.done()
        if self._task.cancelled():
            return False, asyncio.CancelledError("the workflow task was cancelled")
        error = self._task.exception()
        if error is not None:
            return False, error
        return True, self._task.result()

    # The three views below read small indexes kept up to date by the handlers,
    # never the whole history: a delivery asks for them after every step, so a
    # scan would make an n-step run O(n^2).

    def new_commands(self) -> list[Command]:
        """Commands the workflow issued that the log does not hold yet, in issue order."""
        commands: list[Command] = []
        if not self._uncreated:
            return commands  # the common case after every step: nothing new
        for state in self._uncreated.values():  # insertion order is issue order
            if isinstance(state, StepState):
                if state.future is None or not state.future.cancelled():
                    commands.append(
                        _step_command(
                            correlation_id=state.correlation_id,
                            definition=state.definition,
                            input=state.input,
                        )
                    )
            elif isinstance(state, WaitState):
                if not state.handle.cancelled():
                    commands.append(WaitCommand(state.correlation_id, state.resume_at))
            elif isinstance(state, HookState):
                commands.append(
                    HookCommand(state.correlation_id, state.token, state.metadata, state.is_webhook)
                )
            else:
                commands.append(state.command)
        return commands

    def single_new_step(self) -> StepState | None:
        """The step call that is the only new command, if so (else ``None``).

        When it returns a state, :meth:`new_commands` is that one step's command
        (the same correlation id, definition and input), without building it.
        """
        if len(self._uncreated) != 1:
            return None
        for state in self._uncreated.values():
            if type(state) is StepState and (state.future is None or not state.future.cancelled()):
                return state
        return None

    def open_steps(self) -> list[StepState]:
        """Steps in the log without an outcome, in creation order."""
        return list(self._open_steps.values())

    def open_waits(self) -> list[WaitState]:
        """Waits in the log not completed yet."""
        return list(self._open_waits.values())

    # -- StepCaller: workflow code calls a step ---------------------------------------

    def call_step(
        self,
        definition: StepDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        closure: dict[str, Any],
    ) -> asyncio.Future[Any]:
        """Issue a step command; the future resolves when the log has its outcome."""
        count = self._step_counts.get(definition.step_id, 0) + 1
        self._step_counts[definition.step_id] = count
        correlation_id = f"{definition.step_id}#{count}"
        future: asyncio.Future[Any] = WorkflowFuture(loop=self.loop)
        # Reduced to bytes here, at the call site: custom classes serialize the
        # same way on every replay, and the caller's objects are never shared
        # with the step (pass by value).  Frozen values already stored are
        # written by reference (same bytes on every replay: see _payloads).
        data = self.payloads.encode_step_call(
            correlation_id, args, kwargs, closure, step_name=definition.name
        )
        self._order += 1
        # (correlation_id, definition, input, future, order, computed): positional,
        # no keyword to match (once a step)
        state = StepState(correlation_id, definition, data, future, self._order, data)
        self.steps[correlation_id] = state
        self._uncreated[correlation_id] = state
        return future

    # -- HookCaller: workflow code creates and reads hooks --------------------------

    def create_hook(self, token: str | None, metadata: Any, *, is_webhook: bool) -> HookState:
        """Issue a hook command (id: :mod:`._sites`); the token is the recorded one on replay.

        A chosen token the World would refuse is refused here, at the call in the
        workflow (:class:`~durasim.worlds.InvalidRequest` naming the rule): retrying
        the delivery could never make it valid.
        """
        if token is not None:
            what = "create_webhook(token=...)" if is_webhook else "create_hook(token=...)"
            check_token(token, field=what)
        correlation_id = self._next_id("hook" if self._legacy_ids else hook_stem(token))
        token_given = token is not None
        if token is None:
            token = self._recorded_tokens.get(correlation_id) or new_token()
        self._order += 1
        state = HookState(
            correlation_id=correlation_id,
            token=token,
            metadata=None if metadata is None else serialize(metadata, root="hook metadata"),
            is_webhook=is_webhook,
            order=self._order,
            token_given=token_given,
        )
        self.hooks[correlation_id] = state
        self._uncreated[correlation_id] = state
        return state

    def next_payload(self, state: HookState) -> asyncio.Future[Any]:
        """The hook's next unread payload, in log order."""
        future: asyncio.Future[Any] = self.loop.create_future()
        if state.payloads:
            _settle(future, state.payloads.popleft())
        elif (error := state.error()) is not None:
            future.set_exception(error)
        else:
            state.waiters.append(future)
        return future

    def dispose_hook(self, state: HookState) -> None:
        """Issue the hook's disposal (once; nothing for a hook that lost its token)."""
        if state.dispose_issued:
            return
        state.dispose_issued = True
        if state.conflict is None:
            key = f"{state.correlation_id}!dispose"
            self._uncreated[key] = _Pending(DisposeCommand(state.correlation_id))
        while state.waiters:  # a waiter left inside the with block: nothing will come
            waiter = state.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(state.error() or RuntimeError("hook disposed"))

    def hook_settled(self, state: HookState) -> asyncio.Future[HookConflict | None]:
        """Resolved once the log has the hook's creation (or its conflict)."""
        future: asyncio.Future[HookConflict | None] = self.loop.create_future()
        if state.created or state.conflict is not None:
            future.set_result(state.conflict)
        else:
            state.settled.append(future)
        return future

    # -- patches (._patches) ----------------------------------------------------------

    def patched(self, change_id: str, *, deprecated: bool = False) -> bool:
        """The run's decision for patch ``change_id`` (made once, journaled when new)."""
        decided = self.patches.get(change_id)
        if decided is not None:
            return decided or deprecated
        if change_id in self._recorded_patches:
            decision = True
        elif self.consumed < self.horizon:
            # The log goes on past this point: it was recorded without the patch.
            decision = False
            if deprecated:
                self._hints.append(
                    f"This run was recorded before patch {change_id!r}, which the workflow now "
                    f"retires with deprecate_patch({change_id!r}): it needs the old branch. "
                    f"Serve it with code that still has `if patched({change_id!r})` (or migrate "
                    "it back to that version), and deprecate only once no such run is in flight."
                )
        else:
            decision = True
            correlation_id = PATCH_PREFIX + change_id
            self._uncreated[f"{correlation_id}!attr"] = _Pending(
                PatchCommand(correlation_id, change_id)
            )
        self.patches[change_id] = decision
        return decision or deprecated

    # -- workflow-made cancellations -------------------------------------------------

    def new_cancellation(self) -> str:
        """A new cancellation token id of this run (``cancel#<n>``)."""
        self._cancel_count += 1
        return f"cancel#{self._cancel_count}"

    def cancel(self, token_id: str, reason: str) -> None:
        """Journal the cancellation of ``token_id`` (once) as an ``attr_set``."""
        low, high = STRING_LIMITS["attribute value"]
        check_text(reason, field="CancellationToken.cancel(reason)", min_chars=low, max_chars=high)
        if token_id in self.cancellations:
            return
        self.cancellations[token_id] = reason
        command = AttrCommand(token_id, ((CANCEL_ATTR + token_id, reason),))
        self._uncreated[f"{token_id}!attr"] = _Pending(command)

    # -- timers --------------------------------------------------------------------------

    def _next_id(self, stem: str) -> str:
        """``<stem>#<n>``: the n-th hook or timer with this stem in the run."""
        count = self._site_counts.get(stem, 0) + 1
        self._site_counts[stem] = count
        return f"{stem}#{count}"

    def _timer_armed(self, handle: asyncio.TimerHandle) -> None:
        correlation_id = self._next_id("sleep" if self._legacy_ids else timer_stem())
        self._order += 1
        state = WaitState(
            correlation_id=correlation_id,
            resume_at=_moment(handle.when()),
            handle=handle,
            order=self._order,
        )
        self.waits[correlation_id] = state
        self._uncreated[correlation_id] = state

    # -- event handlers -------------------------------------------------------------------

    def _diverged(self, event: Event, why: str) -> ReplayDivergence:
        expected = self.new_commands()
        waiting = (
            f"the workflow's next new command is {_describe(expected[0])}"
            if expected
            else "the workflow has issued no command that is not in the log"
        )
        return ReplayDivergence(
            f"run {self.run_id!r} diverged from its log: the log has {event.label}"
            f"{_step_name(event)} where {waiting} ({why}). {self._causes()}",
            run_id=self.run_id,
            seq=event.seq,
        )

    def _differs(self, event: Event, what: str, difference: str, fix: str = "") -> ReplayDivergence:
        """A divergence in the parameters of a command the log does hold."""
        return ReplayDivergence(
            f"run {self.run_id!r} diverged from its log at #{event.seq}: {what} differs from "
            f"the recorded one: {difference}. {self._causes()}{fix}",
            run_id=self.run_id,
            seq=event.seq,
        )

    def _causes(self) -> str:
        return " ".join([*self._hints, _CAUSES])

    def _check_payload(
        self, event: Event, what: str, recorded: bytes | None, now: bytes | None, fix: str = ""
    ) -> None:
        """Compare a recorded payload with the one computed now (bytes, then values)."""
        if recorded == now:
            return
        if recorded is None or now is None:
            shown = "recorded none, now one" if recorded is None else "recorded one, now none"
            raise self._differs(event, what, shown, fix)
        try:
            # Either side may refer to frozen values earlier in the log (indexes nothing).
            old, new = self.payloads.decode(recorded), self.payloads.decode_computed(now)
        except SerializationError as exc:
            # Different bytes that cannot be compared as values here (a class this
            # process lacks): no evidence they mean the same, so they differ.
            raise self._differs(
                event,
                what,
                f"the bytes differ ({len(recorded)} recorded, {len(now)} now) and cannot be "
                f"decoded here to compare their values ({exc})",
                fix,
            ) from exc
        if isinstance(old, dict) and isinstance(new, dict) and "args" in old:
            # A step input: name the argument (args[0], kwargs['amount']).
            parts = ("args", "kwargs", "closure")
            difference = next(
                (d for k in parts if (d := first_difference(old.get(k), new.get(k), path=k))),
                None,
            )
        else:
            difference = first_difference(old, new)
        if difference is not None:
            raise self._differs(
                event, what, f"{difference} (recorded {short(old)}, now {short(new)})", fix
            )

    def _step(self, event: Event) -> StepState:
        state = self.steps.get(event.correlation_id or "")
        if state is None:
            raise self._diverged(event, "no step call of the workflow has this id")
        return state

    def _on_structural(self, event: Event) -> None:
        return None

    def _on_noted(self, event: Event) -> None:
        """An event whose record is all the replay takes from it (``run_created``)."""
        self.payloads.note(event)

    def _on_step_created(self, event: Event) -> None:
        key = event.correlation_id or ""
        get = event.data.get
        recorded = get("input")
        self.payloads.note_step_input(key, recorded)
        state = self.steps.get(key) or self._step(event)
        if state.created:
            return  # a second creation is refused by the World; inert if seen
        definition = state.definition
        if get("step_name") != definition.step_id:
            raise self._diverged(
                event, f"the workflow calls step {definition.step_id!r} under that id"
            )
        if recorded != state.input and definition.check_input:
            self._check_payload(
                event,
                f"the input of step {state.definition.name} ({state.correlation_id})",
                recorded,
                state.input,
                " If this step's input may legitimately differ, declare it "
                "@step(check_input=False): it then always runs with the recorded input",
            )
        if recorded is not None:
            state.input = recorded  # every execution runs with what the log holds
        state.created = True
        state.created_seq = event.seq
        state.inline = bool(get("inline", True))
        self._uncreated.pop(key, None)
        self._open_steps[key] = state

    def _on_step_started(self, event: Event) -> None:
        state = self.steps.get(event.correlation_id or "") or self._step(event)
        if not state.created:
            raise self._diverged(event, "the step was started before it was created")
        state.attempts = int(event.data.get("attempt", state.attempts + 1))
        state.retry_after = None

    def _on_step_retrying(self, event: Event) -> None:
        state = self._step(event)
        state.retry_after = event.data.get("retry_after")

    def _on_step_completed(self, event: Event) -> None:
        key, data = f"@{event.seq}", event.data.get("result")
        payloads = self.payloads
        payloads.note_record(key, data)
        state = self.steps.get(event.correlation_id or "") or self._step(event)
        if state.done:
            return  # first outcome in log order wins; later ones are inert
        state.done = True
        self._open_steps.pop(state.correlation_id, None)
        future = state.future
        if future is None or future.cancelled():
            return
        if type(data) is bytes:
            future.set_result(payloads.decode_record(key, data))
        else:
            future.set_result(payloads.decode_event(event))
        state.future = None  # settled (never cancelled now): nothing more reads it

    def _on_step_outcome(self, event: Event) -> None:
        state = self.steps.get(event.correlation_id or "") or self._step(event)
        if state.done:
            return  # first outcome in log order wins; later ones are inert
        state.done = True
        self._open_steps.pop(state.correlation_id, None)
        future = state.future
        if future is None or future.cancelled():
            return
        if event.type is Types.STEP_COMPLETED:
            future.set_result(self.payloads.decode_event(event))
        else:
            error = _decode(event.data["error"])
            if not isinstance(error, BaseException):
                error = FatalError(f"step {state.definition.name} failed: {error!r}")
            future.set_exception(error)
        state.future = None  # settled (never cancelled now): nothing more reads it

    def _hook(self, event: Event) -> HookState:
        state = self.hooks.get(event.correlation_id or "")
        if state is None:
            raise self._diverged(event, "the workflow created no hook with this id")
        return state

    def _check_hook(self, event: Event, state: HookState) -> None:
        """The hook the log holds is the one the workflow creates now."""
        what = f"hook {state.correlation_id}"
        recorded_webhook = bool(event.data.get("is_webhook", False))
        if recorded_webhook != state.is_webhook:
            kinds = ("a webhook", "a hook")
            raise self._differs(
                event,
                what,
                f"recorded {kinds[not recorded_webhook]}, now {kinds[not state.is_webhook]}",
            )
        if state.token_given and event.data["token"] != state.token:
            raise self._differs(
                event, what, f"recorded token {event.data['token']!r}, now {state.token!r}"
            )
        self._check_payload(
            event, f"the metadata of {what}", event.data.get("metadata"), state.metadata
        )

    def _on_hook_created(self, event: Event) -> None:
        state = self._hook(event)
        if not state.created:
            self._check_hook(event, state)
        state.created = True
        state.token = event.data["token"]  # the recorded token is the truth
        self._uncreated.pop(state.correlation_id, None)
        _resolve_all(state.settled, None)

    def _on_hook_conflict(self, event: Event) -> None:
        state = self._hook(event)
        self._check_hook(event, state)
        state.token = event.data["token"]
        state.conflict = HookConflict(
            token=state.token,
            conflicting_run_id=event.data["conflicting_run_id"],
            conflicting_hook_id=event.data["conflicting_hook_id"],
        )
        self._uncreated.pop(state.correlation_id, None)
        self._uncreated.pop(f"{state.correlation_id}!dispose", None)  # nothing to dispose
        _resolve_all(state.settled, state.conflict)
        error = state.error()
        while state.waiters:
            waiter = state.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error or RuntimeError("hook conflict"))

    def _on_hook_received(self, event: Event) -> None:
        self.payloads.note(event)
        state = self._hook(event)
        try:
            payload: Any = self.payloads.decode_event(event)
        except SerializationError as exc:
            payload = _Undecodable(exc)
        while state.waiters:
            waiter = state.waiters.popleft()
            if not waiter.done():  # a cancelled await (a timeout) leaves the payload queued
                _settle(waiter, payload)
                return
        state.payloads.append(payload)

    def _on_hook_disposed(self, event: Event) -> None:
        state = self._hook(event)
        state.disposed = True
        self._uncreated.pop(f"{state.correlation_id}!dispose", None)

    def _on_attr_set(self, event: Event) -> None:
        token_id = event.correlation_id or ""
        if token_id.startswith(PATCH_PREFIX):
            self._on_patch(event, token_id[len(PATCH_PREFIX) :])
            return
        if not token_id.startswith("cancel#"):
            return  # an attribute set by someone else: not the workflow's business
        if token_id not in self.cancellations:
            raise self._diverged(event, "the workflow cancelled no token with this id")
        recorded = dict(event.data.get("changes", ())).get(CANCEL_ATTR + token_id)
        if f"{token_id}!attr" in self._uncreated and recorded != self.cancellations[token_id]:
            raise self._differs(
                event,
                f"the reason of cancellation {token_id}",
                f"recorded {recorded!r}, now {self.cancellations[token_id]!r}",
            )
        self._uncreated.pop(f"{token_id}!attr", None)

    def _on_patch(self, event: Event, change_id: str) -> None:
        decided = self.patches.get(change_id)
        if decided is None:
            checked = ", ".join(repr(c) for c in self.patches) or "none"
            raise self._diverged(
                event,
                f"the log records patch {change_id!r} here, but the workflow has not called "
                f"patched({change_id!r}) or deprecate_patch({change_id!r}) by this point "
                f"(patches it checked: {checked}); a patch that runs recorded must stay in the "
                "code, as deprecate_patch() at least, until no such run is in flight",
            )
        if not decided:
            raise self._diverged(
                event,
                f"the log records patch {change_id!r} after the workflow decided it without "
                "(the log went on past the call)",
            )
        self._uncreated.pop(f"{PATCH_PREFIX}{change_id}!attr", None)

    def _wait(self, event: Event) -> WaitState:
        state = self.waits.get(event.correlation_id or "")
        if state is None:
            raise self._diverged(event, "the workflow armed no timer with this id")
        return state

    def _on_wait_created(self, event: Event) -> None:
        state = self._wait(event)
        recorded: datetime = event.data["resume_at"]
        if not state.created and abs((recorded - state.resume_at).total_seconds()) > (
            _DEADLINE_SLACK
        ):
            raise self._differs(
                event,
                f"the deadline of timer {state.correlation_id}",
                f"recorded {recorded.isoformat()}, now {state.resume_at.isoformat()}",
            )
        state.created = True
        state.resume_at = recorded  # the recorded time is the truth
        self._uncreated.pop(state.correlation_id, None)
        self._open_waits[state.correlation_id] = state

    def _on_wait_completed(self, event: Event) -> None:
        state = self._wait(event)
        if state.done:
            return
        state.done = True
        self._open_waits.pop(state.correlation_id, None)
        self.loop.fire_timer(state.handle)


async def _fail_with(error: BaseException) -> Any:
    raise error


@attrs.frozen
class _Undecodable:
    """A hook payload that cannot be deserialized: raised at the await that reads it."""

    error: SerializationError


def _settle(future: asyncio.Future[Any], payload: Any) -> None:
    if isinstance(payload, _Undecodable):
        future.set_exception(payload.error)
    else:
        future.set_result(payload)


def _resolve_all(futures: list[asyncio.Future[Any]], value: Any) -> None:
    for future in futures:
        if not future.done():
            future.set_result(value)
    futures.clear()


def _decode(data: bytes) -> Any:
    return deserialize(data)


def _describe(command: Command) -> str:
    if isinstance(command, StepCommand):
        return f"step {command.definition.name} ({command.correlation_id})"
    if isinstance(command, WaitCommand):
        return f"sleep until {command.resume_at.isoformat()} ({command.correlation_id})"
    if isinstance(command, HookCommand):
        return f"create hook ({command.correlation_id})"
    if isinstance(command, DisposeCommand):
        return f"dispose hook ({command.correlation_id})"
    if isinstance(command, PatchCommand):
        return f"patched({command.change_id!r}) ({command.correlation_id})"
    return f"cancel ({command.correlation_id})"


#: What a divergence may mean; it never assumes which.
_CAUSES = (
    "Likely causes: the workflow code changed after the run started (keep the old code "
    "for runs in flight, or give the new code a new workflow id), or the workflow is "
    "nondeterministic (it read the time, randomness, the environment, a set's or a "
    "dict's order or module state other than through the run's own: see "
    "docs/runtime.md, 'Determinism, enforced')."
)


def _step_name(event: Event) -> str:
    name = event.data.get("step_name")
    return f" (step {name})" if name else ""


#: Events that say nothing about how far the workflow went (see Replay.horizon).
_NOT_PROGRESS = frozenset({Types.RUN_CREATED, Types.RUN_STARTED})
_HOOK_BIRTHS = frozenset({Types.HOOK_CREATED, Types.HOOK_CONFLICT})
_NUMBERED = frozenset({Types.HOOK_CREATED, Types.HOOK_CONFLICT, Types.WAIT_CREATED})
#: The events :meth:`Replay.preload` looks into beyond their position.
_PRELOADED = _HOOK_BIRTHS | _NUMBERED | {Types.ATTR_SET}
#: The events :meth:`Replay.preload` does more with than note their position.
_PRELOADED_OR_NOT_PROGRESS = _PRELOADED | _NOT_PROGRESS

_HANDLERS: dict[EventType, Callable[[Replay, Event], None]] = {
    Types.RUN_CREATED: Replay._on_noted,
    Types.RUN_STARTED: Replay._on_structural,
    Types.NOOP: Replay._on_structural,
    # The run's end: nothing is waiting for it (a cancel reaches the workflow in part 2).
    Types.RUN_COMPLETED: Replay._on_structural,
    Types.RUN_FAILED: Replay._on_structural,
    Types.RUN_CANCELLED: Replay._on_structural,
    Types.STEP_CREATED: Replay._on_step_created,
    Types.STEP_STARTED: Replay._on_step_started,
    Types.STEP_RETRYING: Replay._on_step_retrying,
    Types.STEP_COMPLETED: Replay._on_step_completed,
    Types.STEP_FAILED: Replay._on_step_outcome,
    Types.HOOK_CREATED: Replay._on_hook_created,
    Types.HOOK_CONFLICT: Replay._on_hook_conflict,
    Types.HOOK_RECEIVED: Replay._on_hook_received,
    Types.HOOK_DISPOSED: Replay._on_hook_disposed,
    Types.ATTR_SET: Replay._on_attr_set,
    Types.WAIT_CREATED: Replay._on_wait_created,
    Types.WAIT_COMPLETED: Replay._on_wait_completed,
}
