"""Workflow and step definitions, and the process-wide registry of them by id.

The engine finds the code of a recorded step or workflow here by id.  A module
registers its definitions when it is imported; a nested step registers each time
its enclosing function runs.  Registering an id again with the same code (the
enclosing function ran again, or the module was re-imported) refreshes the entry;
another function under a taken id is refused, naming both places.  A file
imported under two module names (``pkg.mod``, then ``mod``) keeps the ids its
first import gave (:func:`one_id`): one function, one id in a process.
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, Literal

import attrs

from ._authoring_errors import DefinitionNotFound, InvalidDefinition
from .serialization import default_registry

__all__ = [
    "StepDef",
    "StepKind",
    "WorkflowDef",
    "all_steps",
    "all_workflows",
    "check_step",
    "find_step",
    "find_workflow",
    "one_id",
    "register_step",
    "register_workflow",
    "source_of",
]

StepKind = Literal["function", "nested", "staticmethod", "classmethod", "method"]

METHOD_KINDS: frozenset[str] = frozenset({"staticmethod", "classmethod", "method"})

_SERIALIZE = "__durasim_serialize__"
_DESERIALIZE = "__durasim_deserialize__"


@attrs.define(eq=False)
class StepDef:
    """One ``@step`` definition.

    Attributes:
        step_id: ``step//<module>//<name>`` (``step//shop//Cart#total``).
        name: the name part of the id (``charge``, ``checkout/validate``, ``Cart#total``).
        fn: the undecorated function; for methods the plain function taking
            ``self`` / ``cls`` first.
        max_retries: retries after the first attempt (``>= 0``).
        is_async: ``fn`` is an ``async def``.
        kind: where the step was written.
        owner: the class of a method step, once the class exists.
        check_input: a replay compares the input the workflow computes now with
            the recorded one (a difference is a divergence); ``False`` for a step
            whose input may legitimately differ between executions.
    """

    step_id: str
    name: str
    fn: Callable[..., Any]
    max_retries: int
    is_async: bool
    kind: StepKind
    owner: type | None = None
    check_input: bool = True


@attrs.define(eq=False)
class WorkflowDef:
    """One ``@workflow`` definition.

    Attributes:
        workflow_id: ``workflow//<module>//<name>``.
        name: the name part of the id.
        fn: the undecorated ``async def``.
    """

    workflow_id: str
    name: str
    fn: Callable[..., Coroutine[Any, Any, Any]]


log = logging.getLogger("durasim.runtime")

_STEPS: dict[str, StepDef] = {}
_WORKFLOWS: dict[str, WorkflowDef] = {}
#: (file, first line) of each registered function -> its id and module name.
_PLACES: dict[tuple[str, int], tuple[str, str]] = {}


def source_of(fn: Callable[..., Any]) -> str:
    """``file:line`` where ``fn`` is defined (``<unknown>`` for non-Python callables)."""
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return "<unknown>"
    return f"{code.co_filename}:{code.co_firstlineno}"


def _same_code(old: Callable[..., Any], new: Callable[..., Any]) -> bool:
    a, b = getattr(old, "__code__", None), getattr(new, "__code__", None)
    if a is None or b is None:
        return old is new
    # Same code object: the enclosing function ran again.  Same file and line:
    # the module was imported again (a reload, or under a second name).
    return a is b or (a.co_filename, a.co_firstlineno) == (b.co_filename, b.co_firstlineno)


def _refuse_duplicate(
    what: str, ident: str, old: Callable[..., Any], new: Callable[..., Any]
) -> None:
    raise InvalidDefinition(
        f"{what} id {ident!r} is taken: {new.__qualname__} ({source_of(new)}) and "
        f"{old.__qualname__} ({source_of(old)}) would share it; give one of them "
        "another name with name='...'",
        function=new.__qualname__,
    )


def one_id(ident: str, fn: Callable[..., Any]) -> str:
    """The id of ``fn``'s definition: ``ident``, or the id its file already gave it.

    A file imported under a second module name (``mod`` after ``pkg.mod``, say
    by a test runner that imports by path) re-runs its decorators with another
    module part; the id stays the one the first import gave, so one function
    keeps one id in a process and both copies register under it (same code).
    """
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType) or code.co_filename.startswith("<"):
        return ident  # no file (exec'd source): nothing says two modules are one file
    place = (code.co_filename, code.co_firstlineno)
    module = getattr(fn, "__module__", "") or ""
    first, first_module = _PLACES.setdefault(place, (ident, module))
    if first == ident or first_module == module:
        return ident  # the same id, or one module's own choice (two name=s for one function)
    if first_module == f"durasim.{module}":
        # durasim's own folders, imported again by top-level name (a test runner that
        # puts the checkout or site-packages/durasim on sys.path): nothing to fix.
        log.debug("%s imported again as %r; keeps %r", fn.__qualname__, module, first)
        return first
    log.warning(
        "%s (%s) was imported again as module %r (first as %r): it keeps its id %r, not %r; "
        "import it under one name (or pin the id with module='...')",
        fn.__qualname__,
        source_of(fn),
        module,
        first_module,
        first,
        ident,
    )
    return first


def register_step(definition: StepDef) -> None:
    """Register ``definition`` under its id (refreshing a re-run or re-import).

    Raises:
        InvalidDefinition: another function holds the id.
    """
    old = _STEPS.get(definition.step_id)
    if old is not None and not _same_code(old.fn, definition.fn):
        _refuse_duplicate("step", definition.step_id, old.fn, definition.fn)
    _STEPS[definition.step_id] = definition


def register_workflow(definition: WorkflowDef) -> None:
    """Register ``definition`` under its id (refreshing a re-run or re-import).

    Raises:
        InvalidDefinition: another function holds the id.
    """
    old = _WORKFLOWS.get(definition.workflow_id)
    if old is not None and not _same_code(old.fn, definition.fn):
        _refuse_duplicate("workflow", definition.workflow_id, old.fn, definition.fn)
    _WORKFLOWS[definition.workflow_id] = definition


def _hooks_of(cls: type) -> tuple[bool, bool]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(klass.__dict__)
    return _SERIALIZE in names, _DESERIALIZE in names


def check_owner_hooks(definition: StepDef, owner: type) -> None:
    """Refuse a method step's class that has one of the two serialization hooks.

    Raises:
        InvalidDefinition: ``owner`` defines exactly one of the pair.
    """
    has_ser, has_de = _hooks_of(owner)
    if has_ser != has_de:
        missing = _DESERIALIZE if has_ser else _SERIALIZE
        raise InvalidDefinition(
            f"step {definition.name!r}: its class {owner.__qualname__} defines only one of "
            f"{_SERIALIZE} / {_DESERIALIZE}; define {missing} too (both or neither)",
            function=definition.fn.__qualname__,
        )


def check_step(definition: StepDef) -> None:
    """The checks that must wait until the class of a method step is complete.

    A class gets ``@serializable`` only after its body (and the ``__set_name__``
    of its step methods) ran, so whether ``self`` can cross the log is decided
    here, when the step is first called or looked up.  A class with the hook pair
    that nobody registered is registered under its default id, as the class
    would be if decorated.

    Raises:
        InvalidDefinition: a step written in a class body was never bound to its
            class (another decorator above ``@step`` hid it), or the class of an
            instance-method step cannot be serialized.
    """
    if definition.kind not in METHOD_KINDS:
        return
    owner = definition.owner
    if owner is None:
        raise InvalidDefinition(
            f"step {definition.name!r} ({source_of(definition.fn)}) is written in a class "
            "body but was never bound to its class: put @step above @staticmethod / "
            "@classmethod (and other decorators), not below",
            function=definition.fn.__qualname__,
        )
    if definition.kind != "method":
        return
    registry = default_registry()
    if registry.entry_for_class(owner) is not None:
        return
    check_owner_hooks(definition, owner)
    if all(_hooks_of(owner)):
        registry.register(owner)
        return
    raise InvalidDefinition(
        f"step {definition.name!r} is an instance method of {owner.__qualname__}, which "
        "cannot be serialized, so `self` cannot reach the step: decorate "
        f"{owner.__qualname__} with @serializable (an attrs class or dataclass), or give "
        f"it the {_SERIALIZE} / {_DESERIALIZE} classmethod pair",
        function=definition.fn.__qualname__,
    )


def find_step(step_id: str) -> StepDef:
    """The step registered under ``step_id`` (its latest definition).

    Raises:
        DefinitionNotFound: no step has this id in this process.
        InvalidDefinition: the step is registered but unusable (see :func:`check_step`).
    """
    definition = _STEPS.get(step_id)
    if definition is None:
        raise DefinitionNotFound(
            f"no step {step_id!r} is registered in this process; import the module that "
            "defines it (a nested step registers when its enclosing function runs)",
            definition_id=step_id,
        )
    check_step(definition)
    return definition


def find_workflow(workflow_id: str) -> WorkflowDef:
    """The workflow registered under ``workflow_id``.

    Raises:
        DefinitionNotFound: no workflow has this id in this process.
    """
    definition = _WORKFLOWS.get(workflow_id)
    if definition is None:
        raise DefinitionNotFound(
            f"no workflow {workflow_id!r} is registered in this process; import the module "
            "that defines it",
            definition_id=workflow_id,
        )
    return definition


def all_steps() -> Iterator[StepDef]:
    """Every registered step (latest definitions), in registration order."""
    return iter(list(_STEPS.values()))


def all_workflows() -> Iterator[WorkflowDef]:
    """Every registered workflow, in registration order."""
    return iter(list(_WORKFLOWS.values()))


def is_async_function(fn: Callable[..., Any]) -> bool:
    """``fn`` is an ``async def`` (a coroutine function, not an async generator)."""
    return inspect.iscoroutinefunction(fn)
