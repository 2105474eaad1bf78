"""Entities (folds of the log) and the value types Worlds hand back.

Runs, steps, hooks and waits are never written directly: each is the fold of
its run's log (docs/protocol.md §3), handed back as a *record*
(:class:`RunRecord`, :class:`StepRecord`, :class:`HookRecord`,
:class:`WaitRecord`; the runtime's live :class:`~durasim.runtime.Run` and
:class:`~durasim.runtime.Hook` are handles, another concept).  Every type here
is a frozen ``attrs`` value, so a caller can never change what a World stores.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, TypeVar

import attrs

from ._build import evolver
from ._events import Event, Payload

__all__ = [
    "BatchResult",
    "Capabilities",
    "Chunk",
    "ChunkPage",
    "Delivery",
    "EventPage",
    "EventResult",
    "HookRecord",
    "HookStatus",
    "Message",
    "RunPage",
    "RunRecord",
    "RunStatus",
    "Snapshot",
    "StepRecord",
    "StepStatus",
    "StreamInfo",
    "WaitRecord",
    "WaitStatus",
]


class RunStatus(enum.StrEnum):
    """Run lifecycle: pending -> running -> completed | failed | cancelled."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Whether no further run transition is possible."""
        return self in _RUN_TERMINAL


_RUN_TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


class StepStatus(enum.StrEnum):
    """Step lifecycle: pending -> running -> (pending on retry) -> completed | failed."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """Whether the step has its one outcome."""
        return self in _STEP_TERMINAL


_STEP_TERMINAL = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})


class HookStatus(enum.StrEnum):
    """Hook lifecycle: active -> disposed (by hook_disposed) | released (run ended)."""

    ACTIVE = "active"
    DISPOSED = "disposed"
    RELEASED = "released"


class WaitStatus(enum.StrEnum):
    """Wait lifecycle: waiting -> completed (wait_completed) | released (run ended)."""

    WAITING = "waiting"
    COMPLETED = "completed"
    RELEASED = "released"


class RunStatuses:
    """:class:`RunStatus`'s members as plain class attributes (see ``_events.Types``)."""

    PENDING: Final = RunStatus.PENDING
    RUNNING: Final = RunStatus.RUNNING
    COMPLETED: Final = RunStatus.COMPLETED
    FAILED: Final = RunStatus.FAILED
    CANCELLED: Final = RunStatus.CANCELLED


class StepStatuses:
    """:class:`StepStatus`'s members as plain class attributes (see ``_events.Types``)."""

    PENDING: Final = StepStatus.PENDING
    RUNNING: Final = StepStatus.RUNNING
    COMPLETED: Final = StepStatus.COMPLETED
    FAILED: Final = StepStatus.FAILED


class HookStatuses:
    """:class:`HookStatus`'s members as plain class attributes (see ``_events.Types``)."""

    ACTIVE: Final = HookStatus.ACTIVE
    DISPOSED: Final = HookStatus.DISPOSED
    RELEASED: Final = HookStatus.RELEASED


class WaitStatuses:
    """:class:`WaitStatus`'s members as plain class attributes (see ``_events.Types``)."""

    WAITING: Final = WaitStatus.WAITING
    COMPLETED: Final = WaitStatus.COMPLETED
    RELEASED: Final = WaitStatus.RELEASED


def frozen_attributes(value: Mapping[str, str] | None) -> Payload:
    """A run's attributes as :class:`RunRecord` holds them (its converter).

    A Payload comes back as it is (immutable: each copy of a run passes it on);
    the fold copies a run through ``twin_copier(..., converted=True)``, which
    relies on that.
    """
    if type(value) is Payload:
        return value
    return Payload(value or {})


_E = TypeVar("_E")


@attrs.frozen(kw_only=True)
class RunRecord:
    """A workflow run: the fold of its run events and attribute changes."""

    run_id: str
    workflow_name: str
    status: RunStatus
    input: bytes
    created_at: datetime
    updated_at: datetime
    deployment_id: str | None = None
    execution_context: bytes | None = None
    output: bytes | None = None
    error: bytes | None = None
    error_code: str | None = None
    cancel_reason: str | None = None
    attributes: Payload = attrs.field(factory=Payload, converter=frozen_attributes)
    started_at: datetime | None = None
    completed_at: datetime | None = None


@attrs.frozen(kw_only=True)
class StepRecord:
    """A step of a run.  ``attempt`` is the number of ``step_started`` events."""

    run_id: str
    step_id: str
    step_name: str
    status: StepStatus
    input: bytes
    attempt: int
    created_at: datetime
    updated_at: datetime
    output: bytes | None = None
    error: bytes | None = None
    retry_after: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    inline: bool = False


@attrs.frozen(kw_only=True)
class HookRecord:
    """A hook: a token the outside world resumes the run with."""

    run_id: str
    hook_id: str
    token: str
    status: HookStatus
    created_at: datetime
    updated_at: datetime
    metadata: bytes | None = None
    is_webhook: bool = False
    received_count: int = 0


@attrs.frozen(kw_only=True)
class WaitRecord:
    """A durable sleep: due at ``resume_at``, completed by ``wait_completed``."""

    run_id: str
    wait_id: str
    status: WaitStatus
    resume_at: datetime
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None = None


@attrs.frozen(kw_only=True)
class Snapshot:
    """A run's counters, read before a page: ``seq`` events, ``seq_in_band`` of them in-band."""

    seq: int
    seq_in_band: int


@attrs.frozen(kw_only=True)
class EventPage:
    """A page of a run's log in position order.

    ``snapshot`` was read before the page; ``events`` are a prefix-consistent
    slice; ``has_more`` says another page follows ``events[-1].seq``.
    """

    events: tuple[Event, ...]
    snapshot: Snapshot
    has_more: bool

    @property
    def next_after(self) -> int:
        """The ``after_seq`` that asks for the next page."""
        return self.events[-1].seq if self.events else 0


@attrs.frozen(kw_only=True)
class EventResult:
    """The answer to one write.

    Attributes:
        event: the committed event (or, for a tolerated duplicate, the canonical
            earlier one; ``None`` when the write appended nothing, e.g. a second
            ``run_started``).
        run: the run after the write.
        step, hook, wait: the entity the write touched, after it.
        unseen: events committed after ``seen_seq`` and before ``event``: what the
            writer had not seen (bump and report).
        allocated: positions this write took (0 for a duplicate collapsed onto an
            earlier event).
    """

    event: Event | None
    run: RunRecord
    step: StepRecord | None = None
    hook: HookRecord | None = None
    wait: WaitRecord | None = None
    unseen: tuple[Event, ...] = ()
    allocated: int = 0


@attrs.frozen(kw_only=True)
class BatchResult:
    """The answer to ``create_batch``: every event at consecutive positions."""

    events: tuple[Event, ...]
    run: RunRecord
    unseen: tuple[Event, ...] = ()

    @property
    def allocated(self) -> int:
        """Positions the batch took."""
        return len(self.events)


@attrs.frozen(kw_only=True)
class RunPage:
    """A page of runs, newest first; pass ``cursor`` back for the next page."""

    runs: tuple[RunRecord, ...]
    cursor: str | None


@attrs.frozen(kw_only=True)
class Capabilities:
    """What a World supports.  A World that lacks a feature says so here.

    The feature flags default to what the project's Worlds do (everything); the
    conformance suite reports a check of a feature the World declares false as
    *not applicable* instead of failing it (docs/conformance.md, "Capabilities").

    Attributes:
        in_band_fence: refuses stale in-band writes (required by the runtime).
        batch: implements ``events.create_batch`` atomically.
        hook_resume_dedup: collapses ``hook_received`` with one ``resume_id``.
        queue: provides the queue facet.
        streams: provides the streams facet.
        attr_set: stores ``attr_set`` events and folds them into ``Run.attributes``.
        conditional_writes: honours ``expected_seq`` (refuses with ``StaleView``
            unless the log holds exactly that many events); the runtime needs it.
        input_validation: refuses malformed calls with ``InvalidRequest`` before
            writing anything (bad ids, types, sizes, page limits, delays).
        strict_lifecycles: refuses writes that break an entity's lifecycle
            (``EntityConflict``, ``RunExpired``, ``TooEarly``); the runtime needs it.
        multi_process: several processes may share the World's storage.
        durable: committed events survive the process (and, with ``power_safe``,
            a lost machine).
        power_safe: see ``durable``.
    """

    in_band_fence: bool = True
    batch: bool = True
    hook_resume_dedup: bool = True
    queue: bool = True
    streams: bool = True
    attr_set: bool = True
    conditional_writes: bool = True
    input_validation: bool = True
    strict_lifecycles: bool = True
    multi_process: bool = False
    durable: bool = False
    power_safe: bool = False


@attrs.frozen(kw_only=True)
class Message:
    """A queued message as stored: its id is stable across redeliveries."""

    message_id: str
    queue_name: str
    payload: bytes
    available_at: datetime
    enqueued_at: datetime
    attempt: int = 0
    run_id: str | None = None
    orchestrator: bool = False
    idempotency_key: str | None = None


@attrs.frozen(kw_only=True)
class Delivery:
    """A claimed message: hold it by its lease, then ack or release it.

    ``attempt`` counts deliveries (1 on the first).  ``lease_id`` names this
    claim.  The lease holds the message until another claim takes it, which may
    happen once ``lease_expires_at`` has passed; an ack, release or extend after
    that raises :class:`~durasim.worlds.LeaseLost`.
    """

    message: Message
    lease_id: str
    lease_expires_at: datetime

    @property
    def message_id(self) -> str:
        """The message's stable id."""
        return self.message.message_id

    @property
    def attempt(self) -> int:
        """1 on the first delivery, 2 on the first redelivery ..."""
        return self.message.attempt

    @property
    def payload(self) -> bytes:
        """The message body."""
        return self.message.payload


@attrs.frozen(kw_only=True)
class Chunk:
    """One chunk of a stream, at ``index`` (0-based)."""

    index: int
    data: bytes


@attrs.frozen(kw_only=True)
class ChunkPage:
    """Chunks from an index; ``done`` when the stream is closed and fully read."""

    chunks: tuple[Chunk, ...]
    next_index: int
    closed: bool

    @property
    def done(self) -> bool:
        """No chunk will ever follow this page."""
        return self.closed and not self.has_more

    has_more: bool = False


@attrs.frozen(kw_only=True)
class StreamInfo:
    """A stream's tail: ``tail_index`` is the last chunk's index (-1 when empty)."""

    tail_index: int
    closed: bool


def evolve(value: _E, **changes: Any) -> _E:
    """``attrs.evolve`` for the fold: entities change by copy, several times per event.

    Same result as ``attrs.evolve`` (``__init__`` runs, converters and
    validators included), a third faster: each class gets a copier generated
    once, which reads the fields by name instead of looping over them.
    """
    # One copier per class and set of changed fields (each call site changes the
    # same ones): it reads the others by name, with no test per field.
    key = (type(value), tuple(changes))
    copier = _COPIERS.get(key)
    if copier is None:
        copier = _COPIERS[key] = _copier(type(value), key[1])
    return copier(value, changes)  # type: ignore[no-any-return]


_COPIERS: dict[tuple[type, tuple[str, ...]], Callable[[Any, dict[str, Any]], Any]] = {}
_copier = evolver


# --- records built through a mutable twin ----------------------------------------
#
# A frozen slotted ``attrs`` class refuses plain stores; ``_build`` sets each slot
# through its descriptor's ``__set__`` (about 670 instructions a field on 3.11).  A
# *twin* is a subclass that adds no slot and takes plain stores (its ``__setattr__``
# and ``__delattr__`` are ``object``'s, so CPython gives it the generic setter): a
# record is born a twin, gets each field by a plain store (a few dozen instructions),
# and is then made an instance of the frozen class itself by ``__class__``
# assignment, which CPython allows between a class and a subclass that adds nothing
# to its layout.  What leaves a builder is exactly what ``__init__`` builds (the
# same class, the same slots, never seen half-built); the twin never escapes.
#
# The assignment raises the audit event ``object.__setattr__``: with an audit hook
# installed (the runtime's sandbox has one) each costs a Python call, about 2,700
# instructions.  So only a record of many fields gains: the StepRecord (14 fields,
# 12,400 instructions through ``_build``, 7,500 this way with that hook, 4,700 without),
# and the Event (7 fields, a builder call of 8,200 through ``_build``, 7,400 this way
# with that hook, 4,600 without; three a step).


def twin(cls: type) -> type:
    """``cls``'s mutable twin: a subclass without slots of its own that takes plain stores."""
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__attrs_post_init__"):
        raise TypeError(f"{cls!r}: a twin needs a slotted class whose __init__ only sets slots")
    made = type(
        cls.__name__,
        (cls,),
        {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__module__": cls.__module__,
            "__qualname__": f"{cls.__qualname__}.<twin>",
        },
    )
    probe: Any = object.__new__(made)
    probe.__class__ = cls  # TypeError here if CPython would not allow it
    return made


def _twin_fields(cls: type, *, converted: bool = False) -> list[attrs.Attribute[Any]]:
    fields = list(attrs.fields(cls))
    # Every slot a field (no hidden one ``__init__`` would fill, such as a cached hash).
    slots = set(cls.__dict__.get("__slots__", ())) - {"__weakref__"}
    if slots != {a.name for a in fields}:
        raise TypeError(f"{cls.__name__}: slots besides its fields: {sorted(slots)}")
    for a in fields:
        if not a.init or a.validator or (a.converter and not converted) or a.alias != a.name:
            raise TypeError(f"{cls.__name__}.{a.name}: not a plain field")
    return fields


def _twin_compile(
    cls: type, name: str, params: str, body: str, extra: dict[str, Any]
) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin(cls), "_new": object.__new__, **extra}
    source = (
        f"def {name}({params}):\n    n = _new(_twin)\n{body}    n.__class__ = _cls\n    return n\n"
    )
    exec(compile(source, f"<{name} {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 -- our own source
    return namespace[name]  # type: ignore[no-any-return]


def twin_builder(
    cls: Callable[..., _E], *, converted: bool = False, positional: bool = False
) -> Callable[..., _E]:
    """``build(**fields)``: what ``cls(**fields)`` builds, through the twin.

    Keyword-only like the class; a field with a plain default may be left out, one
    with a factory must be given.  With ``converted`` a field may have a converter,
    which does not run (as with :func:`._build.builder`): the caller passes every
    value in its converted form already (the guards' ``Event.data``, a ``Payload``).

    With ``positional``, ``build(*values)`` instead: every field, in the class's
    order, by position only (no default).  For the write path's hottest records: a
    keyword call matches each name against the parameters, about 40 instructions
    a field on 3.11 (issue 22).
    """
    fields = _twin_fields(cls, converted=converted)  # type: ignore[arg-type]
    body = "".join(f"    n.{a.name} = {a.name}\n" for a in fields)
    if positional:
        params = ", ".join(a.name for a in fields) + ", /"
        return _twin_compile(cls, "build", params, body, {})  # type: ignore[arg-type]
    names = []
    defaults: dict[str, Any] = {}
    for a in fields:
        if a.default is not attrs.NOTHING and not isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
            defaults[f"_d_{a.name}"] = a.default
            names.append(f"{a.name}=_d_{a.name}")
        else:  # a factory default is a required argument here
            names.append(a.name)
    return _twin_compile(cls, "build", "*, " + ", ".join(names), body, defaults)  # type: ignore[arg-type]


def twin_copier(
    cls: Callable[..., _E], *changed: str, converted: bool = False
) -> Callable[..., _E]:
    """``copy(value, *new_values)``: ``attrs.evolve(value, **dict(zip(changed, new_values)))``
    through the twin.

    With ``converted`` the class may have converters, on fields not changed only:
    those keep the value ``__init__`` converted when it built ``value``, which
    ``attrs.evolve`` passes through the converter again.  So only for a converter
    that gives back its own result unchanged (``conv(conv(x)) is conv(x)``).
    """
    fields = _twin_fields(cls, converted=converted)  # type: ignore[arg-type]
    unknown = sorted(set(changed) - {a.name for a in fields})
    if unknown:
        raise TypeError(f"{cls!r} has no field(s) {unknown}")
    if any(a.converter for a in fields if a.name in changed):
        raise TypeError(f"{cls!r}: a changed field has a converter (it would not run)")
    body = "".join(
        f"    n.{a.name} = {a.name if a.name in changed else 'v.' + a.name}\n" for a in fields
    )
    return _twin_compile(cls, "copy", ", ".join(("v", *changed)), body, {})  # type: ignore[arg-type]
