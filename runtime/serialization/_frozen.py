"""FrozenValues: one run's index of stored frozen values, by identity.

It answers the two questions the frozen encoding needs -- "is this object stored,
and where?" and "which stored tuples share runs of elements with this one?" --
and rebuilds values from references and deltas, loading the records they depend
on (oldest first, with an explicit stack, so a chain of 1,000 deltas does not
recurse 1,000 levels).

The whole-copy rule bounds every rebuild: a tuple is written whole again once the
deltas since its last whole copy pass ``rewrite_fraction`` of its size, or after
``rewrite_changes`` deltas, so rebuilding a value costs about its own size.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from ._api import (
    NOT_PLAIN,
    dumps_tree,
    loads_body,
    loads_plain,
    plain_scalar,
    split_payload,
    wrap_errors,
)
from ._encode import Encoder, is_flat_plain, is_plain
from ._errors import SerializationError
from ._format import KIND_FROZEN, KIND_PLAIN, KIND_TAGGED, PREFIX
from ._frozen_codec import Chain, FrozenDecoder, FrozenEncoder, children_frozen
from ._leaves import ATOM_TYPES
from ._registry import ClassRegistry, default_registry
from ._store import RecordStore

__all__ = ["FrozenValues"]

_HEAD_PLAIN = PREFIX + bytes([KIND_PLAIN])
_WHOLE = Chain(size=0, delta_bytes=0, changes=0)
_MUTABLE = frozenset({list, dict, set, bytearray})
_SKIP = ATOM_TYPES | _MUTABLE  # never indexed: atoms are not objects, the rest not frozen


class FrozenValues:
    """Stores deeply frozen values once per run and refers to them afterwards.

    Use one per run.  Encode every payload of the run through it, each under its
    own record key, and tell it which records are durable through ``records``.

    Args:
        records: the run's stored records (see :class:`RecordStore`).
        registry: where to look up classes; default :func:`default_registry`.
        rewrite_fraction: write a tuple whole again once its deltas since the last
            whole copy pass this fraction of its size.
        rewrite_changes: ... or after this many deltas.
    """

    def __init__(
        self,
        records: RecordStore,
        *,
        registry: ClassRegistry | None = None,
        rewrite_fraction: float = 0.5,
        rewrite_changes: int = 1000,
    ) -> None:
        self.records = records
        self.registry = registry or default_registry()
        self.rewrite_fraction = rewrite_fraction
        self.rewrite_changes = rewrite_changes
        # (record, index) -> object; keeps every stored object alive, which is
        # what makes the id() keys below safe for the life of the run.
        self._nodes: dict[tuple[str, int], object] = {}
        self._where: dict[int, tuple[str, int]] = {}
        self._parent: dict[int, tuple[tuple[Any, ...], int]] = {}
        self._chains: dict[int, Chain] = {}
        self._sizes: dict[int, int] = {}
        self._loaded: set[str] = set()
        self._durable: set[str] = set()

    # -- encoding and decoding -----------------------------------------------

    def serialize(
        self, value: object, *, record: str | None, whole: bool = False, root: str = "value"
    ) -> bytes:
        """Encode ``value`` as record ``record`` of this run.

        Frozen parts already in a stored record are written as references, tuples
        that share runs with stored tuples as deltas (unless ``whole``).  The
        frozen parts of ``value`` become referable once ``records.stored(record)``.

        Args:
            value: the payload.
            record: the record key, unique in the run; None for bytes whose key is
                not known yet (nothing is indexed: decoding the stored record
                later indexes it).
            whole: write everything in full (run inputs, workflow results, hook
                payloads), still indexing its frozen parts for later records.
            root: how the value is named in error paths.

        Raises:
            SerializationError: as :func:`serialize`; or ``record`` was used before.
        """
        if record is not None:
            self._check_new(record)
        if is_flat_plain(value):  # a step input of JSON scalars: nothing to refer to
            if record is not None:
                self._loaded.add(record)
            return _HEAD_PLAIN + dumps_tree(value)
        scalar = plain_scalar(value)
        if scalar is not None:
            if record is not None:
                self._loaded.add(record)
            return scalar
        with wrap_errors(root):
            if is_plain(value):
                if record is not None:
                    self._loaded.add(record)
                return PREFIX + bytes([KIND_PLAIN]) + dumps_tree(value)
            encoder = FrozenEncoder(self.registry, self, whole=whole)
            tree = encoder.encode(value)
        if record is not None:
            self._index(record, encoder.new_nodes, encoder.chains)
        return _frame(list(encoder.deps), tree)

    def take_plain(self, record: str) -> None:
        """Note record ``record`` encoded as plain JSON by the caller (it refers to nothing).

        What :meth:`serialize` does for a plain value besides writing its bytes:
        the key is checked unused, then taken.

        Raises:
            SerializationError: ``record`` was used before.
        """
        if record in self._loaded:
            self._check_new(record)  # raises
        self._loaded.add(record)

    def deserialize(self, data: bytes | bytearray | memoryview, *, record: str | None) -> Any:
        """Decode record ``record``'s bytes, loading the records it refers to.

        ``record=None`` decodes bytes that are no record of the run (a recomputed
        payload that may differ from the stored one): nothing is indexed, so later
        references still resolve against the stored records only.

        Raises:
            SerializationError: the bytes are malformed, or refer to a record that
                is not stored, or to a value the record does not hold.
        """
        plain = loads_plain(data)
        if plain is not NOT_PLAIN:
            if record is not None:
                self._loaded.add(record)
            return plain
        kind, header, body = split_payload(data)
        deps = _parse_deps(header) if kind == KIND_FROZEN else []
        self._load(deps)
        with wrap_errors(""):
            tree = loads_body(body)
            if kind == KIND_PLAIN:
                if record is not None:
                    self._loaded.add(record)
                return tree
            decoder = FrozenDecoder(self.registry, self, record, deps)
            value = decoder.decode(tree)
        if record is not None and record not in self._loaded:
            self._index_decoded(record, decoder)
        return value

    def rebuild(self, record: str) -> Any:
        """Decode a stored record cold (as a fresh worker or a replay would)."""
        return self.deserialize(self._read(record), record=record)

    # -- what the codec asks -------------------------------------------------

    def known_ids(self) -> dict[int, tuple[str, int]]:
        """ids of every indexed frozen object (a container for ``in`` tests)."""
        return self._where

    def location(self, value: object) -> tuple[str, int]:
        """Where an indexed object is stored: (record, index)."""
        return self._where[id(value)]

    def stored_location(self, value: object) -> tuple[str, int] | None:
        """Where ``value`` (by identity) is stored in a durable record, or None."""
        found = self._where.get(id(value))
        if found is None or not self._is_durable(found[0]):
            return None
        return found

    def node(self, record: str, index: int) -> object:
        """The stored object at ``index`` of ``record`` (loaded before use)."""
        try:
            return self._nodes[(record, index)]
        except KeyError:
            raise SerializationError(
                f"record {record!r} holds no frozen value #{index}; the payload is "
                "corrupt or was encoded against another run's records",
                path=record,
            ) from None

    def indexed(self, record: str | None, index: int) -> object | None:
        """The object indexed at ``index`` of ``record``, or None."""
        if record is None:
            return None
        return self._nodes.get((record, index))

    def shared_runs(self, value: tuple[Any, ...]) -> list[tuple[int, tuple[Any, ...], int, int]]:
        """Runs of ``value`` that are slices of stored tuples, found by identity.

        Returns:
            ``(start in value, stored tuple, start in it, length)`` for each run.
        """
        runs: list[tuple[int, tuple[Any, ...], int, int]] = []
        parent = self._parent
        n = len(value)
        i = 0
        while i < n:
            found = parent.get(id(value[i]))
            if found is not None:
                base, j = found
                if j < len(base) and base[j] is value[i] and self.stored_location(base):
                    k = 1
                    limit = min(n - i, len(base) - j)
                    while k < limit and base[j + k] is value[i + k]:
                        k += 1
                    runs.append((i, base, j, k))
                    i += k
                    continue
            i += 1
        return runs

    def chain_of(self, value: tuple[Any, ...]) -> Chain:
        """The rebuild cost of a stored tuple (a whole copy costs only its size)."""
        chain = self._chains.get(id(value))
        if chain is not None:
            return chain
        return Chain(size=self.size_of(value), delta_bytes=0, changes=0)

    def chain_for(self, bases: list[tuple[tuple[Any, ...], int, int]], delta_bytes: int) -> Chain:
        """The chain of a tuple written as ``delta_bytes`` of delta over slices of bases.

        Args:
            bases: ``(stored tuple, start, stop)`` for each slice the delta copies.
            delta_bytes: the encoded size of the delta itself.
        """
        size = delta_bytes
        chain_bytes = delta_bytes
        changes = 1
        seen: set[int] = set()
        size_of = self.size_of
        for base, start, stop in bases:
            size += sum(size_of(item) + 1 for item in base[start:stop])
            if id(base) not in seen:
                seen.add(id(base))
                base_chain = self.chain_of(base)
                chain_bytes += base_chain.delta_bytes
                changes = max(changes, base_chain.changes + 1)
        return Chain(size=size, delta_bytes=chain_bytes, changes=changes)

    def size_of(self, value: object) -> int:
        """Bytes ``value`` takes written whole (cached for indexed objects).

        Sizes are measured per element and summed, so a tuple built from slices of
        big and small elements is sized by what it holds, not by its length.
        """
        size = self._sizes.get(id(value))
        if size is not None:
            return size
        if type(value) is tuple and id(value) in self._where:
            size = 2 + sum(self.size_of(item) + 1 for item in value)
        else:
            size = len(dumps_tree(Encoder(self.registry).encode(value)))
        if id(value) in self._where:  # indexed objects live as long as the run
            self._sizes[id(value)] = size
        return size

    def needs_whole_copy(self, chain: Chain) -> bool:
        """The whole-copy rule: too many delta bytes or too many deltas to apply."""
        return (
            chain.delta_bytes > self.rewrite_fraction * chain.size
            or chain.changes >= self.rewrite_changes
        )

    # -- bookkeeping ---------------------------------------------------------

    def _check_new(self, record: str) -> None:
        if record in self._loaded:
            raise SerializationError(
                f"record {record!r} was already encoded in this run; give every "
                "payload its own record key",
                path=record,
            )

    def _is_durable(self, record: str) -> bool:
        if record in self._durable:
            return True
        if self.records.stored(record):
            self._durable.add(record)  # stored stays stored (the protocol says so)
            return True
        return False

    def _index(
        self, record: str, nodes: list[tuple[int, object]], chains: dict[int, Chain]
    ) -> None:
        for index, obj in nodes:
            self._nodes[(record, index)] = obj
            # The first stored copy wins: it is the one later records point at.
            self._where.setdefault(id(obj), (record, index))
            if type(obj) is tuple:
                for position, item in enumerate(obj):
                    if type(item) not in ATOM_TYPES:
                        self._parent[id(item)] = (obj, position)
            chain = chains.get(id(obj))
            if chain is not None:
                self._chains[id(obj)] = chain
        self._loaded.add(record)

    def _index_decoded(self, record: str, decoder: FrozenDecoder) -> None:
        frozen: dict[int, bool] = {}
        known = (self._where,)
        nodes = [
            (index, obj)
            for index, obj in enumerate(decoder.objs)
            if type(obj) not in _SKIP
            and id(obj) not in self._where
            and self._decoded_frozen(obj, frozen, known)
        ]
        self._index(record, nodes, decoder.chains)

    # A method, not a closure calling itself: that would be a reference cycle
    # (function -> cell -> function) made at every record decoded (issue 22).
    def _decoded_frozen(
        self, obj: object, frozen: dict[int, bool], known: tuple[dict[int, tuple[str, int]]]
    ) -> bool:
        t = type(obj)
        if t in ATOM_TYPES:
            return True
        if t in _MUTABLE:  # the common payload wrapper: no registry look-up
            return False
        if isinstance(obj, enum.Enum):  # as the encoder judges it (is_frozen_in)
            entry = self.registry.entry_for_class(t)
            return entry is not None and entry.kind == "enum"
        oid = id(obj)
        if oid in self._where:  # indexed before (a reference or a slice)
            return True
        cached = frozen.get(oid)
        if cached is not None:
            return cached
        frozen[oid] = False  # a cycle is never frozen
        entry = self.registry.entry_for_class(t)
        if t is tuple or t is frozenset:
            children: list[object] = list(obj)  # type: ignore[call-overload]
        elif entry is not None and entry.kind == "fields" and entry.frozen:
            children = [getattr(obj, name) for name in entry.fields]
        else:
            return children_frozen(obj, entry, self.registry, known)
        result = all(self._decoded_frozen(child, frozen, known) for child in children)
        frozen[oid] = result
        return result

    def _read(self, record: str) -> bytes:
        try:
            return self.records.load(record)
        except KeyError:
            raise SerializationError(
                f"record {record!r} is not stored in this run; a payload may only refer "
                "to stored records",
                path=record,
            ) from None

    def _load(self, keys: list[str]) -> None:
        # Oldest first with an explicit stack: a record is decoded only once all
        # the records it refers to are, so decoding never recurses into another.
        stack = [key for key in keys if key not in self._loaded]
        waiting: set[str] = set()
        while stack:
            key = stack[-1]
            if key in self._loaded:
                stack.pop()
                continue
            data = self._read(key)
            kind, header, _ = split_payload(data)
            deps = _parse_deps(header) if kind == KIND_FROZEN else []
            missing = [dep for dep in deps if dep not in self._loaded]
            if missing:
                if key in waiting:
                    raise SerializationError(
                        f"record {key!r} refers to itself through {missing[0]!r}; the "
                        "stored records are corrupt",
                        path=key,
                    )
                waiting.add(key)
                stack.extend(missing)
                continue
            self.deserialize(data, record=key)
            stack.pop()

    def _check(self) -> None:
        """Assert the index's invariants (called by property tests)."""
        for key, obj in self._nodes.items():
            assert key[0] in self._loaded, key
            assert id(obj) in self._where, key
        for oid, key in self._where.items():
            assert id(self._nodes[key]) == oid, key
        for oid, (base, position) in self._parent.items():
            assert id(base[position]) == oid
            assert id(base) in self._where


def _frame(deps: list[str], tree: Any) -> bytes:
    if not deps:
        return PREFIX + bytes([KIND_TAGGED]) + dumps_tree(tree)
    return PREFIX + bytes([KIND_FROZEN]) + dumps_tree(deps) + b"\n" + dumps_tree(tree)


def _parse_deps(header: bytes) -> list[str]:
    try:
        deps = json.loads(header)
    except ValueError:
        deps = None
    if type(deps) is not list or not all(type(key) is str for key in deps):
        raise SerializationError(
            f"malformed record list in a frozen-value payload: {header!r:.80}", path=""
        )
    return deps
