"""durasim.runtime: durable workflows (this issue: serialization; more to come).

Everything that crosses a workflow/step boundary goes through
:mod:`durasim.runtime.serialization`; its public names are re-exported here.
"""

from .serialization import (
    MAX_DEPTH,
    PREFIX,
    Chain,
    ClassRegistry,
    FatalError,
    FrozenValues,
    MemoryRecordStore,
    RecordStore,
    Registered,
    RetryableError,
    RevivedError,
    SerializationError,
    default_class_id,
    default_registry,
    deserialize,
    serializable,
    serialize,
)

__all__ = [
    "MAX_DEPTH",
    "PREFIX",
    "Chain",
    "ClassRegistry",
    "FatalError",
    "FrozenValues",
    "MemoryRecordStore",
    "RecordStore",
    "Registered",
    "RetryableError",
    "RevivedError",
    "SerializationError",
    "default_class_id",
    "default_registry",
    "deserialize",
    "serializable",
    "serialize",
]
