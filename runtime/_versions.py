"""Runs pinned to the code version that started them (deployment ids).

A run records the *deployment id* of the code that started it
(``run_created.deployment_id``, protocol.md §2): ``DURASIM_DEPLOYMENT`` when the
process sets it (an explicit version: a release tag, a git sha), else one
derived from the source of the module that defines the workflow
(``src-<12 hex of its SHA-256>``), so an edit of that file is a new version.

Its messages go to that version's queues (``durasim@<id>/run``,
``durasim@<id>/step``); a :class:`~durasim.runtime.Worker` claims from the
queues of the versions it serves and from the unversioned ones
(``durasim.run``, ``durasim.step``: runs started before versioning, and wake-ups
sent by code that does not know a run's version, such as ``resume_hook``).  A
worker that meets a run of another version there leaves it alone: it logs the
skip and moves the message to that version's queue.  ``durasim migrate RUN --to
VERSION`` moves a run to another version after replaying its log on that
version's code (an ``attr_set`` of ``durasim.deployment``: the run's version is
that attribute when set, else ``deployment_id``).  See docs/versioning.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from durasim.worlds import DurasimError, Event, EventType, RunRecord

from ._decorators import workflow_definition
from ._definitions import _WORKFLOWS, WorkflowDef, all_workflows
from ._wake import pinned_queue

__all__ = [
    "DEPLOYMENT_ATTR",
    "DEPLOYMENT_ENV",
    "DeploymentError",
    "VersionPolicy",
    "change_code",
    "check_deployment_id",
    "deployment_of",
    "pinned_queue",
    "pinning",
    "run_deployment",
    "start_deployment",
]

DEPLOYMENT_ENV = "DURASIM_DEPLOYMENT"
#: The run attribute ``durasim migrate`` sets: the run's version from then on.
DEPLOYMENT_ATTR = "durasim.deployment"
_DEPLOYMENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # fits a queue name
_sources: dict[str, str] = {}
#: The derived versions of this process, by (DURASIM_DEPLOYMENT as the environment
#: stores it, workflows registered).
_served: dict[tuple[object, int], list[str]] = {}
#: ``DEPLOYMENT_ENV`` as ``os.environ`` keys its store (encoded: bytes on POSIX).
_ENV_KEY: object = os.environ.encodekey(DEPLOYMENT_ENV)


def _stored_deployment_env() -> object:
    """``DURASIM_DEPLOYMENT`` as the environment stores it (``None``: unset), read cheaply.

    ``os.environ.get`` is three Python calls (``get``, ``__getitem__``, the key's
    encoding) and the value's decoding; the store itself is one dict lookup.
    Distinct values are stored distinctly, so a cache keyed by this follows every
    change ``os.environ`` sees (``monkeypatch.setenv`` and ``delenv`` included).
    """
    store: dict[object, object] = os.environ._data  # type: ignore[attr-defined]
    return store.get(_ENV_KEY)


class DeploymentError(DurasimError, ValueError):
    """A deployment id that is not valid, or a migration that would break the run."""


def check_deployment_id(value: object, *, where: str = "deployment id") -> str:
    """``value`` if it is a valid deployment id, else :class:`DeploymentError`."""
    if not isinstance(value, str) or not _DEPLOYMENT_ID.fullmatch(value):
        raise DeploymentError(
            f"{where} {value!r} is not valid: use 1-64 characters from [A-Za-z0-9_.:+=~-] "
            "(a release tag such as 'v2.3.0' or a git sha)"
        )
    return value


def _module_source_id(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    found = _sources.get(path)
    if found is None:
        try:
            with open(path, "rb") as source:
                digest = hashlib.sha256(source.read()).hexdigest()[:12]
        except OSError:
            return None
        found = _sources[path] = f"src-{digest}"
    return found


def deployment_of(definition: WorkflowDef) -> str | None:
    """The version of ``definition``'s code in this process (``None``: unknown, unpinned).

    ``DURASIM_DEPLOYMENT`` when set, else ``src-<hash>`` of the source file of
    the module that defines the workflow.
    """
    # Unset or empty in the store: no os.environ.get (a few calls, once a run).
    explicit = os.environ.get(DEPLOYMENT_ENV) if _stored_deployment_env() else None
    if explicit:
        return check_deployment_id(explicit, where=f"${DEPLOYMENT_ENV}")
    return _module_source_id(getattr(definition.fn, "__module__", "") or "")


#: Whether start() pins the runs it creates (the simulator turns it off: its
#: logs and traces must not depend on the source text of the workflows).
_PINNING: contextvars.ContextVar[bool] = contextvars.ContextVar("durasim_pinning", default=True)


@contextlib.contextmanager
def pinning(enabled: bool) -> Iterator[None]:
    """Within the block, runs started here are pinned to a version (or not)."""
    token = _PINNING.set(enabled)
    try:
        yield
    finally:
        _PINNING.reset(token)


def start_deployment(definition: WorkflowDef) -> str | None:
    """The version a run started now records (``None`` when pinning is off)."""
    return deployment_of(definition) if _PINNING.get() else None


def run_deployment(run: RunRecord) -> str | None:
    """The version a run is pinned to: a migration's, else the one that started it."""
    return run.attributes.get(DEPLOYMENT_ATTR) or run.deployment_id


@attrs.frozen
class VersionPolicy:
    """Which runs a worker serves.

    Attributes:
        deployment: the one version served (explicit), or ``None``: the version
            of each workflow's code in this process (:func:`deployment_of`).
        serve_all: serve every run whatever its version (the behaviour before
            versioning; the simulator and the replay oracle run so).
    """

    deployment: str | None = None
    serve_all: bool = False

    def served(self) -> list[str]:
        """The versions served (explicit: one; derived: one per workflow module)."""
        if self.deployment is not None:
            return [self.deployment]
        # Keyed by the registry's size (what the list of it would hold): asked a
        # few times per delivery, the registry is listed only when it changed.
        key = (_stored_deployment_env(), len(_WORKFLOWS))
        cached = _served.get(key)
        if cached is None:
            found = {deployment_of(d) for d in all_workflows()}
            cached = _served[key] = sorted(d for d in found if d is not None)
        return cached

    def serves(self, run: RunRecord) -> bool:
        """Whether this worker runs ``run`` (an unpinned run is everyone's)."""
        pinned = run_deployment(run)
        return self.serve_all or pinned is None or pinned in self.served()

    def own_queue(self, queue_name: str) -> bool:
        """Whether ``queue_name`` is the queue of a version this worker serves."""
        if not queue_name.startswith("durasim@"):
            return False
        return queue_name[len("durasim@") :].rpartition("/")[0] in self.served()

    def moved(self, events: Iterable[Event]) -> bool:
        """Whether ``events`` move their run to another version (``durasim migrate``)."""
        return any(
            e.type is EventType.ATTR_SET
            and any(k == DEPLOYMENT_ATTR for k, _ in e.data.get("changes", ()))
            for e in events
        )

    def prefixes(self) -> list[str]:
        """The queue prefixes to claim from, this worker's versions first."""
        if self.serve_all:
            return ["durasim"]
        return [f"durasim@{d}/" for d in self.served()] + ["durasim."]


def _renamed(new: Any, old: Any) -> Any:
    """``new`` under ``old``'s name: the same function, edited (sites name the function)."""
    new_code, old_code = getattr(new, "__code__", None), getattr(old, "__code__", None)
    if not isinstance(new_code, types.CodeType) or not isinstance(old_code, types.CodeType):
        return new
    qualname = getattr(old_code, "co_qualname", old_code.co_name)
    if (new_code.co_name, getattr(new_code, "co_qualname", None)) == (old_code.co_name, qualname):
        return new
    changes: dict[str, Any] = {"co_name": old_code.co_name}
    if hasattr(new_code, "co_qualname"):
        changes["co_qualname"] = qualname
    renamed = types.FunctionType(
        new_code.replace(**changes),
        new.__globals__,
        old.__name__,
        new.__defaults__,
        new.__closure__,
    )
    renamed.__kwdefaults__ = new.__kwdefaults__
    renamed.__qualname__ = old.__qualname__
    renamed.__module__ = new.__module__
    return renamed


@contextlib.contextmanager
def change_code(workflow: object, new: object) -> Iterator[WorkflowDef]:
    """Within the block, ``workflow``'s id runs ``new``'s code (a deployment, in one process).

    ``new`` is another ``@workflow`` function or a plain ``async def``; the runs
    of ``workflow`` delivered from now on replay on it (live replays of the old
    code are not continued: their definition is another object).  The
    simulator's "the code changes here" action (``explore(upgrade=...)``).
    """
    old = workflow_definition(workflow)
    fn = getattr(new, "definition", None)
    code = fn.fn if isinstance(fn, WorkflowDef) else new
    if not callable(code):
        raise DeploymentError(f"the new code of {old.workflow_id} must be a function: {new!r}")
    changed = attrs.evolve(old, fn=_renamed(code, old.fn))
    current = _WORKFLOWS.get(old.workflow_id)
    _WORKFLOWS[old.workflow_id] = changed
    try:
        yield changed
    finally:
        if current is None:
            _WORKFLOWS.pop(old.workflow_id, None)
        else:
            _WORKFLOWS[old.workflow_id] = current
