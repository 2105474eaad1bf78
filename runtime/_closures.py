"""Closures of nested steps: read the captured values, rebind them on a copy.

A step written inside a workflow may use the workflow's locals.  Python keeps
those in cells; :func:`closure_of` reads them when the step is called (so they
travel with the step's input, by value) and :func:`with_closure` builds the step
body that runs later, possibly in another process, over the recorded values.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ._authoring_errors import InvalidDefinition

__all__ = ["closure_of", "with_closure"]

# A method that uses super() or __class__ closes over its class; that cell is fixed
# by the class definition, is the same in every process, and is no workflow state.
_CLASS_CELL = "__class__"


def _plain_function(fn: object) -> types.FunctionType:
    inner = getattr(fn, "__durasim_function__", fn)
    if not isinstance(inner, types.FunctionType):
        raise TypeError(f"expected a Python function, got {type(fn).__name__}")
    return inner


def closure_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The free variables of ``fn`` and their current values.

    Args:
        fn: a function (or a step object: its undecorated function is read).

    Returns:
        ``{name: value}`` in the order of ``fn.__code__.co_freevars``; ``{}`` for a
        function that captures nothing.  ``__class__`` (the cell of ``super()``)
        is left out: the class definition fixes it.

    Raises:
        InvalidDefinition: a captured variable has no value yet (it is assigned
            after the call, or deleted).
    """
    inner = _plain_function(fn)
    cells = inner.__closure__ or ()
    values: dict[str, Any] = {}
    for name, cell in zip(inner.__code__.co_freevars, cells, strict=True):
        if name == _CLASS_CELL:
            continue
        try:
            values[name] = cell.cell_contents
        except ValueError:
            raise InvalidDefinition(
                f"{inner.__qualname__} uses the variable {name!r} of its enclosing "
                "function, which has no value at this call; assign it before the call",
                function=inner.__qualname__,
            ) from None
    return values


def with_closure(fn: Callable[..., Any], values: dict[str, Any]) -> Callable[..., Any]:
    """A copy of ``fn`` whose free variables hold ``values``.

    Names of ``fn``'s free variables missing from ``values`` keep ``fn``'s own
    cells (so ``__class__`` and values nobody recorded survive); names in ``values``
    that ``fn`` does not capture are ignored (the step's code may have changed to
    use fewer of them since the values were recorded).

    Args:
        fn: a function (or a step object: its undecorated function is copied).
        values: name -> value, as :func:`closure_of` returned them.

    Returns:
        A new function with the same code, globals, defaults and attributes.

    Raises:
        InvalidDefinition: a free variable is neither in ``values`` nor bound in
            ``fn`` (the recorded values predate a change of the step's code).
    """
    inner = _plain_function(fn)
    own = dict(zip(inner.__code__.co_freevars, inner.__closure__ or (), strict=True))
    cells: list[types.CellType] = []
    for name in inner.__code__.co_freevars:
        if name in values:
            cells.append(types.CellType(values[name]))
            continue
        cell = own[name]
        try:
            cell.cell_contents  # noqa: B018 -- probe: an empty cell raises ValueError
        except ValueError:
            raise InvalidDefinition(
                f"{inner.__qualname__} uses the variable {name!r} of its enclosing "
                "function, but no value was recorded for it; the step's code has changed "
                "since the call was recorded",
                function=inner.__qualname__,
            ) from None
        cells.append(cell)
    copy = types.FunctionType(
        inner.__code__, inner.__globals__, inner.__name__, inner.__defaults__, tuple(cells)
    )
    copy.__kwdefaults__ = inner.__kwdefaults__
    copy.__qualname__ = inner.__qualname__
    copy.__module__ = inner.__module__
    copy.__doc__ = inner.__doc__
    copy.__annotations__ = dict(inner.__annotations__)
    copy.__dict__.update(inner.__dict__)
    return copy
