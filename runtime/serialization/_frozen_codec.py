"""Encoder and decoder subclasses that write and read frozen values by reference.

A *frozen* value is an atom (an immutable leaf: str, int, bytes, datetime ...), a
member of a registered enum, or a tuple, frozenset or instance of a registered
frozen attrs/dataclass class whose children are all frozen.  Nothing inside one
can change, so once stored it can be referred to by identity:

* a frozen object already stored in a committed record is written as
  ``{"#": "@", "k": <dep>, "i": <index>}`` (record ``deps[k]``, object ``i``);
* a tuple sharing runs of elements with stored tuples is written as
  ``{"#": "t+", "v": [...]}`` whose items are elements or slices
  ``{"#": ":", "k": <dep>, "i": <index>, "a": <start>, "b": <stop>}`` -- "the
  previous history plus two messages" is one slice and two elements.

Whether a delta may be written is the whole-copy rule (:class:`Chain`).
"""

from __future__ import annotations

import enum
from collections.abc import Container
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ._decode import Decoder, Malformed
from ._encode import Encoder
from ._format import TAG
from ._leaves import ATOM_TYPES
from ._registry import ClassRegistry, Registered

if TYPE_CHECKING:
    from ._frozen import FrozenValues

__all__ = [
    "MIN_REFERENCED_SIZE",
    "Chain",
    "FrozenDecoder",
    "FrozenEncoder",
    "children_frozen",
    "is_frozen_in",
]

Node = Any

#: Stored values written shorter than this (bytes) are written again, not referred to.
MIN_REFERENCED_SIZE = 48


@attrs.frozen(kw_only=True)
class Chain:
    """What rebuilding a delta-written tuple costs.

    Attributes:
        size: estimated bytes of the tuple written whole.
        delta_bytes: bytes of the deltas written since the last whole copy of the
            chain of bases (what a cold rebuild has to apply).
        changes: number of deltas since the last whole copy.
    """

    size: int
    delta_bytes: int
    changes: int


def is_frozen_in(value: object, registry: ClassRegistry, known: tuple[Container[int], ...]) -> bool:
    """Whether ``value`` is a frozen leaf or an object already known to be frozen."""
    t = type(value)
    if t in ATOM_TYPES:
        return True
    oid = id(value)
    if any(oid in ids for ids in known):
        return True
    if isinstance(value, enum.Enum):
        entry = registry.entry_for_class(t)
        return entry is not None and entry.kind == "enum"
    return False


def children_frozen(
    value: object,
    entry: Registered | None,
    registry: ClassRegistry,
    known: tuple[Container[int], ...],
) -> bool:
    """Whether every child of a tuple, frozenset or frozen class instance is frozen."""
    if type(value) is tuple or type(value) is frozenset:
        return all(is_frozen_in(x, registry, known) for x in value)
    if entry is not None and entry.kind == "fields" and entry.frozen:
        return all(is_frozen_in(getattr(value, name), registry, known) for name in entry.fields)
    return False


class FrozenEncoder(Encoder):
    """An encoder that refers to stored frozen values and writes tuple deltas."""

    def __init__(self, registry: ClassRegistry, values: FrozenValues, *, whole: bool) -> None:
        super().__init__(registry)
        self.values = values
        self.whole = whole
        self.deps: dict[str, int] = {}
        self.frozen_ids: set[int] = set()
        self.new_nodes: list[tuple[int, object]] = []
        self.chains: dict[int, Chain] = {}

    # -- references ----------------------------------------------------------

    def _dep(self, record: str) -> int:
        return self.deps.setdefault(record, len(self.deps))

    def _stored_ref(self, value: object) -> Node | None:
        if self.whole:
            return None
        found = self.values.stored_location(value)
        # A reference (~25 bytes, and a record the reader must load: a queued
        # step's worker reads the log for it) is worth it only for a bigger value.
        if found is None or self.values.size_of(value) < MIN_REFERENCED_SIZE:
            return None
        record, index = found
        self.number(value)
        self.frozen_ids.add(id(value))
        return {TAG: "@", "k": self._dep(record), "i": index}

    def _done(self, value: object, entry: Registered | None) -> None:
        known = (self.frozen_ids, self.values.known_ids())
        if children_frozen(value, entry, self.registry, known):
            self.frozen_ids.add(id(value))
            self.new_nodes.append((self.memo[id(value)], value))

    # -- frozen containers ---------------------------------------------------

    def enc_tuple(self, value: tuple[Any, ...], depth: int) -> Node:
        """A stored tuple as a reference, a tuple sharing stored runs as a delta."""
        ref = self._stored_ref(value)
        if ref is not None:
            return ref
        if not self.whole and len(value) > 1:
            node = self._delta(value, depth)
            if node is not None:
                return node
        node = super().enc_tuple(value, depth)
        self._done(value, None)
        return node

    def enc_frozenset(self, value: frozenset[Any], depth: int) -> Node:
        """A stored frozenset as a reference, otherwise whole."""
        ref = self._stored_ref(value)
        if ref is not None:
            return ref
        node = super().enc_frozenset(value, depth)
        self._done(value, None)
        return node

    def fields_object(self, value: Any, entry: Registered, depth: int) -> Node:
        """A stored frozen attrs/dataclass instance as a reference, otherwise by fields."""
        if entry.frozen:
            ref = self._stored_ref(value)
            if ref is not None:
                return ref
        node = super().fields_object(value, entry, depth)
        self._done(value, entry)
        return node

    def _delta(self, value: tuple[Any, ...], depth: int) -> Node | None:
        # A slice of one element is longer than the reference the element gets
        # anyway (it is stored), and trying costs an encode and a roll-back: a
        # small tuple holding one stored value is written whole at once.
        runs = [run for run in self.values.shared_runs(value) if run[3] > 1]
        if not runs:
            return None
        # Encode first, then apply the whole-copy rule to the real size; if the
        # rule says "write it whole", undo the numbering the attempt did.
        mark = (len(self.objs), len(self.new_nodes), len(self.deps))
        index = self.number(value, opened=True)
        items: list[Node] = []
        bases: list[tuple[tuple[Any, ...], int, int]] = []
        position = 0
        for start, base, base_start, length in runs:
            items.extend(self.enc(x, depth) for x in value[position:start])
            record, base_index = self.values.location(base)
            items.append(
                {
                    TAG: ":",
                    "k": self._dep(record),
                    "i": base_index,
                    "a": base_start,
                    "b": base_start + length,
                }
            )
            bases.append((base, base_start, base_start + length))
            position = start + length
        items.extend(self.enc(x, depth) for x in value[position:])
        node = {TAG: "t+", "v": items}
        from ._api import dumps_tree  # noqa: PLC0415 -- _api imports this module's users

        chain = self.values.chain_for(bases, len(dumps_tree(node)))
        if self.values.needs_whole_copy(chain):
            self._rollback(mark)
            return None
        self.open.discard(index)
        self.chains[id(value)] = chain
        self._done(value, None)
        return node

    def _rollback(self, mark: tuple[int, int, int]) -> None:
        objs_len, nodes_len, deps_len = mark
        for index in range(objs_len, len(self.objs)):
            obj = self.objs[index]
            del self.memo[id(obj)]
            self.open.discard(index)
            self.frozen_ids.discard(id(obj))
            self.chains.pop(id(obj), None)
        del self.objs[objs_len:]
        del self.new_nodes[nodes_len:]
        for record in list(self.deps)[deps_len:]:
            del self.deps[record]


class FrozenDecoder(Decoder):
    """A decoder that resolves ``@`` references and ``t+`` deltas."""

    _TAGGED: ClassVar[dict[str, str]] = {**Decoder._TAGGED, "@": "_stored", "t+": "_delta"}

    def __init__(
        self, registry: ClassRegistry, values: FrozenValues, record: str | None, deps: list[str]
    ) -> None:
        super().__init__(registry)
        self.values = values
        self.record = record
        self.deps = deps
        self.chains: dict[int, Chain] = {}

    # A record decoded again (the workflow reading a step output it just stored,
    # a replay) must give back the very objects already indexed for it: frozen
    # values are linked by identity, and a fresh copy would link to nothing.
    def _known(self, index: int, value: Any) -> Any:
        known = self.values.indexed(self.record, index)
        if known is None:
            return value
        self.objs[index] = known
        return known

    def dec_tuple(self, node: dict[str, Any], depth: int) -> tuple[Any, ...]:
        """A tuple, or the indexed tuple this record already holds at its place."""
        index = len(self.objs)
        return self._known(index, super().dec_tuple(node, depth))  # type: ignore[no-any-return]

    def dec_frozenset(self, node: dict[str, Any], depth: int) -> frozenset[Any]:
        """A frozenset, or the indexed one this record already holds at its place."""
        index = len(self.objs)
        return self._known(index, super().dec_frozenset(node, depth))  # type: ignore[no-any-return]

    def fields_object(self, node: dict[str, Any], entry: Registered, depth: int) -> Any:
        """An instance, or the indexed one this record already holds at its place."""
        index = len(self.objs)
        return self._known(index, super().fields_object(node, entry, depth))

    def _located(self, node: dict[str, Any]) -> object:
        dep, index = node.get("k"), node.get("i")
        if type(dep) is not int or not 0 <= dep < len(self.deps) or type(index) is not int:
            raise Malformed("malformed reference to a stored frozen value")
        return self.values.node(self.deps[dep], index)

    def _stored(self, node: dict[str, Any], depth: int) -> object:
        value = self._located(node)
        self.objs.append(value)
        return value

    def _delta(self, node: dict[str, Any], depth: int) -> tuple[Any, ...]:
        index = self.reserve()
        items = node.get("v")
        if type(items) is not list:
            raise Malformed("a tuple delta needs a list in 'v'")
        out: list[Any] = []
        bases: list[tuple[tuple[Any, ...], int, int]] = []
        for item in items:
            if type(item) is dict and item.get(TAG) == ":":
                base = self._located(item)
                start, stop = item.get("a"), item.get("b")
                if (
                    type(base) is not tuple
                    or type(start) is not int
                    or type(stop) is not int
                    or not 0 <= start <= stop <= len(base)
                ):
                    raise Malformed("a tuple slice outside its stored tuple")
                out.extend(base[start:stop])
                bases.append((base, start, stop))
            else:
                out.append(self.dec(item, depth))
        value = tuple(out)
        from ._api import dumps_tree  # noqa: PLC0415

        self.chains[id(value)] = self.values.chain_for(bases, len(dumps_tree(node)))
        self.objs[index] = value
        return self._known(index, value)  # type: ignore[no-any-return]
