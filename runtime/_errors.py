"""Errors of the runtime (the serialization and authoring errors live beside their code).

DurasimError
├── WorkflowSandboxError (RuntimeError)   workflow code did something only a step may do
├── ReplayDivergence                      the workflow no longer matches its log
├── WorkflowFailed                        ``Run.result()`` of a run that failed
├── RunCancelledError                     ``Run.result()`` of a run that was cancelled
├── RunNotFinished                        ``Run.result(wait=False)`` of a live run
├── HookConflictError                     the hook's token is held by another live hook
├── HookDisposedError                     awaiting a hook the workflow disposed
└── HookNotFoundError (HookNotFound)      resume_hook() of a token no live hook holds
"""

from __future__ import annotations

from durasim.worlds import DurasimError, HookNotFound

__all__ = [
    "PASSTHROUGH_ATTRIBUTE",
    "HookConflictError",
    "HookDisposedError",
    "HookNotFoundError",
    "ReplayDivergence",
    "RunCancelledError",
    "RunNotFinished",
    "WorkflowFailed",
    "WorkflowSandboxError",
]


class WorkflowSandboxError(DurasimError, RuntimeError):
    """Workflow code made a call that would not replay identically (I/O, threads, sleep)."""


class ReplayDivergence(DurasimError):
    """Replaying the workflow met a log it cannot match.

    Attributes:
        run_id: the run.
        seq: the position of the event that could not be matched (0 at the end of the log).
    """

    run_id: str
    seq: int


class WorkflowFailed(DurasimError):
    """The run ended ``failed``; ``__cause__`` is the workflow's exception, revived.

    Attributes:
        run_id: the run.
        error_code: why it failed (``USER_ERROR``, ``CORRUPTED_EVENT_LOG`` ...).
    """

    run_id: str
    error_code: str


class RunCancelledError(DurasimError):
    """The run was cancelled before it finished."""

    run_id: str


class RunNotFinished(DurasimError):
    """The run has not reached a terminal status yet."""

    run_id: str


class HookConflictError(DurasimError):
    """The hook's token is held by a live hook of another (or the same) run.

    Attributes:
        token: the token.
        conflicting_run_id: the run whose hook holds it.
    """

    token: str
    conflicting_run_id: str


class HookDisposedError(DurasimError):
    """The workflow awaited a hook it had disposed."""

    token: str


class HookNotFoundError(HookNotFound):
    """No live hook holds the token (never created, disposed, or its run ended)."""

    token: str


#: A ``BaseException`` class with this attribute set to true is not a step's or a
#: workflow's outcome but an interrupt of the host (the simulator's wall-budget
#: watchdog): it propagates through step runners and the replay loop untouched.
PASSTHROUGH_ATTRIBUTE = "durasim_passthrough"


def passes_through(error: BaseException) -> bool:
    """Whether ``error`` must propagate instead of becoming a step's or workflow's outcome."""
    return bool(getattr(type(error), PASSTHROUGH_ATTRIBUTE, False))
