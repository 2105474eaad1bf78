"""The scheduler: interception points, parking, choices, deliveries, faults.

Every simulated task (an orchestrator delivery, a queued step, an external
sender) parks at each interception point of each World call it makes.  When
the loop is idle (every task blocked), :meth:`Scheduler.on_idle` collects the
candidates (parked tasks not held by the script, due queue messages) and asks
the choice source which one goes; a single candidate needs no choice.  Only
when there is none does it jump the clock to the next loop timer or due
message; when there is nothing at all the simulation is quiescent and the
script's waiters are answered.  The scheduler is the worker: it claims
messages from the recording queue and hands each to the World's engine
(:meth:`Engine.handle`, as a ``Worker`` does), then applies the settlement the
engine returns; it keeps only choosing, faults and virtual time.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from durasim.runtime import Limits
from durasim.runtime.lowlevel import (
    ORCHESTRATOR_QUEUE,
    REQUEUE_DELAY,
    STEP_METADATA,
    StepMessage,
    WakeMessage,
    engine_for,
    parse_message,
    wall_monotonic,
)
from durasim.worlds import (
    BatchResult,
    Event,
    EventPage,
    EventRequest,
    EventResult,
    IdSource,
    Snapshot,
    World,
    WorldError,
)

from ._choices import ChoiceSource
from ._clock import SimClock
from ._errors import (
    BudgetExceeded,
    Crashed,
    HoldNeverReached,
    InjectedFault,
    SimDeadlock,
    WallBudgetInterrupt,
)
from ._loop import SimLoop
from ._points import EXTERNAL, ORCHESTRATOR, STEP, Match, Point, Writer, step_short_name
from ._queue import QueueSlot, SimQueue
from ._trace import Trace
from ._world import ACTOR, Actor, SimWorld

if TYPE_CHECKING:
    from ._reports import StuckCode

__all__ = ["FAULT_KINDS", "FaultKind", "Rejection", "Scheduler"]

T = TypeVar("T")

_OUTCOMES = frozenset({"step_completed", "step_failed", "step_retrying"})
_WRITES = frozenset({"events.create", "events.create_batch"})
#: A loop timer within this many seconds of the loop's time is due (SimLoop's resolution).
_LOOP_RESOLUTION = 1e-6


class FaultKind(enum.StrEnum):
    """A fault the choice source may inject when enabled."""

    CRASH = "crash"  # a delivery's process dies at a World call
    FAIL = "fail"  # a World call raises a WorldError
    DUPLICATE = "duplicate"  # a message is delivered twice at once
    EXPIRE_LEASE = "expire_lease"  # a running delivery's lease ends
    WITHHOLD = "withhold"  # a log read misses the latest committed event (a stale read)
    DROP = "drop"  # a committed write is reported failed
    DELAY = "delay"  # a message is delivered later than due


#: Fault kinds the choice source may inject when enabled (as plain strings, in a
#: fixed order: explorations draw from this tuple, so its order is part of a seed).
FAULT_KINDS: tuple[str, ...] = tuple(kind.value for kind in FaultKind)


@attrs.frozen(kw_only=True)
class Rejection:
    """A World call that raised (the World refused it, or a fault was injected)."""

    seq: int
    writer: str
    call: str
    types: tuple[str, ...]
    error: str
    message: str


@attrs.define(eq=False)
class Parked:
    """A task waiting at an interception point for the scheduler (or the script)."""

    point: Point
    future: asyncio.Future[None]
    actor: Actor
    held: bool = False
    fail: bool = False


@attrs.define(eq=False)
class Watch:
    """Something the script waits for at the next matching point.

    ``action``: ``hold`` (park the writer for the script), ``notify`` (just
    tell), ``fail`` (raise a transient error at ``before``), ``crash``.
    """

    match: Match
    action: str
    future: asyncio.Future[Parked | Point] | None = None
    times: int = 1
    label: str = ""


@attrs.define(eq=False)
class DeliveryRecord:
    """One simulated delivery (a claimed message being handled)."""

    number: int
    message_id: str
    run_id: str | None
    actor: Actor
    task: asyncio.Task[None] | None = None
    status: str = "running"


class Scheduler:
    """The simulator's core; :class:`~durasim.sim.Sim` adds the script API on top."""

    def __init__(
        self,
        store: World,
        clock: SimClock,
        ids: IdSource,
        choices: ChoiceSource,
        limits: Limits,
        *,
        faults: Sequence[str],
        fault_odds: int,
        max_faults: int,
        max_deliveries: int,
        max_virtual_seconds: float,
        max_wall_seconds: float,
        lease_seconds: float,
    ) -> None:
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}: choose from {FAULT_KINDS}")
        self.clock = clock
        self.store = store
        self.choices = choices
        self.limits = limits
        self.loop = SimLoop(clock)
        self.loop.on_idle = self.on_idle
        self.queue = SimQueue(clock, ids)
        self.world = SimWorld(self, store, self.queue, clock)
        self.engine = engine_for(self.world)
        self.trace = Trace(clock)
        self.faults = tuple(faults)
        self.fault_odds = max(2, fault_odds)
        self.faults_left = max_faults if faults else 0
        self.max_deliveries = max_deliveries
        self.max_virtual_seconds = max_virtual_seconds
        self.max_wall_seconds = max_wall_seconds
        self.lease_seconds = lease_seconds
        self.auto_deliver = True
        #: Every choice made: (number of candidates, index chosen).
        self.choice_log: list[tuple[int, int]] = []
        #: Every fault the choice source injected, by kind, in order.
        self.injected: list[str] = []
        self._labeled = getattr(choices, "choose_labeled", None)
        # Points passed, in order; one passed with nobody looking is kept as its
        # fields (a tuple) and built into a Point when the history is read.
        self._history: list[Point | tuple[Any, ...]] = []
        self._built = 0  # _history[:_built] are Points
        self.rejections: list[Rejection] = []
        self.deliveries: dict[int, DeliveryRecord] = {}
        self.halted: str | None = None
        #: The code the wall-time watchdog interrupted (see _watchdog.py), if any.
        self.stuck: StuckCode | None = None
        self._parked: dict[int, Parked] = {}
        self._watches: list[Watch] = []
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._ordinal = 0
        self._calls = 0
        self._withhold_armed: list[tuple[int, str | None]] = []
        self._hidden: dict[tuple[str, int], int] = {}
        self._wall_start = wall_monotonic()
        self._closing = False
        self._tasks: list[asyncio.Task[Any]] = []
        #: The script's task (set by Sim.run_sync), cancelled on a deadlock.
        self.main_task: asyncio.Task[Any] | None = None
        self.deadlock: SimDeadlock | None = None

    # --- interception ------------------------------------------------------

    async def call(
        self,
        call: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """One World call: ``before`` point, the store, ``after`` point."""
        actor = ACTOR.get()
        if actor is None:
            return await self._direct(call, method, args, kwargs)
        if actor.crashed or self._closing:
            raise Crashed
        run_id, requests, token = _describe(call, args, kwargs)
        writers = _writers(actor, requests)
        events: tuple[tuple[str, str | None, int], ...] = ()
        if requests:
            types = tuple(r.type._value_ for r in requests)
            cids = tuple(r.correlation_id for r in requests if r.correlation_id)
            events = tuple((r.type._value_, r.correlation_id, 0) for r in requests)
        else:
            types = cids = ()
        self._calls += 1
        seq = self._calls
        try:
            await self._pass(
                actor, seq, call, "before", writers, run_id, types, cids, token, events
            )
        except InjectedFault as exc:
            self._reject(seq, writers[0], call, types, exc)
            raise
        try:
            result = await method(*args, **kwargs)
        except WorldError as exc:
            self._reject(seq, writers[0], call, types, exc)
            error = type(exc).__name__
            await self._pass(
                actor, seq, call, "after", writers, run_id, types, cids, token, events, True, error
            )
            raise
        committed = self._committed(writers, result)
        if committed:
            run_id = run_id or committed[0].run_id
            types += tuple(e.type._value_ for e in committed if e.type not in types)
            # After the commit a point names what was committed, at its positions.
            events = tuple((e.type._value_, e.correlation_id, e.seq) for e in committed)
        if call == "events.list" and self._hidden:
            result = self._stale_read(writers[0], result)
        await self._pass(actor, seq, call, "after", writers, run_id, types, cids, token, events)
        return result

    async def _direct(
        self,
        call: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        external = Writer(kind=EXTERNAL)
        try:
            result = await method(*args, **kwargs)
        except WorldError as exc:
            if call in _WRITES:
                _, requests, _ = _describe(call, args, kwargs)
                types = tuple(r.type.value for r in requests)
                self._calls += 1
                self._reject(self._calls, external, call, types, exc)
            raise
        self._committed((external,), result)
        return result

    @property
    def history(self) -> list[Point]:
        """Every point passed, in order."""
        history = self._history
        for index in range(self._built, len(history)):
            fields = history[index]
            if isinstance(fields, tuple):
                history[index] = _point(fields)
        self._built = len(history)
        return history  # type: ignore[return-value]  # all built above

    async def _pass(self, actor: Actor, *fields: Any) -> None:
        """One interception point; ``fields``: a Point's, after its ordinal (see _point)."""
        self._ordinal += 1
        if not self._watches and self._alone():
            # Nothing else could run and nobody looks: go on (see at()); the
            # Point is built only if the history is read.
            self._history.append((self._ordinal, *fields))
            return
        await self.at(actor, _point((self._ordinal, *fields)))

    async def at(self, actor: Actor, point: Point) -> None:
        """Record ``point``, fire the script's watches, park until the scheduler says go."""
        self._history.append(point)
        parked = Parked(point=point, future=self.loop.create_future(), actor=actor)
        crash: Watch | None = None
        if self._watches:
            for watch in list(self._watches):
                if not watch.match.matches(point):
                    continue
                if watch.action == "fail" and point.phase != "before":
                    continue
                watch.times -= 1
                if watch.times <= 0:
                    self._watches.remove(watch)
                if watch.action == "notify":
                    _resolve(watch.future, point)
                elif watch.action == "hold" and not parked.held:
                    parked.held = True
                    self.trace.add("hold", f"{watch.label or 'hold'}: {point.describe()}")
                    _resolve(watch.future, parked)
                elif watch.action == "fail":
                    parked.fail = True
                elif watch.action == "crash":
                    crash = watch
        if crash is not None:
            where = crash.match.describe_hit(point)
            if not where.startswith("at "):
                where += f" ({point.writer.label} at {point.call} [call {point.seq}])"
            self.crash(actor, point, where=where)
            raise Crashed
        if not parked.held and not parked.fail and self._alone():
            # The idle point would offer exactly this task and ask nothing (no
            # other task, message, timer or fault question): go on without the
            # round trip through the loop. Same choices, same trace.
            return
        self._parked[point.ordinal] = parked
        if not parked.held and not parked.fail and self._idle_next() and self._decide(parked):
            self._parked.pop(point.ordinal, None)
            return
        try:
            await parked.future
        finally:
            self._parked.pop(point.ordinal, None)
        if actor.crashed:
            raise Crashed
        if parked.fail:
            raise InjectedFault(
                f"injected transient failure of {point.call} for {point.writer.label}; "
                "nothing was written: retry",
                run_id=point.run_id,
            )

    def _idle_next(self) -> bool:
        """Whether, once this task parks, the loop's next step is the idle point.

        True when the loop is quiet (see :meth:`_quiet`) and no World socket is
        watched: the idle point would then choose among exactly the candidates
        there are now.
        """
        return self._quiet() and not self.loop.io_in_flight()

    def _quiet(self) -> bool:
        """No fault or budget question pending, no callback ready, no loop timer due."""
        if self.faults_left > 0 or self.halted is not None or self._closing:
            return False
        return not self.loop._ready and not self._timer_due()  # type: ignore[attr-defined]

    def _timer_due(self) -> bool:
        """Whether the loop would run a timer now (its rule: due within its resolution)."""
        scheduled: list[asyncio.TimerHandle] = self.loop._scheduled  # type: ignore[attr-defined]
        return bool(scheduled) and scheduled[0].when() < self.loop.time() + _LOOP_RESOLUTION

    def _decide(self, parked: Parked) -> bool:
        """Make the idle point's choice here, without the trip through the loop.

        The candidates, their order and the question asked are the idle
        point's (``parked`` is the newest parked task); whether ``parked``
        itself was chosen to go on.  Another choice is acted on (resumed or
        launched) and ``parked`` waits for its turn as it would have.
        """
        self._check_wall_budget()
        if self.halted is not None:
            return False  # the idle point reports it
        candidates = self._candidates()
        labels = [_label(c) for c in candidates] if self._labeled is not None else ()
        chosen = candidates[self._choose(len(candidates), "schedule", labels)]
        if chosen is parked:
            return True
        self._act(chosen)
        return False

    @property
    def wall_deadline(self) -> float:
        """When the wall budget runs out (``wall_monotonic()`` seconds)."""
        return self._wall_start + self.max_wall_seconds

    def _check_wall_budget(self) -> None:
        if self.halted is None and wall_monotonic() - self._wall_start > self.max_wall_seconds:
            stuck = f": {self.stuck}" if self.stuck is not None else ""
            self.halt(f"wall-time budget of {self.max_wall_seconds} s exceeded{stuck}")

    def note_stuck(self, stuck: StuckCode) -> None:
        """The watchdog's report, told from its thread before its interrupt lands."""
        self.stuck = stuck

    def _alone(self) -> bool:
        """Whether the running task is the only thing that could run now."""
        if self._parked or not self._quiet():
            return False
        if self.auto_deliver:
            due = self.queue.next_due_micros()
            if due is not None and due <= self.clock.micros:
                return False
        return True

    def resume(self, parked: Parked) -> None:
        """Let a parked task continue."""
        self._parked.pop(parked.point.ordinal, None)
        parked.held = False
        if not parked.future.done():
            parked.future.set_result(None)

    def parked(self) -> list[Parked]:
        """Tasks parked now, oldest first."""
        return list(self._parked.values())

    def watch(self, match: Match, action: str, *, times: int = 1, label: str = "") -> Watch:
        """Arm a watch (see :class:`Watch`)."""
        future: asyncio.Future[Parked | Point] | None = None
        if action in ("hold", "notify"):
            future = self.loop.create_future()
        watch = Watch(match=match, action=action, future=future, times=times, label=label)
        self._watches.append(watch)
        return watch

    def unwatch(self, watch: Watch) -> None:
        """Disarm a watch (no-op if it fired)."""
        if watch in self._watches:
            self._watches.remove(watch)

    # --- what a call did -----------------------------------------------------

    def _committed(self, writers: tuple[Writer, ...], result: Any) -> list[Any]:
        if isinstance(result, EventResult):
            events = [result.event] if result.allocated and result.event is not None else []
        elif isinstance(result, BatchResult):
            events = list(result.events)
        else:
            return []
        default = writers[0] if STEP_METADATA.get() is not None else writers[-1]
        for event in events:
            writer = default
            if len(writers) > 1 and event.type in _OUTCOMES and event.correlation_id:
                name = step_short_name(event.correlation_id)
                writer = next((w for w in writers if w.kind == STEP and w.name == name), writer)
            self.trace.event(event, writer.label)
            if self._withhold_armed:
                self._arm_withhold(event)
        return events

    def _arm_withhold(self, event: Event) -> None:
        """Hide ``event`` from the next reads if a withhold is armed for its run."""
        for index, (reads, run_id) in enumerate(self._withhold_armed):
            if run_id is None or run_id == event.run_id:
                del self._withhold_armed[index]
                self._hidden[(event.run_id, event.seq)] = reads
                return

    def _reject(
        self, seq: int, writer: Writer, call: str, types: tuple[str, ...], exc: WorldError
    ) -> None:
        rejection = Rejection(
            seq=seq,
            writer=writer.label,
            call=call,
            types=types,
            error=type(exc).__name__,
            message=str(exc),
        )
        self.rejections.append(rejection)
        what = f" ({', '.join(types)})" if types else ""
        self.trace.add("reject", f"{writer.label} {call}{what} {rejection.error}: {exc}")

    def _stale_read(self, writer: Writer, page: EventPage) -> EventPage:
        if not page.events:
            return page
        run_id = page.events[0].run_id
        cut = None
        for (hidden_run, seq), reads in list(self._hidden.items()):
            if hidden_run != run_id or reads <= 0:
                continue
            self._hidden[(hidden_run, seq)] = reads - 1
            if reads - 1 <= 0:
                del self._hidden[(hidden_run, seq)]
            cut = seq if cut is None else min(cut, seq)
        if cut is None or page.events[-1].seq < cut:
            return page
        kept = tuple(e for e in page.events if e.seq < cut)
        dropped = page.events[len(kept) :]
        self.trace.add(
            "stale",
            f"stale read by {writer.label}: {run_id} #{cut} withheld "
            f"({len(dropped)} event(s) hidden)",
        )
        in_band = page.snapshot.seq_in_band - sum(1 for e in dropped if e.in_band)
        return EventPage(
            events=kept,
            snapshot=Snapshot(seq=cut - 1, seq_in_band=max(0, in_band)),
            has_more=False,
        )

    # --- the idle point ------------------------------------------------------

    def on_idle(self, timer: float | None) -> None:
        """Every task is blocked: choose what happens next (see the module docstring)."""
        if self._closing:
            self._idle_closing(timer)
            return
        self._check_wall_budget()
        if self.halted is None:
            candidates = self._candidates()
            if not candidates:
                due = self._next_due(timer)
                if due is None:
                    self._quiescent()
                    return
                if due > self.max_virtual_seconds:
                    self.halt(f"virtual-time budget of {self.max_virtual_seconds:g} s exceeded")
                    self._quiescent()
                    return
                self.clock.advance_to_seconds(due)
                if self._timer_due():
                    return  # a loop timer is due now: the loop runs it before the next idle point
                # Nothing else can happen before the next idle point would offer what
                # is due now: offer it at once (same choices, one loop iteration less).
                candidates = self._candidates()
                if not candidates:
                    return
            labels = [_label(c) for c in candidates] if self._labeled is not None else ()
            index = self._choose(len(candidates), "schedule", labels)
            self._act(candidates[index])
            return
        self._quiescent()

    def _idle_closing(self, timer: float | None) -> None:
        if self._parked:
            for parked in list(self._parked.values()):
                self.resume(parked)
            return
        if timer is not None:
            self.clock.advance_to_seconds(timer)
            return
        raise SimDeadlock("tasks of the simulation would not end while it closed")

    def _choose(self, n: int, what: str, labels: Sequence[str] = ()) -> int:
        if n == 1:
            return 0
        index = self._ask(n, what, labels)
        if not 0 <= index < n:
            raise ValueError(f"choice source answered {index} to choose({n})")
        self.choice_log.append((n, index))
        return index

    def _candidates(self) -> list[Parked | QueueSlot]:
        found: list[Parked | QueueSlot] = [p for p in self._parked.values() if not p.held]
        if self.auto_deliver:
            found.extend(self.queue.claimable())
        return found

    def _next_due(self, timer: float | None) -> float | None:
        times = [] if timer is None else [timer]
        if self.auto_deliver:
            micros = self.queue.next_due_micros()
            if micros is not None:
                times.append(self._loop_seconds(micros))
        return min(times, default=None)

    def _loop_seconds(self, micros: int) -> float:
        return self.clock.seconds() + (micros - self.clock.micros) / 1_000_000

    def _ask(self, n: int, what: str, labels: Sequence[str] = ()) -> int:
        # A source with ``choose_labeled`` is told what the choice is about
        # (see LabeledChoiceSource); its answers replay through plain choose().
        if self._labeled is not None:
            return int(self._labeled(n, what, tuple(labels)))
        return self.choices.choose(n)

    def _act(self, candidate: Parked | QueueSlot) -> None:
        if self.faults_left > 0 and self._ask(self.fault_odds, "fault") == self.fault_odds - 1:
            kinds = self._applicable(candidate)
            if kinds:
                kind = kinds[self._choose(len(kinds), "fault-kind", kinds)]
                self.faults_left -= 1
                self.injected.append(kind)
                if self._inject(kind, candidate):
                    return
        if isinstance(candidate, Parked):
            self.resume(candidate)
        else:
            self.launch(candidate)

    def _applicable(self, candidate: Parked | QueueSlot) -> list[FaultKind]:
        if isinstance(candidate, Parked):
            kinds = [
                FaultKind.CRASH,
                FaultKind.EXPIRE_LEASE,
                FaultKind.WITHHOLD,
                FaultKind.DUPLICATE,
            ]
            if candidate.point.phase == "before":
                kinds.append(FaultKind.FAIL)
            if candidate.actor.writer.kind == EXTERNAL:
                kinds = [k for k in kinds if k in (FaultKind.FAIL, FaultKind.WITHHOLD)]
        else:
            kinds = [FaultKind.DROP, FaultKind.DELAY, FaultKind.DUPLICATE]
        return [k for k in kinds if k in self.faults]

    def _inject(self, kind: str, candidate: Parked | QueueSlot) -> bool:
        """Apply fault ``kind``; True if the candidate must not also go ahead."""
        if isinstance(candidate, QueueSlot):
            message = candidate.message
            if kind == FaultKind.DROP:
                self.queue.drop(message.message_id)
                self.trace.add("fault", f"dropped {message.message_id} ({message.run_id})")
                return True
            if kind == FaultKind.DELAY:
                seconds = float(1 + self._choose(60, "delay"))
                self.queue.delay(message.message_id, seconds)
                self.trace.add("fault", f"delayed {message.message_id} by {seconds:g} s")
                return True
            self.launch(candidate)
            self.launch(candidate, duplicate=True)
            return True
        actor, point = candidate.actor, candidate.point
        if kind == FaultKind.CRASH:
            self.crash(actor, point)
            return False  # it resumes only to unwind
        if kind == FaultKind.FAIL:
            candidate.fail = True
            self.trace.add("fault", f"transient failure of {point.describe()}")
        elif kind == FaultKind.EXPIRE_LEASE and actor.message_id is not None:
            self.expire(actor.message_id, redeliver=True)
        elif kind == FaultKind.WITHHOLD:
            self._withhold_armed.append((1, point.run_id))
            self.trace.add("fault", f"the next event of {point.run_id} is withheld from 1 read")
        elif kind == FaultKind.DUPLICATE and actor.message_id is not None:
            slot = self.queue.slot(actor.message_id)
            if slot is not None:
                self.launch(slot, duplicate=True)
        return False

    def _quiescent(self) -> None:
        waiters = [w for w in self._watches if w.future is not None]
        if not self._idle_waiters and not waiters:
            self.deadlock = SimDeadlock(
                "the script awaits something outside the simulation and every simulated task "
                f"is blocked; parked: {[p.point.describe() for p in self._parked.values()]}"
            )
            if self.main_task is None or self.main_task.done():
                raise self.deadlock
            self.main_task.cancel()  # Sim.run_sync raises the deadlock in its place
            return
        for future in self._idle_waiters:
            if not future.done():
                future.set_result(None)
        self._idle_waiters.clear()
        for watch in waiters:
            self._watches.remove(watch)
            assert watch.future is not None
            if watch.future.done():
                continue
            if self.halted is not None:
                error: Exception = BudgetExceeded(f"{self.halted}; waiting for {watch.label}")
            else:
                error = HoldNeverReached(self._never_reached(watch))
            watch.future.set_exception(error)

    def _never_reached(self, watch: Watch) -> str:
        held = [p.point.describe() for p in self._parked.values()]
        last: dict[str, str] = {}
        for point in self.history:
            last[point.writer.label] = point.describe()
        positions = "; ".join(last.values()) or "no writer made a call"
        return (
            f"{watch.label or 'the awaited point'} ({watch.match.describe()}) was never "
            f"reached: nothing is left to run. Held by the script: {held or 'nothing'}. "
            f"Last point of each writer: {positions}"
        )

    def wait_idle(self) -> asyncio.Future[None]:
        """A future resolved when nothing is left to run (or a budget ran out)."""
        future: asyncio.Future[None] = self.loop.create_future()
        self._idle_waiters.append(future)
        return future

    def halt(self, reason: str) -> None:
        """Stop scheduling anything (a budget ran out)."""
        if self.halted is None:
            self.halted = reason
            self.trace.add("note", f"halted: {reason}")

    def interrupted(self, stuck: StuckCode) -> None:
        """The watchdog interrupted ``stuck`` (it never yielded): halt, and say where."""
        self.stuck = stuck
        if self.halted is None:
            self.halt(f"wall-time budget of {self.max_wall_seconds:g} s exceeded: {stuck}")
        else:
            self.trace.add("note", f"interrupted: {stuck}")
        for record in self.deliveries.values():
            task = record.task
            if record.status != "running" or task is None or not task.done():
                continue
            if not task.cancelled() and isinstance(task.exception(), WallBudgetInterrupt):
                record.status = "interrupted"
                self.trace.add("delivery", f"d{record.number} interrupted")

    # --- deliveries ------------------------------------------------------------

    def launch(self, slot: QueueSlot, *, duplicate: bool = False) -> DeliveryRecord:
        """Deliver ``slot``'s message now as a new task (a duplicate reuses its lease)."""
        if len(self.deliveries) >= self.max_deliveries:
            self.halt(f"delivery budget of {self.max_deliveries} exceeded")
        message = slot.message
        number = len(self.deliveries) + 1
        if duplicate and slot.lease_id is not None:
            delivery = None
        else:
            delivery = self.queue.take(message.message_id, lease_seconds=self.lease_seconds)
            message = delivery.message
        parsed = parse_message(message.queue_name, message.payload)
        run_id = parsed.run_id
        if isinstance(parsed, StepMessage):
            writer = Writer(
                kind=STEP,
                run_id=run_id,
                name=step_short_name(parsed.correlation_id),
                delivery=number,
            )
        else:
            writer = Writer(kind=ORCHESTRATOR, run_id=run_id, delivery=number)
        actor = Actor(writer=writer, message_id=message.message_id, duplicate=delivery is None)
        record = DeliveryRecord(
            number=number, message_id=message.message_id, run_id=run_id, actor=actor
        )
        self.deliveries[number] = record
        what = "duplicate delivery" if delivery is None else "deliver"
        self.trace.add(
            "delivery",
            f"d{number} {what} {message.message_id} {message.queue_name} run={run_id} "
            f"attempt={message.attempt}",
        )
        coro = self._deliver(record, message.attempt, parsed, delivery)
        context = contextvars.copy_context()
        context.run(ACTOR.set, actor)
        record.task = self.loop.create_task(coro, context=context)
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
        try:
            handled = await self.engine.handle_message(
                message,
                attempt=attempt,
                limits=self.limits,
                sync_in_thread=False,
                log_failures=False,
            )
        except Crashed:
            record.status = "crashed"
            self.trace.add("delivery", f"d{record.number} crashed")
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
            self.queue.put(
                ORCHESTRATOR_QUEUE,
                settlement.wake.encode(),
                run_id=settlement.wake.run_id,
                orchestrator=True,
                delay=REQUEUE_DELAY,
            )
        record.status = status
        self.trace.add("delivery", f"d{record.number} ended: {status}")
        if delivery is None or record.actor.crashed:
            return
        try:
            self.queue.settle(delivery, release_after=settlement.release_after)
        except WorldError:
            self.trace.add("note", f"d{record.number} could not settle {record.message_id}")

    def crash(self, actor: Actor, point: Point | None = None, *, where: str = "") -> None:
        """Crash ``actor``'s delivery: it stops at once; its lease expires later.

        ``where`` says where in the trace (default: the point's description);
        a scripted crash names the commit and event its match selected.
        """
        if actor.crashed:
            return
        actor.crashed = True
        if not where and point is not None:
            where = f"at {point.describe()}"
        self.trace.add("fault", f"crash {actor.writer.label}" + (f" {where}" if where else ""))
        if actor.message_id is not None and not actor.duplicate:
            self.queue.expire(actor.message_id, after=self.lease_seconds)
        for parked in list(self._parked.values()):
            if parked.actor is actor:
                self.resume(parked)

    def expire(self, message_id: str, *, redeliver: bool) -> None:
        """End the lease of an in-flight message (its delivery keeps running)."""
        if redeliver:
            self.queue.expire(message_id)
        else:
            self.queue.open_gate(message_id)
        self.trace.add("fault", f"lease of {message_id} expired (redeliver={redeliver})")

    def withhold(self, reads: int, run_id: str | None) -> None:
        """Hide the next committed event (of ``run_id``) from the next ``reads`` log reads."""
        self._withhold_armed.append((reads, run_id))

    def spawn(self, actor: Actor, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``coro`` as a simulated task working for ``actor``."""
        context = contextvars.copy_context()
        context.run(ACTOR.set, actor)
        task = self.loop.create_task(coro, context=context)
        self._tasks.append(task)
        return task

    async def close_tasks(self) -> None:
        """End every task still running (parked, sleeping): the simulation is over."""
        self._closing = True
        tasks = [r.task for r in self.deliveries.values() if r.task is not None]
        tasks += self._tasks
        running = []
        for task in tasks:
            if not task.done():
                task.cancel()
                running.append(task)
            elif not task.cancelled():
                task.exception()  # looked at, as gather() would: no "never retrieved" warning
        for parked in list(self._parked.values()):
            self.resume(parked)
        await asyncio.gather(*running, return_exceptions=True)


def _point(fields: tuple[Any, ...]) -> Point:
    """A Point from (ordinal, seq, call, phase, writers, run_id, types, correlation ids,
    token, events[, failed, error])."""
    ordinal, seq, call, phase, writers, run_id, types, cids, token, events, *failure = fields
    failed, error = failure or (False, None)
    return Point(
        ordinal=ordinal,
        seq=seq,
        call=call,
        phase=phase,
        writer=writers[0],
        writers=writers,
        run_id=run_id,
        types=types,
        correlation_ids=cids,
        token=token,
        failed=failed,
        error=error,
        events=events,
    )


def _label(candidate: Parked | QueueSlot) -> str:
    """A candidate's stable name for labeled choice sources: its writer, or its message."""
    if isinstance(candidate, Parked):
        return candidate.point.writer.label
    return f"msg {candidate.message.message_id}"


def _resolve(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


def _describe(
    call: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str | None, list[EventRequest], str | None]:
    run_id = kwargs.get("run_id")
    if run_id is None and args and isinstance(args[0], str) and not call.startswith("queue."):
        run_id = args[0]
    requests: list[EventRequest] = []
    token = None
    if call == "events.create":
        requests = [args[1] if len(args) > 1 else kwargs["request"]]
    elif call == "events.create_batch":
        requests = list(args[1] if len(args) > 1 else kwargs["requests"])
    elif call == "hooks.get_by_token":
        token, run_id = run_id, None
    return run_id, requests, token


@functools.lru_cache(maxsize=4096)
def _step_writer(run_id: str | None, step: str, delivery: int) -> Writer:
    """The writer of a step body (``step``: its name or correlation id); shared, immutable."""
    return Writer(kind=STEP, run_id=run_id, name=step_short_name(step), delivery=delivery)


def _writers(actor: Actor, requests: list[EventRequest]) -> tuple[Writer, ...]:
    base = actor.writer
    meta = STEP_METADATA.get()
    if meta is None and not any(r.type in _OUTCOMES for r in requests):
        return (base,)
    found: list[Writer] = []
    if meta is not None:
        found.append(_step_writer(meta.run_id, meta.step_name, base.delivery))
    for request in requests:
        if request.type in _OUTCOMES and request.correlation_id:
            found.append(_step_writer(base.run_id, request.correlation_id, base.delivery))
    if not found or (found[0] is not base and found[0] != base):
        found.append(base)
    return tuple(dict.fromkeys(found))
