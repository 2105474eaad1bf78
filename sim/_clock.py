"""Virtual time: one integer of microseconds shared by the loop and the World.

Follows trio's ``MockClock``: it starts at a fixed epoch and moves only when
the scheduler jumps it (to the next due timer or message, when nothing else can
run) or the script does; it never goes backwards.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING

from durasim.worlds import EPOCH
from durasim.worlds._time import from_micros, to_micros

__all__ = ["SimClock"]


class SimClock:
    """The simulation's clock: a :class:`~durasim.worlds.Clock` for Worlds, seconds for the loop.

    Args:
        start: the first instant (default 2024-01-01T00:00:00Z).
    """

    def __init__(self, start: datetime = EPOCH) -> None:
        self._epoch = to_micros(start)
        self._micros = self._epoch
        #: now() at ``_micros`` once asked (None: not made since the clock last moved;
        #: every move goes through jump() or advance_to_micros(), which clear it).
        self._now: datetime | None = start

    if TYPE_CHECKING:

        @property
        def micros(self) -> int:
            """Microseconds since the Unix epoch."""

    else:  # the same read-only property, its getter in C (read at every choice)
        micros = property(attrgetter("_micros"), doc="Microseconds since the Unix epoch.")

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the start."""
        return (self._micros - self._epoch) / 1_000_000

    def now(self) -> datetime:
        """The current virtual instant (aware UTC)."""
        moment = self._now
        if moment is None:
            moment = self._now = from_micros(self._micros)
        return moment

    def seconds(self) -> float:
        """The loop's ``time()``: virtual seconds since the start (small floats stay exact)."""
        return (self._micros - self._epoch) / 1_000_000

    def jump(self, seconds: float) -> None:
        """Move forward by ``seconds``; a negative jump raises ``ValueError``."""
        if seconds < 0:
            raise ValueError(f"cannot move the virtual clock backwards by {seconds} s")
        micros = round(seconds * 1_000_000)
        if micros:
            self._micros += micros
            self._now = None

    def advance_to_seconds(self, when: float) -> None:
        """Move to loop time ``when`` (rounded up to the microsecond), if it is later."""
        self.advance_to_micros(self._epoch + math.ceil(when * 1_000_000))

    def micros_at(self, seconds: float) -> int:
        """The first microsecond at which :meth:`seconds` is not before ``seconds``.

        (Rounding ``seconds`` to the microsecond could land just before it, and a
        driver waiting until ``seconds() >= x`` would then wait at the same time forever.)
        """
        micros = self._epoch + math.ceil(seconds * 1_000_000)
        while (micros - self._epoch) / 1_000_000 < seconds:
            micros += 1
        return micros

    def advance_to_micros(self, micros: int) -> None:
        """Move to ``micros`` if it is later; never backwards."""
        if micros > self._micros:
            self._micros = micros
            self._now = None

    def advance_to(self, moment: datetime) -> None:
        """Move to ``moment`` if it is later; never backwards."""
        self.advance_to_micros(to_micros(moment))

    def offset(self, moment: datetime) -> timedelta:
        """How long after the start ``moment`` is."""
        return timedelta(microseconds=to_micros(moment) - self._epoch)
