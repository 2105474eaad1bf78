"""The record store interface: what "already stored in this run" means.

Serialization never decides what is durable.  The caller (the runtime, wiring this
to the log) tells it through a :class:`RecordStore`: a payload is a *record* with
a key the caller chooses (say ``"step:charge#2:output"``), and a record is stored
once the caller has made its bytes durable.  Only stored records may be referred
to, so a payload never points at bytes a crash could lose.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import attrs

__all__ = ["MemoryRecordStore", "RecordStore"]


@runtime_checkable
class RecordStore(Protocol):
    """The records of one run that are durably stored.

    Contract:

    * ``stored(key)`` is True once the record's bytes are durable, and stays True
      for the rest of the run; before that, nothing may refer to the record.
    * ``load(key)`` returns exactly the bytes that were stored under ``key``
      (used to rebuild a value cold, e.g. on another worker or in a replay), and
      raises ``KeyError`` for a record that is not stored.
    """

    def stored(self, key: str) -> bool:
        """Whether the record ``key`` is durably stored in this run."""
        ...

    def load(self, key: str) -> bytes:
        """The bytes stored under ``key``; ``KeyError`` if none."""
        ...


@attrs.define(eq=False)
class MemoryRecordStore:
    """A :class:`RecordStore` in a dict, for tests and single-process use.

    Attributes:
        records: key to stored bytes, in the order they were put.
    """

    records: dict[str, bytes] = attrs.field(factory=dict)

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``; a record is written once."""
        if key in self.records:
            raise KeyError(f"record {key!r} is already stored; records are written once")
        self.records[key] = data

    def stored(self, key: str) -> bool:
        """Whether ``key`` was put."""
        return key in self.records

    def load(self, key: str) -> bytes:
        """The bytes put under ``key``."""
        return self.records[key]

    def total_bytes(self) -> int:
        """Sum of the sizes of all stored records."""
        return sum(len(data) for data in self.records.values())
