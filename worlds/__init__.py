"""durasim.worlds: the log contract and the Worlds that keep it.

A World stores append-only, position-numbered per-run event logs, the entities
folded from them (runs, steps, hooks, waits), a message queue and chunk streams.
docs/protocol.md is the normative contract; :mod:`durasim.worlds` gives:

* the contract as protocols (:class:`World` and its facets), value types and errors;
* the reference fold and guards every World reuses (:func:`fold_log`, :func:`plan_write`),
  and the input checks they run before any I/O (:func:`check_request`, :func:`check_run_id`,
  :func:`check_limit`, :func:`check_text` for every string, ... docs/writing-a-world.md);
* :class:`MemoryWorld` (the reference) and :class:`SQLiteWorld` (the embedded default);
* the one factory shape everything that builds Worlds takes,
  ``make(setup: WorldSetup) -> World`` (:class:`WorldSetup`, :func:`check_factory`);
* :class:`PostgresWorld` (many workers on many machines), imported on first use
  because it needs the optional ``psycopg`` (``pip install 'durasim[postgres]'``).
"""

from typing import TYPE_CHECKING, Any

from ._checks import (
    MAX_CLOCK_SKEW,
    MAX_PAGE,
    check_chunks,
    check_delay,
    check_limit,
    check_message,
    check_queue_name,
    check_queue_prefix,
    check_request,
    clamp_start,
    decode_run_cursor,
    encode_run_cursor,
    event_time,
    normalize_statuses,
    run_sort_key,
)
from ._entities import (
    BatchResult,
    Capabilities,
    Chunk,
    ChunkPage,
    Delivery,
    EventPage,
    EventResult,
    HookRecord,
    HookStatus,
    Message,
    RunPage,
    RunRecord,
    RunStatus,
    Snapshot,
    StepRecord,
    StepStatus,
    StreamInfo,
    WaitRecord,
    WaitStatus,
)
from ._errors import (
    CorruptedLog,
    DurasimError,
    EntityConflict,
    EventNotFound,
    HookNotFound,
    InBandSuperseded,
    InvalidRequest,
    LeaseLost,
    RunExpired,
    RunNotFound,
    StaleView,
    StepNotFound,
    StorageFull,
    StreamClosed,
    TooEarly,
    WaitNotFound,
    WorldError,
    WorldFileChanged,
)
from ._events import (
    RUN_TERMINAL_TYPES,
    Event,
    EventRequest,
    EventType,
    Payload,
    Types,
    check_correlation_id,
    check_run_id,
    check_stream_name,
    validate_request,
)
from ._fold import FoldedRun, fold_log
from ._guards import BATCH_FORBIDDEN, Plan, StateView, plan_batch, plan_write
from ._memory import MemoryWorld
from ._protocol import (
    EventsFacet,
    HooksFacet,
    QueueFacet,
    RunsFacet,
    StepsFacet,
    StreamsFacet,
    WaitsFacet,
    World,
)
from ._setup import FactoryError, WorldFactory, WorldSetup, check_factory
from ._sqlite import SQLiteWorld
from ._text import STRING_LIMITS, check_text, check_token
from ._time import (
    EPOCH,
    Clock,
    CountingIds,
    FixedClock,
    IdSource,
    RandomIds,
    SystemClock,
    housekeeping,
)
from ._vercel import NotExpressible, VercelFactory, VercelWorld, vercel_factory
from ._vercel_host import InstalledPackage, NodeMissing, install_vercel_package

if TYPE_CHECKING:
    from ._postgres import PostgresWorld

from ._public import publish as _publish

__all__ = [
    "BATCH_FORBIDDEN",
    "EPOCH",
    "MAX_CLOCK_SKEW",
    "MAX_PAGE",
    "RUN_TERMINAL_TYPES",
    "STRING_LIMITS",
    "BatchResult",
    "Capabilities",
    "Chunk",
    "ChunkPage",
    "Clock",
    "CorruptedLog",
    "CountingIds",
    "Delivery",
    "DurasimError",
    "EntityConflict",
    "Event",
    "EventNotFound",
    "EventPage",
    "EventRequest",
    "EventResult",
    "EventType",
    "EventsFacet",
    "FactoryError",
    "FixedClock",
    "FoldedRun",
    "HookNotFound",
    "HookRecord",
    "HookStatus",
    "HooksFacet",
    "IdSource",
    "InBandSuperseded",
    "InstalledPackage",
    "InvalidRequest",
    "LeaseLost",
    "MemoryWorld",
    "Message",
    "NodeMissing",
    "NotExpressible",
    "Payload",
    "Plan",
    "PostgresWorld",
    "QueueFacet",
    "RandomIds",
    "RunExpired",
    "RunNotFound",
    "RunPage",
    "RunRecord",
    "RunStatus",
    "RunsFacet",
    "SQLiteWorld",
    "Snapshot",
    "StaleView",
    "StateView",
    "StepNotFound",
    "StepRecord",
    "StepStatus",
    "StepsFacet",
    "StorageFull",
    "StreamClosed",
    "StreamInfo",
    "StreamsFacet",
    "SystemClock",
    "TooEarly",
    "Types",
    "VercelFactory",
    "VercelWorld",
    "WaitNotFound",
    "WaitRecord",
    "WaitStatus",
    "WaitsFacet",
    "World",
    "WorldError",
    "WorldFactory",
    "WorldFileChanged",
    "WorldSetup",
    "check_chunks",
    "check_correlation_id",
    "check_delay",
    "check_factory",
    "check_limit",
    "check_message",
    "check_queue_name",
    "check_queue_prefix",
    "check_request",
    "check_run_id",
    "check_stream_name",
    "check_text",
    "check_token",
    "clamp_start",
    "decode_run_cursor",
    "encode_run_cursor",
    "event_time",
    "fold_log",
    "housekeeping",
    "install_vercel_package",
    "normalize_statuses",
    "plan_batch",
    "plan_write",
    "run_sort_key",
    "validate_request",
    "vercel_factory",
]

_publish(__name__, globals(), __all__)


if not TYPE_CHECKING:  # static tools see PostgresWorld above, and no catch-all attribute

    def __getattr__(name: str) -> Any:
        """Import :class:`PostgresWorld` on first use: psycopg is an optional dependency."""
        if name == "PostgresWorld":
            try:
                from ._postgres import PostgresWorld  # noqa: PLC0415 -- psycopg is optional
            except ImportError as exc:
                raise ImportError(
                    f"PostgresWorld needs psycopg 3 and psycopg-pool ({exc}): "
                    "pip install 'durasim[postgres]'"
                ) from exc
            _publish(__name__, {name: PostgresWorld}, [name])
            return PostgresWorld
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
