"""OpenTelemetry spans for deliveries and step attempts (the ``otel`` extra), off by default.

:func:`enable_tracing` turns them on for the process: a span ``durasim.delivery``
per orchestrator delivery of a run (attributes ``durasim.run_id``,
``durasim.delivery.status``) and a span ``durasim.step <name>`` per step attempt
(``durasim.run_id``, ``durasim.step_id``, ``durasim.step``, ``durasim.attempt``,
``durasim.outcome``; a failed attempt records its exception and an error status).
A step span is a child of the delivery that ran it inline.  Only the
``opentelemetry-api`` package is used, imported when tracing is enabled: the
application chooses the SDK and exporter (``TracerProvider``) as usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from durasim.worlds import DurasimError

__all__ = ["TracingUnavailable", "disable_tracing", "enable_tracing", "span", "tracing_enabled"]

_tracer: Any = None


class TracingUnavailable(DurasimError):
    """``enable_tracing()`` without the ``opentelemetry-api`` package installed."""


def enable_tracing(tracer_provider: Any = None) -> None:
    """Emit spans for deliveries and step attempts from now on, in this process.

    ``tracer_provider``: an OpenTelemetry ``TracerProvider`` (default: the global one).

    Raises:
        TracingUnavailable: ``opentelemetry-api`` is not installed
            (``pip install 'durasim[otel]'``).
    """
    global _tracer  # noqa: PLW0603 -- one switch per process, read on every step
    try:
        # optional: imported only when enabled (mypy on an install without it: no stubs)
        from opentelemetry import trace  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
    except ImportError as exc:
        raise TracingUnavailable(
            "enable_tracing() needs the opentelemetry-api package: pip install 'durasim[otel]'"
        ) from exc
    _tracer = trace.get_tracer("durasim", tracer_provider=tracer_provider)


def disable_tracing() -> None:
    """Stop emitting spans."""
    global _tracer  # noqa: PLW0603 -- see enable_tracing
    _tracer = None


def tracing_enabled() -> bool:
    """Whether :func:`enable_tracing` is in effect."""
    return _tracer is not None


class _Span:
    """The open span (or nothing): set attributes and the outcome as they become known."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, name: str, value: str | int | float | bool) -> None:
        if self._span is not None:
            self._span.set_attribute(name, value)

    def failed(self, error: BaseException) -> None:
        if self._span is not None:
            from opentelemetry.trace import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
                Status,
                StatusCode,
            )

            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


@contextlib.contextmanager
def span(name: str, **attributes: str | int | float | bool) -> Iterator[_Span]:
    """A span named ``name`` when tracing is enabled; a no-op otherwise."""
    tracer = _tracer
    if tracer is None:
        yield _Span(None)
        return
    attrs = {f"durasim.{k}": v for k, v in attributes.items()}
    with tracer.start_as_current_span(name, attributes=attrs) as current:
        yield _Span(current)
