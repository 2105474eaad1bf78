"""The class registry: the only place decoding may find a class or function.

A class is registered at definition time with :func:`serializable`, under
``class//<module>//<qualname>`` or an explicit id.  Three kinds are accepted:

* classes with the ``__durasim_serialize__`` / ``__durasim_deserialize__`` pair
  (both or neither: a class with one of them is refused when decorated);
* ``attrs`` classes and dataclasses, which serialize their fields by name;
* ``enum.Enum`` subclasses, whose members serialize by name;
* exception classes, rebuilt from their ``args`` (a ``DurasimError`` from its
  message and facts).  Unregistered exceptions still cross the log: they decode
  as :class:`RevivedError`, which keeps the type's name.

Step and workflow functions are registered by the runtime with
:meth:`ClassRegistry.register_function`; a registered function crosses the log as
its id.  Decoding never imports a module or calls ``getattr`` on a name read from
the log: an id that is not in the registry is an error.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar, overload

import attrs

from ._errors import SerializationError

__all__ = [
    "ClassRegistry",
    "Registered",
    "default_class_id",
    "default_registry",
    "register_durasim_errors",
    "serializable",
]

_T = TypeVar("_T", bound=type)

Kind = Literal["pair", "fields", "enum", "exception"]


@attrs.frozen(kw_only=True)
class Registered:
    """One registered class.

    Attributes:
        class_id: the id written to the log.
        cls: the class.
        kind: ``pair`` (the hook pair), ``fields`` (attrs/dataclass), ``enum`` or
            ``exception`` (rebuilt from its args, or message and facts).
        fields: field names in definition order (``fields`` kind only).
        frozen: whether instances are immutable (frozen attrs/dataclass), so a value
            made of them can be stored once and referenced (see FrozenValues).
    """

    class_id: str
    cls: type
    kind: Kind
    fields: tuple[str, ...] = ()
    frozen: bool = False


def default_class_id(cls: type) -> str:
    """The id a class gets when none is given: ``class//<module>//<qualname>``."""
    return f"class//{cls.__module__}//{cls.__qualname__}"


def _describe(cls: type) -> Registered:
    has_ser = "__durasim_serialize__" in _attrs_of_mro(cls)
    has_de = "__durasim_deserialize__" in _attrs_of_mro(cls)
    if has_ser != has_de:
        missing = "__durasim_deserialize__" if has_ser else "__durasim_serialize__"
        raise SerializationError(
            f"{cls.__qualname__} defines only one of __durasim_serialize__ / "
            f"__durasim_deserialize__; define {missing} too (both or neither)",
            path=cls.__qualname__,
        )
    if has_ser:
        if not isinstance(cls.__dict__.get("__durasim_deserialize__"), classmethod) and not any(
            isinstance(k.__dict__.get("__durasim_deserialize__"), classmethod) for k in cls.__mro__
        ):
            raise SerializationError(
                f"{cls.__qualname__}.__durasim_deserialize__ must be a classmethod "
                "(it builds an instance from data); decorate it with @classmethod",
                path=cls.__qualname__,
            )
        return Registered(class_id="", cls=cls, kind="pair")
    if issubclass(cls, BaseException):
        return Registered(class_id="", cls=cls, kind="exception")
    if issubclass(cls, enum.Enum):
        return Registered(class_id="", cls=cls, kind="enum")
    if attrs.has(cls):
        names = tuple(a.name for a in attrs.fields(cls))
        frozen = _attrs_frozen(cls)
        return Registered(class_id="", cls=cls, kind="fields", fields=names, frozen=frozen)
    if dataclasses.is_dataclass(cls):
        names = tuple(f.name for f in dataclasses.fields(cls))
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        return Registered(
            class_id="", cls=cls, kind="fields", fields=names, frozen=bool(params.frozen)
        )
    raise SerializationError(
        f"{cls.__qualname__} cannot be registered: it has no __durasim_serialize__ / "
        "__durasim_deserialize__ pair and is not an attrs class, dataclass or Enum; "
        "add the pair",
        path=cls.__qualname__,
    )


def _attrs_of_mro(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(klass.__dict__)
    return names


def _attrs_frozen(cls: type) -> bool:
    # attrs marks frozen classes by installing its own __setattr__ that raises;
    # probing is the documented-free but stable way across attrs versions.
    setattr_ = getattr(cls, "__setattr__", None)
    return setattr_ is not None and getattr(setattr_, "__name__", "") == "_frozen_setattrs"


class ClassRegistry:
    """Maps ids to classes and functions, and back.

    The default registry (:func:`default_registry`) is process-wide, like the
    import system it stands in for; tests may build their own.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, Registered] = {}
        self._by_class: dict[type, Registered] = {}
        self._functions: dict[str, Callable[..., Any]] = {}
        self._function_ids: dict[int, tuple[str, Callable[..., Any]]] = {}

    def register(self, cls: type, *, class_id: str | None = None) -> Registered:
        """Register ``cls`` under ``class_id`` (default ``class//<module>//<qualname>``).

        Re-registering the same module and qualname replaces the entry (a reloaded
        module defines a new class object); any other clash is refused.

        Raises:
            SerializationError: the class cannot be serialized, or the id is taken.
        """
        desc = _describe(cls)
        cid = class_id if class_id is not None else default_class_id(cls)
        old = self._by_id.get(cid)
        if (
            old is not None
            and old.cls is not cls
            and (
                old.cls.__module__,
                old.cls.__qualname__,
            )
            != (cls.__module__, cls.__qualname__)
        ):
            raise SerializationError(
                f"class id {cid!r} is already registered for "
                f"{old.cls.__module__}.{old.cls.__qualname__}; give "
                f"{cls.__qualname__} another id",
                path=cid,
            )
        entry = attrs.evolve(desc, class_id=cid)
        if old is not None:
            self._by_class.pop(old.cls, None)
        self._by_id[cid] = entry
        self._by_class[cls] = entry
        return entry

    def register_function(self, function: Callable[..., Any], function_id: str) -> None:
        """Register a step or workflow function so it can cross the log as its id."""
        self._functions[function_id] = function
        self._function_ids[id(function)] = (function_id, function)

    def entry_for_class(self, cls: type) -> Registered | None:
        """The registration of ``cls``, or None."""
        return self._by_class.get(cls)

    def entry_for_id(self, class_id: str) -> Registered | None:
        """The registration under ``class_id``, or None."""
        return self._by_id.get(class_id)

    def function_id(self, function: object) -> str | None:
        """The id of a registered function, or None."""
        found = self._function_ids.get(id(function))
        if found is None or found[1] is not function:
            return None
        return found[0]

    def function_for_id(self, function_id: str) -> Callable[..., Any] | None:
        """The function registered under ``function_id``, or None."""
        return self._functions.get(function_id)


_DEFAULT = ClassRegistry()


def register_durasim_errors(
    registry: ClassRegistry, namespace: Mapping[str, object], names: Iterable[str]
) -> None:
    """Register the ``DurasimError`` classes among ``names`` of a public namespace.

    durasim's own errors decode as themselves everywhere (a workflow's
    ``WorkflowSandboxError`` comes back as one, not as a ``RevivedError``), under ids
    that do not depend on which private module defines them (so moving one breaks
    no log): ``error//durasim//<public name>``.
    """
    from durasim.worlds import DurasimError  # noqa: PLC0415 -- the root, no cycle

    for name in names:
        # namespace lookups, not getattr(): a lazily imported name (PostgresWorld,
        # which imports psycopg) is no error and must not be imported here.
        obj = namespace.get(name)
        if isinstance(obj, type) and issubclass(obj, DurasimError):
            registry.register(obj, class_id=f"error//durasim//{name}")


def _register_durasim_errors(registry: ClassRegistry) -> None:
    # The runtime's own errors are registered by durasim.runtime (its __init__),
    # which imports this module first.
    from durasim import worlds  # noqa: PLC0415 -- only at import of this module

    from . import _errors  # noqa: PLC0415

    for module in (worlds, _errors):
        register_durasim_errors(registry, vars(module), module.__all__)


_register_durasim_errors(_DEFAULT)


def default_registry() -> ClassRegistry:
    """The process-wide registry :func:`serializable` writes to by default."""
    return _DEFAULT


@overload
def serializable(cls: _T, /) -> _T: ...
@overload
def serializable(
    *, class_id: str | None = None, registry: ClassRegistry | None = None
) -> Callable[[_T], _T]: ...
def serializable(
    cls: _T | None = None,
    /,
    *,
    class_id: str | None = None,
    registry: ClassRegistry | None = None,
) -> _T | Callable[[_T], _T]:
    """Register a class so its instances can cross a step boundary.

    Use bare (``@serializable``) or with an explicit id
    (``@serializable(class_id="billing.Invoice/v2")``).  The check runs when the
    class is defined, so a class with half of the hook pair fails at import.

    Args:
        cls: the class (when used bare).
        class_id: the id written to the log; default ``class//<module>//<qualname>``.
        registry: where to register; default :func:`default_registry`.

    Returns:
        The class itself, unchanged.

    Raises:
        SerializationError: the class has one hook of the pair, or is none of the
            accepted kinds, or the id is taken by another class.
    """

    def decorate(klass: _T) -> _T:
        (registry or _DEFAULT).register(klass, class_id=class_id)
        return klass

    if cls is not None:
        return decorate(cls)
    return decorate
