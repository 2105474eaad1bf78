"""Linearizability of a concurrent history against the reference World.

A *history* is what a concurrent test saw: each operation on a World (a
:class:`Call`), when it was invoked and when it returned (two stamps from one
counter shared by every thread, so the order of stamps is real-time order), and
its answer.  The history is *linearizable* when some serial order of the
operations (1) keeps real-time precedence (an operation that returned before
another was invoked comes first) and (2) replayed one by one on a fresh
reference World gives every operation exactly the answer it got.

:func:`check_linearizable` searches for that order in the manner of Wing & Gong
(depth first, next operation among those no pending operation precedes) with
the memoization of Lowe and Porcupine: a set of operations already placed and
the reference's state after them is explored once.  Groups are small (a few
set-up calls, up to about eight concurrent ones, then the final reads, which
are serial), so the search visits at most a few hundred states.

When no order exists the result keeps the longest prefix that could be
explained and, at its end, what the reference would have answered for each
operation that could come next: the start of every witness.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs

from durasim.worlds import (
    BatchResult,
    ChunkPage,
    Event,
    EventPage,
    EventRequest,
    EventResult,
    HookRecord,
    RunRecord,
    StepRecord,
    StreamInfo,
    WaitRecord,
    World,
    WorldError,
)

__all__ = [
    "READ_METHODS",
    "Call",
    "Linearization",
    "Outcome",
    "Record",
    "check_linearizable",
    "difference",
    "render_outcome",
    "settle",
]

#: ``("ok", value)``, ``("error", type, facts)`` or ``("crash", "Type: message")``.
Outcome = tuple[Any, ...]

#: Methods that change nothing: the search need not copy the reference for them.
READ_METHODS = frozenset(
    {
        "events.list",
        "events.get",
        "runs.get",
        "steps.get",
        "steps.list",
        "hooks.get",
        "hooks.list",
        "hooks.get_by_token",
        "waits.get",
        "waits.list",
        "streams.read",
        "streams.info",
        "streams.list",
    }
)


@attrs.frozen(kw_only=True)
class Call:
    """One operation on a World, as data: ``method`` (``facet.name``), arguments, options.

    ``Call(method="events.list", args=("r1",), options=(("limit", 2),))`` is
    ``world.events.list("r1", limit=2)``.
    """

    method: str
    args: tuple[Any, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()

    def apply(self, world: World) -> Awaitable[Any]:
        """Call it on ``world``; the awaitable of its answer."""
        facet, name = self.method.split(".")
        function = getattr(getattr(world, facet), name)
        result: Awaitable[Any] = function(*self.args, **dict(self.options))
        return result

    @property
    def reads_only(self) -> bool:
        """Whether the call never changes what a World stores."""
        return self.method in READ_METHODS

    @property
    def run_id(self) -> str | None:
        """The run the call is about (``None`` for a token lookup)."""
        if self.method == "hooks.get_by_token" or not self.args:
            return None
        first = self.args[0]
        return first if isinstance(first, str) else None

    def option(self, name: str, default: Any = None) -> Any:
        """The value of one keyword option."""
        return dict(self.options).get(name, default)

    def render(self) -> str:
        """``events.create('c3-ra', hook_created h1 {token='c3-t'}, in_band=True)``."""
        parts = [_render_arg(a) for a in self.args]
        parts += [f"{k}={_render_arg(v)}" for k, v in self.options]
        return f"{self.method}({', '.join(parts)})"


def _render_request(request: EventRequest) -> str:
    text = str(request.type)
    if request.correlation_id is not None:
        text += f" {request.correlation_id}"
    if request.data:
        fields = ", ".join(f"{k}={_short(v)}" for k, v in request.data.items())
        text += f" {{{fields}}}"
    return text


def _short(value: Any) -> str:
    if hasattr(value, "isoformat"):
        return f"<{value.isoformat(timespec='seconds')}>"
    return repr(value)


def _render_arg(value: Any) -> str:
    if isinstance(value, EventRequest):
        return _render_request(value)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], EventRequest):
        return "[" + ", ".join(_render_request(r) for r in value) + "]"
    return _short(value)


@attrs.frozen(kw_only=True)
class Record:
    """One operation of a history: the call, its two stamps, its answer.

    Attributes:
        index: its number in the history (witnesses print ``[index]``).
        call: what was called.
        invoked: the stamp taken just before the call.
        returned: the stamp taken just after its answer (error or not).
        outcome: its answer (see :data:`Outcome`).
        worker: which World instance and task issued it (``w1.2``).
        phase: ``setup`` (serial, before), ``concurrent``, or ``final`` (serial, after).
        message: the error's message, for the witness (never compared).
    """

    index: int
    call: Call
    invoked: int
    returned: int
    outcome: Outcome
    worker: str = ""
    phase: str = "concurrent"
    message: str = attrs.field(default="", eq=False)

    def precedes(self, other: Record) -> bool:
        """Whether this operation returned before ``other`` was invoked."""
        return self.returned < other.invoked

    @property
    def ok(self) -> bool:
        """Whether the call answered without an error."""
        return bool(self.outcome[0] == "ok")

    @property
    def value(self) -> Any:
        """The answer of a call that succeeded (``None`` otherwise)."""
        return self.outcome[1] if self.ok else None


def settle(call: Awaitable[Any]) -> Outcome:
    """Run ``call`` on a World that answers without waiting (the reference) to its outcome.

    The reference World never awaits anything, so its coroutines finish on
    their first step: no event loop is needed, which keeps the search cheap.
    """
    iterator = call.__await__()
    try:
        try:
            iterator.send(None)
        except StopIteration as stop:
            return ("ok", stop.value)
    except WorldError as exc:
        return ("error", type(exc), exc.facts)
    except Exception as exc:  # the reference refusing what it does not understand
        return ("crash", f"{type(exc).__name__}: {exc}")
    close = getattr(iterator, "close", None)
    if close is not None:
        close()
    raise RuntimeError("the reference World awaited something; it must answer at once")


# -- rendering answers ------------------------------------------------------------


def _event(event: Event | None) -> str:
    if event is None:
        return "nothing appended"
    cid = f" {event.correlation_id}" if event.correlation_id else ""
    band = " in-band" if event.in_band else ""
    return f"#{event.seq} {event.type}{cid}{band}"


def render_outcome(outcome: Outcome) -> str:
    """An answer in one line: ``ok #3 hook_created h1``, ``EntityConflict(run_id='r')`` ..."""
    if outcome[0] == "crash":
        return f"raised {outcome[1]}"
    if outcome[0] == "error":
        facts = ", ".join(f"{k}={_short(v)}" for k, v in outcome[2].items())
        return f"{outcome[1].__name__}({facts})"
    return "ok " + _render_value(outcome[1])


def _render_value(value: Any) -> str:
    if isinstance(value, EventResult):
        text = _event(value.event)
        if value.event is not None and not value.allocated:
            text += " (the earlier event, nothing appended)"
        if value.unseen:
            text += f", unseen {[e.seq for e in value.unseen]}"
        return text
    if isinstance(value, BatchResult):
        return "batch " + ", ".join(_event(e) for e in value.events)
    if isinstance(value, EventPage):
        shown = ", ".join(_event(e) for e in value.events) or "no events"
        snap = value.snapshot
        return (
            f"page [{shown}] snapshot seq={snap.seq} in-band={snap.seq_in_band} "
            f"has_more={value.has_more}"
        )
    if isinstance(value, Event):
        return _event(value)
    if isinstance(value, RunRecord):
        return f"run {value.run_id} {value.status}"
    if isinstance(value, (StepRecord, HookRecord, WaitRecord)):
        key = getattr(value, "step_id", None) or getattr(value, "hook_id", None)
        key = key or getattr(value, "wait_id", "")
        extra = f" token={value.token!r}" if isinstance(value, HookRecord) else ""
        kind = type(value).__name__.removesuffix("Record").lower()
        return f"{kind} {value.run_id}/{key} {value.status}{extra}"
    if isinstance(value, ChunkPage):
        chunks = ", ".join(f"{c.index}:{c.data!r}" for c in value.chunks)
        return f"chunks [{chunks}] closed={value.closed} has_more={value.has_more}"
    if isinstance(value, StreamInfo):
        return f"stream tail={value.tail_index} closed={value.closed}"
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, (StepRecord, HookRecord, WaitRecord)) for v in value)
    ):
        return "[" + "; ".join(_render_value(v) for v in value) + "]"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return _short(value)


def difference(expected: Any, actual: Any, path: str = "") -> str:
    """Where two answers differ, as ``path: expected != actual`` (``""`` if they do not)."""
    if expected == actual:
        return ""
    if type(expected) is type(actual) and attrs.has(type(expected)):
        for field in attrs.fields(type(expected)):
            found = difference(
                getattr(expected, field.name), getattr(actual, field.name), f"{path}.{field.name}"
            )
            if found:
                return found
    if isinstance(expected, tuple) and isinstance(actual, tuple) and len(expected) == len(actual):
        for n, (a, b) in enumerate(zip(expected, actual, strict=True)):
            found = difference(a, b, f"{path}[{n}]")
            if found:
                return found
    return f"{path.lstrip('.') or 'the answer'}: {_short(expected)} != {_short(actual)}"


# -- the search ---------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Linearization:
    """The verdict of :func:`check_linearizable`.

    Attributes:
        ok: a serial order explains every answer.
        order: that order, as record indexes (when ``ok``).
        prefix: the longest explained prefix (when not ``ok``).
        stuck: at the end of ``prefix``, each record that could come next and
            what the reference answers for it there.
        states: states of the search visited.
        exhausted: the search ran out of budget before deciding (``ok`` is then
            ``True``: an undecided history is not reported as a failure).
    """

    ok: bool
    order: tuple[int, ...] = ()
    prefix: tuple[int, ...] = ()
    stuck: tuple[tuple[int, Outcome], ...] = ()
    states: int = 0
    exhausted: bool = False


class _Exhausted(Exception):
    pass


def _subjects(records: Sequence[Record]) -> tuple[list[str], list[tuple[str, str]]]:
    runs: dict[str, None] = {}
    streams: dict[tuple[str, str], None] = {}
    for record in records:
        run_id = record.call.run_id
        if run_id is None:
            continue
        runs.setdefault(run_id)
        if record.call.method.startswith("streams.") and len(record.call.args) > 1:
            streams.setdefault((run_id, record.call.args[1]))
    return list(runs), list(streams)


def fingerprint(world: World, runs: Iterable[str], streams: Iterable[tuple[str, str]]) -> Hashable:
    """Everything the reference stores about ``runs`` and ``streams``: its logs and chunks.

    Entities, tokens and resume ids are folds of the logs, so two states with
    equal logs and streams answer every later call alike.
    """
    parts: list[Any] = []
    for run_id in runs:
        page = settle(world.events.list(run_id, limit=10_000))
        parts.append(page[1].events if page[0] == "ok" else None)
    for run_id, name in streams:
        read = settle(world.streams.read(run_id, name, limit=10_000))
        parts.append((read[1].chunks, read[1].closed) if read[0] == "ok" else None)
    return repr(parts)


def check_linearizable(
    records: Sequence[Record],
    *,
    reference: Callable[[], World],
    budget: int = 50_000,
) -> Linearization:
    """Whether some serial order of ``records`` explains every answer on the reference.

    Args:
        records: the history, ``records[i].index == i``.
        reference: builds an empty reference World (a ``MemoryWorld`` on the
            same clock as the World that answered); its calls must answer
            without awaiting anything.
        budget: most search states to visit before giving up (undecided).

    Returns:
        A :class:`Linearization`.
    """
    count = len(records)
    full = (1 << count) - 1
    before = [0] * count
    for i, later in enumerate(records):
        for j, earlier in enumerate(records):
            if earlier.precedes(later):
                before[i] |= 1 << j
    # Earliest invoked first: the order the World most likely committed them in.
    candidates = sorted(range(count), key=lambda i: (records[i].invoked, i))
    runs, streams = _subjects(records)
    failed: set[tuple[int, Hashable]] = set()
    best: dict[str, Any] = {"prefix": (), "stuck": ()}
    states = 0

    def search(done: int, world: World, order: list[int]) -> bool:
        nonlocal states
        if done == full:
            return True
        key = (done, fingerprint(world, runs, streams))
        if key in failed:
            return False
        failed.add(key)
        states += 1
        if states > budget:
            raise _Exhausted
        stuck: list[tuple[int, Outcome]] = []
        for i in candidates:
            if done >> i & 1 or before[i] & ~done:
                continue
            record = records[i]
            trial = world if record.call.reads_only else copy.deepcopy(world)
            answer = settle(record.call.apply(trial))
            if answer != record.outcome:
                stuck.append((i, answer))
                continue
            order.append(i)
            if search(done | 1 << i, trial, order):
                return True
            order.pop()
        deeper = len(order) > len(best["prefix"])
        if deeper or (len(order) == len(best["prefix"]) and stuck and not best["stuck"]):
            best["prefix"], best["stuck"] = tuple(order), tuple(stuck)
        return False

    order: list[int] = []
    try:
        found = search(0, reference(), order)
    except _Exhausted:
        return Linearization(ok=True, states=states, exhausted=True)
    if found:
        return Linearization(ok=True, order=tuple(order), states=states)
    return Linearization(ok=False, prefix=best["prefix"], stuck=best["stuck"], states=states)
