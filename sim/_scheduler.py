"""The scheduler: interception points, parking, and choosing what runs next.

Every simulated task (an orchestrator delivery, a queued step, an external
sender) parks at each interception point of each World call it makes.  When
the loop is idle (every task blocked), :meth:`Scheduler.on_idle` collects the
candidates (parked tasks not held by the script, due queue messages) and asks
the choice source which one goes; a single candidate needs no choice.  Only
when there is none does it jump the clock to the next loop timer or due
message; when there is nothing at all the simulation is quiescent and the
script's waiters are answered.

What the scheduler owns is choosing and virtual time.  The rest is in its
parts: the deliveries it launches (``_deliveries.py``: the simulator is the
worker, handing each claimed message to the World's engine and applying the
settlement it returns), their leases (``_leases.py``: the runtime's lease
keeper, renewed after every move of the clock), the faults it injects
(``_faults.py``), and the record of what each call did (``_calls.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from durasim.runtime import LeasePolicy, Limits
from durasim.runtime.lowlevel import STEP_METADATA, engine_for, wall_monotonic
from durasim.worlds import IdSource, World, WorldError
from durasim.worlds._memory_queue import QueueSlot

from ._calls import (
    COMMITS,
    WRITES,
    CallLog,
    asked_of,
    committed_types,
    describe_asked,
    describe_call,
    describe_read,
    make_point,
    point_events,
    writers_of,
)
from ._choices import ChoiceSource
from ._clock import SimClock
from ._deliveries import Deliveries
from ._errors import (
    BudgetExceeded,
    Crashed,
    HoldNeverReached,
    InjectedFault,
    SimDeadlock,
)
from ._faults import Faults
from ._leases import Leases
from ._loop import take_loop
from ._points import EXTERNAL, Match, Point, Writer
from ._queue import SimQueue
from ._trace import Trace
from ._world import ACTOR, Actor, SimWorld
from ._world_queue import WorldQueue

if TYPE_CHECKING:
    from ._loop import _SimSelector
    from ._reports import StuckCode

__all__ = ["Parked", "Scheduler", "Watch"]

T = TypeVar("T")

#: The writer of calls the simulator did not launch (the script's): one value, shared.
_EXTERNAL = Writer(kind=EXTERNAL)

#: A loop timer within this many seconds of the loop's time is due (SimLoop's resolution).
_LOOP_RESOLUTION = 1e-6


class Parked:
    """A task waiting at an interception point for the scheduler (or the script).

    Its :class:`Point` is built when asked for (a choice between tasks needs only
    their writers): ``fields`` are the point's, as :func:`make_point` takes them.
    """

    __slots__ = ("_fields", "_point", "actor", "fail", "future", "held", "ordinal")

    def __init__(self, fields: tuple[Any, ...], actor: Actor, point: Point | None = None) -> None:
        self._fields = fields
        self._point = point
        #: What it awaits: made when it waits (a task the scheduler lets go at once
        #: never does); a resumed task's is done.
        self.future: asyncio.Future[None] | None = None
        self.actor = actor
        self.held = False
        self.fail = False
        #: The point's ordinal (``point.ordinal``).
        self.ordinal: int = fields[0]

    @property
    def writer(self) -> Writer:
        """The point's writer (``point.writer``; a write's is described when asked for)."""
        writers = self._fields[5]
        return writers[0] if writers is not None else self.point.writer

    @property
    def point(self) -> Point:
        """The interception point it waits at."""
        point = self._point
        if point is None:
            point = self._point = make_point(self._fields)
        return point

    def __repr__(self) -> str:
        return (
            f"Parked(point={self.point!r}, future={self.future!r}, actor={self.actor!r}, "
            f"held={self.held!r}, fail={self.fail!r})"
        )


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
        leases: LeasePolicy,
        queue: str = "sim",
    ) -> None:
        self.clock = clock
        self.store = store
        self.choices = choices
        self.limits = limits
        self.loop = take_loop(clock)
        self.loop.on_idle = self.on_idle  # released with the loop (release_loop)
        # What this scheduler owns reaches it weakly: no reference cycle, so a finished
        # Sim, its store and every log in it are freed by reference counting alone.
        me: Scheduler = weakref.proxy(self)
        #: "sim" (the recording queue) or "world" (the World's own, mirrored: _world_queue.py).
        self.queue_mode = queue
        if queue == "world":
            world_queue = WorldQueue(clock, ids, store.queue, lease_seconds=leases.lease_seconds)
            world_queue.on_broken = lambda broken: me.halt(f"queue contract broken: {broken}")
            self.queue: SimQueue = world_queue
        else:
            self.queue = SimQueue(clock, ids)
        self.world = SimWorld(me, store, self.queue, clock)
        self.engine = engine_for(self.world)
        self.trace = Trace(clock, lambda: me._ordinal)
        #: The faults the choice source may inject, and those it did.
        self.faults = Faults(me, faults, odds=fault_odds, max_faults=max_faults)
        #: The leases of the running deliveries, renewed as the clock moves.
        self.leases = Leases(leases, clock, self.queue, self.trace)
        #: Every delivery launched.
        self.deliveries = Deliveries(me, max_deliveries=max_deliveries, leases=self.leases)
        #: What every call did: points passed, events committed, calls refused.
        self.call_log = CallLog(self.trace, self.faults)
        self.max_virtual_seconds = max_virtual_seconds
        self.max_wall_seconds = max_wall_seconds
        self.auto_deliver = True
        #: Every choice made: (number of candidates, index chosen).
        self.choice_log: list[tuple[int, int]] = []
        self._labeled = getattr(choices, "choose_labeled", None)
        self._history = self.call_log.history  # appended to at every point (hot path)
        self.halted: str | None = None
        #: The code the wall-time watchdog interrupted (see _watchdog.py), if any.
        self.stuck: StuckCode | None = None
        self._parked: dict[int, Parked] = {}
        #: The future of a task resumed before it waited (done: awaiting it goes on).
        self._released: asyncio.Future[None] = self.loop.released
        self._watches: list[Watch] = []
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._ordinal = 0
        self._calls = 0
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
        # A point's events: (type, correlation id, position) each; a write's are made
        # when its point is built (see below).
        events: tuple[Any, ...] | None = ()
        token: str | None = None
        types: tuple[Any, ...] | None
        cids: tuple[str, ...] | None
        writers: tuple[Writer, ...] | None
        run_id: Any
        if call in WRITES:
            # A write is recorded as asked (make_point describes it: most points are
            # never built): no writers, the write in the run id's place, None for its
            # request events, and after the commit the Events committed.
            run_id = (*asked_of(call, args, kwargs), actor.writer, STEP_METADATA.get())
            writers = types = cids = events = None
        else:
            # No requests: no event types, and the step writer only inside a step body.
            run_id, token = describe_read(call, args, kwargs)
            writers = (actor.writer,) if STEP_METADATA.get() is None else writers_of(actor, [])
            types = cids = ()
        self._calls += 1
        seq = self._calls
        # The before point (_pass, inline: the common case costs no call of its own).
        self._ordinal += 1
        clock = self.clock
        at = (clock._micros - clock._epoch) / 1_000_000  # clock.elapsed, the loop's time()
        fields: tuple[Any, ...] = (
            self._ordinal,
            at,
            seq,
            call,
            "before",
            writers,
            run_id,
            types,
            cids,
            token,
            events,
        )
        # Nothing else could run and nobody looks: go on (the Point is built only if
        # the history is read).  The same judgement as _pass's, in one place.
        alone = not self._watches and self._alone_at(at)
        if alone:
            self._history.append(fields)
        else:
            try:
                await self.at(actor, fields, not_alone=not self._watches)
            except InjectedFault as exc:
                writer, asked = _caller(writers, run_id, types, cids)
                self.call_log.reject(seq, writer, call, asked, exc)
                raise
        try:
            result = await method(*args, **kwargs)
        except WorldError as exc:
            writer, asked = _caller(writers, run_id, types, cids)
            self.call_log.reject(seq, writer, call, asked, exc)
            error = type(exc).__name__
            if parking := self._pass(
                actor, seq, call, "after", writers, run_id, types, cids, token, events, True, error
            ):
                await parking
            raise
        if isinstance(result, COMMITS):
            if writers is None:
                # A write: its point holds the Events it committed (make_point makes
                # their point events), the trace names their writers when read.
                committed = self.call_log.trace_write(run_id, result, self._ordinal)
                if committed:
                    events = committed
            else:
                first_run, committed = self.call_log.trace_events(writers, result, self._ordinal)
                if committed:
                    # After the commit a point names what was committed, at its positions.
                    run_id = run_id or first_run
                    events = point_events(committed)
                    types = tuple([t for t, _, _ in events])
        if call == "events.list" and self.faults.hidden:
            assert writers is not None  # a read
            result = self.faults.stale_read(writers[0], result)
        # The after point (_pass, inline).
        self._ordinal += 1
        at = (clock._micros - clock._epoch) / 1_000_000
        fields = (
            self._ordinal,
            at,
            seq,
            call,
            "after",
            writers,
            run_id,
            types,
            cids,
            token,
            events,
        )
        alone = not self._watches and self._alone_at(at)
        if alone:
            self._history.append(fields)
        else:
            await self.at(actor, fields, not_alone=not self._watches)
        return result

    async def _direct(
        self,
        call: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        external = _EXTERNAL
        try:
            result = await method(*args, **kwargs)
        except WorldError as exc:
            if call in WRITES:
                _, requests, _ = describe_call(call, args, kwargs)
                types = tuple(r.type.value for r in requests)
                self._calls += 1
                self.call_log.reject(self._calls, external, call, types, exc)
            raise
        self.call_log.committed((external,), result, self._ordinal)
        return result

    @property
    def history(self) -> list[Point]:
        """Every point passed, in order."""
        return self.call_log.points()

    def _pass(self, actor: Actor, *fields: Any) -> Coroutine[Any, Any, None] | None:
        """One interception point; ``fields``: a Point's after its ordinal (see make_point).

        ``None`` when the task goes on at once, else what it awaits (see :meth:`at`):
        not a coroutine of its own, so the common case costs no coroutine.
        """
        self._ordinal += 1
        clock = self.clock
        at = (clock._micros - clock._epoch) / 1_000_000  # clock.elapsed, the loop's time()
        watched = bool(self._watches)
        if not watched and self._alone_at(at):
            # Nothing else could run and nobody looks: go on (see at()); the
            # Point is built only if the history is read.
            self._history.append((self._ordinal, at, *fields))
            return None
        return self.at(actor, (self._ordinal, at, *fields), not_alone=not watched)

    def _alone_at(self, now: float) -> bool:
        """:meth:`_alone` at loop time ``now`` (the interception hot path: one call)."""
        if (
            self._parked
            or self.faults.left > 0
            or self.halted is not None
            or self._closing
            or self.loop._ready  # type: ignore[attr-defined]
        ):
            return False
        scheduled: list[asyncio.TimerHandle] = self.loop._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() < now + _LOOP_RESOLUTION:
            return False
        if self.auto_deliver:
            # queue.next_due_micros(), its memo read here (one call less per point).
            queue = self.queue
            micros = self.clock._micros
            version, memo_micros, due = queue._due
            if version != queue._version or memo_micros != micros:
                due = queue.next_due_micros()
            if due is not None and due <= micros:
                return False
        return True

    async def at(self, actor: Actor, fields: tuple[Any, ...], *, not_alone: bool = False) -> None:
        """Record the point of ``fields`` (see :func:`make_point`), fire the script's
        watches, park until the scheduler says go.

        ``not_alone``: the caller found, with no watch armed, that another task could
        run (nothing changes that before the check here: it is not made twice).
        """
        crash: Watch | None = None
        if not self._watches:
            # Nobody matches it: the Point is built only if someone reads it.
            self._history.append(fields)
            parked = Parked(fields, actor)
        else:
            point = make_point(fields)
            self._history.append(point)
            parked = Parked(fields, actor, point)
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
            point = parked.point
            where = crash.match.describe_hit(point)
            if not where.startswith("at "):
                where += f" ({point.writer.label} at {point.call} [call {point.seq}])"
            self.deliveries.crash(actor, point, where=where)
            raise Crashed
        if not parked.held and not parked.fail and not not_alone and self._alone():
            # The idle point would offer exactly this task and ask nothing (no
            # other task, message, timer or fault question): go on without the
            # round trip through the loop. Same choices, same trace.
            return
        ordinal = parked.ordinal
        self._parked[ordinal] = parked
        if not parked.held and not parked.fail and self._idle_next():
            if self._decide(parked):
                self._parked.pop(ordinal, None)
                return
            if parked.future is not None:
                # A fault hit this very task as it was chosen (see _decide): it wakes
                # through the loop, after what the fault started, as from the idle point.
                await asyncio.sleep(0)
        if parked.future is None:
            parked.future = self.loop.create_future()
        try:
            await parked.future
        finally:
            self._parked.pop(ordinal, None)
        if actor.crashed:
            raise Crashed
        if parked.fail:
            point = parked.point
            raise InjectedFault(
                f"injected transient failure of {point.call} for {point.writer.label}; "
                "nothing was written: retry",
                run_id=point.run_id,
            )

    def _idle_next(self) -> bool:
        """Whether, once this task parks, the loop's next step is the idle point.

        True when the loop is settled (see :meth:`_settled`) and no World socket
        is watched: the idle point would then choose among exactly the
        candidates there are now (and ask the fault question it would ask).
        """
        # _settled() and no I/O in flight, in one call (asked at every parked point).
        if self.halted is not None or self._closing:
            return False
        loop = self.loop
        if loop._ready:  # type: ignore[attr-defined]
            return False
        scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
        if scheduled and scheduled[0].when() < self.clock.seconds() + _LOOP_RESOLUTION:
            return False
        selector: _SimSelector = loop._selector  # type: ignore[attr-defined]
        return not selector.in_flight  # loop.io_in_flight(), read here

    def _quiet(self) -> bool:
        """No fault question pending, and the loop settled (see :meth:`_settled`)."""
        return self.faults.left <= 0 and self._settled()

    def _settled(self) -> bool:
        """No budget halt or closing, no callback ready, no loop timer due."""
        if self.halted is not None or self._closing:
            return False
        return not self.loop._ready and not self._timer_due()  # type: ignore[attr-defined]

    def _timer_due(self) -> bool:
        """Whether the loop would run a timer now (its rule: due within its resolution)."""
        scheduled: list[asyncio.TimerHandle] = self.loop._scheduled  # type: ignore[attr-defined]
        return bool(scheduled) and scheduled[0].when() < self.loop.time() + _LOOP_RESOLUTION

    def _decide(self, parked: Parked) -> bool:
        """Make the idle point's choice here, without the trip through the loop.

        The candidates, their order and the questions asked (which goes, then
        whether a fault hits it) are the idle point's (``parked`` is the
        newest parked task); whether ``parked`` itself was chosen to go on, no
        fault hitting it.  Another choice is acted on (resumed or launched) and
        ``parked`` waits for its turn as it would have; so does ``parked`` when
        a fault hit it (resumed by then: its caller yields to the loop first).
        """
        self._check_wall_budget()
        if self.halted is not None:
            return False  # the idle point reports it
        # _candidates() and _choose(), inline (asked at every parked point).
        candidates: list[Parked | QueueSlot] = [p for p in self._parked.values() if not p.held]
        if self.auto_deliver:
            candidates.extend(self.queue.claimable())
        if len(candidates) == 1:
            chosen = candidates[0]
        else:
            chosen = candidates[self._choose(len(candidates), "schedule", self._labels(candidates))]
        if chosen is parked and self.faults.left <= 0:
            return True
        injected = len(self.faults.injected)
        self._act(chosen)
        return chosen is parked and len(self.faults.injected) == injected

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
        self._parked.pop(parked.ordinal, None)
        parked.held = False
        future = parked.future
        if future is None:
            parked.future = self._released  # resumed before it waited: it will not
        elif not future.done():
            future.set_result(None)

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
                if self.leases.running:
                    self.leases.renew()
                if self._timer_due():
                    return  # a loop timer is due now: the loop runs it before the next idle point
                # Nothing else can happen before the next idle point would offer what
                # is due now: offer it at once (same choices, one loop iteration less).
                candidates = self._candidates()
                if not candidates:
                    return
            index = self._choose(len(candidates), "schedule", self._labels(candidates))
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

    def _labels(self, candidates: list[Parked | QueueSlot]) -> Sequence[str]:
        """The candidates' labels for a labeled source (none asked for one candidate)."""
        if self._labeled is None or len(candidates) == 1:
            return ()
        return [_label(c) for c in candidates]

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
        if self.leases.running:
            # A heartbeat that stalled or fails tries again then (a healthy one
            # renews whenever the clock moves: it needs no stop of its own).
            micros = self.leases.next_round()
            if micros is not None:
                times.append(self._loop_seconds(micros))
        return min(times, default=None)

    def advance(self, seconds: float) -> None:
        """Jump the clock forward (the script's ``advance_time``); leases are renewed."""
        self.clock.jump(seconds)
        if self.leases.running:
            self.leases.renew()

    def _loop_seconds(self, micros: int) -> float:
        return self.clock.seconds() + (micros - self.clock.micros) / 1_000_000

    def _ask(self, n: int, what: str, labels: Sequence[str] = ()) -> int:
        # A source with ``choose_labeled`` is told what the choice is about
        # (see LabeledChoiceSource); its answers replay through plain choose().
        if self._labeled is not None:
            return int(self._labeled(n, what, tuple(labels)))
        return self.choices.choose(n)

    def _act(self, candidate: Parked | QueueSlot) -> None:
        if self.faults.left > 0 and self.faults.strike(candidate):
            return
        if isinstance(candidate, Parked):
            self.resume(candidate)
        else:
            self.deliveries.launch(candidate)

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
        self.deliveries.interrupted()

    # --- simulated tasks -----------------------------------------------------

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
        tasks = [r.task for r in self.deliveries.records.values() if r.task is not None]
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
        if running:  # (gather of nothing is done at once: the await would not yield)
            await asyncio.gather(*running, return_exceptions=True)


def _request_types(types: tuple[Any, ...], cids: tuple[str, ...] | None) -> tuple[str, ...]:
    """A call's event types before its commit (a write's points hold its request events)."""
    return types if cids is not None else committed_types(types, types)


def _caller(
    writers: tuple[Writer, ...] | None, run_id: Any, types: Any, cids: tuple[str, ...] | None
) -> tuple[Writer, tuple[str, ...]]:
    """A call's writer and the event types it asked for, from its point's fields (a
    write's, ``writers`` None, described now: see Scheduler.call)."""
    if writers is None:
        _, writers, types = describe_asked(*run_id)
        cids = None
    return writers[0], _request_types(types, cids)


def _label(candidate: Parked | QueueSlot) -> str:
    """A candidate's stable name for labeled choice sources: its writer, or its message."""
    if isinstance(candidate, Parked):
        return candidate.writer.label
    return f"msg {candidate.message.message_id}"


def _resolve(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)
