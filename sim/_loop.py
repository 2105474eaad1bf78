"""The simulation's event loop: asyncio with virtual time.

:class:`SimLoop` is a :class:`asyncio.BaseEventLoop` whose ``time()`` is the
:class:`SimClock` and whose selector never touches the operating system.  The
loop calls ``select(timeout)`` once per iteration; a timeout of 0 means
callbacks are ready, anything else means every task is blocked.  That moment
is the *idle point* (unless a task waits on a World's socket: then the loop
waits for it, in wall time): the loop hands it to the scheduler, which releases a
parked task, starts a delivery, or jumps the clock to the next due timer or
message.  Nothing else ever advances time, so ``asyncio.sleep(30 days)`` costs
one loop iteration.  There are no threads: step bodies run on this loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import os
import selectors
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVarTuple

from durasim.worlds._time import in_housekeeping

from ._clock import SimClock
from ._errors import Crashed

__all__ = ["SimLoop", "release_loop", "take_loop"]

_Ts = TypeVarTuple("_Ts")

#: Called at each idle point with the loop; the next due loop timer (loop seconds) or None.
IdleHook = Callable[[float | None], None]


class _SimSelector(selectors.BaseSelector):
    """A real selector, except that a wait with no I/O in flight is the loop's idle point.

    Sockets a World uses (PostgreSQL's, say) are watched for real: while any
    task waits on one, the loop waits for it in wall time, as that task is
    running, not blocked.  Only when no I/O is in flight and no callback is
    ready does the scheduler decide what happens next (or the clock jump).
    """

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()
        # Registrations: the loop's self-pipe (always; not a World's I/O) and sockets.
        self._watched = 0
        #: Whether a World's socket is watched (kept with the count: read at every
        #: loop iteration and every parked point).
        self.in_flight = False

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self._real.register(fileobj, events, data)
        self._count(self._watched + 1)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = self._real.unregister(fileobj)
        self._count(self._watched - 1)
        return key

    def _count(self, watched: int) -> None:
        self._watched = watched
        self.in_flight = watched > 1  # anything besides the self-pipe

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0 and not self.in_flight:
            # Callbacks are ready and no World socket is watched: nothing to poll
            # (the self-pipe only wakes a blocked select; it is read at the idle point).
            return []
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if self.in_flight:
            return self._real.select(_IO_WAIT)  # wall time: a task is waiting on a socket
        self._loop._idle()
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()


#: Longest wall-clock wait for a World's socket in one loop iteration.
_IO_WAIT = 1.0


class SimLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time; its idle points call ``on_idle``.

    Args:
        clock: the virtual clock (shared with the World).
    """

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.on_idle: IdleHook | None = None
        selector = _SimSelector(self)
        super().__init__(selector)
        # Timers due within this much of now fire; the clock counts microseconds.
        self._clock_resolution = 1e-6
        self._housekeeping: weakref.WeakSet[asyncio.TimerHandle] = weakref.WeakSet()
        #: A done future: what a task resumed before it waited awaits (shared by every
        #: Sim on this loop: awaiting a done future adds nothing to it).
        self.released: asyncio.Future[None] = self.create_future()
        self.released.set_result(None)
        #: What a new loop looks like, to tell whether a used one is as new (reusable):
        #: its attribute names in order (a tuple compares faster than a set; attributes
        #: deleted and set again, which asyncio never does, only cost the reuse).
        names = (*vars(self), "_fresh")
        self._fresh = (names, self.get_debug(), self.slow_callback_duration)

    def time(self) -> float:
        """Virtual seconds."""
        return self.clock.seconds()

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """asyncio's, except for the tasks of a crashed delivery.

        A step task the runtime started (a step run beside another) and nobody
        awaits once its delivery crashed ends in :class:`Crashed`, "never
        retrieved": a crashed process's tasks dying unawaited are no news.
        """
        if isinstance(context.get("exception"), Crashed):
            return
        super().default_exception_handler(context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """Schedule ``callback``; remember it if a World's housekeeping set it."""
        handle = super().call_at(when, callback, *args, context=context)
        if in_housekeeping():
            self._housekeeping.add(handle)
        return handle

    def reusable(self) -> bool:
        """Whether this loop is as new (see :func:`release_loop`); tidies cancelled timers."""
        return _reusable(self)

    def io_in_flight(self) -> bool:
        """Whether a task waits on a World's socket (the loop then waits for it in wall time)."""
        selector: _SimSelector = self._selector  # type: ignore[attr-defined]
        return selector.in_flight

    def _idle(self) -> None:
        # The next due timer that is not a World's housekeeping (see worlds.housekeeping):
        # a pool's maintenance timers fire when the clock passes them, never move it.
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        chores = self._housekeeping
        due = min(
            (h.when() for h in scheduled if not h.cancelled() and h not in chores), default=None
        )
        if self.on_idle is None:
            if due is None:
                raise RuntimeError("the simulation loop is idle with nothing scheduled")
            self.clock.advance_to_seconds(due)
            return
        self.on_idle(due)

    def close(self) -> None:
        """Close the loop (and the selector)."""
        super().close()


# --- reuse --------------------------------------------------------------------------
#
# A new loop costs a socket pair, an epoll instance and their registration (system
# calls: a third of a small Sim's wall time).  A Sim's loop that ends exactly as a new
# one is (see SimLoop.reusable) is kept for the next Sim of this process instead.

#: Loops as new, ready for the next Sim (shared by threads: pop and append are atomic).
_IDLE: list[SimLoop] = []
_KEEP = 4


def take_loop(clock: SimClock) -> SimLoop:
    """A loop on ``clock``: a kept one (as new) or a new one."""
    try:
        loop = _IDLE.pop()
    except IndexError:
        return SimLoop(clock)
    loop.clock = clock
    return loop


def release_loop(loop: SimLoop) -> None:
    """Keep ``loop`` for the next Sim if it is exactly as new; otherwise close it."""
    loop.on_idle = None
    if len(_IDLE) < _KEEP and loop.reusable():
        _IDLE.append(loop)
    else:
        loop.close()


def _reusable(loop: SimLoop) -> bool:
    """Whether ``loop`` is as new: nothing scheduled, watched, set or running.

    Cancelled timers are dropped (asyncio drops them lazily; they can never run).
    """
    if loop.is_closed() or loop.is_running() or loop._stopping:  # type: ignore[attr-defined]
        return False
    names, debug, slow = loop._fresh
    state = vars(loop)
    if tuple(state) != names or loop.get_debug() != debug:
        return False
    if loop.slow_callback_duration != slow or state["_thread_id"] is not None:
        return False
    if state["_ready"] or state["_asyncgens"] or state["_current_handle"] is not None:
        return False
    # Loop attributes a new loop has unset, then containers it has empty (written out:
    # a generator per check costs more than the checks).
    if (
        state["_exception_handler"] is not None
        or state["_task_factory"] is not None
        or state["_default_executor"] is not None
    ):
        return False
    if (
        state.get("_signal_handlers")
        or state.get("_transports")
        or state.get("_unix_server_sockets")
        or state["_executor_shutdown_called"]
    ):
        return False
    if state["_coroutine_origin_tracking_enabled"]:
        return False
    scheduled: list[asyncio.TimerHandle] = state["_scheduled"]
    if scheduled and not all(handle.cancelled() for handle in scheduled):
        return False
    selector: _SimSelector = state["_selector"]
    if selector._watched != 1 or len(selector.get_map()) != 1 or selector._real.select(0):
        return False  # a World's socket still watched, or the self-pipe woken
    scheduled.clear()
    state["_timer_cancelled_count"] = 0
    state["_asyncgens_shutdown_called"] = False
    loop._housekeeping.clear()
    return True


def _forget_inherited() -> None:
    """In a forked child: the kept loops share their epoll instance with the parent.

    Unregistering anything from it would unregister it for the parent too, so each
    loop gets a selector of its own (the shared one is only closed) before it closes.
    """
    while _IDLE:
        loop = _IDLE.pop()
        selector: _SimSelector = loop._selector  # type: ignore[attr-defined]
        selector._real.close()
        selector._real = selectors.DefaultSelector()
        selector._count(0)
        loop.close()


def _close_idle() -> None:
    """At exit: close the kept loops (a loop left open warns when it is collected)."""
    while _IDLE:
        _IDLE.pop().close()


atexit.register(_close_idle)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited)
