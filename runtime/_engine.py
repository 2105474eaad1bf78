"""The engine of one World: its live replays, its deliveries, their settlements.

Every driver of the runtime goes through an :class:`Engine`: the
:class:`~durasim.runtime.Worker`, the simulator's scheduler and the replay
oracle.  A driver claims a message (its own way: a real lease, a simulated
one), hands it to :meth:`Engine.handle`, and applies the :class:`Settlement`
it gets back to its queue.  What the message means, how the run is delivered
and what becomes of the message is decided here, once.

The engine is found with :func:`engine_for`, which keeps it on the World object
itself (no module-level table keyed by World identity): a World that cannot
carry an attribute gets a fresh engine per call, which keeps no replays.  The
World owns its engine and the engine reaches the World through a weak
reference, so the two make no reference cycle: a World its user drops is freed
at once, with its engine and the replays it keeps (issue 22).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import traceback
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from durasim.worlds import DurasimError, RunExpired, RunNotFound, World, WorldError

from ._children import notify_parent
from ._errors import ReplayDivergence
from ._orchestrator import DeliveryReport, Limits, run_delivery
from ._queued import run_queued_step
from ._settlement import DROP, DeliveryStatus, Settlement, settle, settle_step
from ._signals import Cancellations
from ._versions import VersionPolicy, run_deployment
from ._wake import (
    MalformedMessage,
    StepMessage,
    WakeMessage,
    enqueue_wake,
    is_step_queue,
    parse_message,
    pinned_queue,
)
from ._writer import Superseded

if TYPE_CHECKING:
    from ._writer import Kept

__all__ = ["KEPT_REPLAYS", "Engine", "Handled", "engine_for"]

log = logging.getLogger("durasim.runtime")

#: Suspended runs whose replay an engine keeps (least recently used dropped).
KEPT_REPLAYS = 256
#: The attribute of a World its engine is kept in.
_ATTRIBUTE = "_durasim_engine"
_CREATING = threading.Lock()


@attrs.frozen
class Handled:
    """What one claimed message came to.

    Attributes:
        settlement: what to do with the message (:func:`settle`).
        report: the orchestrator delivery's report (``None`` for a step, a
            malformed message, or a delivery that raised).
        error: what the delivery raised (a World failure, or a bug), if it did.
        step: the message was a queued step attempt.
    """

    settlement: Settlement
    report: DeliveryReport | None = None
    error: Exception | None = None
    step: bool = False


class Engine:
    """The runtime of one World in this process.

    Owns the World's live replays (suspended runs whose next delivery here
    continues the replay instead of replaying the log from the top), what this
    process knows is cancelled in it (:class:`Cancellations`), and turns queue
    messages into deliveries and settlements.

    Args:
        world: the World this engine runs (held weakly when it can be: the World
            keeps its engine, see :func:`engine_for`).
    """

    def __init__(self, world: World) -> None:
        try:
            self._world: Callable[[], World | None] = weakref.ref(world)
        except TypeError:  # a World without weak references: it cannot carry us weakly
            self._world = lambda: world
        self._kept: OrderedDict[str, Kept] = OrderedDict()
        #: What this process knows is cancelled in this World (runs, tokens).
        self.cancellations = Cancellations()

    @property
    def world(self) -> World:
        """The World this engine runs."""
        world = self._world()
        if world is None:
            raise DurasimError(
                "this engine's World was dropped: keep a reference to the World while its "
                "engine (a Worker, a simulator) runs"
            )
        return world

    def __copy__(self) -> Engine:
        # A copied World (a checker's deepcopy of a reference World) gets no share
        # of this one's replays or cancellations: engine_for() makes it its own.
        return Engine(self.world)

    def __deepcopy__(self, memo: dict[int, object]) -> Engine:
        return Engine(self.world)

    # --- live replays ---------------------------------------------------------

    def take_kept(self, run_id: str) -> Kept | None:
        """The kept replay of ``run_id``, removed (the delivery taking it owns it)."""
        return self._kept.pop(run_id, None)

    def keep(self, run_id: str, kept: Kept) -> None:
        """Keep ``run_id``'s suspended replay for its next delivery here."""
        self._kept[run_id] = kept
        while len(self._kept) > KEPT_REPLAYS:
            self._kept.popitem(last=False)

    def keeps(self, run_id: str) -> bool:
        """Whether this engine keeps a live replay of ``run_id``."""
        return run_id in self._kept

    def forget_kept_replays(self) -> None:
        """Drop every kept replay (tests, memory pressure)."""
        self._kept.clear()

    # --- messages -------------------------------------------------------------

    async def deliver(
        self,
        run_id: str,
        *,
        limits: Limits | None = None,
        attempt: int = 1,
        divergences: int = 0,
        min_seq: int = 0,
        versions: VersionPolicy | None = None,
    ) -> DeliveryReport:
        """One orchestrator delivery of ``run_id``: what it did, and how it ended.

        ``versions``: deliver only a run of these versions (else the delivery
        moves the wake-up to the run's version's queue and ends).

        The steps are :func:`~durasim.runtime._orchestrator.run_delivery`'s (the
        module docstring of ``_orchestrator``); here, what ends a delivery early
        becomes its status.  ``attempt``: the message's delivery count (past
        ``limits.max_deliveries`` the run fails).  ``divergences``: the replay
        divergences of the run so far (the wake message carries them).
        ``min_seq``: the position the message's sender wrote (a hook payload, a
        queued step's outcome); if the log read ends before it, the World served
        a stale prefix, and the delivery gives the message back
        (``unavailable``) instead of suspending without having seen what it was
        woken for.
        """
        world = self.world
        limits = limits or Limits()
        report = DeliveryReport(run_id=run_id, divergences=divergences)
        try:
            await run_delivery(
                self, run_id, limits, report, attempt=attempt, min_seq=min_seq, versions=versions
            )
        except Superseded as exc:
            _let_go(exc)
            log.info("run %s: this delivery was superseded (%s); stopping", run_id, exc)
            report.status = DeliveryStatus.SUPERSEDED
            # Another delivery may own the run, or this one read a stale prefix and
            # nobody does: a wake-up that must read the log at least as far as the
            # refusal saw it makes sure the run goes on either way (deduplicated).
            seen = int(getattr(exc.__cause__, "seq", 0) or 0)
            key = f"superseded:{run_id}:{seen}"
            await enqueue_wake(world, run_id, key=key, delay=1.0, seq=seen)
        except ReplayDivergence as exc:
            _let_go(exc)
            # Met while feeding this delivery's own writes to the live replay.
            log.warning("%s", exc)
            report.divergences += 1
            report.divergence = str(exc)
            report.status = DeliveryStatus.RETRY
        except RunExpired:
            report.status = DeliveryStatus.FINISHED
        except RunNotFound:
            log.warning("run %s does not exist; dropping its message", run_id)
            report.status = DeliveryStatus.FINISHED
            return report
        if report.status is DeliveryStatus.FINISHED:
            # Also on a redelivery of an ended run: a crash between the end and this
            # hand-over must not leave a parent waiting forever.
            await notify_parent(world, run_id, parent=report.parent)
        return report

    async def handle(
        self,
        queue_name: str,
        payload: bytes | str,
        *,
        attempt: int,
        limits: Limits,
        sync_in_thread: bool,
        quick_inline: bool = False,
        log_failures: bool = True,
        versions: VersionPolicy | None = None,
    ) -> Handled:
        """Run one claimed message and say how to settle it.

        ``versions``: which runs this driver serves (a worker's version,
        runtime/_versions.py); a message of a run pinned to another version is
        moved to that version's queue, logged, and not run.  ``None``: every run.

        A World failure (or a bug) while running it does not escape: the message
        is released with a back-off (``max_deliveries`` bounds the retries), and
        the error is in :attr:`Handled.error`, logged unless ``log_failures`` is
        false (the simulator injects such failures by the thousand and traces
        them itself).  ``BaseException`` s do escape.
        """
        try:
            message = parse_message(queue_name, payload)
        except MalformedMessage as exc:
            log.error("dropping a malformed message: %s", exc)
            return Handled(DROP)
        if versions is not None and versions.serve_all:
            versions = None
        if versions is not None and not versions.own_queue(queue_name):
            # An unversioned message (or a version's we do not serve): whose run is it?
            if await self._move_elsewhere(queue_name, payload, message.run_id, versions):
                return Handled(DROP)
            versions = None  # checked: the delivery need not check again
        return await self.handle_message(
            message,
            versions=versions,
            attempt=attempt,
            limits=limits,
            sync_in_thread=sync_in_thread,
            quick_inline=quick_inline,
            log_failures=log_failures,
        )

    async def _move_elsewhere(
        self, queue_name: str, payload: bytes | str, run_id: str, versions: VersionPolicy
    ) -> bool:
        """Move the message of a run of another version to its queue; whether it was."""
        try:
            run = await self.world.runs.get(run_id)
        except RunNotFound:
            return False  # the delivery says so
        if versions.serves(run):
            return False
        pinned = run_deployment(run)
        kind = "step" if is_step_queue(queue_name) else "run"
        raw = payload.encode() if isinstance(payload, str) else bytes(payload)
        target = pinned_queue(pinned, kind)
        await self.world.queue.enqueue(
            target,
            raw,
            run_id=run_id,
            orchestrator=kind == "run",
            idempotency_key=f"moved:{run_id}:{hashlib.sha256(raw).hexdigest()[:16]}",
        )
        log.warning(
            "run %s is pinned to version %s; this worker serves %s: leaving it to that "
            "version's workers (its message moved to queue %s; `durasim migrate %s --to "
            "VERSION` moves the run)",
            run_id,
            pinned,
            ", ".join(versions.served()) or "no version",
            target,
            run_id,
        )
        return True

    async def handle_message(
        self,
        message: WakeMessage | StepMessage,
        *,
        attempt: int,
        limits: Limits,
        sync_in_thread: bool,
        quick_inline: bool = False,
        log_failures: bool = True,
        versions: VersionPolicy | None = None,
    ) -> Handled:
        """:meth:`handle` for a message its driver has parsed already (the simulator).

        ``versions``: the delivery checks that the run is still one of them (a
        migrated run's stale messages in this version's queue move on).
        """
        if isinstance(message, StepMessage):
            try:
                retry_in = await run_queued_step(
                    self.world,
                    message.payload,
                    sync_in_thread=sync_in_thread,
                    quick_inline=quick_inline,
                )
            except Exception as exc:
                if log_failures:
                    log.warning(
                        "queued step %s of run %s failed to run (%r); retrying",
                        message.correlation_id,
                        message.run_id,
                        exc,
                    )
                return Handled(settle(None, attempt), error=exc, step=True)
            return Handled(settle_step(retry_in), step=True)
        try:
            report = await self.deliver(
                message.run_id,
                limits=limits,
                attempt=attempt,
                divergences=message.divergences,
                min_seq=message.seq,
                versions=versions,
            )
        except Exception as exc:
            if log_failures:
                level = logging.WARNING if isinstance(exc, WorldError) else logging.ERROR
                log.log(
                    level, "run %s: delivery failed (%r); it will be retried", message.run_id, exc
                )
            return Handled(settle(None, attempt), error=exc)
        return Handled(settle(report, attempt), report=report)


def _let_go(error: BaseException) -> None:
    """Clear the locals of the frames ``error`` left (the delivery it ended, which has exited).

    Those frames hold what raised it (the step task whose result re-raised it, the
    replay, the writer) and the traceback holds the frames: without this, every
    delivery ended early would wait for the cyclic collector.  Only frames that have
    exited are cleared (the one handling ``error`` is still running: left alone).
    """
    traceback.clear_frames(error.__traceback__)


def engine_for(world: World) -> Engine:
    """The engine of ``world`` in this process (made on first use, kept on the World)."""
    engine = getattr(world, _ATTRIBUTE, None)
    if isinstance(engine, Engine) and engine._world() is world:
        return engine
    with _CREATING:  # step threads ask too: one engine per World, not two
        engine = getattr(world, _ATTRIBUTE, None)
        if isinstance(engine, Engine) and engine._world() is world:
            return engine
        engine = Engine(world)
        # A World that cannot carry it gets a fresh engine per call, keeping nothing.
        with contextlib.suppress(AttributeError, TypeError):
            setattr(world, _ATTRIBUTE, engine)
    return engine
