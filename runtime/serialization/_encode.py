"""The encoder: a Python value to the JSON tree of the tagged format.

One recursive walk.  Plain JSON values pass through untouched; everything else
becomes a tag node (see ``_format``).  Every list, dict and object tag is numbered
in pre-order as it is first met; meeting it again writes ``{"#": "R", "i": n}``,
which is how shared references and cycles survive.

A value that cannot be encoded raises ``_Refusal`` at the point of failure; each
container it passes on the way up adds its own step of the path (``[1]``,
``["conn"]``), so the hot loops pay nothing for paths until something fails.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from durasim.worlds import DurasimError

from ._errors import RevivedError, SerializationError
from ._format import INT_LIMIT, MAX_DEPTH, TAG
from ._leaves import ATOM_TYPES, LEAF_ENCODERS, encode_float, encode_int
from ._refusals import describe_type, refusal
from ._registry import ClassRegistry, Registered
from ._tracebacks import stored_traceback

__all__ = ["Encoder", "Refusal", "args_text", "is_flat_plain", "is_plain"]

Node = Any

# Types whose repr is a pure function of the value (no addresses).
_REPR_STABLE = ATOM_TYPES


class Refusal(DurasimError):
    """A value could not be encoded; carries the path built while unwinding.

    Internal: the encoder turns it into a :class:`SerializationError` before it
    leaves the package.
    """

    def __init__(self, message: str, culprit: object) -> None:
        super().__init__(message, culprit=culprit)
        self.culprit = culprit
        self.segments: list[str] = []

    def at(self, segment: str, container: object) -> None:
        """Prepend one path step (segments are collected innermost first)."""
        self.segments.append(segment)
        self.culprit = container

    def error(self, root: str) -> SerializationError:
        """The user-facing error, with the full path from ``root``."""
        path = root + "".join(reversed(self.segments))
        return SerializationError(f"{path}: {self.message}", path=path)


def _index_in(items: Iterable[object], culprit: object) -> str:
    for i, item in enumerate(items):
        if item is culprit:
            return f"[{i}]"
    return "[?]"


def _key_text(key: object) -> str:
    if type(key) is str:
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(key)


def _set_order(items: set[Any] | frozenset[Any]) -> list[Any]:
    # Set iteration order follows the per-process hash seed, so members are
    # written sorted by a canonical key: the same set gives the same bytes in
    # every process.  Members without a stable key (objects whose repr carries an
    # address) keep iteration order: still correct, not byte-stable.
    try:
        return sorted(items, key=_order_key)
    except TypeError:
        return list(items)


def _order_key(value: object) -> tuple[str, Any]:
    t = type(value)
    if t is str or t is int or t is bytes:
        return (t.__name__, value)
    if t is tuple:
        return ("tuple", tuple([_order_key(x) for x in value]))  # type: ignore[attr-defined]
    if t is frozenset:
        return ("frozenset", tuple(sorted([_order_key(x) for x in value])))  # type: ignore[attr-defined]
    if t in _REPR_STABLE or isinstance(value, enum.Enum):
        return ("~" + t.__name__, repr(value))
    raise TypeError(f"no canonical order for {t.__name__}")


def is_plain(value: object) -> bool:
    """Whether ``value`` is plain JSON that ``json.loads`` alone rebuilds exactly.

    Plain means: str-keyed dicts, lists, str, finite floats, ints within the
    portable range, bool and None, with no list or dict reached twice.
    """
    if is_flat_plain(value):
        return True
    seen: set[int] = set()
    return _plain(value, 0, seen)


def is_flat_plain(value: object) -> bool:
    """Whether ``value`` is a dict of scalars, lists and dicts of scalars, each container once.

    The shape of every step input (``{"args": [...], "kwargs": {...}, "closure":
    {...}}``) judged in one call; ``False`` leaves the judgement to the full walk.
    """
    if type(value) is not dict:
        return False
    parts: list[object] = [value]
    for key, part in value.items():
        if type(key) is not str:
            return False
        tp = type(part)
        if tp is list:
            items = part
        elif tp is dict:
            for name in part:
                if type(name) is not str:
                    return False
            items = part.values()
        elif tp is str or part is None or tp is bool:
            continue
        else:
            return False
        for seen in parts:
            if seen is part:
                return False
        parts.append(part)
        for v in items:
            tv = type(v)
            if tv is int:  # the commonest leaf first
                if -INT_LIMIT <= v <= INT_LIMIT:
                    continue
                return False
            if tv is str or v is None or tv is bool:
                continue
            if tv is float and v - v == 0.0:
                continue
            return False
    return True


def _plain(value: object, depth: int, seen: set[int]) -> bool:
    # Scalars are checked inline in the loops: a call per element would double
    # the cost of the fast path on large payloads.
    t = type(value)
    if t is dict:
        if depth > MAX_DEPTH or id(value) in seen:
            return False
        seen.add(id(value))
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                return False
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if tv is int:
                if -INT_LIMIT <= v <= INT_LIMIT:
                    continue
                return False
            if tv is float:
                if v - v == 0.0:
                    continue
                return False
            if not _plain(v, depth + 1, seen):
                return False
        return True
    if t is list:
        if depth > MAX_DEPTH or id(value) in seen:
            return False
        seen.add(id(value))
        for v in value:  # type: ignore[attr-defined]
            tv = type(v)
            if tv is str or v is None or tv is bool:
                continue
            if tv is int:
                if -INT_LIMIT <= v <= INT_LIMIT:
                    continue
                return False
            if tv is float:
                if v - v == 0.0:
                    continue
                return False
            if not _plain(v, depth + 1, seen):
                return False
        return True
    if t is str or value is None or t is bool:
        return True
    if t is int:
        return bool(-INT_LIMIT <= value <= INT_LIMIT)  # type: ignore[operator]
    if t is float:
        return bool(value - value == 0.0)  # type: ignore[operator]
    return False


class Encoder:
    """Encodes one value into a tagged JSON tree; use a fresh one per payload."""

    def __init__(self, registry: ClassRegistry) -> None:
        self.registry = registry
        self.memo: dict[int, int] = {}
        # objs keeps every numbered object alive until the walk ends, so an id()
        # cannot be reused by a temporary (hook data) and alias a memo entry.
        self.objs: list[object] = []
        # Numbered objects that decode only after their children (tuple,
        # frozenset, hook-pair objects, exceptions during their args): meeting one
        # again before it is closed is a cycle the decoder could not rebuild.
        self.open: set[int] = set()

    #: The method encoding each container type, by name.  The table of functions
    #: (:attr:`_handlers`) is the class's, made once per class (a subclass's
    #: overrides included): a table of bound methods on each encoder would tie
    #: every encoder into a reference cycle with itself (issue 22).
    _HANDLED: ClassVar[dict[type, str]] = {
        list: "_list",
        dict: "_dict",
        tuple: "enc_tuple",
        set: "_set",
        frozenset: "enc_frozenset",
    }
    _handlers: ClassVar[dict[type, Callable[[Any, Any, int], Node]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._make_handlers()

    @classmethod
    def _make_handlers(cls) -> None:
        cls._handlers = {t: getattr(cls, name) for t, name in cls._HANDLED.items()}

    # -- entry ---------------------------------------------------------------

    def encode(self, value: object) -> Node:
        """The tagged tree for ``value``.

        Raises:
            Refusal: a part of the value cannot be encoded.
        """
        return self.enc(value, 0)

    def number(self, value: object, *, opened: bool = False) -> int:
        """Give ``value`` the next pre-order index."""
        index = len(self.objs)
        self.memo[id(value)] = index
        self.objs.append(value)
        if opened:
            self.open.add(index)
        return index

    def enc(self, value: Any, depth: int) -> Node:
        """Encode one value at nesting ``depth``."""
        t = type(value)
        if t is str:
            return value
        if t is int:
            return value if -INT_LIMIT <= value <= INT_LIMIT else encode_int(value)
        if t is float:
            return value if value - value == 0.0 else encode_float(value)
        if value is None or t is bool:
            return value
        index = self.memo.get(id(value))
        if index is not None:
            if index in self.open:
                raise Refusal(
                    f"{describe_type(value)} contains itself through an immutable "
                    "container (a tuple, frozenset or a class rebuilt from its data); "
                    "durasim rebuilds children first, so break the cycle with a list",
                    value,
                )
            return {TAG: "R", "i": index}
        if depth >= MAX_DEPTH:
            raise Refusal(f"nesting deeper than {MAX_DEPTH} levels; flatten the structure", value)
        handler = self._handlers.get(t)
        if handler is not None:
            return handler(self, value, depth + 1)
        leaf = LEAF_ENCODERS.get(t)
        if leaf is not None:
            try:
                node = leaf(value)
            except ValueError as exc:
                raise Refusal(
                    f"{describe_type(value)} cannot cross a step boundary ({exc}); "
                    "pass a supported equivalent (docs/serialization.md lists them)",
                    value,
                ) from None
            self.number(value)
            return node
        return self._other(value, depth + 1)

    # -- containers ----------------------------------------------------------

    def _list(self, value: list[Any], depth: int) -> Node:
        self.number(value)
        enc = self.enc
        try:
            return [enc(x, depth) for x in value]
        except Refusal as r:
            r.at(_index_in(value, r.culprit), value)
            raise

    def _dict(self, value: dict[Any, Any], depth: int) -> Node:
        self.number(value)
        enc = self.enc
        if TAG not in value and all(type(k) is str for k in value):
            try:
                return {k: enc(v, depth) for k, v in value.items()}
            except Refusal as r:
                r.at(_dict_segment(value, r.culprit), value)
                raise
        flat: list[Node] = []
        try:
            for k, v in value.items():
                flat.append(enc(k, depth))
                flat.append(enc(v, depth))
        except Refusal as r:
            r.at(_dict_segment(value, r.culprit), value)
            raise
        return {TAG: "d", "v": flat}

    def enc_tuple(self, value: tuple[Any, ...], depth: int) -> Node:
        """Encode a tuple (overridden by the frozen-value encoder)."""
        index = self.number(value, opened=True)
        enc = self.enc
        try:
            items = [enc(x, depth) for x in value]
        except Refusal as r:
            r.at(_index_in(value, r.culprit), value)
            raise
        self.open.discard(index)
        return {TAG: "t", "v": items}

    def _set(self, value: set[Any], depth: int) -> Node:
        self.number(value)
        return {TAG: "s", "v": self._members(value, depth)}

    def enc_frozenset(self, value: frozenset[Any], depth: int) -> Node:
        """Encode a frozenset (overridden by the frozen-value encoder)."""
        index = self.number(value, opened=True)
        items = self._members(value, depth)
        self.open.discard(index)
        return {TAG: "f", "v": items}

    def _members(self, value: set[Any] | frozenset[Any], depth: int) -> list[Node]:
        enc = self.enc
        try:
            return [enc(x, depth) for x in _set_order(value)]
        except Refusal as r:
            r.at("{...}", value)
            raise

    # -- registered classes, functions, exceptions ---------------------------

    def _other(self, value: Any, depth: int) -> Node:
        entry = self.registry.entry_for_class(type(value))
        if entry is not None:
            if entry.kind == "fields":
                return self.fields_object(value, entry, depth)
            if entry.kind == "pair":
                return self._pair_object(value, entry, depth)
            if entry.kind == "enum":
                self.number(value)
                return {TAG: "e", "c": entry.class_id, "n": value.name}
            return self._exception(value, entry, depth)
        if isinstance(value, BaseException):
            return self._exception(value, None, depth)
        function_id = self.registry.function_id(value)
        if function_id is not None:
            self.number(value)
            return {TAG: "fn", "c": function_id}
        if isinstance(value, enum.Enum):
            raise Refusal(
                f"{describe_type(value)} is a member of an unregistered enum; "
                "register the enum with @serializable",
                value,
            )
        if dataclasses.is_dataclass(value) or hasattr(type(value), "__attrs_attrs__"):
            raise Refusal(
                f"{describe_type(value)} is not registered; decorate the class with "
                "@serializable (its fields are then serialized by name)",
                value,
            )
        raise Refusal(refusal(value), value)

    def fields_object(self, value: Any, entry: Registered, depth: int) -> Node:
        """Encode an attrs/dataclass instance field by field."""
        self.number(value)
        enc = self.enc
        fields: dict[str, Node] = {}
        name = ""
        try:
            for name in entry.fields:
                fields[name] = enc(getattr(value, name), depth)
        except Refusal as r:
            r.at(f".{name}", value)
            raise
        return {TAG: "o", "c": entry.class_id, "v": fields}

    def _pair_object(self, value: Any, entry: Registered, depth: int) -> Node:
        index = self.number(value, opened=True)
        try:
            data = value.__durasim_serialize__()
        except Exception as exc:
            raise Refusal(
                f"{describe_type(value)}.__durasim_serialize__ raised "
                f"{type(exc).__name__}: {exc}; fix the hook",
                value,
            ) from exc
        try:
            node = self.enc(data, depth)
        except Refusal as r:
            r.at(".__durasim_serialize__()", value)
            raise
        self.open.discard(index)
        return {TAG: "o", "c": entry.class_id, "v": node}

    def _exception(self, value: BaseException, entry: Registered | None, depth: int) -> Node:
        index = self.number(value, opened=True)
        enc = self.enc
        cls = type(value)
        type_name = getattr(value, "type_name", None) if _is_revived(value) else None
        node: dict[str, Node] = {
            TAG: "x",
            "t": type_name or f"{cls.__module__}.{cls.__qualname__}",
        }
        args = value.original_args if type_name else value.args  # type: ignore[attr-defined]
        message = str(value)
        # The message is written only when the args do not already say it: args
        # often hold objects whose repr carries an address, which would make the
        # same exception encode to different bytes.
        if message != args_text(args):
            node["m"] = message
        if entry is not None:
            node["c"] = entry.class_id
        try:
            node["a"] = [enc(arg, depth) for arg in args]
            facts = getattr(value, "facts", None)
            if entry is not None and isinstance(facts, dict):
                node["k"] = {str(k): enc(v, depth) for k, v in facts.items()}
        except Refusal as r:
            r.at(_index_in(args, r.culprit).replace("[", ".args[", 1), value)
            raise
        self.open.discard(index)
        try:
            cause = value.__cause__
            if cause is not None:
                node["ca"] = enc(cause, depth)
            notes = getattr(value, "__notes__", None)
            if notes:
                node["n"] = [enc(note, depth) for note in notes]
        except Refusal as r:
            r.at(".__cause__" if r.culprit is cause else ".__notes__", value)
            raise
        frames = stored_traceback(value)
        if frames:
            node["tb"] = frames
        return node


def args_text(args: tuple[Any, ...]) -> str:
    """What ``str()`` of an exception with these args is, by default."""
    try:
        return str(BaseException(*args))
    except Exception:
        return ""


def _is_revived(value: object) -> bool:
    return isinstance(value, RevivedError)


def _dict_segment(value: dict[Any, Any], culprit: object) -> str:
    for i, (k, v) in enumerate(value.items()):
        if v is culprit:
            return f"[{_key_text(k)}]"
        if k is culprit:
            return f"[<key {i}>]"
    return "[?]"


Encoder._make_handlers()
