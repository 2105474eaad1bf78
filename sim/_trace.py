"""The trace: what happened, in commit order, as plain text.

One line per committed event, numbered by its log position (``#12``), with the
virtual time, the run, the writer, the type, the entity and a short payload;
deliveries, holds, notes, faults, stale reads and rejected writes (``!!``)
interleaved where they happened.  Entries are kept as values and rendered on
demand, so an unread trace costs little; the text is stable for golden files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import attrs

from durasim.worlds import Event

from ._clock import SimClock

__all__ = ["Trace", "TraceEntry"]

_CLIP = 32


@attrs.frozen(kw_only=True)
class TraceEntry:
    """One trace line before rendering.

    Attributes:
        kind: ``event``, ``delivery``, ``hold``, ``note``, ``fault``, ``stale`` or ``reject``.
        at: virtual seconds since the start.
        text: the line's text after its marker (unused for events).
        event: the committed event (``kind == "event"``).
        writer: the writer's label (events).
        points: how many interception points had been passed when it was
            written (places it among the calls: see ``Sim.points``).
    """

    kind: str
    at: float
    text: str = ""
    event: Event | None = None
    writer: str = ""
    points: int = 0


_MARKS = {
    "delivery": "--",
    "hold": "||",
    "note": "..",
    "fault": "xx",
    "stale": "~~",
    "reject": "!!",
}


#: A row: (kind, at, text, event, writer, points).  A ``commit`` row (appended by the
#: simulator's call log) holds a write's committed events and the write, in the
#: event's and writer's places: it is replaced by one ``event`` row per event, its
#: writer named by :attr:`Trace.labels`, before the trace is read.
Row = tuple[str, float, str, Any, Any, int]

#: Names the writers of a ``commit`` row's events: ``labels(write, events)``.
Labels = Callable[[Any, Sequence[Event]], Sequence[str]]


class Trace:
    """The simulation's trace (append-only).

    Args:
        clock: gives each line its virtual time.
        points: how many interception points have been passed (the scheduler's
            count), recorded with each line.
    """

    def __init__(self, clock: SimClock, points: Callable[[], int] = lambda: 0) -> None:
        self._clock = clock
        self._points = points
        # Rows as plain tuples (kind, at, text, event, writer, points): a trace nobody
        # reads costs one tuple per line; entries are built when asked for.
        self._rows: list[Row] = []
        #: Names a ``commit`` row's writers (see Row); set by whoever appends them.
        self.labels: Labels | None = None
        self._settled = 0  # _rows[:_settled] hold no commit row
        self._entries: list[TraceEntry] = []
        # Each line is rendered once (a row never changes; the clock's epoch neither):
        # the text and its hash are asked for more than once per simulation.
        self._lines: list[str] = []
        self._text = ""
        self._text_rows = 0

    @property
    def entries(self) -> list[TraceEntry]:
        """Every line so far, oldest first (a new list each time)."""
        rows, entries = self._settle(), self._entries
        for kind, at, text, event, writer, points in rows[len(entries) :]:
            entries.append(
                TraceEntry(kind=kind, at=at, text=text, event=event, writer=writer, points=points)
            )
        return list(entries)

    def add(self, kind: str, text: str) -> None:
        """A non-event line."""
        self._rows.append((kind, self._clock.elapsed, text, None, "", self._points()))

    def event(self, event: Event, writer: str) -> None:
        """A committed event."""
        clock = self._clock  # clock.elapsed, inline: one call less per committed event
        at = (clock._micros - clock._epoch) / 1_000_000
        self._rows.append(("event", at, "", event, writer, self._points()))

    def lines(self) -> list[str]:
        """The rendered lines (a new list each time)."""
        lines, render = self._lines, self._render_row
        for row in self._settle()[len(lines) :]:
            lines.append(render(*row))
        return list(lines)

    def text(self) -> str:
        """The whole trace, one line per entry, newline-terminated."""
        if self._text_rows != len(self._rows):
            lines = self.lines()
            self._text = "".join(line + "\n" for line in lines)
            self._text_rows = len(lines)
        return self._text

    def hash(self) -> str:
        """sha256 of :meth:`text` (hex)."""
        return hashlib.sha256(self.text().encode()).hexdigest()

    def same_text(self, other: Trace) -> bool:
        """Whether ``other`` renders to the same :meth:`text` (rendered only if it may not).

        Rows that are equal in everything a line shows, with values of types
        whose line depends on their value alone, render alike; anything else
        (another row count, a float or a container in a payload, another start
        of the clock) is settled by rendering both texts.
        """
        rows, others = self._settle(), other._settle()
        alike = (
            len(rows) == len(others)
            and self._clock.micros_at(0) == other._clock.micros_at(0)
            and all(map(_render_alike, rows, others))
        )
        return alike or self.text() == other.text()

    def _settle(self) -> list[Row]:
        """The rows, each ``commit`` row replaced by its events' rows (see Row)."""
        rows = self._rows
        start = self._settled
        for index in range(start, len(rows)):
            if rows[index][0] == "commit":
                break
        else:
            self._settled = len(rows)
            return rows
        labels = self.labels
        assert labels is not None, "a commit row, and nothing to name its writers"
        settled: list[Row] = []
        for row in rows[index:]:
            kind, at, _, events, write, points = row
            if kind == "commit":
                for event, label in zip(events, labels(write, events), strict=True):
                    settled.append(("event", at, "", event, label, points))
            else:
                settled.append(row)
        rows[index:] = settled
        self._settled = len(rows)
        return rows

    def _render_row(
        self, kind: str, at_seconds: float, text: str, event: Event | None, writer: str, *_: Any
    ) -> str:
        at = f"+{at_seconds:.6f}s"
        if event is None:
            return f"{_MARKS[kind]:<5} {at:>17} {text}"
        position = f"#{event.seq}"
        entity = event.correlation_id or "-"
        fields = []
        for key, value in event.data.items():
            if value is None:
                continue
            shape = type(value)
            # The common exact types inline, as _field shows them.
            if shape is bytes:
                fields.append(f"{key}=<{len(value)}B>")
            elif shape is int or shape is bool:
                fields.append(f"{key}={value}")
            else:
                fields.append(self._field(key, value))
        payload = " ".join(fields)
        band = "" if event.in_band else " (oob)"
        line = (
            f"{position:<5} {at:>17} {event.run_id} {writer:<18} {event.type.value:<15} "
            f"{entity}{band} {payload}"
        )
        return line.rstrip()

    def _field(self, key: str, value: Any) -> str:
        kind = type(value)
        if kind is bytes:  # the common exact types first, shown as the checks below show them
            return f"{key}=<{len(value)}B>"
        if kind is int or kind is bool:
            return f"{key}={value}"
        if isinstance(value, bytes | bytearray):
            return f"{key}=<{len(value)}B>"
        if isinstance(value, datetime):
            return f"{key}=+{self._clock.offset(value).total_seconds():g}s"
        if isinstance(value, bool | int | float):
            return f"{key}={value}"
        shown = repr(value)
        if len(shown) > _CLIP:
            shown = shown[: _CLIP - 3] + "..."
        return f"{key}={shown}"


#: Payload value types whose rendering depends on the value alone (equal values, equal text).
_PLAIN_TYPES = frozenset({str, bytes, int, bool, datetime, type(None)})


def _render_alike(row: Row, other: Row) -> bool:
    """Whether two rows surely render to the same line (False: maybe not)."""
    kind, at, text, event, writer, _ = row
    their_kind, their_at, their_text, theirs, their_writer, _ = other
    if kind != their_kind or at != their_at or text != their_text or writer != their_writer:
        return False
    if event is None or theirs is None:
        return event is theirs
    data, their_data = event.data, theirs.data
    if (
        event.seq != theirs.seq
        or event.run_id != theirs.run_id
        or event.type != theirs.type
        or event.correlation_id != theirs.correlation_id
        or event.in_band != theirs.in_band
        or len(data) != len(their_data)
    ):
        return False
    for (key, value), (their_key, their_value) in zip(
        data.items(), their_data.items(), strict=True
    ):
        shape = type(value)
        if (
            key != their_key
            or shape is not type(their_value)
            or shape not in _PLAIN_TYPES
            or value != their_value
        ):
            return False
    return True
