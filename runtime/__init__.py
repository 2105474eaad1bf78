"""durasim.runtime: durable workflows.

Workflows and steps are declared with :func:`workflow` and :func:`step` (the
authoring layer, ``_authoring``); :func:`start` / :func:`run` start runs and a
:class:`Worker` serves them (the replay engine: ``_replay``, ``_orchestrator``).
Everything that crosses a workflow/step boundary goes through
:mod:`durasim.runtime.serialization`; its public names are re-exported here.
"""

from ._authoring import (
    DefinitionNotFound,
    InvalidDefinition,
    ManifestError,
    StepCaller,
    StepDef,
    StepFunction,
    WorkflowCallError,
    WorkflowDef,
    WorkflowFunction,
    build_manifest,
    find_step,
    find_workflow,
    step,
    step_definition,
    workflow,
    workflow_definition,
)
from ._cancel import CancellationToken, cancellation_token
from ._client import Run, get_run, start
from ._determinism import now
from ._errors import (
    HookConflictError,
    HookDisposedError,
    HookNotFoundError,
    ReplayDivergence,
    RunCancelledError,
    RunNotFinished,
    WorkflowFailed,
    WorkflowSandboxError,
)
from ._hooks import Hook, HookConflict, create_hook, resume_hook
from ._leases import LeaseOptionsError, LeasePolicy
from ._metadata import StepMetadata, WorkflowMetadata, get_step_metadata, get_workflow_metadata
from ._orchestrator import DeliveryReport, Limits, deliver
from ._payloads import RunPayloads, decode_payload
from ._run import DEFAULT_HOME, default_world, run
from ._streams import StreamRewriteError, Writable, get_writable, read_stream
from ._waiting import as_completed, sleep, wait
from ._waiting import route_stdlib as _route_stdlib
from ._webhooks import Webhook, WebhookRequest, create_webhook, webhook_app
from ._worker import Worker
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
from .serialization._registry import register_durasim_errors as _register_durasim_errors

__all__ = [
    "DEFAULT_HOME",
    "MAX_DEPTH",
    "PREFIX",
    "CancellationToken",
    "Chain",
    "ClassRegistry",
    "DefinitionNotFound",
    "DeliveryReport",
    "FatalError",
    "FrozenValues",
    "Hook",
    "HookConflict",
    "HookConflictError",
    "HookDisposedError",
    "HookNotFoundError",
    "InvalidDefinition",
    "LeaseOptionsError",
    "LeasePolicy",
    "Limits",
    "ManifestError",
    "MemoryRecordStore",
    "RecordStore",
    "Registered",
    "ReplayDivergence",
    "RetryableError",
    "RevivedError",
    "Run",
    "RunCancelledError",
    "RunNotFinished",
    "RunPayloads",
    "SerializationError",
    "StepCaller",
    "StepDef",
    "StepFunction",
    "StepMetadata",
    "StreamRewriteError",
    "Webhook",
    "WebhookRequest",
    "Worker",
    "WorkflowCallError",
    "WorkflowDef",
    "WorkflowFailed",
    "WorkflowFunction",
    "WorkflowMetadata",
    "WorkflowSandboxError",
    "Writable",
    "as_completed",
    "build_manifest",
    "cancellation_token",
    "create_hook",
    "create_webhook",
    "decode_payload",
    "default_class_id",
    "default_registry",
    "default_world",
    "deliver",
    "deserialize",
    "find_step",
    "find_workflow",
    "get_run",
    "get_step_metadata",
    "get_workflow_metadata",
    "get_writable",
    "now",
    "read_stream",
    "resume_hook",
    "run",
    "serializable",
    "serialize",
    "sleep",
    "start",
    "step",
    "step_definition",
    "wait",
    "webhook_app",
    "workflow",
    "workflow_definition",
]

# Inside workflows (only while workflow code runs), asyncio.wait / as_completed keep
# their arguments' order.
_route_stdlib()

# A workflow that raises one of these (WorkflowSandboxError, HookConflictError ...)
# fails with it as the cause, revived as itself, not as a RevivedError.
_register_durasim_errors(default_registry(), globals(), __all__)
