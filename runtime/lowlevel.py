"""durasim.runtime.lowlevel: the engine's internals, for the layers that drive it.

The workflow author needs only :mod:`durasim.runtime`.  What is here is for
drivers of the runtime (the simulator, the checkers, custom workers): the
per-World :class:`Engine`, its message vocabulary (:class:`WakeMessage`,
:func:`parse_message`), how a delivery ends (:class:`DeliveryStatus`) and what
becomes of its message (:class:`Settlement`, :func:`settle`, :func:`backoff`), and
the :class:`LeaseKeeper` a worker's heartbeat drives in real time (the simulator
drives it in virtual time).  Packages above the runtime import these names from
here, never from a private ``durasim.runtime._module`` (tests/test_private_imports.py
checks it).
"""

from ._determinism import wall_monotonic
from ._engine import KEPT_REPLAYS, Engine, Handled, engine_for
from ._leases import DEFAULT_LEASE_SECONDS, DEFAULT_RENEW_EVERY, LeaseKeeper
from ._metadata import STEP_METADATA, StepMetadata, WorkflowMetadata
from ._modules import importable_name
from ._orchestrator import forget_kept_replays, load_log
from ._queued import run_queued_step
from ._settlement import (
    MAX_BACKOFF,
    REQUEUE_DELAY,
    DeliveryStatus,
    SettleAction,
    Settlement,
    backoff,
    settle,
    settle_step,
)
from ._wake import (
    ORCHESTRATOR_QUEUE,
    QUEUE_PREFIX,
    STEP_QUEUE,
    MalformedMessage,
    StepMessage,
    WakeMessage,
    enqueue_wake,
    parse_message,
    wake_message,
)
from ._worker import apply_settlement

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_RENEW_EVERY",
    "KEPT_REPLAYS",
    "MAX_BACKOFF",
    "ORCHESTRATOR_QUEUE",
    "QUEUE_PREFIX",
    "REQUEUE_DELAY",
    "STEP_METADATA",
    "STEP_QUEUE",
    "DeliveryStatus",
    "Engine",
    "Handled",
    "LeaseKeeper",
    "MalformedMessage",
    "SettleAction",
    "Settlement",
    "StepMessage",
    "StepMetadata",
    "WakeMessage",
    "WorkflowMetadata",
    "apply_settlement",
    "backoff",
    "engine_for",
    "enqueue_wake",
    "forget_kept_replays",
    "importable_name",
    "load_log",
    "parse_message",
    "run_queued_step",
    "settle",
    "settle_step",
    "wake_message",
    "wall_monotonic",
]
