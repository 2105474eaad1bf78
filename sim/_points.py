"""Who called the World, where in the call they are, and how a script names that.

Every intercepted World call makes two :class:`Point` s: ``before`` (the request
is formed, nothing is committed) and ``after`` (the effect is committed, or the
call failed; the caller has not resumed).  A :class:`Match` selects points; a
:class:`WriterPattern` selects writers.

A write may carry several events (a batch commits the outcome of one step with
the start of the next).  A match on events (``event_type``, ``step``,
``correlation_id``) selects a point only when ONE event of it has all of them:
``Match(event_type="step_completed", step="charge")`` is the commit containing
charge's completion, never a batch completing another step beside charge's
start.  :meth:`Match.describe_hit` names that event and, after the commit, its
position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs

__all__ = ["Match", "Point", "PointEvent", "Writer", "WriterPattern", "step_short_name"]

ORCHESTRATOR, STEP, EXTERNAL = "orchestrator", "step", "external"


def step_short_name(step_or_correlation_id: str) -> str:
    """``step//shop//charge#2`` or ``step//shop//charge`` -> ``charge``."""
    name = step_or_correlation_id.rsplit("//", 1)[-1]
    return name.split("#", 1)[0]


@attrs.frozen(kw_only=True, cache_hash=True)
class Writer:
    """Who made a World call.

    Attributes:
        kind: ``"orchestrator"``, ``"step"`` (a step body, or the commit of its
            outcome) or ``"external"`` (the script, a hook sender).
        run_id: the run the writer works for (``None`` for external writers).
        name: the step's short name (``charge``), or an external actor's label.
        delivery: the number of the simulated delivery it belongs to (0: none).
    """

    kind: str
    run_id: str | None = None
    name: str = ""
    delivery: int = 0
    #: ``orch d1``, ``step:charge d1``, ``external``: how traces name it (made once:
    #: the trace asks for it at every event).
    label: str = attrs.field(init=False, eq=False, repr=False)

    @label.default
    def _label(self) -> str:
        if self.kind == ORCHESTRATOR:
            base = "orch"
        elif self.kind == STEP:
            base = f"step:{self.name}"
        else:
            base = f"external:{self.name}" if self.name else "external"
        return f"{base} d{self.delivery}" if self.delivery else base


#: One event of a write, as points see it: ``(type, correlation id, position)``;
#: the position is 0 before the commit.
PointEvent = tuple[str, str | None, int]


def _event_label(event: PointEvent) -> str:
    """``step_completed(charge#1)``, ``run_completed``."""
    type_, cid, _ = event
    if not cid:
        return type_
    if cid.startswith("step//"):
        cid = f"{step_short_name(cid)}#{cid.rsplit('#', 1)[-1]}" if "#" in cid else cid
    return f"{type_}({cid})"


@attrs.frozen(kw_only=True)
class Point:
    """One interception point of one World call.

    Attributes:
        ordinal: the point's number in the simulation (before < after).
        seq: the call's number (its before and after share it).
        call: ``events.create``, ``runs.get``, ``queue.enqueue`` ...
        phase: ``"before"`` or ``"after"``.
        writer: the writer the trace shows.
        writers: every writer the point counts for (an outcome committed in
            one batch with the next step counts for the step and the orchestrator).
        run_id: the run the call concerns, if any.
        types: event types requested (and, after, committed).
        correlation_ids: the entities those events concern.
        token: the hook token, for ``hooks.get_by_token``.
        failed: after only: the call raised.
        error: after only: the error's type name.
        events: each event of the write: the requested ones before the commit
            (position 0), the committed ones after it (with their positions).
        at: the virtual time of the point, in seconds since the simulation began.
    """

    ordinal: int
    seq: int
    call: str
    phase: str
    writer: Writer
    writers: tuple[Writer, ...]
    run_id: str | None = None
    types: tuple[str, ...] = ()
    correlation_ids: tuple[str, ...] = ()
    token: str | None = None
    failed: bool = False
    error: str | None = None
    events: tuple[PointEvent, ...] = ()
    at: float = 0.0

    def describe(self) -> str:
        """``orch d1 at events.create_batch:before (step_created, step_started)``."""
        what = f" ({', '.join(self.types)})" if self.types else ""
        failed = f" failed: {self.error}" if self.failed else ""
        return f"{self.writer.label} at {self.call}:{self.phase}{what} [call {self.seq}]{failed}"


@attrs.frozen(kw_only=True)
class WriterPattern:
    """Selects writers: by kind, run and step name (``None`` matches anything)."""

    kind: str | None = None
    run_id: str | None = None
    name: str | None = None

    def matches(self, writer: Writer) -> bool:
        """Whether ``writer`` is one of these."""
        if self.kind is not None and writer.kind != self.kind:
            return False
        if self.run_id is not None and writer.run_id != self.run_id:
            return False
        return not (self.name is not None and not _name_matches(writer.name, self.name))

    @property
    def label(self) -> str:
        """How errors name the pattern."""
        kind = self.kind or "any writer"
        name = f" {self.name!r}" if self.name else ""
        run = f" of run {self.run_id}" if self.run_id else ""
        return f"{kind}{name}{run}"


def _name_matches(actual: str, wanted: str) -> bool:
    return actual == wanted or actual.endswith("/" + wanted) or wanted.endswith("//" + actual)


def _as_tuple(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@attrs.frozen(kw_only=True)
class Match:
    """Selects points; every given field must hold (AND).

    Attributes:
        call: a call name (``events.create``) or several; ``event_type``
            implies ``events.create`` / ``events.create_batch``.
        phase: ``"before"``, ``"after"`` (the default) or ``None`` for both.
        event_type: an event type the call requests (or commits), or several.
        step: a step name (``charge``) among the call's correlation ids.
        correlation_id: an exact correlation id among the call's.
        token: the hook token of a ``hooks.get_by_token`` call.
        run_id: the run the call concerns.
        writer: a :class:`WriterPattern` or a predicate on :class:`Writer`.
        failed: after only: whether the call raised.
        where: any predicate on the :class:`Point`.
    """

    call: tuple[str, ...] | None = attrs.field(default=None, converter=_as_tuple)
    phase: str | None = "after"
    event_type: tuple[str, ...] | None = attrs.field(default=None, converter=_as_tuple)
    step: str | None = None
    correlation_id: str | None = None
    token: str | None = None
    run_id: str | None = None
    writer: WriterPattern | Callable[[Writer], bool] | None = None
    failed: bool | None = None
    where: Callable[[Point], bool] | None = None

    def matches(self, point: Point) -> bool:
        """Whether ``point`` is selected."""
        if self.phase is not None and point.phase != self.phase:
            return False
        if self.call is not None and point.call not in self.call:
            return False
        if self._on_events:
            if not point.call.startswith("events.create"):
                return False
            if self.hit(point) is None:
                return False
        if self.token is not None and point.token != self.token:
            return False
        if self.run_id is not None and point.run_id != self.run_id:
            return False
        if self.failed is not None and point.failed != self.failed:
            return False
        if self.writer is not None:
            test = self.writer.matches if isinstance(self.writer, WriterPattern) else self.writer
            if not any(test(w) for w in point.writers):
                return False
        return self.where is None or self.where(point)

    @property
    def _on_events(self) -> bool:
        return (
            self.event_type is not None or self.step is not None or self.correlation_id is not None
        )

    def _cid_matches(self, cid: str | None) -> bool:
        if self.step is not None and not (
            cid is not None
            and cid.startswith("step//")
            and _name_matches(step_short_name(cid), self.step)
        ):
            return False
        return self.correlation_id is None or cid == self.correlation_id

    def _event_matches(self, event: PointEvent) -> bool:
        type_, cid, _ = event
        if self.event_type is not None and type_ not in self.event_type:
            return False
        return self._cid_matches(cid)

    def hit(self, point: Point) -> PointEvent | None:
        """The first event of ``point`` that has every event field of this match.

        ``None`` when none has (or when the match names no event field).  A
        refused write is matched on the events it requested.
        """
        if not self._on_events:
            return None
        for event in point.events:
            if self._event_matches(event):
                return event
        if point.events:
            return None
        # A point without its events (made by hand): each field on the whole call.
        types = [t for t in point.types if self.event_type is None or t in self.event_type]
        cids = [c for c in point.correlation_ids if self._cid_matches(c)]
        needs_cid = self.step is not None or self.correlation_id is not None
        if (self.event_type is not None and not types) or (needs_cid and not cids):
            return None
        return (types[0] if types else "", cids[0] if cids else None, 0)

    def describe_hit(self, point: Point) -> str:
        """Where ``point`` is, by the event this match selected in it.

        ``before the commit containing step_completed(charge#1)``, or ``after the
        commit containing step_completed(charge#1) at position 5`` (``, in a batch
        of 2 at #5-#6`` for a batch); the point's own description when the match
        names no event.
        """
        event = self.hit(point)
        if event is None:
            return f"at {point.describe()}"
        where = f"{point.phase} the commit containing {_event_label(event)}"
        if point.phase == "after" and event[2]:
            where += f" at position {event[2]}"
            positions = [e[2] for e in point.events if e[2]]
            if len(positions) > 1:
                where += f", in a batch of {len(positions)} at #{positions[0]}-#{positions[-1]}"
        return where

    def describe(self) -> str:
        """How errors name the match."""
        parts = []
        for field in attrs.fields(Match):
            value = getattr(self, field.name)
            if value is None or field.name == "where":
                continue
            if isinstance(value, WriterPattern):
                value = value.label
            elif isinstance(value, tuple):
                value = "|".join(value)
            parts.append(f"{field.name}={value}")
        if self.where is not None:
            parts.append("where=<predicate>")
        return ", ".join(parts)
