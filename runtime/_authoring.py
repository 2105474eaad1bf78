"""The authoring layer: what workflow code is written with, and what the engine reads.

* :func:`workflow` / :func:`step` declare definitions and register them by id
  (ids: :mod:`._ids`; registry: :mod:`._definitions`);
* :data:`STEP_CALLER` is where the engine plugs in while workflow code runs (a
  :class:`StepCaller`); a step called outside a workflow is a plain call;
* :func:`closure_of` / :func:`with_closure` carry a nested step's captured values;
* :func:`build_manifest` lists the definitions and serializable classes of a tree.

This module gathers the names; each lives in a small private module.
"""

from __future__ import annotations

from ._authoring_errors import (
    DefinitionNotFound,
    InvalidDefinition,
    ManifestError,
    WorkflowCallError,
)
from ._closures import closure_of, with_closure
from ._decorators import (
    STEP_CALLER,
    StepCaller,
    StepFunction,
    WorkflowFunction,
    step,
    step_definition,
    workflow,
    workflow_definition,
)
from ._definitions import StepDef, StepKind, WorkflowDef, find_step, find_workflow
from ._ids import MAX_ID_LENGTH
from ._manifest import build_manifest

__all__ = [
    "MAX_ID_LENGTH",
    "STEP_CALLER",
    "DefinitionNotFound",
    "InvalidDefinition",
    "ManifestError",
    "StepCaller",
    "StepDef",
    "StepFunction",
    "StepKind",
    "WorkflowCallError",
    "WorkflowDef",
    "WorkflowFunction",
    "build_manifest",
    "closure_of",
    "find_step",
    "find_workflow",
    "step",
    "step_definition",
    "with_closure",
    "workflow",
    "workflow_definition",
]
