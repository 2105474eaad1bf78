"""Frozen values built field by field, for the write path's hottest constructors.

A frozen ``attrs`` class's ``__init__`` sets each field through a bound
``object.__setattr__``, and a keyword call matches every argument by name: on
CPython 3.11 an ``Event`` costs about 14k instructions that way.  Each slot's own
descriptor sets its field for about a third of a generic ``__setattr__``; the
functions generated here call those descriptors directly, once per field.

They build exactly what ``__init__`` would, for classes whose fields have no
validator and whose values the caller already gives in their converted form
(``copier`` falls back to ``__init__`` for a class with a converter or validator).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["builder", "copier", "evolver"]

_E = TypeVar("_E")


def _fields(cls: type) -> list[attrs.Attribute[Any]]:
    fields = [a for a in attrs.fields(cls) if a.init]
    for a in fields:
        if not (a.name.isidentifier() and a.alias and a.alias.isidentifier()):
            raise TypeError(f"{cls.__name__}.{a.name}: not a plain field")
    return fields


def _direct(cls: type, fields: list[attrs.Attribute[Any]]) -> bool:
    """Whether setting the slots is all ``__init__`` does."""
    return (
        "__slots__" in cls.__dict__
        and not hasattr(cls, "__attrs_post_init__")
        and not any(a.validator for a in fields)
    )


def _compile(
    cls: type, name: str, params: str, body: str, fields: list[Any], *, extra: dict[str, Any]
) -> Any:
    namespace: dict[str, Any] = {"cls": cls, "_new": object.__new__, **extra}
    for a in fields:
        namespace[f"_s_{a.name}"] = cls.__dict__[a.name].__set__
    source = f"def {name}({params}):\n{body}"
    exec(compile(source, f"<{name} {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 -- our own source
    return namespace[name]


def _body(cls: type, fields: list[attrs.Attribute[Any]], value: Callable[[str], str]) -> str:
    setattr_: object = cls.__setattr__
    if setattr_ is object.__setattr__:  # a mutable class: plain stores are cheapest
        sets = "".join(f"    n.{a.name} = {value(a.name)}\n" for a in fields)
    else:  # frozen: each slot's own setter
        sets = "".join(f"    _s_{a.name}(n, {value(a.name)})\n" for a in fields)
    return f"    n = _new(cls)\n{sets}    return n\n"


def builder(cls: Callable[..., _E]) -> Callable[..., _E]:
    """``build(**fields)``, keyword-only like the class: ``cls(**fields)`` without ``__init__``.

    Converters do not run: pass values already in their converted form.
    """
    fields = _fields(cls)  # type: ignore[arg-type]
    if not _direct(cls, fields):  # type: ignore[arg-type]
        raise TypeError(f"{cls!r}: its __init__ does more than set its slots")
    defaults: dict[str, Any] = {}
    for a in fields:
        if a.default is not attrs.NOTHING and not isinstance(a.default, attrs.Factory):  # type: ignore[arg-type]
            defaults[f"_d_{a.name}"] = a.default
    # A field with a factory default is a required argument here.
    params = ", ".join(
        f"{a.name}=_d_{a.name}" if f"_d_{a.name}" in defaults else a.name for a in fields
    )
    body = _body(cls, fields, lambda name: name)  # type: ignore[arg-type]
    return _compile(cls, "build", f"*, {params}", body, fields, extra=defaults)  # type: ignore[arg-type,no-any-return]


def copier(cls: Callable[..., _E], *changed: str) -> Callable[..., _E]:
    """``copy(value, *new_values)``: ``attrs.evolve(value, **dict(zip(changed, new_values)))``.

    Made once at import for a transition the fold makes several times a step.
    """
    return _copy(cls, changed, ", ".join(("v", *changed)), lambda name: name)  # type: ignore[no-any-return]


def evolver(cls: type, changed: tuple[str, ...]) -> Callable[[Any, dict[str, Any]], Any]:
    """``copy(value, changes)``: ``attrs.evolve(value, **changes)`` for these changed fields."""
    return _copy(cls, changed, "v, c", lambda name: f"c[{name!r}]")  # type: ignore[no-any-return]


def _copy(cls: Any, changed: tuple[str, ...], params: str, new: Callable[[str], str]) -> Any:
    fields = _fields(cls)
    unknown = sorted(set(changed) - {a.name for a in fields})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {unknown}")

    def value(name: str) -> str:
        return new(name) if name in changed else f"v.{name}"

    if _direct(cls, fields) and not any(a.converter for a in fields):
        return _compile(cls, "copy", params, _body(cls, fields, value), fields, extra={})
    arguments = ", ".join(f"{a.alias}={value(a.name)}" for a in fields)
    return _compile(cls, "copy", params, f"    return cls({arguments})\n", [], extra={})
