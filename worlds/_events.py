"""Events and event requests: the vocabulary of the log (docs/protocol.md §2).

An :class:`EventRequest` is what a writer asks for; the World validates it,
decides whether it is legal, and commits an :class:`Event` at the next position.
User data (step inputs, results, errors, hook payloads) is opaque ``bytes``: the
World never looks inside it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs

from ._errors import InvalidRequest
from ._text import STRING_LIMITS, check_text, check_token, shown

__all__ = [
    "Event",
    "EventRequest",
    "EventType",
    "Payload",
    "Types",
    "check_correlation_id",
    "check_run_id",
    "check_stream_name",
    "validate_request",
]


class EventType(enum.StrEnum):
    """The closed set of event types."""

    RUN_CREATED = "run_created"
    RUN_STARTED = "run_started"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    STEP_CREATED = "step_created"
    STEP_STARTED = "step_started"
    STEP_RETRYING = "step_retrying"
    STEP_COMPLETED = "step_completed"
    STEP_FAILED = "step_failed"
    HOOK_CREATED = "hook_created"
    HOOK_RECEIVED = "hook_received"
    HOOK_DISPOSED = "hook_disposed"
    HOOK_CONFLICT = "hook_conflict"
    WAIT_CREATED = "wait_created"
    WAIT_COMPLETED = "wait_completed"
    ATTR_SET = "attr_set"
    NOOP = "noop"


class Types:
    """:class:`EventType`'s members as plain class attributes, for hot paths.

    On Python 3.11 ``EventType.X`` is an enum class lookup (about 250 ns);
    ``Types.X`` is the same member through a plain class (about 30 ns).
    """

    RUN_CREATED: Final = EventType.RUN_CREATED
    RUN_STARTED: Final = EventType.RUN_STARTED
    RUN_COMPLETED: Final = EventType.RUN_COMPLETED
    RUN_FAILED: Final = EventType.RUN_FAILED
    RUN_CANCELLED: Final = EventType.RUN_CANCELLED
    STEP_CREATED: Final = EventType.STEP_CREATED
    STEP_STARTED: Final = EventType.STEP_STARTED
    STEP_RETRYING: Final = EventType.STEP_RETRYING
    STEP_COMPLETED: Final = EventType.STEP_COMPLETED
    STEP_FAILED: Final = EventType.STEP_FAILED
    HOOK_CREATED: Final = EventType.HOOK_CREATED
    HOOK_RECEIVED: Final = EventType.HOOK_RECEIVED
    HOOK_DISPOSED: Final = EventType.HOOK_DISPOSED
    HOOK_CONFLICT: Final = EventType.HOOK_CONFLICT
    WAIT_CREATED: Final = EventType.WAIT_CREATED
    WAIT_COMPLETED: Final = EventType.WAIT_COMPLETED
    ATTR_SET: Final = EventType.ATTR_SET
    NOOP: Final = EventType.NOOP


#: The events that end a run: the one declaration every package uses.
RUN_TERMINAL_TYPES: Final = frozenset(
    {EventType.RUN_COMPLETED, EventType.RUN_FAILED, EventType.RUN_CANCELLED}
)
STEP_TYPES: Final = frozenset(
    {
        EventType.STEP_CREATED,
        EventType.STEP_STARTED,
        EventType.STEP_RETRYING,
        EventType.STEP_COMPLETED,
        EventType.STEP_FAILED,
    }
)
HOOK_TYPES: Final = frozenset(
    {
        EventType.HOOK_CREATED,
        EventType.HOOK_RECEIVED,
        EventType.HOOK_DISPOSED,
        EventType.HOOK_CONFLICT,
    }
)
WAIT_TYPES: Final = frozenset({EventType.WAIT_CREATED, EventType.WAIT_COMPLETED})
RUN_TYPES: Final = frozenset({EventType.RUN_CREATED, EventType.RUN_STARTED} | RUN_TERMINAL_TYPES)
#: Types only a World writes; a client request for one is refused.
WORLD_ONLY_TYPES: Final = frozenset({EventType.HOOK_CONFLICT, EventType.NOOP})


class Payload(Mapping[str, Any]):
    """An immutable, hashable, picklable mapping: the ``data`` of an event."""

    # ``get`` is the dict's own bound method, held per instance: a field read makes
    # no Python call (the runtime and the fold read several fields per event).
    __slots__ = ("_items", "get")

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        # ``type() is`` first: Payload is an ABC, so isinstance() is a Python-level call.
        if type(items) is Payload or isinstance(items, Payload):
            self._items: dict[str, Any] = items._items  # immutable: safe to share
        else:
            self._items = dict(items) if items else {}
        self.get = self._items.get  # type: ignore[method-assign,assignment]

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    if TYPE_CHECKING:  # at run time, the instance's slot (see above)

        def get(self, key: str, default: Any = None) -> Any:
            """The value for ``key``, or ``default``."""

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # The Mapping mixins go through __getitem__ and catch KeyError: slow on a miss.
    def __contains__(self, key: object) -> bool:
        return key in self._items

    # The Mapping mixin's views look every key up again through __getitem__.
    def items(self) -> ItemsView[str, Any]:
        """The (key, value) pairs, in order (a read-only view)."""
        return self._items.items()

    def values(self) -> ValuesView[Any]:
        """The values, in order (a read-only view)."""
        return self._items.values()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __eq__(self, other: object) -> bool:
        if type(other) is Payload or isinstance(other, Payload):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Payload({self._items!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Payload, (self._items,))

    def first(self, key: str, value: Any) -> Payload:
        """A copy with ``key`` set to ``value`` and placed first (the schema's order)."""
        merged = {key: value}
        for name, item in self._items.items():
            if name != key:
                merged[name] = item
        return _owned(merged)

    def last(self, key: str, value: Any) -> Payload:
        """A copy with ``key`` set to ``value`` and placed last (the schema's order)."""
        merged = {name: item for name, item in self._items.items() if name != key}
        merged[key] = value
        return _owned(merged)

    def replace(self, **changes: Any) -> Payload:
        """A copy with ``changes`` applied (a value of ``None`` removes the key)."""
        merged = dict(self._items)
        for key, value in changes.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return Payload(merged)


def _owned(items: dict[str, Any]) -> Payload:
    """A Payload that takes ``items`` as its own (nothing else may hold the dict)."""
    payload = Payload.__new__(Payload)
    payload._items = items
    payload.get = items.get  # type: ignore[method-assign,assignment]
    return payload


@attrs.frozen(kw_only=True)
class Event:
    """One committed entry of a run's log.

    Attributes:
        run_id: the run whose log holds the event.
        seq: the event's position, dense from 1 per run; its identity.
        type: what happened.
        created_at: commit time, from the World's clock.
        correlation_id: the step, hook or wait it concerns (``None`` for run events).
        in_band: written by the run's orchestrator under the in-band fence.
        data: the type's payload fields (docs/protocol.md §2).
    """

    run_id: str
    seq: int
    type: EventType
    created_at: datetime
    correlation_id: str | None = None
    in_band: bool = False
    data: Payload = attrs.field(factory=Payload, converter=Payload)

    @property
    def label(self) -> str:
        """``#12 step_completed charge#1``: how traces and errors name an event."""
        subject = f" {self.correlation_id}" if self.correlation_id else ""
        return f"#{self.seq} {self.type.value}{subject}"


@attrs.frozen(kw_only=True)
class EventRequest:
    """What a writer asks the World to append.

    Build one with :meth:`of`: ``EventRequest.of("step_created", "charge#1",
    step_name="step//shop//charge", input=b"...")``.  A request built by hand
    is checked again by the World before anything else, and so is one changed
    with ``attrs.evolve`` (the mark below is not an ``__init__`` argument, so
    no copy inherits it).
    """

    type: EventType
    correlation_id: str | None = None
    data: Payload = attrs.field(factory=Payload, converter=Payload)
    _validated: bool = attrs.field(init=False, default=False, eq=False, repr=False)

    @property
    def validated(self) -> bool:
        """Whether :func:`validate_request` built this very object."""
        return self._validated

    def __reduce__(self) -> tuple[Any, ...]:
        # Without the mark: a request that comes back from bytes (pickle, a copy) is
        # input like any other, and the World validates it again.
        return (_unpickle_request, (self.type, self.correlation_id, self.data))

    @classmethod
    def of(
        cls, type: EventType | str, correlation_id: str | None = None, **data: Any
    ) -> EventRequest:
        """A validated request; raises :class:`InvalidRequest` naming what is wrong."""
        # validate_request's two paths, called directly (this runs three times a step);
        # ``data`` is the call's own keyword dict, so the type's check takes it as is.
        check = _COMMON[type] if isinstance(type, str) else None
        if check is not None:
            try:
                request = check(correlation_id, data)
            except InvalidRequest:
                request = None
            if request is not None:
                return request
        return _validate_full(type, correlation_id, data, world=False)


def _unpickle_request(type: EventType, correlation_id: str | None, data: Payload) -> EventRequest:
    """A request from its pickled parts, unvalidated (see ``EventRequest.__reduce__``)."""
    return EventRequest(type=type, correlation_id=correlation_id, data=data)


# --- payload schema -----------------------------------------------------------

_BYTES, _STR, _INT, _BOOL, _TIME, _CHANGES = "bytes", "str", "int", "bool", "time", "changes"


@attrs.frozen
class _Field:
    kind: str
    required: bool = False
    world_only: bool = False  # filled in by the World; a client may not send it


_SCHEMA: Final[dict[EventType, dict[str, _Field]]] = {
    EventType.RUN_CREATED: {
        "workflow_name": _Field(_STR, required=True),
        "input": _Field(_BYTES, required=True),
        "deployment_id": _Field(_STR),
        "execution_context": _Field(_BYTES),
        "attributes": _Field(_CHANGES),
    },
    EventType.RUN_STARTED: {},
    EventType.RUN_COMPLETED: {"output": _Field(_BYTES, required=True)},
    EventType.RUN_FAILED: {"error": _Field(_BYTES, required=True), "error_code": _Field(_STR)},
    EventType.RUN_CANCELLED: {"reason": _Field(_STR)},
    EventType.STEP_CREATED: {
        "step_name": _Field(_STR, required=True),
        "input": _Field(_BYTES, required=True),
        "inline": _Field(_BOOL),
        "creator_message_id": _Field(_STR),
    },
    EventType.STEP_STARTED: {
        "attempt": _Field(_INT, world_only=True),
        "owner_message_id": _Field(_STR),
        "start_reason": _Field(_STR),
    },
    EventType.STEP_RETRYING: {"error": _Field(_BYTES, required=True), "retry_after": _Field(_TIME)},
    EventType.STEP_COMPLETED: {"result": _Field(_BYTES, required=True)},
    EventType.STEP_FAILED: {"error": _Field(_BYTES, required=True)},
    EventType.HOOK_CREATED: {
        "token": _Field(_STR, required=True),
        "metadata": _Field(_BYTES),
        "is_webhook": _Field(_BOOL),
    },
    EventType.HOOK_RECEIVED: {
        "payload": _Field(_BYTES, required=True),
        "resume_id": _Field(_STR),
        "token": _Field(_STR, world_only=True),
    },
    EventType.HOOK_DISPOSED: {},
    EventType.HOOK_CONFLICT: {
        "token": _Field(_STR, required=True),
        "conflicting_run_id": _Field(_STR, required=True),
        "conflicting_hook_id": _Field(_STR, required=True),
        "metadata": _Field(_BYTES),
        "is_webhook": _Field(_BOOL),
    },
    EventType.WAIT_CREATED: {"resume_at": _Field(_TIME, required=True)},
    EventType.WAIT_COMPLETED: {
        "resume_at": _Field(_TIME, world_only=True),
        "early": _Field(_BOOL),
    },
    EventType.ATTR_SET: {"changes": _Field(_CHANGES, required=True), "writer": _Field(_STR)},
    EventType.NOOP: {},
}

#: Event types whose request must name an entity (step, hook or wait id).
_NEEDS_CORRELATION: Final = STEP_TYPES | HOOK_TYPES | WAIT_TYPES
#: Event types that must not carry one.
_NO_CORRELATION: Final = RUN_TYPES | {EventType.NOOP}

MAX_REASON_CHARS: Final = 512
MAX_ATTR_KEY_CHARS: Final = 128
MAX_ATTR_VALUE_CHARS: Final = 4096
MAX_TOKEN_CHARS: Final = 256
#: Bound of a str field without its own entry in STRING_LIMITS.
MAX_TEXT_CHARS: Final = 256

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_CORRELATION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/#@+=~-]{0,255}")
_STREAM_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}")


def check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a well-formed run id, else raise :class:`InvalidRequest`."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise InvalidRequest(
            f"run id {shown(run_id)} is malformed: use 1-128 characters from [A-Za-z0-9_-], "
            "starting with a letter or digit (no paths, quotes or SQL)",
            run_id=run_id if isinstance(run_id, str) and len(run_id) <= 1024 else shown(run_id),
            field="run_id",
            rule="format",
        )
    return run_id


def check_correlation_id(correlation_id: object, *, what: str = "correlation id") -> str:
    """Return ``correlation_id`` if well formed, else raise :class:`InvalidRequest`."""
    if not isinstance(correlation_id, str) or not _CORRELATION_ID.fullmatch(correlation_id):
        raise InvalidRequest(
            f"{what} {shown(correlation_id)} is malformed: use 1-256 characters from "
            "[A-Za-z0-9_.:/#@+=~-], starting with a letter, digit or underscore",
            correlation_id=shown(correlation_id),
            field="correlation_id",
            rule="format",
        )
    return correlation_id


def check_stream_name(name: object) -> str:
    """Return ``name`` if it is a well-formed stream name, else raise :class:`InvalidRequest`."""
    if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
        raise InvalidRequest(
            f"stream name {shown(name)} is malformed: use 1-128 characters from [A-Za-z0-9_.:/-]",
            name=shown(name),
            field="stream name",
            rule="format",
        )
    return name


def _check_changes(where: str, value: object) -> tuple[tuple[str, str | None], ...]:
    items = list(value.items()) if isinstance(value, Mapping) else value
    if not isinstance(items, list | tuple):
        raise InvalidRequest(
            f"{where} must be a mapping or a sequence of (key, value) pairs, got "
            f"{type(value).__name__}",
        )
    changes: list[tuple[str, str | None]] = []
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise InvalidRequest(f"{where}: each change must be a (key, value) pair, got {item!r}")
        key, val = item
        check_text(key, field="attribute key")
        if not key.isprintable():
            raise InvalidRequest(
                f"{where}: attribute key {shown(key)} must be 1-{MAX_ATTR_KEY_CHARS} "
                "printable characters",
                field="attribute key",
                rule="printable",
            )
        if val is not None:
            if not isinstance(val, str):
                raise InvalidRequest(
                    f"{where}: value of attribute {key!r} must be a str of at most "
                    f"{MAX_ATTR_VALUE_CHARS} characters, or None to delete it",
                    field="attribute value",
                    rule="type",
                )
            check_text(val, field="attribute value")
        changes.append((key, val))
    return tuple(changes)


def _check_field(type_: EventType, name: str, spec: _Field, value: object) -> object:
    if spec.kind == _BYTES and type(value) is bytes:
        return value  # the common case, checked first and without building messages
    where = f"{type_.value}.{name}"
    if spec.kind == _BYTES:
        if type(value) is not bytes:
            raise InvalidRequest(
                f"{where} must be bytes, got {type(value).__name__}: the World stores "
                "opaque bytes; serialize the value first (durasim.runtime serialization)",
                field=where,
            )
    elif spec.kind == _STR:
        if not isinstance(value, str):
            raise InvalidRequest(
                f"{where} must be a str, got {type(value).__name__}", field=where, rule="type"
            )
        if name == "token":
            check_token(value, field=where)
        elif name == "conflicting_run_id":
            check_run_id(value)
        else:
            low, high = STRING_LIMITS.get(name, (1, MAX_TEXT_CHARS))
            check_text(value, field=where, min_chars=low, max_chars=high)
    elif spec.kind == _INT:
        if type(value) is not int or value < 0:
            raise InvalidRequest(f"{where} must be a non-negative int, got {value!r}", field=where)
    elif spec.kind == _BOOL:
        if type(value) is not bool:
            raise InvalidRequest(f"{where} must be a bool, got {type(value).__name__}", field=where)
    elif spec.kind == _TIME:
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise InvalidRequest(
                f"{where} must be an aware datetime (tzinfo set), got {value!r}", field=where
            )
    elif spec.kind == _CHANGES:
        return _check_changes(where, value)
    return value


def validate_request(
    type_: EventType | str,
    correlation_id: str | None,
    data: Mapping[str, Any],
    *,
    world: bool = False,
) -> EventRequest:
    """Check a request against the schema and return it normalized.

    Raises :class:`InvalidRequest` naming the problem: an unknown type, a type only
    the World may write, a missing or ill-typed field, an unknown field, a
    missing or forbidden correlation id.  ``world=True`` admits World-only types
    and fields (the World's own synthesized events).
    """
    if not world:
        # Every request the runtime builds is well formed: check it in one pass
        # over precomputed rules; anything unusual takes the full path below,
        # which raises the same error the same way as before.
        try:
            fast = _validate_common(type_, correlation_id, data)
        except InvalidRequest:
            fast = None
        if fast is not None:
            return fast
    return _validate_full(type_, correlation_id, data, world=world)


#: Field kinds whose values need no check beyond their exact type ...
_PLAIN: Final = {_BYTES: "bytes", _STR: "str", _BOOL: "bool"}
#: ... except these string fields, checked further by :func:`_check_field`.
_STR_CHECKED: Final = frozenset({"token", "conflicting_run_id"})
#: Short ASCII text without NUL is valid for every str field whose lower bound is
#: at most 1 (an empty one goes to the full check, which knows each field's bound).
_FAST_MAX_CHARS: Final = min(high for _, high in STRING_LIMITS.values())

_Common: TypeAlias = Callable[[Any, Any], "EventRequest | None"]


def _common_source(event_type: EventType) -> str:
    """The one-pass check of ``event_type``'s requests, as Python source.

    Each client field of the schema, in its order, gets its own lines: a value of
    its exact plain type (a str also short ASCII text without NUL) is taken as is,
    any other goes to :func:`_check_field`; an unknown field, a missing required
    one or a malformed correlation id returns ``None`` (the full check decides).
    """
    fields = [(n, f) for n, f in _SCHEMA[event_type].items() if not f.world_only]
    lines = ["def check(correlation_id, data):"]
    # A well-formed id is remembered (_WELL_FORMED_IDS): a step's id is checked
    # three times, for its step_created, step_started and outcome.
    remember = [
        "        if not _fullmatch(correlation_id): return None",
        f"        if len(_known_ids) >= {_KNOWN_IDS_MAX}: _known_ids.clear()",
        "        _known_ids.add(correlation_id)",
    ]
    if event_type in _NEEDS_CORRELATION:
        lines += [
            "    if type(correlation_id) is not str: return None",
            "    if correlation_id not in _known_ids:",
            *remember,
        ]
    elif event_type in _NO_CORRELATION:
        lines.append("    if correlation_id is not None: return None")
    else:
        lines += [
            "    if correlation_id is not None and (type(correlation_id) is not str"
            " or not _fullmatch(correlation_id)): return None"
        ]
    lines.append("    clean = {}")
    if not fields:
        lines.append("    if data: return None")
    else:
        lines += ["    if data:", "        if not _fields.issuperset(data): return None"]
        for name, spec in fields:
            lines.append(f"        v = data.get({name!r})")
            lines.append(f"        if v is None: {'return None' if spec.required else 'pass'}")
            plain = None if name in _STR_CHECKED else _PLAIN.get(spec.kind)
            if plain is not None:
                test = f"type(v) is {plain}"
                if spec.kind == _STR:
                    test += (
                        f" and v and v.isascii() and len(v) <= {_FAST_MAX_CHARS}"
                        " and '\\x00' not in v"
                    )
                lines.append(f"        elif {test}: clean[{name!r}] = v")
            checked = f"_check_field(_type, {name!r}, _spec_{name}, v)"
            lines.append(f"        else: clean[{name!r}] = {checked}")
        if any(f.required for _, f in fields):
            lines.append("    else: return None")
    # Built field by field, as attrs would (frozen: each set once, at birth),
    # around a Payload that owns ``clean`` (nothing else holds it).
    lines += [
        "    payload = _new_payload(Payload)",
        "    payload._items = clean",
        "    payload.get = clean.get",
        "    request = _new_request(EventRequest)",
        "    _set_type(request, _type)",
        "    _set_correlation_id(request, correlation_id)",
        "    _set_data(request, payload)",
        "    _set_validated(request, True)",
        "    return request",
    ]
    return "\n".join(lines) + "\n"


def _compile_common(event_type: EventType) -> _Common:
    namespace: dict[str, Any] = {
        "_type": event_type,
        "_fields": frozenset(n for n, f in _SCHEMA[event_type].items() if not f.world_only),
        "_fullmatch": _CORRELATION_ID.fullmatch,
        "_known_ids": _WELL_FORMED_IDS,
        "_check_field": _check_field,
        "Payload": Payload,
        "EventRequest": EventRequest,
        "_new_payload": Payload.__new__,
        "_new_request": EventRequest.__new__,
        # Each slot's own setter: a third of the cost of ``object.__setattr__`` (see ``_build``).
        **{
            f"_set_{name}": EventRequest.__dict__[slot].__set__
            for name, slot in (
                ("type", "type"),
                ("correlation_id", "correlation_id"),
                ("data", "data"),
                ("validated", "_validated"),
            )
        },
        **{f"_spec_{n}": f for n, f in _SCHEMA[event_type].items()},
    }
    source = _common_source(event_type)
    code = compile(source, f"<check {event_type.value}>", "exec")
    exec(code, namespace)  # noqa: S102 -- our own source, from the schema above
    return namespace["check"]  # type: ignore[no-any-return]


#: Correlation ids the one-pass checks found well formed lately (whether one is
#: depends on its text alone), emptied when it holds _KNOWN_IDS_MAX: a hit skips the
#: pattern match (about 1,900 instructions), the check a step's id passes three times.
_WELL_FORMED_IDS: Final[set[str]] = set()
_KNOWN_IDS_MAX: Final = 1024

#: The event types a client may request, by value.
_CLIENT_TYPES: Final = {t.value: t for t in EventType if t not in WORLD_ONLY_TYPES}


class _Checks(dict[str, "_Common | None"]):
    """Each client event type's one-pass check, compiled on first use (by value: an
    ``EventType`` finds its own); ``None`` for any other key (not stored)."""

    def __missing__(self, key: str) -> _Common | None:
        event_type = _CLIENT_TYPES.get(key)
        if event_type is None:
            return None
        check = self[event_type.value] = _compile_common(event_type)
        return check


_COMMON: Final = _Checks()


# --- the runtime's own requests -------------------------------------------------
#
# The runtime builds three requests a step (step_created, step_started, and the
# outcome) from values it made itself: bytes it serialized, ids it formatted.
# These builders give exactly what ``EventRequest.of`` gives for the same
# arguments (the same frozen request, marked validated, its payload in schema
# order) without the call's keyword dict, the type's lookup and the field loop.
# Each still takes its values only in the form the one-pass check takes as is (a
# correlation id already found well formed, exact ``bytes``, short ASCII text):
# any other value goes to ``EventRequest.of`` itself, which accepts or refuses it
# as it always did.  tests/worlds/test_trusted_requests.py proves the equality.

_new_object = object.__new__
_set_request_type = EventRequest.__dict__["type"].__set__
_set_request_correlation_id = EventRequest.__dict__["correlation_id"].__set__
_set_request_data = EventRequest.__dict__["data"].__set__
_set_request_validated = EventRequest.__dict__["_validated"].__set__
#: The payload of every request without fields (immutable: shared).
_EMPTY: Final = Payload()
# The builders' types as module globals: on 3.11 ``Types.X`` is looked up through the
# class on every read (about 120 instructions), a global from a cache.
_STEP_CREATED: Final = Types.STEP_CREATED
_STEP_STARTED: Final = Types.STEP_STARTED
_STEP_COMPLETED: Final = Types.STEP_COMPLETED


def _trusted(
    event_type: EventType, correlation_id: str | None, items: dict[str, Any]
) -> EventRequest:
    """The request ``validate_request`` would build from these checked parts."""
    if items:
        payload: Payload = _new_object(Payload)
        payload._items = items  # owned: nothing else holds the dict
        payload.get = items.get  # type: ignore[method-assign,assignment]
    else:
        payload = _EMPTY
    request: EventRequest = _new_object(EventRequest)
    _set_request_type(request, event_type)
    _set_request_correlation_id(request, correlation_id)
    _set_request_data(request, payload)
    _set_request_validated(request, True)
    return request


def _known_id(correlation_id: object) -> bool:
    """Whether ``correlation_id`` is well formed (remembered as the one-pass checks do)."""
    if type(correlation_id) is not str:
        return False
    if correlation_id in _WELL_FORMED_IDS:
        return True
    if not _CORRELATION_ID.fullmatch(correlation_id):
        return False
    if len(_WELL_FORMED_IDS) >= _KNOWN_IDS_MAX:
        _WELL_FORMED_IDS.clear()
    _WELL_FORMED_IDS.add(correlation_id)
    return True


def step_created_request(
    correlation_id: str, step_name: str, input: bytes, inline: bool
) -> EventRequest:
    """``EventRequest.of("step_created", correlation_id, step_name=..., input=..., inline=...)``."""
    if (
        type(input) is bytes
        and type(inline) is bool
        and type(step_name) is str
        and step_name
        and step_name.isascii()
        and len(step_name) <= _FAST_MAX_CHARS
        and "\x00" not in step_name
        and _known_id(correlation_id)
    ):
        return _trusted(
            _STEP_CREATED,
            correlation_id,
            {"step_name": step_name, "input": input, "inline": inline},
        )
    return EventRequest.of(
        "step_created", correlation_id, step_name=step_name, input=input, inline=inline
    )


def step_started_request(correlation_id: str) -> EventRequest:
    """``EventRequest.of("step_started", correlation_id)``."""
    if type(correlation_id) is str and correlation_id in _WELL_FORMED_IDS:
        request: EventRequest = _new_object(EventRequest)
        _set_request_type(request, _STEP_STARTED)
        _set_request_correlation_id(request, correlation_id)
        _set_request_data(request, _EMPTY)
        _set_request_validated(request, True)
        return request
    return EventRequest.of("step_started", correlation_id)


def step_completed_request(correlation_id: str, result: bytes) -> EventRequest:
    """``EventRequest.of("step_completed", correlation_id, result=result)``."""
    if type(result) is bytes and type(correlation_id) is str and correlation_id in _WELL_FORMED_IDS:
        return _trusted(_STEP_COMPLETED, correlation_id, {"result": result})
    return EventRequest.of("step_completed", correlation_id, result=result)


def wait_completed_request(correlation_id: str) -> EventRequest:
    """``EventRequest.of("wait_completed", correlation_id)``."""
    if _known_id(correlation_id):
        return _trusted(Types.WAIT_COMPLETED, correlation_id, {})
    return EventRequest.of("wait_completed", correlation_id)


def run_completed_request(output: bytes) -> EventRequest:
    """``EventRequest.of("run_completed", output=output)``."""
    if type(output) is bytes:
        return _trusted(Types.RUN_COMPLETED, None, {"output": output})
    return EventRequest.of("run_completed", output=output)


def _validate_common(
    type_: EventType | str, correlation_id: str | None, data: Mapping[str, Any]
) -> EventRequest | None:
    """The request if it is plainly valid; ``None`` to let the full check decide."""
    check = _COMMON[type_] if isinstance(type_, str) else None
    if check is None or (type(data) is not dict and type(data) is not Payload):
        return None
    return check(correlation_id, data)


def _validate_full(
    type_: EventType | str,
    correlation_id: str | None,
    data: Mapping[str, Any],
    *,
    world: bool,
) -> EventRequest:
    try:
        event_type = EventType(type_)
    except ValueError:
        known = ", ".join(t.value for t in EventType)
        raise InvalidRequest(
            f"unknown event type {type_!r}; the types are: {known}", event_type=type_
        ) from None
    if not world and event_type in WORLD_ONLY_TYPES:
        raise InvalidRequest(
            f"{event_type.value} is written by the World only; a client cannot request it",
            event_type=event_type.value,
        )
    if event_type in _NEEDS_CORRELATION:
        check_correlation_id(correlation_id, what=f"{event_type.value} correlation id")
    elif event_type in _NO_CORRELATION and correlation_id is not None:
        raise InvalidRequest(
            f"{event_type.value} concerns the run itself and takes no correlation id "
            f"(got {correlation_id!r})",
            event_type=event_type.value,
        )
    elif correlation_id is not None:
        check_correlation_id(correlation_id)
    if not isinstance(data, Mapping):
        raise InvalidRequest(
            f"{event_type.value} data must be a mapping, got {type(data).__name__}"
        )
    schema = _SCHEMA[event_type]
    clean: dict[str, Any] = {}
    for name, value in data.items():
        spec = schema.get(name)
        if spec is None or (spec.world_only and not world):
            allowed = ", ".join(n for n, s in schema.items() if not s.world_only) or "none"
            raise InvalidRequest(
                f"{event_type.value} has no field {name!r} a client may set; its fields: {allowed}",
                field=name,
            )
        if value is None and not spec.required:
            continue
        clean[name] = _check_field(event_type, name, spec, value)
    for name, spec in schema.items():
        if spec.required and name not in clean:
            raise InvalidRequest(
                f"{event_type.value} is missing its required field {name!r}", field=name
            )
    request = EventRequest(
        type=event_type, correlation_id=correlation_id, data=in_schema_order(event_type, clean)
    )
    if not world:
        object.__setattr__(request, "_validated", True)  # frozen: set once, at birth
    return request


def in_schema_order(event_type: EventType, data: Mapping[str, Any]) -> Payload:
    """``data`` with its keys in the schema's order, so equal events render alike."""
    return Payload({name: data[name] for name in _SCHEMA[event_type] if name in data})
