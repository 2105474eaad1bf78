"""Errors of the authoring layer: decorators, ids, the definition registry, the manifest.

Branch under the root in ``durasim.worlds``::

    DurasimError
    ├── InvalidDefinition (TypeError)        a @workflow / @step is written wrongly
    ├── WorkflowCallError (TypeError)        a workflow function was called directly
    ├── DefinitionNotFound (LookupError)     no workflow / step with this id in the process
    └── ManifestError (ImportError)          ``durasim manifest`` could not import a module
"""

from __future__ import annotations

from durasim.worlds import DurasimError

__all__ = ["DefinitionNotFound", "InvalidDefinition", "ManifestError", "WorkflowCallError"]


class InvalidDefinition(DurasimError, TypeError):
    """A workflow or step definition breaks a rule; the message names it and the fix.

    Raised when the decorator runs (or, for a step method whose class is not yet
    serializable, at the latest when the step is first called or looked up).

    Attributes:
        function: the qualified name of the offending function (when known).
    """

    function: str


class WorkflowCallError(DurasimError, TypeError):
    """A ``@workflow`` function was called like a plain function.

    Attributes:
        workflow_id: the workflow's id.
    """

    workflow_id: str


class DefinitionNotFound(DurasimError, LookupError):
    """No workflow or step is registered under the id in this process.

    Attributes:
        definition_id: the id looked up.
    """

    definition_id: str


class ManifestError(DurasimError, ImportError):
    """Building a manifest failed: the path is missing or a module did not import.

    Attributes:
        path: the file or folder given (or the file of the failing module).
        module: the module that failed to import ("" when the path is missing).
    """

    path: str
    module: str
