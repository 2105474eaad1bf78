"""durasim.runtime.serialization: every value that crosses a step boundary.

:func:`serialize` / :func:`deserialize` turn a value into self-describing bytes
(``b"dj1:"`` + tagged JSON) and back, keeping types, shared references and
cycles.  :func:`serializable` registers custom classes.  :class:`FrozenValues`
stores deeply frozen values once per run and refers to them (or to their change)
afterwards.  docs/serialization.md describes the format and the decisions.
"""

from durasim.worlds._public import publish as _publish

from ._api import deserialize, serialize, without_tracebacks
from ._errors import FatalError, RetryableError, RevivedError, SerializationError
from ._format import MAX_DEPTH, PREFIX
from ._frozen import FrozenValues
from ._frozen_codec import Chain
from ._registry import ClassRegistry, Registered, default_class_id, default_registry, serializable
from ._store import MemoryRecordStore, RecordStore
from ._tracebacks import MAX_TRACEBACK_CHARS, format_error

__all__ = [
    "MAX_DEPTH",
    "MAX_TRACEBACK_CHARS",
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
    "format_error",
    "serializable",
    "serialize",
    "without_tracebacks",
]

_publish(__name__, globals(), __all__)
