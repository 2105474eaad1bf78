"""durasim.runtime.lowlevel: the engine's internals, for the layers that drive it.

The workflow author needs only :mod:`durasim.runtime`.  What is here is for
drivers of the runtime (the simulator, the checkers, tools, custom workers):

* the per-World :class:`Engine` (:func:`engine_for`), whose :meth:`Engine.deliver`
  runs one orchestrator delivery and :meth:`Engine.handle` one queue message;
* its message vocabulary (:class:`WakeMessage`, :class:`StepMessage`,
  :func:`parse_message`, the queue names), how a delivery ends
  (:class:`DeliveryStatus`) and what becomes of its message (:class:`Settlement`,
  :func:`settle`, :func:`backoff`);
* the definitions registry (:class:`WorkflowDef`, :class:`StepDef`,
  :func:`find_workflow`, :func:`find_step`, :func:`build_manifest`) and the hook
  the engine plugs into workflow code (:class:`StepCaller`);
* a run's payloads read back (:class:`RunPayloads`, :func:`decode_payload`);
* the :class:`LeaseKeeper` a worker's heartbeat drives in real time (the simulator
  drives it in virtual time).

Packages above the runtime import these names from here, never from a private
``durasim.runtime._module`` (tests/test_private_imports.py checks it).
"""

from durasim.worlds._public import publish as _publish

from ._authoring import (
    StepCaller,
    StepDef,
    WorkflowDef,
    build_manifest,
    find_step,
    find_workflow,
    step_definition,
    workflow_definition,
)
from ._determinism import wall_monotonic
from ._engine import KEPT_REPLAYS, Engine, Handled, engine_for
from ._leases import DEFAULT_LEASE_SECONDS, DEFAULT_RENEW_EVERY, LeaseKeeper
from ._metadata import STEP_METADATA
from ._modules import importable_name
from ._otel import TracingUnavailable, disable_tracing, tracing_enabled
from ._patches import PATCH_ATTR, PATCH_PREFIX
from ._payloads import RunPayloads, decode_payload
from ._queued import run_queued_step
from ._replay import Replay
from ._seeds import seed_source
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
from ._versions import (
    DEPLOYMENT_ATTR,
    DEPLOYMENT_ENV,
    DeploymentError,
    VersionPolicy,
    change_code,
    check_deployment_id,
    deployment_of,
    pinning,
    run_deployment,
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
from ._webhooks import webhook_path
from ._worker import apply_settlement

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_RENEW_EVERY",
    "DEPLOYMENT_ATTR",
    "DEPLOYMENT_ENV",
    "KEPT_REPLAYS",
    "MAX_BACKOFF",
    "ORCHESTRATOR_QUEUE",
    "PATCH_ATTR",
    "PATCH_PREFIX",
    "QUEUE_PREFIX",
    "REQUEUE_DELAY",
    "STEP_METADATA",
    "STEP_QUEUE",
    "DeliveryStatus",
    "DeploymentError",
    "Engine",
    "Handled",
    "LeaseKeeper",
    "MalformedMessage",
    "Replay",
    "RunPayloads",
    "SettleAction",
    "Settlement",
    "StepCaller",
    "StepDef",
    "StepMessage",
    "TracingUnavailable",
    "VersionPolicy",
    "WakeMessage",
    "WorkflowDef",
    "apply_settlement",
    "backoff",
    "build_manifest",
    "change_code",
    "check_deployment_id",
    "decode_payload",
    "deployment_of",
    "disable_tracing",
    "engine_for",
    "enqueue_wake",
    "find_step",
    "find_workflow",
    "importable_name",
    "parse_message",
    "pinning",
    "run_deployment",
    "run_queued_step",
    "seed_source",
    "settle",
    "settle_step",
    "step_definition",
    "tracing_enabled",
    "wake_message",
    "wall_monotonic",
    "webhook_path",
    "workflow_definition",
]

_publish(__name__, globals(), __all__)
