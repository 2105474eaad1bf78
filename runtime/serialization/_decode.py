"""The decoder: the JSON tree of the tagged format back to Python values.

It mirrors the encoder's walk and numbering exactly: every list, dict and object
tag takes the next index in pre-order, so ``{"#": "R", "i": n}`` finds the same
object the encoder numbered ``n``.  Containers that can exist before their
children (list, dict, set, field-registered objects) are numbered and then
filled, which is what lets a cycle through them close.

Decoding trusts nothing it reads: shapes are checked, ids are looked up only in
the registry (never imported), and every failure leaves as
:class:`SerializationError`.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

from durasim.worlds import DurasimError

from ._encode import args_text
from ._errors import RevivedError, SerializationError
from ._format import MAX_DEPTH, TAG
from ._leaves import LEAF_DECODERS, decode_float, decode_int
from ._registry import ClassRegistry, Registered
from ._tracebacks import TRACEBACK_ATTRIBUTE, bound_traceback

__all__ = ["Decoder", "Malformed"]

Node = Any

_UNFINISHED = object()

# Exceptions decodable by name without registration: the builtins, looked up in
# this fixed table (never by getattr on a name read from the log).
_BUILTIN_EXCEPTIONS: dict[str, type[BaseException]] = {
    f"builtins.{name}": obj
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


class Malformed(DurasimError, ValueError):
    """The tree does not follow the format (turned into SerializationError)."""


def _list_field(node: dict[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    if type(value) is not list:
        raise Malformed(f"tag {node.get(TAG)!r} needs a list in {key!r}")
    return value


def _str_field(node: dict[str, Any], key: str) -> str:
    value = node.get(key)
    if type(value) is not str:
        raise Malformed(f"tag {node.get(TAG)!r} needs text in {key!r}")
    return value


class Decoder:
    """Decodes one tagged tree; use a fresh one per payload."""

    def __init__(self, registry: ClassRegistry) -> None:
        self.registry = registry
        self.objs: list[object] = []

    #: The method decoding each tag, by name; a subclass adds its own tags.  The
    #: table of functions (:attr:`_tags`) is the class's, made once per class (a
    #: table of bound methods on each decoder would tie every decoder into a
    #: reference cycle with itself, issue 22).
    _TAGGED: ClassVar[dict[str, str]] = {
        "R": "_ref",
        "i": "_int",
        "F": "_float",
        "t": "dec_tuple",
        "s": "_set",
        "f": "dec_frozenset",
        "d": "_dict",
        "o": "_object",
        "e": "_enum",
        "fn": "_function",
        "x": "_exception",
    }
    _tags: ClassVar[dict[str, Callable[[Any, dict[str, Any], int], Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._make_tags()

    @classmethod
    def _make_tags(cls) -> None:
        cls._tags = {tag: getattr(cls, name) for tag, name in cls._TAGGED.items()}

    def decode(self, tree: Node) -> Any:
        """The value for ``tree``.

        Raises:
            SerializationError: the tree is malformed or names an unknown id.
            Malformed, ValueError, TypeError, KeyError: shape errors (the caller
                wraps them with the payload context).
        """
        return self.dec(tree, 0)

    def reserve(self) -> int:
        """Take the next index for an object built after its children."""
        self.objs.append(_UNFINISHED)
        return len(self.objs) - 1

    def dec(self, node: Node, depth: int) -> Any:
        """Decode one node at nesting ``depth``."""
        t = type(node)
        if t is str or t is int or t is float or node is None or t is bool:
            return node
        if depth >= MAX_DEPTH:
            raise Malformed(f"nesting deeper than {MAX_DEPTH} levels")
        depth += 1
        if t is list:
            out: list[Any] = []
            self.objs.append(out)
            dec = self.dec
            out.extend([dec(x, depth) for x in node])
            return out
        if t is not dict:
            raise Malformed(f"unexpected JSON value of type {t.__name__}")
        tag = node.get(TAG)
        if tag is None:
            result: dict[str, Any] = {}
            self.objs.append(result)
            dec = self.dec
            for k, v in node.items():
                result[k] = dec(v, depth)
            return result
        handler = self._tags.get(tag) if type(tag) is str else None
        if handler is not None:
            return handler(self, node, depth)
        leaf = LEAF_DECODERS.get(tag) if type(tag) is str else None
        if leaf is None:
            raise Malformed(
                f"unknown type tag {tag!r:.40}; the payload was written by a newer "
                "durasim or is corrupt"
            )
        value = leaf(node)
        self.objs.append(value)
        return value

    # -- references and containers -------------------------------------------

    def _int(self, node: dict[str, Any], depth: int) -> int:
        return decode_int(node)

    def _float(self, node: dict[str, Any], depth: int) -> float:
        return decode_float(node)

    def _ref(self, node: dict[str, Any], depth: int) -> Any:
        index = node.get("i")
        if type(index) is not int or not 0 <= index < len(self.objs):
            raise Malformed(f"reference to object #{index!r:.20}, which does not exist (yet)")
        value = self.objs[index]
        if value is _UNFINISHED:
            raise Malformed(f"reference to object #{index}, which is still being built")
        return value

    def dec_tuple(self, node: dict[str, Any], depth: int) -> tuple[Any, ...]:
        """Decode a tuple node."""
        index = self.reserve()
        dec = self.dec
        value = tuple([dec(x, depth) for x in _list_field(node, "v")])
        self.objs[index] = value
        return value

    def dec_frozenset(self, node: dict[str, Any], depth: int) -> frozenset[Any]:
        """Decode a frozenset node."""
        index = self.reserve()
        dec = self.dec
        value = frozenset([dec(x, depth) for x in _list_field(node, "v")])
        self.objs[index] = value
        return value

    def _set(self, node: dict[str, Any], depth: int) -> set[Any]:
        value: set[Any] = set()
        self.objs.append(value)
        dec = self.dec
        for x in _list_field(node, "v"):
            value.add(dec(x, depth))
        return value

    def _dict(self, node: dict[str, Any], depth: int) -> dict[Any, Any]:
        flat = _list_field(node, "v")
        if len(flat) % 2:
            raise Malformed("a dict needs a key for every value")
        value: dict[Any, Any] = {}
        self.objs.append(value)
        dec = self.dec
        it = iter(flat)
        for k in it:
            key = dec(k, depth)
            value[key] = dec(next(it), depth)
        return value

    # -- registered classes, functions, exceptions ---------------------------

    def entry(self, node: dict[str, Any], kind: str) -> Registered:
        """The registration the node's ``c`` names; refuses unknown ids."""
        class_id = _str_field(node, "c")
        entry = self.registry.entry_for_id(class_id)
        if entry is None:
            raise SerializationError(
                f"class id {class_id!r} is not registered in this process; import the "
                "module that defines the class before decoding (decoding never imports)",
                path=class_id,
            )
        if entry.kind != kind:
            raise Malformed(f"class id {class_id!r} is a {entry.kind}, not a {kind}")
        return entry

    def _object(self, node: dict[str, Any], depth: int) -> Any:
        class_id = _str_field(node, "c")
        entry = self.registry.entry_for_id(class_id)
        if entry is not None and entry.kind == "fields":
            return self.fields_object(node, entry, depth)
        entry = self.entry(node, "pair")
        index = self.reserve()
        data = self.dec(node.get("v"), depth)
        try:
            value = entry.cls.__durasim_deserialize__(data)  # type: ignore[attr-defined]
        except Exception as exc:
            raise SerializationError(
                f"{entry.cls.__qualname__}.__durasim_deserialize__ raised "
                f"{type(exc).__name__}: {exc}; fix the hook or the data it was given",
                path=class_id,
            ) from exc
        self.objs[index] = value
        return value

    def fields_object(self, node: dict[str, Any], entry: Registered, depth: int) -> Any:
        """Build an attrs/dataclass instance without running ``__init__``.

        Like pickle, the instance exists before its fields are decoded, so a field
        may refer back to it (a cycle); validators and ``__post_init__`` do not run.
        """
        fields = node.get("v")
        if type(fields) is not dict or set(fields) != set(entry.fields):
            raise SerializationError(
                f"{entry.class_id}: stored fields do not match the class's fields "
                f"{list(entry.fields)}; the payload was written by another version of "
                "the class (give the new version a new class_id)",
                path=entry.class_id,
            )
        value: Any = object.__new__(entry.cls)
        self.objs.append(value)
        dec = self.dec
        for name in entry.fields:
            object.__setattr__(value, name, dec(fields[name], depth))
        return value

    def _enum(self, node: dict[str, Any], depth: int) -> Any:
        entry = self.entry(node, "enum")
        name = _str_field(node, "n")
        try:
            value = entry.cls[name]  # type: ignore[index]
        except KeyError:
            raise Malformed(f"{entry.class_id} has no member {name!r:.40}") from None
        self.objs.append(value)
        return value

    def _function(self, node: dict[str, Any], depth: int) -> Any:
        function_id = _str_field(node, "c")
        value = self.registry.function_for_id(function_id)
        if value is None:
            raise SerializationError(
                f"function id {function_id!r} is not registered in this process; import "
                "the module that defines the step or workflow before decoding",
                path=function_id,
            )
        self.objs.append(value)
        return value

    def _exception(self, node: dict[str, Any], depth: int) -> BaseException:
        type_name = _str_field(node, "t")
        index = self.reserve()
        dec = self.dec
        args = tuple([dec(a, depth) for a in _list_field(node, "a")])
        message = _str_field(node, "m") if "m" in node else args_text(args)
        facts_node = node.get("k", {})
        if type(facts_node) is not dict:
            raise Malformed("exception facts must be an object")
        facts = {str(k): dec(v, depth) for k, v in facts_node.items()}
        value = _build_exception(self, node, type_name, message, args, facts)
        self.objs[index] = value
        if "ca" in node:
            cause = dec(node["ca"], depth)
            if cause is not None and not isinstance(cause, BaseException):
                raise Malformed("an exception's cause must be an exception")
            value.__cause__ = cause
        if "n" in node:
            notes = [dec(n, depth) for n in _list_field(node, "n")]
            value.__notes__ = notes
        frames = node.get("tb")
        if isinstance(frames, str):  # absent from logs written before tracebacks were kept
            with contextlib.suppress(AttributeError, TypeError):
                setattr(value, TRACEBACK_ATTRIBUTE, bound_traceback(frames))
        return value


def _build_exception(  # noqa: PLR0917 -- private helper of _exception only
    decoder: Decoder,
    node: dict[str, Any],
    type_name: str,
    message: str,
    args: tuple[Any, ...],
    facts: dict[str, Any],
) -> BaseException:

    cls: type[BaseException] | None = None
    if "c" in node:
        cls = decoder.entry(node, "exception").cls
    else:
        cls = _BUILTIN_EXCEPTIONS.get(type_name)
    if cls is not None:
        try:
            if issubclass(cls, DurasimError):
                return cls(message, **facts)
            return cls(*args)
        except Exception:  # noqa: S110 -- a constructor that refuses its args: revive
            pass
    return RevivedError(message, type_name=type_name, original_args=args)


Decoder._make_tags()
