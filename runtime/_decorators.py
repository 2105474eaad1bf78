"""``@workflow`` and ``@step``: the objects user code defines and calls.

A decorated step is a :class:`StepFunction`.  Called inside workflow code (the
engine has installed a :class:`StepCaller` in :data:`STEP_CALLER`), it hands the
call to the engine, which journals it and returns an awaitable of the result;
called anywhere else it is the plain function, so steps stay unit-testable.  It
is a descriptor, so it works as an instance, static or class method.

A decorated workflow is a :class:`WorkflowFunction`; calling it directly raises
:class:`WorkflowCallError`: a run starts through ``durasim.runtime.start()``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import types
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, NoReturn, ParamSpec, Protocol, TypeVar, overload

from ._authoring_errors import InvalidDefinition, WorkflowCallError
from ._closures import closure_of
from ._definitions import (
    METHOD_KINDS,
    StepDef,
    StepKind,
    WorkflowDef,
    check_owner_hooks,
    check_step,
    one_id,
    register_step,
    register_workflow,
)
from ._ids import make_id, parse_qualname
from ._modules import module_name_of
from .serialization import default_registry

__all__ = [
    "STEP_CALLER",
    "StepCaller",
    "StepFunction",
    "WorkflowFunction",
    "step",
    "step_definition",
    "workflow",
    "workflow_definition",
]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class StepCaller(Protocol):
    """What the engine installs in :data:`STEP_CALLER` while workflow code runs."""

    def call_step(
        self,
        definition: StepDef,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        closure: dict[str, Any],
    ) -> Awaitable[Any]:
        """Journal one call of a step and return an awaitable of its result.

        Args:
            definition: the step called (the definition of this very function object:
                for a nested step, ``definition.fn`` carries this call's closure).
            args: positional arguments; ``self`` (instance method) or ``cls`` (class
                method) first.
            kwargs: keyword arguments.
            closure: the values of the variables the step captures from its enclosing
                function (``{}`` for most steps); run the body with
                ``with_closure(find_step(id).fn, closure)``.

        Returns:
            An awaitable the workflow awaits for the step's result.
        """
        ...


#: The engine's :class:`StepCaller` while workflow code runs; None elsewhere.
STEP_CALLER: contextvars.ContextVar[StepCaller | None] = contextvars.ContextVar(
    "durasim.step_caller", default=None
)


def _where(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _id_module(what: str, fn: types.FunctionType) -> str:
    """The module part of ``fn``'s id: its module's importable name (``__main__`` resolved).

    A worker finds the code by importing the id's module, so a script's
    ``__main__`` is named as ``python -m`` or a worker would import it (see
    ``_modules.py``), and refused when nothing could import it.
    """
    name = fn.__module__
    if name != "__main__":
        return name
    resolved = module_name_of(fn.__globals__)
    if resolved is not None:
        return resolved
    file = fn.__globals__.get("__file__")
    where = f"the script {file}" if file else "an interactive session (no file)"
    raise InvalidDefinition(
        f"@{what} {fn.__qualname__} is defined in __main__ ({where}), which no worker can "
        "import, so no worker could find its code by its id: run the file as a module "
        "(`python -m pkg.mod`) from the folder a worker imports it from, or pass "
        f"module='pkg.mod' to @{what} (the name a worker imports)",
        function=fn.__qualname__,
    )


def _unwrap(what: str, obj: object) -> tuple[types.FunctionType, StepKind | None]:
    kind: StepKind | None = None
    inner: object = obj
    if isinstance(obj, staticmethod):
        kind, inner = "staticmethod", obj.__func__
    elif isinstance(obj, classmethod):
        kind, inner = "classmethod", obj.__func__
    if isinstance(inner, StepFunction | WorkflowFunction):
        qualname = inner.definition.fn.__qualname__
        raise InvalidDefinition(
            f"@{what} on {qualname}: it is already a "
            f"{'step' if isinstance(inner, StepFunction) else 'workflow'}; decorate the "
            "function once",
            function=qualname,
        )
    if not isinstance(inner, types.FunctionType):
        raise InvalidDefinition(
            f"@{what} needs a function written with def, got {type(inner).__name__} {inner!r}",
            function=repr(inner),
        )
    if inner.__name__ == "<lambda>":
        raise InvalidDefinition(
            f"@{what} on a lambda ({inner.__qualname__} in {inner.__module__}): a lambda has "
            "no stable name for an id; write it as a def",
            function=inner.__qualname__,
        )
    return inner, kind


# -- steps -------------------------------------------------------------------------


class StepFunction(Generic[P, R_co]):
    """A ``@step``: the function, plus its :class:`StepDef` in ``definition``."""

    definition: StepDef
    __durasim_function__: Callable[P, R_co]

    def __init__(self, definition: StepDef) -> None:
        self.definition = definition
        self.__durasim_function__ = definition.fn
        self._checked = definition.kind not in METHOD_KINDS
        functools.update_wrapper(self, definition.fn)

    def __repr__(self) -> str:
        return f"<step {self.definition.step_id}>"

    def __set_name__(self, owner: type, name: str) -> None:
        definition = self.definition
        if definition.kind not in METHOD_KINDS:
            return
        # Take the latest class of the step's own qualified name: attrs and
        # dataclass(slots=True) build a second class from the first one's body
        # (which calls this again); an alias in another class body is ignored.
        if owner.__qualname__ != definition.fn.__qualname__.rpartition(".")[0]:
            return
        definition.owner = owner
        _retarget_class_cell(definition.fn, owner)
        if definition.kind == "method":
            # On Python 3.11 an error raised here reaches the user as a RuntimeError
            # whose __cause__ is this InvalidDefinition (3.12 lets it through).
            check_owner_hooks(definition, owner)

    # Through a class or an instance the parameters are not checked: a type checker
    # cannot tell an instance, static or class method under @step apart (it sees a
    # plain function in each case), so only the result type is kept.
    def __get__(self, instance: object, owner: type | None = None) -> Callable[..., R_co]:
        kind = self.definition.kind
        if kind == "staticmethod":
            return self
        if kind == "classmethod":
            return types.MethodType(self, owner if owner is not None else type(instance))
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        definition = self.definition
        if not self._checked:
            check_step(definition)
            self._checked = True
        caller = STEP_CALLER.get()
        if caller is None:
            return self.__durasim_function__(*args, **kwargs)
        fn = self.__durasim_function__
        closure = closure_of(fn) if fn.__closure__ else {}  # most steps capture nothing
        # ``args`` is a tuple and ``kwargs`` a dict of this call's own: no copies.
        result: Any = caller.call_step(definition, args, kwargs, closure=closure)
        return result  # type: ignore[no-any-return]


def _retarget_class_cell(fn: Callable[..., Any], owner: type) -> None:
    # attrs and dataclass(slots=True) point the ``__class__`` cell (what super()
    # reads) of the functions in a rebuilt class at the new class; they do not see
    # the function inside a step object, so do the same here.
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None or "__class__" not in code.co_freevars:
        return
    cell = cells[code.co_freevars.index("__class__")]
    try:
        current = cell.cell_contents
    except ValueError:
        return  # the class body is still running
    if current is not owner and getattr(current, "__qualname__", None) == owner.__qualname__:
        cell.cell_contents = owner


def _make_step(
    obj: object, *, max_retries: int, name: str | None, module: str | None, check_input: bool
) -> StepFunction[Any, Any]:
    fn, kind = _unwrap("step", obj)
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise InvalidDefinition(
            f"@step on {_where(fn)}: it is a generator; a step returns one value (return "
            "a list, or write the items to a stream)",
            function=fn.__qualname__,
        )
    parsed = parse_qualname(fn.__qualname__)
    if kind is not None and not parsed.in_class:
        raise InvalidDefinition(
            f"@step on the {kind} {_where(fn)}, which is not written in a class body; drop @{kind}",
            function=fn.__qualname__,
        )
    if kind is None:
        kind = "method" if parsed.in_class else "nested" if parsed.nested else "function"
    if name is not None:
        part = name
    elif kind == "method":
        part = f"{parsed.class_path}#{parsed.member}"
    else:
        part = parsed.path
    step_id = make_id("step", module or _id_module("step", fn), part, function=fn.__qualname__)
    step_id = one_id(step_id, fn)
    definition = StepDef(
        step_id=step_id,
        name=part,
        fn=fn,
        max_retries=max_retries,
        is_async=inspect.iscoroutinefunction(fn),
        kind=kind,
        check_input=check_input,
    )
    register_step(definition)
    wrapper: StepFunction[Any, Any] = StepFunction(definition)
    if kind in ("function", "staticmethod"):
        # Only objects that stay the same across calls may cross the log as their
        # id: a nested step is re-made (with other captured values) on every call.
        default_registry().register_function(wrapper, step_id)
    return wrapper


# In workflow code a step call is awaited, a sync step's too: so a sync ``def f() -> R``
# becomes a step whose call is typed ``Awaitable[R]``, and an ``async def`` keeps its
# coroutine type.  (Called outside a workflow, a sync step returns ``R`` itself: the
# types describe the call as workflow code makes it.)  The coroutine overloads come
# first: a coroutine function also matches ``Callable[P, R]``.
class _StepDecorator(Protocol):
    @overload
    def __call__(
        self, fn: staticmethod[P, Coroutine[Any, Any, R]], /
    ) -> StepFunction[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: staticmethod[P, R], /) -> StepFunction[P, Awaitable[R]]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(
        self, fn: classmethod[Any, P, Coroutine[Any, Any, R]], /
    ) -> StepFunction[..., Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: classmethod[Any, P, R], /) -> StepFunction[..., Awaitable[R]]: ...
    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> StepFunction[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> StepFunction[P, Awaitable[R]]: ...


@overload
def step(
    fn: staticmethod[P, Coroutine[Any, Any, R]], /
) -> StepFunction[P, Coroutine[Any, Any, R]]: ...
@overload
def step(fn: staticmethod[P, R], /) -> StepFunction[P, Awaitable[R]]: ...  # type: ignore[overload-overlap]
@overload
def step(
    fn: classmethod[Any, P, Coroutine[Any, Any, R]], /
) -> StepFunction[..., Coroutine[Any, Any, R]]: ...
@overload
def step(fn: classmethod[Any, P, R], /) -> StepFunction[..., Awaitable[R]]: ...
@overload
def step(fn: Callable[P, Coroutine[Any, Any, R]], /) -> StepFunction[P, Coroutine[Any, Any, R]]: ...
@overload
def step(fn: Callable[P, R], /) -> StepFunction[P, Awaitable[R]]: ...
@overload
def step(
    *,
    max_retries: int = 3,
    name: str | None = None,
    module: str | None = None,
    check_input: bool = True,
) -> _StepDecorator: ...
def step(
    fn: object = None,
    /,
    *,
    max_retries: int = 3,
    name: str | None = None,
    module: str | None = None,
    check_input: bool = True,
) -> Any:
    """Declare a step: a unit of work whose result is journaled, retried on failure.

    Use bare (``@step``) or with options (``@step(max_retries=5)``), on a sync or
    async function, a nested function, or in a class body on an instance method,
    a ``@staticmethod`` or a ``@classmethod`` (put ``@step`` above those two).  An
    instance method needs a serializable class (``@serializable``, or the
    ``__durasim_serialize__`` / ``__durasim_deserialize__`` pair): ``self`` travels
    with the step input.  A nested step may use the enclosing function's variables;
    their values at the call travel with the step input.

    Inside workflow code a call is journaled and returns an awaitable; elsewhere
    the function runs as written.

    Args:
        fn: the function (when used bare).
        max_retries: retries after the first failed attempt (``>= 0``).
        name: a stable name part of the id, replacing the qualified name (keeps
            recorded runs valid across renames).
        module: the module part of the id, e.g. a versioned specifier ``payments@2``.
        check_input: on replay, compare the input the workflow computes with the
            recorded one and report a difference as a divergence (the default).
            ``False`` accepts a different input (e.g. one that embeds a value
            the workflow may legitimately compute differently); every execution
            of the step still runs with the recorded input.

    Returns:
        The :class:`StepFunction` (or a decorator making one).

    Raises:
        InvalidDefinition: not a def, a lambda or generator, a bad option, an id
            outside the World's alphabet or too long, an id taken by another
            function, or (for methods) a class with half of the hook pair.
    """
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidDefinition(
            f"@step(max_retries={max_retries!r}): max_retries must be an int >= 0 "
            "(the number of retries after the first attempt)",
            function=getattr(fn, "__qualname__", ""),
        )

    if not isinstance(check_input, bool):
        raise InvalidDefinition(
            f"@step(check_input={check_input!r}): pass True or False",
            function=getattr(fn, "__qualname__", ""),
        )

    def decorate(obj: object) -> StepFunction[Any, Any]:
        return _make_step(
            obj, max_retries=max_retries, name=name, module=module, check_input=check_input
        )

    if fn is not None:
        return decorate(fn)
    return decorate


def step_definition(obj: object) -> StepDef | None:
    """The :class:`StepDef` of a step, or None if ``obj`` is not one.

    Accepts the decorated function, a method step found on a class or an instance
    (a bound method), or the raw class attribute.
    """
    if isinstance(obj, types.MethodType | staticmethod | classmethod):
        obj = obj.__func__
    if isinstance(obj, StepFunction):
        return obj.definition
    return None


# -- workflows ---------------------------------------------------------------------


class WorkflowFunction(Generic[P, R_co]):
    """A ``@workflow``: its :class:`WorkflowDef` in ``definition``; not callable directly."""

    definition: WorkflowDef
    __durasim_function__: Callable[P, Coroutine[Any, Any, R_co]]

    def __init__(self, definition: WorkflowDef) -> None:
        self.definition = definition
        self.__durasim_function__ = definition.fn
        functools.update_wrapper(self, definition.fn)

    def __repr__(self) -> str:
        return f"<workflow {self.definition.workflow_id}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> NoReturn:
        name = self.definition.name
        short = self.definition.fn.__name__
        raise WorkflowCallError(
            f"workflow {name!r} cannot be called directly: a workflow runs durably, "
            f"from its log; use durasim.runtime.start({short}, ...) to start a run (or "
            f"durasim.runtime.run({short}, ...) to start it and wait for its result)",
            workflow_id=self.definition.workflow_id,
        )


class _WorkflowDecorator(Protocol):
    @overload
    def __call__(
        self, fn: staticmethod[P, Coroutine[Any, Any, R]], /
    ) -> WorkflowFunction[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> WorkflowFunction[P, R]: ...


def _make_workflow(
    obj: object, *, name: str | None, module: str | None
) -> WorkflowFunction[Any, Any]:
    fn, kind = _unwrap("workflow", obj)
    if kind == "classmethod":
        raise InvalidDefinition(
            f"@workflow on the classmethod {_where(fn)}: a workflow takes only its input; "
            "make it a module-level async def (or a @staticmethod)",
            function=fn.__qualname__,
        )
    if not inspect.iscoroutinefunction(fn):
        shape = "an async generator" if inspect.isasyncgenfunction(fn) else "not an async def"
        raise InvalidDefinition(
            f"@workflow on {_where(fn)}: it is {shape}; a workflow is an `async def` that "
            f"returns its result: write `async def {fn.__name__}(...)`",
            function=fn.__qualname__,
        )
    parsed = parse_qualname(fn.__qualname__)
    if parsed.in_class and kind is None:
        raise InvalidDefinition(
            f"@workflow on the instance method {_where(fn)}: a workflow takes only its "
            "input, no `self`; make it a module-level async def (or put @workflow above "
            "@staticmethod)",
            function=fn.__qualname__,
        )
    part = name if name is not None else parsed.path
    workflow_id = make_id(
        "workflow", module or _id_module("workflow", fn), part, function=fn.__qualname__
    )
    workflow_id = one_id(workflow_id, fn)
    definition = WorkflowDef(workflow_id=workflow_id, name=part, fn=fn)
    register_workflow(definition)
    wrapper: WorkflowFunction[Any, Any] = WorkflowFunction(definition)
    default_registry().register_function(wrapper, workflow_id)
    return wrapper


@overload
def workflow(fn: staticmethod[P, Coroutine[Any, Any, R]], /) -> WorkflowFunction[P, R]: ...
@overload
def workflow(fn: Callable[P, Coroutine[Any, Any, R]], /) -> WorkflowFunction[P, R]: ...
@overload
def workflow(*, name: str | None = None, module: str | None = None) -> _WorkflowDecorator: ...
def workflow(fn: object = None, /, *, name: str | None = None, module: str | None = None) -> Any:
    """Declare a workflow: an ``async def`` that runs durably, replayed from its log.

    Use bare (``@workflow``) or with options.  Start a run with
    ``durasim.runtime.start(wf, ...)``; calling the function directly raises
    :class:`WorkflowCallError`.

    Args:
        fn: the ``async def`` (when used bare).
        name: a stable name part of the id, replacing the qualified name.
        module: the module part of the id, e.g. a versioned specifier ``shop@2``.

    Returns:
        The :class:`WorkflowFunction` (or a decorator making one).

    Raises:
        InvalidDefinition: not an ``async def``, an instance or class method, a
            lambda, an id outside the World's alphabet or too long, or an id taken
            by another function.
    """

    def decorate(obj: object) -> WorkflowFunction[Any, Any]:
        return _make_workflow(obj, name=name, module=module)

    if fn is not None:
        return decorate(fn)
    return decorate


def workflow_definition(obj: object) -> WorkflowDef:
    """The :class:`WorkflowDef` of a ``@workflow`` function.

    Raises:
        InvalidDefinition: ``obj`` is not a workflow.
    """
    if isinstance(obj, staticmethod):
        obj = obj.__func__
    if isinstance(obj, WorkflowFunction):
        return obj.definition
    shown = getattr(obj, "__qualname__", None) or repr(obj)
    raise InvalidDefinition(
        f"{shown} is not a workflow: decorate it with @workflow (an async def)",
        function=str(shown),
    )
