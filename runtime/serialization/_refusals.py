"""What to tell the user when a value cannot cross a step boundary.

Each refusal names the type and says what to pass instead.  The checks use
``isinstance`` against the stdlib types that carry process state (a lock, a
socket, an open file): such a value has no meaning in another process or after a
replay, so no encoding of it could be correct.
"""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import types
from typing import Any

__all__ = ["describe_type", "refusal"]

_LOCK_TYPES: tuple[type, ...] = (
    type(threading.Lock()),
    type(threading.RLock()),
    threading.Condition,
    threading.Semaphore,
    threading.Event,
    asyncio.Lock,
    asyncio.Event,
    asyncio.Condition,
    asyncio.Semaphore,
)


def describe_type(value: object) -> str:
    """``module.QualName`` of the value's type (no module for builtins)."""
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def refusal(value: object) -> str:
    """The message body for a value no encoder accepts: the type, then the fix."""
    kind = describe_type(value)
    fix = _fix(value)
    return f"{kind} cannot cross a step boundary; {fix}"


def _fix(value: Any) -> str:
    if isinstance(value, types.GeneratorType | types.AsyncGeneratorType):
        return "pass list(...) of what it yields, or produce the values inside the step"
    if isinstance(value, types.CoroutineType) or asyncio.isfuture(value):
        return "await it and pass the result"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        name = getattr(value, "__qualname__", repr(value))
        return (
            f"function {name} is not a registered step or workflow; pass the data it "
            "needs, or make it a @step and pass that"
        )
    if isinstance(value, socket.socket):
        return "pass the address and connect inside the step"
    if isinstance(value, io.IOBase):
        return "pass the path (or the contents) and open it inside the step"
    if isinstance(value, _LOCK_TYPES):
        return "locks belong to one process; create it inside the step"
    if isinstance(value, types.ModuleType):
        return "import the module inside the step"
    if isinstance(value, type):
        return "classes do not cross the log; pass an instance of a registered class"
    if isinstance(value, dict):
        return "pass dict(value): only the exact dict type keeps its type exactly"
    if isinstance(value, list | tuple | set | frozenset):
        return f"pass {type(value).__mro__[-2].__name__}(value), or register the class"
    if callable(value):
        return "callables do not cross the log; pass the data it needs"
    return (
        "register the class with @serializable (an attrs class or dataclass needs "
        "nothing else; any other class needs a __durasim_serialize__ / "
        "__durasim_deserialize__ pair)"
    )
