"""One run's payloads: frozen values stored once, any payload decoded from the log.

A chat history passed to a step on every turn would be stored again by every
step: O(n²) bytes.  So a run's payloads are the *records* of a
:class:`FrozenValues` (docs/serialization.md): a step input refers to frozen
values the log already holds -- in an earlier step's input or result, a hook
payload, the run's input -- and a tuple made from a stored one is written as a
delta.  Record keys come from the log itself (docs/protocol.md §2.1), so any
process decodes any payload from the log alone:

* ``@<seq>``: the payload of the event at that position (``run_created.input``,
  ``step_completed.result``, ``hook_received.payload``);
* ``<correlation id>``: a step's input (``step_created.input``), which is
  encoded before its position is known.

Each run has two indexes, for two jobs:

* the *writer*, owned by the run's :class:`Replay`, encodes step inputs.  Its
  bytes must be the same in every replay of the run (the first execution, a
  cold replay, a kept replay continued, a run-ahead), so "stored" means
  "delivered to this replay": a function of the log prefix the workflow has
  consumed, like every other input of workflow code.  An outcome delivered
  ahead of its commit (run-ahead) counts too: what refers to it is committed in
  the same atomic batch, after it, or not at all (the replay is then dropped).
  A step input counts as stored only if the log holds the very bytes this
  replay computed; if it holds others (a set without a canonical order), this
  replay's numbering of it is not the log's, so nothing may point into it.
* the *reader* decodes payloads for step bodies and tools from recorded bytes
  only, loading the records they refer to on demand, and encodes step results:
  a result may refer to the step's own input and the records it refers to (a
  step that returns the history it was given plus a reply writes a delta).
  Nothing is indexed under a result's key while it is encoded (its position is
  not known yet); whoever decodes the stored result indexes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from durasim.worlds import Event, EventType, Types

from .serialization import PREFIX, ClassRegistry, FrozenValues, SerializationError, deserialize
from .serialization._api import NOT_PLAIN, loads_plain, plain_call, plain_scalar

__all__ = [
    "RECORD_TYPES",
    "RUN_INPUT_RECORD",
    "LogRecords",
    "RunPayloads",
    "decode_payload",
    "refers_to_records",
]


#: The payload field of each event whose payload is a record ``@<seq>``.
_RECORD_FIELDS: dict[EventType, str] = {
    Types.RUN_CREATED: "input",
    Types.STEP_COMPLETED: "result",
    Types.HOOK_RECEIVED: "payload",
}
#: The events that carry a record (all others :meth:`RunPayloads.note` ignores).
RECORD_TYPES = frozenset({Types.STEP_CREATED, *_RECORD_FIELDS})
#: ``run_created`` is the first event of every log (docs/protocol.md §4.1).
RUN_INPUT_RECORD = "@1"
#: The kind byte ``f``: a payload that refers to other records (docs/serialization.md).
_FROZEN_HEAD = PREFIX + b"f"
#: How many encoded calls :meth:`RunPayloads.plain_call_of` may hold (steps in flight).
_CALLS_KEPT = 256
#: The kind byte ``j``: plain JSON, which holds no frozen container.
_PLAIN_HEAD = PREFIX + b"j"


def refers_to_records(data: bytes) -> bool:
    """Whether ``data`` refers to other payloads of its run (decode it with the run's log)."""
    return data[: len(_FROZEN_HEAD)] == _FROZEN_HEAD


class LogRecords:
    """The records of one run in the log prefix seen so far (a ``RecordStore``)."""

    def __init__(self) -> None:
        self._bytes: dict[str, bytes] = {}

    def add(self, event: Event) -> None:
        """Take the record ``event`` carries, if any (events in log order)."""
        if event.type is Types.STEP_CREATED:
            key = event.correlation_id or ""
            data = event.data.get("input")
            if not key or key.startswith("@"):
                return  # not a key the runtime writes: nothing may refer to it
        else:
            field = _RECORD_FIELDS.get(event.type)
            if field is None:
                return
            key = f"@{event.seq}"
            data = event.data.get(field)
        if type(data) is bytes:
            self._bytes.setdefault(key, data)  # a repeated creation is refused: first wins

    def add_step_input(self, correlation_id: str, data: bytes) -> None:
        """Take one step's recorded input (a worker that holds only that step)."""
        self._bytes.setdefault(correlation_id, data)

    def get(self, key: str) -> bytes | None:
        """The bytes of record ``key``, or None."""
        return self._bytes.get(key)

    def stored(self, key: str) -> bool:
        """Whether the log prefix seen holds record ``key``."""
        return key in self._bytes

    def load(self, key: str) -> bytes:
        """The bytes of record ``key``; ``KeyError`` if the prefix seen has none."""
        return self._bytes[key]


class _Referable:
    """The writer's records: those seen, minus step inputs it computed otherwise."""

    def __init__(self, records: LogRecords, refused: set[str]) -> None:
        self.records = records
        self.refused = refused

    def stored(self, key: str) -> bool:
        return key not in self.refused and self.records.stored(key)

    def load(self, key: str) -> bytes:
        return self.records.load(key)


class RunPayloads:
    """The payload codec of one run (see the module docstring).

    A :class:`Replay` owns one and feeds it every event it consumes
    (:meth:`note`); a process without a replay (a queued step's worker, a tool)
    builds one from the log with :meth:`from_log`.

    Args:
        registry: where to look up classes; default ``default_registry()``.
    """

    def __init__(self, *, registry: ClassRegistry | None = None) -> None:
        self.records = LogRecords()
        self._registry = registry
        self._refused: set[str] = set()
        self._computed: dict[str, bytes] = {}
        self._indexed: set[str] = set()  # records the writer holds (encoded or decoded)
        #: ``(data, value)``: the last step result of JSON scalars encoded in this process
        #: for this run (``data`` is ``plain_scalar(value)``), set by the step's attempt.
        #: :meth:`decode_record` of those very bytes (the same object) gives ``value``
        #: without decoding it: what ``loads_plain`` would give (an equal scalar of the
        #: same type), once; any other bytes are decoded.
        self.plain_result: tuple[bytes, object] | None = None
        self._writer = FrozenValues(_Referable(self.records, self._refused), registry=registry)
        self._reader: FrozenValues | None = None
        #: correlation id -> (input bytes, args, kwargs) of plain calls encoded here.
        self._calls: dict[str, tuple[bytes, tuple[Any, ...], dict[str, Any]]] = {}

    @classmethod
    def from_log(
        cls, events: Iterable[Event], *, registry: ClassRegistry | None = None
    ) -> RunPayloads:
        """A reader of one run's payloads, from its log (or any prefix holding them)."""
        payloads = cls(registry=registry)
        for event in events:
            payloads.records.add(event)
        return payloads

    # -- the replay's side: deterministic encoding ----------------------------------

    def note(self, event: Event) -> None:
        """Take the next event of the log the replay consumes (before it is handled)."""
        self.records.add(event)
        if event.type is Types.STEP_CREATED:
            key = event.correlation_id or ""
            computed = self._computed.pop(key, None)
            if computed is not None and computed != event.data.get("input"):
                self._refused.add(key)

    def note_step_input(self, key: str, data: object) -> None:
        """:meth:`note` of a ``step_created`` event: its correlation id, its ``input``."""
        if key and not key.startswith("@") and type(data) is bytes:
            self.records._bytes.setdefault(key, data)  # a repeated creation is refused
        computed = self._computed.pop(key, None)
        if computed is not None and computed != data:
            self._refused.add(key)

    def note_record(self, key: str, data: object) -> None:
        """:meth:`note` of an event whose payload is record ``key`` (``@<seq>``)."""
        if type(data) is bytes:
            self.records._bytes.setdefault(key, data)

    def encode_step_input(self, correlation_id: str, value: object, *, root: str) -> bytes:
        """Encode a step's input, referring to the stored frozen values it holds."""
        data = self._writer.serialize(value, record=correlation_id, root=root)
        self._computed[correlation_id] = data
        self._indexed.add(correlation_id)
        return data

    def encode_step_call(
        self,
        correlation_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        closure: dict[str, Any],
        *,
        step_name: str,
    ) -> bytes:
        """Encode a step call's input: :meth:`encode_step_input` of its three parts.

        ``step_name`` names the input in error paths (``<name>(...)``).

        A call of JSON scalars with no closure (the commonest) is written by
        :func:`~.serialization._api.plain_call` (the same bytes), the rest as before;
        such a call's arguments are kept for :meth:`plain_call_of` (``kwargs`` is
        the call's own dict: the caller passes it on and keeps no hold of it).
        """
        # (An empty closure that is the kwargs dict itself is a shared reference.)
        data = None if closure or kwargs is closure else plain_call(args, kwargs)
        if data is None:
            value = {"args": list(args), "kwargs": kwargs, "closure": closure}
            return self.encode_step_input(correlation_id, value, root=f"{step_name}(...)")
        # FrozenValues.take_plain, without its frame: the key checked unused, then taken.
        writer = self._writer
        loaded = writer._loaded
        if correlation_id in loaded:
            writer._check_new(correlation_id)  # raises
        loaded.add(correlation_id)
        self._computed[correlation_id] = data
        self._indexed.add(correlation_id)
        if len(self._calls) < _CALLS_KEPT:
            self._calls[correlation_id] = (data, args, kwargs)
        return data

    def plain_call_of(
        self, correlation_id: str, data: bytes
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments of a call :meth:`encode_step_call` wrote as ``data``, once; else None.

        What decoding ``data`` gives (its arguments are JSON scalars, which
        round-trip exactly), without decoding it: for the step body's first
        attempt in this process.  Copy the dict before handing it out.
        """
        call = self.take_call(correlation_id, data)
        if call is None:
            return None
        return call[1], call[2]

    def take_call(
        self, correlation_id: str, data: bytes
    ) -> tuple[bytes, tuple[Any, ...], dict[str, Any]] | None:
        """:meth:`plain_call_of` as kept: ``(data, args, kwargs)``, once; else None.

        ``kwargs`` is the call's own dict: pass it on only unpacked (``**kwargs``).
        """
        call = self._calls.pop(correlation_id, None)
        if call is None or call[0] != data:
            return None
        return call

    def decode_computed(self, data: bytes) -> Any:
        """Decode bytes this replay's encoder made (its numbering), indexing nothing.

        For comparing a step input computed now with the recorded one: where the
        two encodings differ, references mean what this replay meant by them.
        """
        if data[: len(_PLAIN_HEAD)] == _PLAIN_HEAD or not refers_to_records(data):
            return deserialize(data, registry=self._registry)
        return self._writer.deserialize(data, record=None)

    def decode_run_input(self, data: bytes) -> Any:
        """Decode the run's input for the workflow, indexing its frozen parts."""
        self._indexed.add(RUN_INPUT_RECORD)
        return self._writer.deserialize(data, record=RUN_INPUT_RECORD)

    def decode_event(self, event: Event) -> Any:
        """Decode the record an event carries for the workflow, indexing its frozen parts.

        Only for events that carry a record (a step's result, a hook payload).
        """
        return self.decode_record(f"@{event.seq}", event.data[_RECORD_FIELDS[event.type]])

    def decode_record(self, key: str, data: bytes) -> Any:
        """:meth:`decode_event` of record ``key`` (``@<seq>``) whose bytes are ``data``."""
        if self._refused and self._through_refused(data):
            # This replay's numbering of a refused input is not the log's: read
            # the payload from the recorded bytes; nothing may refer to it either.
            self._refused.add(key)
            return self.decode(data)
        self._indexed.add(key)
        # A plain record (a step's scalar result, the commonest) refers to nothing:
        # FrozenValues.deserialize's first branch, without its frame (the key taken).
        kept = self.plain_result
        if kept is not None and kept[0] is data:  # the result this process just encoded
            self.plain_result = None
            value = kept[1]
        else:
            value = loads_plain(data)
        if value is not NOT_PLAIN:
            self._writer._loaded.add(key)
            return value
        return self._writer.deserialize(data, record=key)

    def _through_refused(self, data: bytes) -> bool:
        """Whether decoding ``data`` would resolve references through a refused record."""
        if not self._refused or not refers_to_records(data):
            return False
        # Records the writer holds were checked when it took them; the others
        # it would load from the log, so their own references count too.
        stack, seen = _deps(data), set()
        while stack:
            key = stack.pop()
            if key in self._refused:
                return True
            if key in seen or key in self._indexed:
                continue
            seen.add(key)
            nested = self.records.get(key)
            if nested is not None and refers_to_records(nested):
                stack += _deps(nested)
        return False

    # -- the reader's side: recorded bytes ----------------------------------------------

    def decode(self, data: bytes, *, record: str | None = None) -> Any:
        """Decode a payload of this run (a step input: ``record`` = its correlation id).

        A payload that refers to other records loads them from the log seen.  A
        step input whose bytes are the recorded ones is indexed under its key, so
        the step's result (:meth:`encode_result`) can refer to it; anything else
        that refers to no record decodes as :func:`deserialize` does.

        Raises:
            SerializationError: the bytes are malformed or refer to a record the
                log seen does not hold.
        """
        if data[: len(_PLAIN_HEAD)] == _PLAIN_HEAD:
            value = loads_plain(data)  # nothing frozen to index
            return deserialize(data, registry=self._registry) if value is NOT_PLAIN else value
        # Index under the key only the recorded bytes themselves: later records
        # (and the step's result) refer to the log's numbering of them.
        if record is not None and self.records.get(record) != data:
            record = None
        if record is None and not refers_to_records(data):
            return deserialize(data, registry=self._registry)
        return self._reading().deserialize(data, record=record)

    def encode_result(self, value: object, *, root: str) -> bytes:
        """Encode a step's result, referring to frozen values of its input and the log.

        Call it after decoding the step's input with :meth:`decode` (which
        indexes it): a result made from the input is then written as references
        or a delta.
        """
        scalar = plain_scalar(value)  # refers to nothing: no reader needed
        if scalar is not None:
            return scalar
        return self._reading().serialize(value, record=None, root=root)

    def _reading(self) -> FrozenValues:
        if self._reader is None:
            self._reader = FrozenValues(self.records, registry=self._registry)
        return self._reader


def _deps(data: bytes) -> list[str]:
    header = data[len(_FROZEN_HEAD) :].partition(b"\n")[0]
    try:
        deps = json.loads(header)
    except ValueError:
        return []  # malformed: decoding it reports the error
    return [key for key in deps if type(key) is str] if type(deps) is list else []


def decode_payload(
    data: bytes, payloads: RunPayloads | None = None, *, record: str | None = None
) -> Any:
    """Decode one payload of a run: a step input (``record``: its correlation id) or any other.

    ``payloads`` is the run's :class:`RunPayloads` (a replay's, or one built with
    :meth:`RunPayloads.from_log`); without it, a payload that refers to other
    records of its run cannot be decoded.

    Raises:
        SerializationError: the bytes cannot be decoded (the message says why).
    """
    if payloads is not None:
        return payloads.decode(data, record=record)
    if refers_to_records(data):
        raise SerializationError(
            "the payload refers to other payloads of its run; decode it with the run's "
            "log (RunPayloads.from_log(events).decode(data))",
            path="",
        )
    return deserialize(data)
