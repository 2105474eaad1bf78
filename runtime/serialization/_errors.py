"""Errors raised by serialization, and the step errors it carries across the log.

Tree (the branch this package adds under the root in ``durasim.worlds``)::

    DurasimError
    ├── SerializationError (TypeError)   a value cannot be encoded, or bytes cannot be decoded
    ├── FatalError                       raised by a step: fail now, do not retry
    ├── RetryableError                   raised by a step: retry, not before ``retry_after``
    └── RevivedError                     an exception whose type this process cannot rebuild

``FatalError`` and ``RetryableError`` live here because serialization is the first
runtime module that must know them (they cross the log with ``retry_after``); the
runtime re-exports them from ``durasim.runtime`` so their import path is stable.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from durasim.worlds import DurasimError

__all__ = ["FatalError", "RetryableError", "RevivedError", "SerializationError"]


class SerializationError(DurasimError, TypeError):
    """A value cannot cross a step boundary, or stored bytes cannot be decoded.

    Subclasses ``TypeError`` because the common cause is a value of a type that
    cannot be serialized; malformed bytes raise it too, so callers catch one type.

    Attributes:
        path: where in the value the problem is (``args[1]["conn"]``), when known.
    """

    path: str


class FatalError(DurasimError):
    """Raised by a step to fail it at once, without further retries.

    ``FatalError("card expired")``; the message may be left out.
    """

    def __init__(self, message: str = "the step failed (FatalError)", **facts: Any) -> None:
        super().__init__(message, **facts)


class RetryableError(DurasimError):
    """Raised by a step to ask for a retry, optionally not before ``retry_after``.

    ``RetryableError("rate limited", retry_after=30)``, ``RetryableError(retry_after=1)``,
    ``RetryableError(retry_after=timedelta(minutes=5))`` or a point in time.

    Attributes:
        retry_after: seconds (int or float), a delay, or a point in time before which
            no retry starts; None for the step's back-off.
    """

    retry_after: timedelta | datetime | float | None

    def __init__(
        self,
        message: str = "the step asked for a retry (RetryableError)",
        *,
        retry_after: timedelta | datetime | float | None = None,
        **facts: Any,
    ) -> None:
        super().__init__(message, retry_after=retry_after, **facts)


class RevivedError(DurasimError):
    """An exception decoded from the log whose type is not known in this process.

    It keeps the original type's name, message and arguments, so error reporting and
    ``except`` clauses over the message still work; it never imports or builds the
    original class (decoding must not run code it was not told to trust).

    Attributes:
        type_name: the original type, ``module.QualName``.
        original_args: the original ``args`` tuple.
    """

    type_name: str
    original_args: tuple[Any, ...]

    def __init__(
        self,
        message: str,
        *,
        type_name: str,
        original_args: tuple[Any, ...] = (),
        **facts: Any,
    ) -> None:
        super().__init__(message, type_name=type_name, original_args=original_args, **facts)

    def __repr__(self) -> str:
        return f"RevivedError({self.type_name}: {self.message!r})"
