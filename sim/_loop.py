"""The simulation's event loop: asyncio with virtual time and no I/O.

:class:`SimLoop` is a :class:`asyncio.BaseEventLoop` whose ``time()`` is the
:class:`SimClock` and whose selector never touches the operating system.  The
loop calls ``select(timeout)`` once per iteration; a timeout of 0 means
callbacks are ready, anything else means every task is blocked.  That moment
is the *idle point*: the loop hands it to the scheduler, which releases a
parked task, starts a delivery, or jumps the clock to the next due timer or
message.  Nothing else ever advances time, so ``asyncio.sleep(30 days)`` costs
one loop iteration.  There are no threads: step bodies run on this loop.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Mapping
from typing import Any

from ._clock import SimClock

__all__ = ["SimLoop"]

#: Called at each idle point with the loop; the next due loop timer (loop seconds) or None.
IdleHook = Callable[[float | None], None]


class _NoSelector(selectors.BaseSelector):
    """A selector with nothing to watch: ``select`` is where the loop would block."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._map: dict[Any, selectors.SelectorKey] = {}

    def register(
        self, fileobj: Any, events: int, data: Any = None
    ) -> selectors.SelectorKey:  # pragma: no cover - the loop registers nothing here
        raise NotImplementedError("the simulation loop does no I/O")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:  # pragma: no cover
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout > 0:
            self._loop._idle()
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._map

    def close(self) -> None:
        self._map.clear()


class SimLoop(asyncio.BaseEventLoop):
    """An asyncio loop on virtual time; its idle points call ``on_idle``.

    Args:
        clock: the virtual clock (shared with the World).
    """

    def __init__(self, clock: SimClock) -> None:
        super().__init__()
        self.clock = clock
        self._selector = _NoSelector(self)  # read by BaseEventLoop._run_once
        self.on_idle: IdleHook | None = None
        # Timers due within this much of now fire; the clock counts microseconds.
        self._clock_resolution = 1e-6

    def time(self) -> float:
        """Virtual seconds."""
        return self.clock.seconds()

    def _idle(self) -> None:
        # _run_once dropped cancelled timers from the head: the head is the next due one.
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        due = scheduled[0].when() if scheduled else None
        if self.on_idle is None:
            if due is None:
                raise RuntimeError("the simulation loop is idle with nothing scheduled")
            self.clock.advance_to_seconds(due)
            return
        self.on_idle(due)

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def close(self) -> None:
        """Close the loop (and the selector)."""
        super().close()
        self._selector.close()
