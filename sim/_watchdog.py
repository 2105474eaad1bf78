"""The wall-time watchdog: a simulation whose code never yields still ends.

The scheduler checks the wall budget at its idle points, so code that never
yields (``while True: pass`` in a workflow, a CPU-bound step body, a script
stuck in a loop) never lets it look.  One daemon thread per process watches the
deadline of every running :meth:`Sim.run_sync` (one entry per run, nothing per
step or task).  A short grace after the deadline, if the scheduler has not
halted by itself, the thread samples the simulation thread's stack (a
:class:`StuckCode`) and raises :class:`WallBudgetInterrupt` in that thread
(``PyThreadState_SetAsyncExc``); the Sim catches it and halts with the report.
If the scheduler did halt but the script still runs an ``allowance`` later, the
script is interrupted the same way.

An asynchronous exception is raised at the next bytecode boundary: code stuck
inside one C call (``time.sleep``, a blocking read, ``sum(range(10**12))``) is
interrupted only when that call returns.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType

import attrs

from durasim.runtime.lowlevel import wall_monotonic

from ._errors import WallBudgetInterrupt
from ._reports import StuckCode

__all__ = ["WallGuard", "grace_after"]

# Private prototypes (the shared ``ctypes.pythonapi`` attribute is left as it is):
# one raises an exception class in a thread, the other (NULL) clears a pending one.
_raise_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)
_clear_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(
    ("PyThreadState_SetAsyncExc", ctypes.pythonapi)
)

#: How long the thread waits, with nothing armed, before it waits for an arm's wake-up
#: (any deadline is seen in time: an earlier one wakes it, see _Watchdog.arm).
_LINGER = 30.0

#: Frames kept in a report's stack.
_STACK = 8

#: Names the writer a frame works for (``None``: look further out).
FrameLabel = Callable[[FrameType], str | None]


def grace_after(budget: float) -> float:
    """How long past the deadline the scheduler has to halt by itself (its next idle point)."""
    return min(1.0, max(0.05, budget / 10))


@attrs.define(eq=False)
class WallGuard:
    """The watchdog's entry for one simulation thread (armed, fired, disarmed).

    Args:
        thread_id: the simulation's thread (``threading.get_ident()``).
        label: names the writer a frame of that thread works for.
        on_fire: told the report when the watchdog fires, in the watchdog's
            thread (before the interrupt lands: a task unwinding slowly, through
            ``finally: await ...``, may let the scheduler halt first).
    """

    thread_id: int
    label: FrameLabel
    on_fire: Callable[[StuckCode], None] = lambda stuck: None
    due: float = 0.0
    allowance: float = 0.0
    halted: Callable[[], bool] | None = None
    stuck: StuckCode | None = None

    def arm(self, due: float, *, allowance: float, halted: Callable[[], bool] | None) -> None:
        """Fire at ``due`` (wall monotonic), unless ``halted()`` then: then ``allowance`` later.

        An infinite ``due`` (no wall budget) arms nothing.
        """
        self.due, self.allowance, self.halted = due, allowance, halted
        if math.isfinite(due):
            _WATCHDOG.arm(self)

    def disarm(self) -> None:
        """Never fire (again); a fired interrupt not raised yet is withdrawn. Idempotent."""
        _WATCHDOG.disarm(self)

    def take(self) -> StuckCode | None:
        """The report of the interrupt fired since the last ``take()``, if any."""
        stuck, self.stuck = self.stuck, None
        return stuck


class _Watchdog:
    """The process's watchdog thread and its armed guards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._guards: list[WallGuard] = []
        self._fired: set[int] = set()  # id() of guards whose interrupt may still be pending
        self._thread: threading.Thread | None = None
        self._waking_at: float | None = None
        # Whether the thread, finding no guard, lingers on a deadline (see _watch).
        self._linger = True

    def arm(self, guard: WallGuard) -> None:
        with self._lock:
            self._guards.append(guard)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="durasim-sim-watchdog", daemon=True
                )
                self._thread.start()
            elif self._waking_at is None or guard.due < self._waking_at:
                # Only an earlier deadline needs the thread awake now: a later one
                # is seen when it wakes for the current one (one wake-up per budget).
                self._linger = True
                self._changed.notify()

    def disarm(self, guard: WallGuard) -> None:
        # Called from the simulation thread, where a fired interrupt may land at
        # any bytecode: every line below may be cut short, so each is idempotent
        # (the caller calls again after catching the interrupt).
        with self._lock:
            if guard in self._guards:
                self._guards.remove(guard)
            # (id() only when something fired: the runtime's audit hook sees every id().)
            if self._fired and id(guard) in self._fired:
                _clear_in(guard.thread_id, None)
                self._fired.discard(id(guard))

    def _watch(self) -> None:
        with self._lock:
            while True:
                now = wall_monotonic()
                for guard in [g for g in self._guards if g.due <= now]:
                    if guard.halted is not None and guard.halted():
                        # The scheduler halted by itself: what still runs is the
                        # script winding up; it gets the allowance.
                        guard.halted = None
                        guard.due = now + guard.allowance
                        if not math.isfinite(guard.due):
                            self._guards.remove(guard)  # no allowance limit: never fire
                        continue
                    self._guards.remove(guard)
                    self._fire(guard)
                self._plan_wake(now)
                wait = None
                if self._waking_at is not None:
                    wait = min(max(0.0, self._waking_at - now), threading.TIMEOUT_MAX)
                self._changed.wait(wait)

    def _plan_wake(self, now: float) -> None:
        """When the thread wakes next (``_waking_at``; None: when an arm wakes it).

        Called with the lock held, after the due guards were handled.
        """
        if self._guards:
            self._waking_at = min(g.due for g in self._guards)
            self._linger = True
        elif self._linger:
            # Sims come one after another: with nothing armed the thread still wakes
            # a while later, so the next Sims' later deadlines need not wake it now
            # (one wake-up per _LINGER, not per Sim).
            self._waking_at = now + _LINGER
            self._linger = False
        else:
            self._waking_at = None  # lingered in vain: the next arm wakes it

    def _fire(self, guard: WallGuard) -> None:
        frame = sys._current_frames().get(guard.thread_id)
        if frame is None:
            return  # the thread is gone
        try:
            guard.stuck = _stuck(frame, guard.label)
            guard.on_fire(guard.stuck)
        except Exception:  # the report is best effort; the interrupt is not (nor this thread)
            code = frame.f_code
            guard.stuck = StuckCode(
                function=code.co_qualname,
                filename=code.co_filename,
                lineno=frame.f_lineno or 0,
                writer="the simulation loop",
            )
        self._fired.add(id(guard))
        _raise_in(guard.thread_id, WallBudgetInterrupt)


def _stuck(frame: FrameType, label: FrameLabel) -> StuckCode:
    """What ``frame`` (innermost) runs, and for whom (the first frame ``label`` names)."""
    stack: list[str] = []
    writer: str | None = None
    current: FrameType | None = frame
    while current is not None:
        code = current.f_code
        if len(stack) < _STACK:
            stack.append(f"{code.co_qualname} ({code.co_filename}:{current.f_lineno})")
        if writer is None:
            writer = label(current)
        current = current.f_back
    code = frame.f_code
    return StuckCode(
        function=code.co_qualname,
        filename=code.co_filename,
        lineno=frame.f_lineno or 0,
        writer=writer or "the simulation loop",
        stack=tuple(stack),
    )


_WATCHDOG = _Watchdog()


def _after_fork() -> None:
    # A forked child has no watchdog thread (nor the parent's simulations).
    global _WATCHDOG  # noqa: PLW0603 -- one per process, rebuilt in a fork's child
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
