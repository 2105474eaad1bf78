"""Sim: the simulation a script drives (see docs/simulator.md).

A :class:`Sim` owns a virtual clock, a store built on it (the in-memory World by
default, or any World), the intercepting :class:`SimWorld` the runtime runs
against, and the :class:`Scheduler`.  A script is an ``async def script(sim)``
run by :meth:`Sim.run_sync` (or :func:`simulate`) on the simulation's loop.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import attrs

from durasim.runtime import LeasePolicy, Limits, Run, resume_hook, start
from durasim.runtime.lowlevel import pinning, wall_monotonic
from durasim.worlds import (
    Event,
    IdSource,
    MemoryWorld,
    Message,
    World,
    WorldFactory,
    WorldSetup,
    check_factory,
)
from durasim.worlds._time import CountingIds

from ._choices import ChoiceSource, as_choice_source
from ._clock import SimClock
from ._deliveries import Deliveries
from ._errors import BudgetExceeded, QueueModeUnsupported, SimError, WallBudgetInterrupt
from ._handles import DeferredCommit, Hold, WriterHandle
from ._loop import release_loop
from ._points import EXTERNAL, ORCHESTRATOR, STEP, Match, Point, Writer, WriterPattern
from ._reports import IdleReport, RunOutcome, SimSnapshot, StallReport, find_stalls, take_snapshot
from ._scheduler import Scheduler
from ._trace import TraceEntry
from ._watchdog import WallGuard, grace_after
from ._world import Actor, SimWorld
from ._world_queue import QUEUE_MODES

__all__ = ["DeferredCommit", "Hold", "Sim", "WriterHandle", "simulate"]

T = TypeVar("T")
#: Selects queued messages: a message id, a predicate, or ``None`` (the oldest pending).
Select = str | Callable[[Message], bool] | None


class Sim:
    """A deterministic simulation of the runtime over a World.

    Args:
        store: the World to store into: ``None`` (a :class:`MemoryWorld` on the
            simulation's clock and counting ids), a factory ``make(setup:
            WorldSetup) -> World`` (called with the simulation's clock and ids
            and a scratch directory removed after the run; e.g. a SQLiteWorld
            in it), or a World built on ``clock``.
        seed: seeds the random choice source (used when ``choices`` is None).
        choices: a :class:`ChoiceSource`, a sequence of ints, or a callable
            ``f(n) -> int`` (e.g. Hypothesis data); overrides ``seed``.
        clock: the virtual clock (pass the one your store was built on).
        ids: the id source for the default store and the queue.
        limits: runtime limits (default: sync step bodies on the loop).
        faults: fault kinds the choice source may inject (see ``FAULT_KINDS``).
        fault_odds: at each choice, a fault is injected when
            ``choose(fault_odds)`` answers its last value.
        max_faults: at most this many injected faults.
        max_deliveries: delivery budget.
        max_virtual_time: virtual-time budget (a ``timedelta``, or seconds).
        max_wall_seconds: wall-time budget; code that never yields is
            interrupted when it runs out (see docs/simulator.md, "Budgets").
        lease_seconds: how long a claimed message stays a delivery's without
            renewal (a ``Worker``'s default, 5 s): a crashed or stalled
            delivery's message is claimable again this long after its last renewal.
        renew_every: how often a delivery's lease is renewed (default: as a
            ``Worker``, 1 s or a third of a shorter lease); validated with
            ``lease_seconds`` as a worker's options are (``LeasePolicy``).
        queue: ``"sim"`` (default): the runtime's queue is the simulator's
            recording queue; ``"world"``: the World's own queue, driven by the
            simulated runtime and checked against what it was asked (a breach
            raises :class:`~durasim.sim.QueueContractBroken`; see
            docs/simulator.md, "The World's own queue").
    """

    def __init__(
        self,
        store: World | WorldFactory | None = None,
        *,
        seed: int | None = 0,
        choices: ChoiceSource | Iterable[int] | Callable[[int], int] | None = None,
        clock: SimClock | None = None,
        ids: IdSource | None = None,
        limits: Limits | None = None,
        faults: Sequence[str] = (),
        fault_odds: int = 20,
        max_faults: int = 3,
        max_deliveries: int = 10_000,
        max_virtual_time: timedelta | float = timedelta(days=3660),
        max_wall_seconds: float = 60.0,
        lease_seconds: float | None = None,
        renew_every: float | None = None,
        queue: str = "sim",
    ) -> None:
        if queue not in QUEUE_MODES:
            raise SimError(
                f"queue={queue!r} is not a queue mode: pass 'sim' (the simulator's queue) "
                "or 'world' (the World's own queue)"
            )
        policy = _lease_policy(lease_seconds, renew_every)
        self.clock = clock or SimClock()
        ids = ids or CountingIds()
        self._owns_store = not _is_world(store)
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if store is None:
            built: World = MemoryWorld(clock=self.clock, ids=ids)
        elif _is_world(store):
            built = store  # type: ignore[assignment]
        else:
            make = check_factory(store)  # type: ignore[arg-type]
            self._scratch = tempfile.TemporaryDirectory(prefix="durasim-sim-")
            setup = WorldSetup(clock=self.clock, ids=ids, directory=Path(self._scratch.name))
            built = make(setup)
        self.store = built
        self._core = Scheduler(
            built,
            self.clock,
            ids,
            as_choice_source(choices, seed=seed),
            limits or _LIMITS,
            faults=faults,
            fault_odds=fault_odds,
            max_faults=max_faults,
            max_deliveries=max_deliveries,
            max_virtual_seconds=_seconds("max_virtual_time", max_virtual_time),
            max_wall_seconds=max_wall_seconds,
            leases=policy,
            queue=queue,
        )
        self.world: SimWorld = self._core.world
        self.run_id: str | None = None
        self._senders = 0
        self._ran = False
        self._store_closed = False

    # --- running ---------------------------------------------------------------

    def run_sync(self, script: Callable[[Sim], Coroutine[Any, Any, T]]) -> T:
        """Run ``await script(self)`` on the simulation's loop; its result.

        A Sim runs one script: afterwards its loop is closed (read the trace,
        not the store, unless you passed the store in).
        """
        if self._ran:
            raise SimError("this Sim already ran a script: make a new Sim for another")
        self._ran = True
        loop = self._core.loop
        task = loop.create_task(self._main(script))
        self._core.main_task = task
        try:
            result = self._drive(task)
        except asyncio.CancelledError:
            if self._core.deadlock is not None:
                raise self._core.deadlock from None
            self._raise_queue_broken()
            raise
        except Exception:
            self._raise_queue_broken()
            raise
        else:
            self._raise_queue_broken()
            return result
        finally:
            try:
                if self._owns_store and not self._store_closed:
                    loop.run_until_complete(self.store.close())
                # Nothing to shut down and no callback left (an async generator's
                # finalizer, say): the loop run that would do it does nothing.
                if loop._asyncgens or loop._ready:  # type: ignore[attr-defined]
                    loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                # Kept for the next Sim if it is as new (see _loop.py), else closed.
                release_loop(loop)
                if self._scratch is not None:
                    self._scratch.cleanup()

    def _raise_queue_broken(self) -> None:
        """The World's queue broke its contract (``queue="world"``): that is the outcome."""
        broken = self._core.queue.broken
        if broken is not None:
            raise broken

    @property
    def queue_mode(self) -> str:
        """``"sim"`` or ``"world"``: whose queue the simulated runtime uses."""
        return self._core.queue_mode

    async def _main(self, script: Callable[[Sim], Coroutine[Any, Any, T]]) -> T:
        try:
            return await script(self)
        finally:
            await self._core.close_tasks()
            if self._owns_store:
                # Here rather than in a loop run of its own (run_sync closes it if
                # the script's task never got this far).
                await self.store.close()
                self._store_closed = True

    def _drive(self, task: asyncio.Task[T]) -> T:
        """Run the script's task to its end under the wall-time watchdog (``_watchdog.py``).

        An interrupt (code that never yielded) halts the scheduler with the
        report; the script then goes on, sees the budget halt as any other, and
        has ``allowance`` seconds to finish.  If the script itself was stuck,
        :class:`BudgetExceeded` carries the report.
        """
        core = self._core
        budget = core.max_wall_seconds
        allowance = max(1.0, budget)
        guard = WallGuard(threading.get_ident(), label=self._frame_writer, on_fire=core.note_stuck)
        due = core.wall_deadline + grace_after(budget)
        guard.arm(due, allowance=allowance, halted=lambda: core.halted is not None)
        strikes = 0
        while True:
            try:
                try:
                    return core.loop.run_until_complete(task)
                finally:
                    guard.disarm()
            except WallBudgetInterrupt:
                guard.disarm()  # again: the interrupt may have cut the first one short
                stuck = guard.take()
                if stuck is not None:
                    strikes += 1
                    core.interrupted(stuck)
                    # Tasks that die of the interrupt unawaited are no news either.
                    core.loop.set_exception_handler(_drop_interrupts)
                    due = wall_monotonic() + allowance
                if task.done() and not task.cancelled():
                    if not isinstance(task.exception(), WallBudgetInterrupt):
                        return task.result()
                    strikes = _GIVE_UP
                if strikes >= _GIVE_UP:
                    raise BudgetExceeded(
                        f"{core.halted or 'wall-time budget exceeded'}; the script could not "
                        "finish: make the stuck code yield, or give the Sim a larger "
                        "max_wall_seconds",
                        stuck=core.stuck,
                    ) from None
                # A delivery (not the script) was stuck: the script goes on, sees the
                # halt, and has the allowance to finish.  (An interrupt without a new
                # report is a task re-raising it: it awaited the stuck one.)
                guard.arm(due, allowance=allowance, halted=None)

    @staticmethod
    def _frame_writer(frame: FrameType) -> str | None:
        """Who a frame of the simulation thread works for (the watchdog's report)."""
        code = frame.f_code
        if code is _DELIVER_CODE:
            record = frame.f_locals.get("record")
            actor = getattr(record, "actor", None)
            if actor is None:
                return None
            writer: Writer = actor.writer
            name = f" {writer.name!r}" if writer.name else ""
            return f"{writer.kind}{name} of run {writer.run_id} (delivery d{writer.delivery})"
        if code is _MAIN_CODE:
            return "the script"
        return None

    async def start(
        self, workflow: Callable[..., Any], *args: Any, run_id: str | None = None, **kwargs: Any
    ) -> Run[Any]:
        """Start a run (as an external writer); it is delivered when the scheduler picks it."""
        # Unpinned: a simulated log must not depend on the workflow's source text.
        with pinning(False):
            run = await start(workflow, *args, world=self.world, run_id=run_id, **kwargs)
        self.run_id = run.run_id
        return run

    async def run(self, workflow: Callable[..., Any], *args: Any, **kwargs: Any) -> RunOutcome:
        """Start a run and drive everything until nothing is left to run."""
        run = await self.start(workflow, *args, **kwargs)
        idle = await self.run_until_idle()
        return await self.outcome(run.run_id, idle=idle)

    async def run_until_idle(self) -> IdleReport:
        """Drive until nothing can run (or a budget runs out); how it ended."""
        await self._core.wait_idle()
        deliveries = len(self._core.deliveries)
        elapsed = self.clock.elapsed
        if self._core.halted is not None:
            return IdleReport(
                status="budget",
                reason=self._core.halted,
                stuck=self._core.stuck,
                deliveries=deliveries,
                virtual_seconds=elapsed,
            )
        stall = await self.stall_report()
        return IdleReport(
            status="stalled" if stall.runs else "idle",
            stall=stall if stall.runs else None,
            deliveries=deliveries,
            virtual_seconds=elapsed,
        )

    async def outcome(self, run_id: str, *, idle: IdleReport | None = None) -> RunOutcome:
        """The run's status and result (or error) now."""
        run = await self.store.runs.get(run_id)
        value: Any = None
        error: BaseException | None = None
        if run.status.terminal:
            try:
                value = await Run(run_id=run_id, world=self.store).result()
            except Exception as exc:  # the run's failure, as Run.result() raises it
                error = exc
        return RunOutcome(
            run_id=run_id,
            status=run.status,
            value=value,
            error=error,
            idle=idle or _IDLE,
        )

    # --- writers and holds -------------------------------------------------------

    def orchestrator(self, run_id: str | None = None) -> WriterHandle:
        """The orchestrator of ``run_id`` (any run if ``None``), in any delivery."""
        return WriterHandle(self._core, WriterPattern(kind=ORCHESTRATOR, run_id=run_id))

    def step(self, name: str, run_id: str | None = None) -> WriterHandle:
        """The step ``name`` (``charge``, or its full id): its body and its outcome's commit."""
        return WriterHandle(self._core, WriterPattern(kind=STEP, run_id=run_id, name=name))

    def any_step(self, run_id: str | None = None) -> WriterHandle:
        """Any step body (or outcome commit)."""
        return WriterHandle(self._core, WriterPattern(kind=STEP, run_id=run_id))

    def park(self, match: Match, *, label: str = "park") -> Hold:
        """Hold the next writer that reaches a point ``match`` selects (edge-triggered)."""
        return Hold(self._core, self._core.watch(match, "hold", label=label))

    async def until(self, match: Match) -> Point:
        """Wait (without holding anyone) until a point ``match`` selects is reached."""
        watch = self._core.watch(match, "notify", label="until")
        assert watch.future is not None
        found = await watch.future
        assert isinstance(found, Point)
        return found

    # --- external actors -----------------------------------------------------------

    async def deliver_hook(
        self, token: str, payload: Any, *, resume_id: str | None = None
    ) -> Event:
        """Resume a hook now, as an external writer (the real ``resume_hook``)."""
        return await resume_hook(token, payload, world=self.world, resume_id=resume_id)

    def begin_hook_delivery(
        self, token: str, payload: Any, *, resume_id: str | None = None
    ) -> DeferredCommit:
        """Start a hook delivery whose commit waits for :meth:`DeferredCommit.commit`.

        The sender is a simulated task: its reads interleave with everyone
        else's, and its ``hook_received`` write is held at ``before``.
        """
        self._senders += 1
        name = f"sender{self._senders}"
        watch = self._core.watch(
            Match(
                phase="before",
                call="events.create",
                writer=WriterPattern(kind=EXTERNAL, name=name),
            ),
            "hold",
            label=f"deferred commit of {name}",
        )
        actor = Actor(writer=_external(name))
        coro = resume_hook(token, payload, world=self.world, resume_id=resume_id)
        return DeferredCommit(self._core, watch, self._core.spawn(actor, coro))

    async def cancel_run(self, run_id: str | None = None, reason: str | None = None) -> bool:
        """Cancel a run (the real ``Run.cancel``), as an external writer."""
        return await Run(run_id=self._run(run_id), world=self.world).cancel(reason)

    async def wake_up(self, run_id: str | None = None) -> int:
        """Complete a run's open sleeps now (the real ``Run.wake_up``), as an external writer."""
        return await Run(run_id=self._run(run_id), world=self.world).wake_up()

    def advance_time(self, seconds: float) -> None:
        """Jump the virtual clock forward (running deliveries' leases are renewed)."""
        self._core.advance(seconds)
        self._core.trace.add("note", f"time advanced by {seconds:g} s")

    def note(self, text: str) -> None:
        """Add a note to the trace."""
        self._core.trace.add("note", text)

    # --- faults --------------------------------------------------------------------

    def crash_at(self, match: Match) -> None:
        """Crash the delivery of the next writer reaching ``match`` (at that point)."""
        self._core.watch(match, "crash", label="crash")

    def fail_next(self, match: Match, *, times: int = 1) -> None:
        """Fail the next ``times`` calls matching at ``before`` with :class:`InjectedFault`."""
        self._core.watch(attrs.evolve(match, phase="before"), "fail", times=times)

    def expire_lease(self, run_id: str | None = None, *, redeliver: bool = True) -> int:
        """End the lease of the run's in-flight orchestrator delivery (it keeps running).

        With ``redeliver`` its message is claimable again now (same id, next
        attempt); without, only the run's gate opens (another message of the run
        may be delivered).  Returns how many leases ended.
        """
        expired = 0
        seen: set[str] = set()
        for record in self._core.deliveries.records.values():
            if record.status != "running" or record.actor.crashed or record.actor.duplicate:
                continue
            if record.actor.writer.kind != ORCHESTRATOR or record.message_id in seen:
                continue
            if run_id is not None and record.run_id != run_id:
                continue
            seen.add(record.message_id)
            self._core.deliveries.expire(record.message_id, redeliver=redeliver)
            expired += 1
        return expired

    def stall_heartbeat(self, run_id: str | None = None, *, seconds: float) -> int:
        """Stop renewing the leases of the run's running deliveries for ``seconds``.

        Their steps run on; each lease lapses at its last renewal plus
        ``lease_seconds``, and another delivery may claim the message and run
        the step again (a takeover).  When the heartbeat resumes, the runtime's
        lease keeper renews the lease, or learns it was lost.  Returns how many
        deliveries stalled.
        """
        return sum(self._core.leases.stall(n, seconds) for n in self._leased(run_id))

    def fail_renewals(
        self, run_id: str | None = None, *, seconds: float = 0.0, lost: bool = False
    ) -> int:
        """Make the renewals of the run's running deliveries' leases fail.

        The World's renewer raises a ``WorldError`` for ``seconds`` (the lease
        keeper retries every ``renew_every``), or, with ``lost``, reports the
        lease lost (``LeaseLost``: the keeper gives it up for good).  Returns
        how many deliveries are affected.
        """
        leases = self._core.leases
        return sum(leases.fail(n, seconds=seconds, lost=lost) for n in self._leased(run_id))

    def _leased(self, run_id: str | None) -> list[int]:
        """The running deliveries of ``run_id`` (any run) whose lease is renewed on time."""
        found = []
        for record in self._core.deliveries.records.values():
            if record.status != "running" or record.actor.crashed:
                continue
            if run_id is not None and record.run_id != run_id:
                continue
            if self._core.leases.is_live(record.number):
                found.append(record.number)
        return found

    @property
    def lease_policy(self) -> LeasePolicy:
        """How the simulated deliveries hold their leases."""
        return self._core.leases.policy

    @property
    def takeovers(self) -> list[tuple[int, int]]:
        """Every lease takeover: (the delivery still running, the one that claimed its message)."""
        return list(self._core.leases.takeovers)

    def withhold_next_event(self, reads: int = 1, *, run_id: str | None = None) -> None:
        """Hide the next committed event (of ``run_id``) from the next ``reads`` log reads.

        Those reads are truncated just before it (always a prefix of the log).
        """
        self._core.faults.withhold(reads, run_id)
        self._core.trace.add(
            "fault",
            f"the next event{f' of {run_id}' if run_id else ''} is withheld from {reads} read(s)",
        )

    def drop_queued(self, select: Select = None) -> list[Message]:
        """Lose pending messages (unleased) as a faulty queue would; the dropped ones."""
        dropped = []
        for slot in self._select(select):
            message = self._core.queue.drop(slot.message.message_id)
            if message is not None:
                dropped.append(message)
                self._core.trace.add("fault", f"dropped {message.message_id} ({message.run_id})")
        return dropped

    def delay_queued(self, select: Select, seconds: float) -> list[Message]:
        """Push pending messages ``seconds`` later; the delayed ones."""
        delayed = []
        for slot in self._select(select):
            self._core.queue.delay(slot.message.message_id, seconds)
            delayed.append(slot.message)
            self._core.trace.add("fault", f"delayed {slot.message.message_id} by {seconds:g} s")
        return delayed

    def deliver_queued(self, select: Select = None, *, force: bool = False) -> list[int]:
        """Deliver pending messages now, concurrently with whatever runs; delivery numbers.

        An orchestrator message of a run whose lease is live waits, unless
        ``force`` (two overlapping orchestrators: only the fence decides).
        """
        numbers = []
        if force and self._core.queue_mode == "world":
            raise QueueModeUnsupported(
                "deliver_queued(force=True) overlaps two orchestrators, which the World's "
                "queue never does: use Sim(queue='sim')"
            )
        claimable = {id(s) for s in self._core.queue.claimable(ignore_leases=force)} | (
            {id(s) for s in self._core.queue.slots()} if force else set()
        )
        for slot in self._select(select):
            if id(slot) not in claimable:
                if self._core.queue_mode == "world" and slot.claimable_at() <= self.clock.micros:
                    raise QueueModeUnsupported(
                        f"message {slot.message.message_id} is not the one the World's queue "
                        "would deliver next: use Sim(queue='sim') to choose any due message"
                    )
                raise SimError(
                    f"message {slot.message.message_id} cannot be delivered now: its run's "
                    "orchestrator lease is live (pass force=True to overlap) or it is not due"
                )
            numbers.append(self._core.deliveries.launch(slot).number)
        return numbers

    def duplicate_delivery(self, run_id: str | None = None) -> int:
        """Deliver the run's in-flight orchestrator message a second time, now."""
        for record in self._core.deliveries.records.values():
            if record.status != "running" or record.actor.writer.kind != ORCHESTRATOR:
                continue
            if run_id is not None and record.run_id != run_id:
                continue
            slot = self._core.queue.slot(record.message_id)
            if slot is not None:
                return self._core.deliveries.launch(slot, duplicate=True).number
        raise SimError(f"no orchestrator delivery of {run_id or 'any run'} is in flight")

    @property
    def auto_deliver(self) -> bool:
        """Whether the scheduler delivers due messages by itself (default True)."""
        return self._core.auto_deliver

    @auto_deliver.setter
    def auto_deliver(self, value: bool) -> None:
        self._core.auto_deliver = value

    def _select(self, select: Select) -> list[Any]:
        slots = [s for s in self._core.queue.slots() if s.lease_id is None]
        if select is None:
            return slots[:1]
        if isinstance(select, str):
            return [s for s in self._core.queue.slots() if s.message.message_id == select]
        return [s for s in slots if select(s.message)]

    def _run(self, run_id: str | None) -> str:
        found = run_id or self.run_id
        if found is None:
            raise SimError("no run: start one first, or pass run_id=")
        return found

    # --- what happened ------------------------------------------------------------------

    @property
    def trace_lines(self) -> list[str]:
        """The trace, line by line."""
        return self._core.trace.lines()

    @property
    def trace_text(self) -> str:
        """The trace as text (stable for golden files)."""
        return self._core.trace.text()

    @property
    def trace_entries(self) -> list[TraceEntry]:
        """The trace as values (what the timeline page draws), oldest first."""
        return self._core.trace.entries

    @property
    def points(self) -> list[Point]:
        """Every interception point passed so far (two per World call), in order."""
        return self._core.history

    @property
    def trace_hash(self) -> str:
        """sha256 of :attr:`trace_text`."""
        return self._core.trace.hash()

    def same_trace(self, other: Sim) -> bool:
        """Whether ``other``'s :attr:`trace_text` is this one's (rendered only if it may not be)."""
        return self._core.trace.same_text(other._core.trace)

    @property
    def choices_made(self) -> list[tuple[int, int]]:
        """Every choice the scheduler made: ``(candidates, index)``."""
        return list(self._core.choice_log)

    @property
    def faults_injected(self) -> list[str]:
        """The kinds of the faults the choice source injected, in order."""
        return list(self._core.faults.injected)

    @property
    def deliveries(self) -> int:
        """Deliveries started so far."""
        return len(self._core.deliveries)

    async def snapshot(self) -> SimSnapshot:
        """Everything the store holds now, read without interception."""
        core = self._core
        return await take_snapshot(
            self.store,
            now=self.clock.now(),
            pending=core.queue.pending(),
            rejections=tuple(core.call_log.rejections),
        )

    async def stall_report(self) -> StallReport:
        """The unfinished runs and what each waits for."""
        held = tuple([p.point.describe() for p in self._core.parked() if p.held])
        return await find_stalls(self.store, pending=self._core.queue.pending(), held=held)


#: After this many interrupts (or one of the script itself) the Sim stops trying to go on.
_GIVE_UP = 3

#: The idle report of an outcome asked for without one (a frozen value, shared).
_IDLE = IdleReport(status="idle")

#: A Sim's default limits: step bodies inline, on the simulation's loop (a frozen value).
_LIMITS = Limits(sync_steps="inline")


@functools.lru_cache(maxsize=64, typed=True)
def _lease_policy(lease_seconds: float | None, renew_every: float | None) -> LeasePolicy:
    """``LeasePolicy.of``, validated once per pair (a frozen value; explore makes two Sims
    per example with the same pair)."""
    return LeasePolicy.of(lease_seconds, renew_every)


#: Frames the watchdog's report names a writer by: a delivery's, the script's.
_DELIVER_CODE = Deliveries._deliver.__code__
_MAIN_CODE = Sim._main.__code__


def _drop_interrupts(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), WallBudgetInterrupt):
        loop.default_exception_handler(context)


def _external(name: str) -> Writer:
    return Writer(kind=EXTERNAL, name=name)


def _is_world(store: object) -> bool:
    return store is not None and hasattr(store, "events") and hasattr(store, "runs")


def simulate(script: Callable[[Sim], Coroutine[Any, Any, T]], **options: Any) -> T:
    """``Sim(**options).run_sync(script)``: run one script in a fresh simulation."""
    return Sim(**options).run_sync(script)


def _seconds(name: str, value: object) -> float:
    """A budget given as a ``timedelta`` or a number of seconds, in seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise TypeError(f"{name} must be a timedelta or a positive number of seconds, got {value!r}")
