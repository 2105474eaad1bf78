"""Injected time and ids.

Every World takes a :class:`Clock` (the source of every ``created_at``, lease
expiry and due time) and an :class:`IdSource` (run ids, message ids, lease ids).
The defaults are real time and :mod:`secrets`; a simulation passes its own so two
runs of one seed produce byte-identical logs.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Protocol

import attrs

__all__ = [
    "EPOCH",
    "Clock",
    "CountingIds",
    "FixedClock",
    "IdSource",
    "RandomIds",
    "SystemClock",
    "from_micros",
    "housekeeping",
    "in_housekeeping",
    "to_micros",
]

_HOUSEKEEPING: ContextVar[bool] = ContextVar("durasim_housekeeping", default=False)


@contextlib.contextmanager
def housekeeping() -> Iterator[None]:
    """Mark the tasks and timers started inside as a World's housekeeping.

    A connection pool's maintenance (shrinking, reconnecting, expiring old
    connections) runs forever on timers.  The simulator's clock jumps to the
    next timer whenever every task is blocked, so such timers would keep it
    moving for ever; it leaves the ones marked here pending instead (they still
    fire when the clock passes them).  Tasks created inside inherit the mark.
    """
    token = _HOUSEKEEPING.set(True)
    try:
        yield
    finally:
        _HOUSEKEEPING.reset(token)


def in_housekeeping() -> bool:
    """Whether the running code was started inside :func:`housekeeping`."""
    return _HOUSEKEEPING.get()


#: The fixed epoch virtual clocks start at (2024-01-01T00:00:00Z).
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

_UNIX = datetime(1970, 1, 1, tzinfo=UTC)


_last_converted: tuple[datetime, int] = (_UNIX, 0)


def to_micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime (exact, no float)."""
    global _last_converted  # noqa: PLW0603 -- a one-entry memo: one write converts `now` 3-4 times
    last, value = _last_converted
    if moment is last:
        return value
    if moment.tzinfo is None:
        raise ValueError(f"naive datetime {moment!r}: pass an aware datetime (tzinfo=UTC)")
    delta = moment - _UNIX
    value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    _last_converted = (moment, value)
    return value


#: Below this many microseconds (year 2242) a float of the seconds is within
#: half a microsecond of the exact value, so rounding recovers it exactly.
_FLOAT_EXACT = 2**33 * 1_000_000


def from_micros(micros: int) -> datetime:
    """Inverse of :func:`to_micros`; always returns a UTC datetime."""
    if 0 <= micros < _FLOAT_EXACT:
        # fromtimestamp rounds half-even to the microsecond: exact here, and
        # several times faster than timedelta arithmetic (log reads are hot).
        return datetime.fromtimestamp(micros / 1_000_000, UTC)
    return _UNIX + timedelta(microseconds=micros)


class Clock(Protocol):
    """Where a World reads the time.  ``now()`` never goes backwards."""

    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        ...


class SystemClock:
    """Real time, made monotonic: never returns an earlier instant than before."""

    def __init__(self) -> None:
        self._last = _UNIX

    def now(self) -> datetime:
        """The wall clock, or the last answer if the wall clock stepped back."""
        current = datetime.now(UTC)
        if current < self._last:
            return self._last
        self._last = current
        return current


@attrs.define
class FixedClock:
    """A clock that moves only when told; for tests of the Worlds themselves.

    The simulator has a fuller virtual clock; this one is the minimum a contract
    test needs to expire a lease or pass a ``retry_after`` without sleeping.
    """

    current: datetime = EPOCH

    def now(self) -> datetime:
        """The time last set."""
        return self.current

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards by {seconds} s")
        self.current += timedelta(seconds=seconds)


class IdSource(Protocol):
    """Where a World gets fresh ids: ``new_id("wrun")`` -> ``"wrun_..."``."""

    def new_id(self, prefix: str) -> str:
        """A fresh id that starts with ``prefix + "_"``, unique within the World."""
        ...


class RandomIds:
    """128 random bits per id from :mod:`secrets` (the default)."""

    def new_id(self, prefix: str) -> str:
        """``prefix_`` followed by 32 hex digits."""
        return f"{prefix}_{secrets.token_hex(16)}"


@attrs.define
class CountingIds:
    """Deterministic ids ``prefix_000001``, ``prefix_000002`` ... per prefix.

    Used by tests and simulations so two runs of one seed produce the same ids.
    ``namespace`` keeps several sources apart (``wrun_a000001``).
    """

    namespace: str = ""
    _counters: dict[str, int] = attrs.field(factory=dict, init=False)

    def new_id(self, prefix: str) -> str:
        """The next id for ``prefix``."""
        count = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = count
        return f"{prefix}_{self.namespace}{count:06d}"
