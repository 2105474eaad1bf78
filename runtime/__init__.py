"""durasim.runtime: durable workflows, the workflow author's API.

Workflows and steps are declared with :func:`workflow` and :func:`step`; runs are
started with :func:`start` (or run to their end with :func:`run`) and served by a
:class:`Worker`.  Inside a workflow: :func:`sleep`, :func:`wait`,
:func:`as_completed`, :func:`now`, hooks (:func:`create_hook`,
:func:`create_webhook`), streams (:func:`get_writable`) and metadata; inside a
step: :class:`FatalError`, :class:`RetryableError`, :func:`cancellation_token`.

What drives the runtime (the per-World engine, its message vocabulary, the
definitions registry, payload decoding) is in :mod:`durasim.runtime.lowlevel`;
the value format is :mod:`durasim.runtime.serialization`.
"""

from durasim.worlds._public import publish as _publish

from ._authoring import (
    DefinitionNotFound,
    InvalidDefinition,
    ManifestError,
    StepFunction,
    WorkflowCallError,
    WorkflowFunction,
    step,
    workflow,
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
from ._fork import fork_run, resume_run
from ._hooks import Hook, HookConflict, create_hook, resume_hook
from ._leases import LeaseOptionsError, LeasePolicy
from ._metadata import StepMetadata, WorkflowMetadata, get_step_metadata, get_workflow_metadata
from ._orchestrator import DeliveryReport, Limits
from ._otel import enable_tracing
from ._patches import PatchError, deprecate_patch, patched
from ._run import DEFAULT_HOME, default_world, run
from ._streams import StreamRewriteError, Writable, get_writable, read_stream
from ._waiting import as_completed, sleep, wait
from ._waiting import route_stdlib as _route_stdlib
from ._webhooks import Webhook, WebhookRequest, create_webhook, webhook_app
from ._worker import Worker
from .serialization import (
    FatalError,
    RetryableError,
    RevivedError,
    SerializationError,
    serializable,
)
from .serialization import default_registry as _default_registry
from .serialization._registry import register_durasim_errors as _register_durasim_errors

__all__ = [
    "DEFAULT_HOME",
    "CancellationToken",
    "DefinitionNotFound",
    "DeliveryReport",
    "FatalError",
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
    "PatchError",
    "ReplayDivergence",
    "RetryableError",
    "RevivedError",
    "Run",
    "RunCancelledError",
    "RunNotFinished",
    "SerializationError",
    "StepFunction",
    "StepMetadata",
    "StreamRewriteError",
    "Webhook",
    "WebhookRequest",
    "Worker",
    "WorkflowCallError",
    "WorkflowFailed",
    "WorkflowFunction",
    "WorkflowMetadata",
    "WorkflowSandboxError",
    "Writable",
    "as_completed",
    "cancellation_token",
    "create_hook",
    "create_webhook",
    "default_world",
    "deprecate_patch",
    "enable_tracing",
    "fork_run",
    "get_run",
    "get_step_metadata",
    "get_workflow_metadata",
    "get_writable",
    "now",
    "patched",
    "read_stream",
    "resume_hook",
    "resume_run",
    "run",
    "serializable",
    "sleep",
    "start",
    "step",
    "wait",
    "webhook_app",
    "workflow",
]

_publish(__name__, globals(), __all__)

# Inside workflows (only while workflow code runs), asyncio.wait / as_completed keep
# their arguments' order.
_route_stdlib()

# A workflow that raises one of these (WorkflowSandboxError, HookConflictError ...)
# fails with it as the cause, revived as itself, not as a RevivedError.
_register_durasim_errors(_default_registry(), globals(), __all__)
