"""Running one step body and turning what happened into the event to record.

A body receives copies of its arguments (decoded from the step's recorded
input), runs with full Python, and ends in one of three outcomes:

* it returned: ``step_completed`` with the serialized result;
* it raised :class:`FatalError`, or ran out of attempts, or its result cannot be
  serialized: ``step_failed``;
* it raised anything else with attempts left: ``step_retrying`` with a
  ``retry_after`` (the :class:`RetryableError`'s, or exponential back-off).

A body that raises a ``BaseException`` that is not an ``Exception``
(``SystemExit`` from argparse or click, ``KeyboardInterrupt``, ``GeneratorExit``
...) fails that attempt like any error, recorded with its type: it is the
step's doing, and a worker must not die of it.  Only ``asyncio.CancelledError``
propagates (the delivery itself is being cancelled: the step stays started, so
the next delivery runs it again and counts the attempt).  A worker's own stop
signals never surface inside a step: ``durasim worker`` handles SIGINT and
SIGTERM by setting a flag (see ``scenarios/_cli_runs.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from durasim.worlds import EventRequest
from durasim.worlds._build import builder
from durasim.worlds._events import step_completed_request

from . import _otel
from ._authoring import StepDef, with_closure
from ._determinism import wall_monotonic, wall_perf_counter
from ._errors import passes_through
from ._leases import STEPS_HERE
from ._metadata import STEP_METADATA, WORKFLOW_METADATA, StepMetadata, WorkflowMetadata
from ._otel import span, tracing_enabled
from ._payloads import RunPayloads, decode_payload
from ._seeds import seeded_result
from ._step_threads import ran_inline, run_in_step_thread, runs_inline
from .serialization import FatalError, RetryableError, SerializationError, serialize
from .serialization._api import NOT_PLAIN, loads_plain, plain_scalar
from .serialization._tracebacks import ErrorText

__all__ = [
    "StepOutcome",
    "attempt_runner",
    "backoff",
    "execute_step",
    "exhausted",
    "failures_log",
]

log = logging.getLogger("durasim.runtime")

#: Failed attempts and failed runs.  Its own NullHandler keeps them off stderr in a
#: program that configured no logging (a simulation's thousands of injected failures);
#: they still reach every handler the program configures (``durasim run`` and
#: ``durasim worker`` configure one on ``durasim``).
failures_log = logging.getLogger("durasim.runtime.failures")
failures_log.addHandler(logging.NullHandler())

#: Back-off before attempt n+1 after a plain failure of attempt n: 1 s, 2 s, 4 s ... 5 min.
_BACKOFF_BASE = 1.0
_BACKOFF_CAP = 300.0


def backoff(attempt: int) -> timedelta:
    """The delay before retrying after plain failure number ``attempt`` (1-based)."""
    return timedelta(seconds=min(_BACKOFF_CAP, _BACKOFF_BASE * 2 ** max(0, attempt - 1)))


@attrs.define(eq=False)
class StepOutcome:
    """The event that records how an attempt ended.

    ``error``: the attempt's error, carried only while tracing is on, to the span
    that reports it (see :func:`_for_span`).

    Made once a step and read once (the delivery takes its ``request``), never
    changed after it is built: a plain slotted class, not a frozen one, whose
    builder sets each field by a plain store (a frozen one's, through each slot's
    descriptor, costs about 670 instructions a field on CPython 3.11).
    """

    request: EventRequest
    error: BaseException | None = None

    @property
    def retrying(self) -> bool:
        """Whether the step will be attempted again."""
        return self.request.type.value == "step_retrying"


#: Whether ``time.monotonic`` (the heartbeat's clock) is ``time.perf_counter`` (the
#: clock a quick inline body is timed with): then one reading serves both.
_ONE_CLOCK = time.get_clock_info("monotonic") == time.get_clock_info("perf_counter")

#: ``StepOutcome(request=...)`` field by field (attrs' ``__init__`` is a call more, once
#: a step); ``error`` defaults to ``None``.
_outcome = builder(StepOutcome)
#: The same for the metadata every attempt installs.
_step_metadata = builder(StepMetadata)
_current_workflow = WORKFLOW_METADATA.get


def exhausted(definition: StepDef, correlation_id: str, attempt: int) -> StepOutcome:
    """``step_failed`` for a step started more often than it may be (crash loops count)."""
    error = FatalError(
        f"step {definition.name} ({correlation_id}) was started {attempt} times, more than "
        f"1 + max_retries={definition.max_retries}; the earlier attempts crashed or were lost"
    )
    return StepOutcome(
        EventRequest.of("step_failed", correlation_id, error=serialize(error)), error
    )


def execute_step(
    definition: StepDef,
    correlation_id: str,
    input: bytes,
    *,
    attempt: int,
    now: datetime,
    workflow: WorkflowMetadata,
    sync_in_thread: bool = True,
    quick_inline: bool = False,
    payloads: RunPayloads | None = None,
) -> Coroutine[Any, Any, StepOutcome]:
    """Run attempt ``attempt`` of a step and say what to record (a span when tracing is on).

    Returns the coroutine to await: without tracing, the attempt's own (one
    coroutine frame less on every step).
    """
    return attempt_runner()(
        definition,
        correlation_id,
        input,
        attempt=attempt,
        now=now,
        workflow=workflow,
        sync_in_thread=sync_in_thread,
        quick_inline=quick_inline,
        payloads=payloads,
    )


def attempt_runner() -> Callable[..., Coroutine[Any, Any, StepOutcome]]:
    """What :func:`execute_step` calls, for a caller that passes every argument itself.

    The attempt's own coroutine function without tracing (no frame in between),
    else the one that wraps it in a span.
    """
    # tracing_enabled(), read without its call (once a step)
    return _execute_step if _otel._tracer is None else _traced


async def _traced(
    definition: StepDef,
    correlation_id: str,
    input: bytes,
    *,
    attempt: int,
    now: datetime,
    workflow: WorkflowMetadata,
    sync_in_thread: bool = True,
    quick_inline: bool = False,
    payloads: RunPayloads | None = None,
) -> StepOutcome:
    with span(
        f"durasim.step {definition.name}",
        run_id=workflow.run_id,
        step_id=correlation_id,
        step=definition.step_id,
        attempt=attempt,
    ) as current:
        outcome = await _execute_step(
            definition,
            correlation_id,
            input,
            attempt=attempt,
            now=now,
            workflow=workflow,
            sync_in_thread=sync_in_thread,
            quick_inline=quick_inline,
            payloads=payloads,
        )
        current.set("durasim.outcome", outcome.request.type.value)
        if outcome.error is None:
            return outcome
        current.failed(outcome.error)
    # Reported (logged, serialized into the request, on the span): the error goes no
    # further.  Its traceback's frames reach back (f_back, Python 3.12+) to the caller
    # holding this outcome: kept, they would tie the run into a reference cycle.
    return _outcome(request=outcome.request)


async def _execute_step(
    definition: StepDef,
    correlation_id: str,
    input: bytes,
    *,
    attempt: int,
    now: datetime,
    workflow: WorkflowMetadata,
    sync_in_thread: bool = True,
    quick_inline: bool = False,
    payloads: RunPayloads | None = None,
) -> StepOutcome:
    """Run attempt ``attempt`` of a step and say what to record.

    A sync body runs in a thread unless ``sync_in_thread=False`` (then on the
    calling loop: no thread hop, but the loop is blocked while it runs).  With
    ``quick_inline``, a function known to be quick runs on the loop all the same
    (:func:`~._step_threads.runs_inline`; ``Limits(sync_steps="auto")``).
    ``payloads``: the run's payloads, to decode an input that refers to values
    stored in other records of the run, and to write a result that refers to
    the input (see ``_payloads``).
    """
    if workflow.execution_context is not None:  # a resumed or forked run
        seeded = seeded_result(workflow.execution_context, correlation_id)
        if seeded is not None:  # the source run's recorded result, not a new execution
            log.info(
                "run %s: step %s reuses the recorded result",
                workflow.run_id,
                correlation_id,
                extra={"run_id": workflow.run_id, "step_id": correlation_id, "attempt": attempt},
            )
            return _outcome(request=step_completed_request(correlation_id, seeded))
    try:
        # The call this process's replay just encoded, when the log holds its bytes:
        # its scalars are what decoding them gives.
        call = payloads.take_call(correlation_id, input) if payloads is not None else None
        if call is not None:
            # The call's own tuple and dict, only ever passed on unpacked (``*args,
            # **kwargs``): the body gets copies, as from the lists decoded below.
            args: Sequence[Any] = call[1]
            kwargs = call[2]
            fn = definition.fn
        else:
            payload = loads_plain(input)  # the common input, JSON scalars: no codec needed
            if payload is NOT_PLAIN:
                payload = decode_payload(input, payloads, record=correlation_id)
            args, kwargs = list(payload["args"]), dict(payload["kwargs"])
            closure = payload.get("closure") or {}
            fn = with_closure(definition.fn, closure) if closure else definition.fn
    except (SerializationError, KeyError, TypeError) as exc:
        error = FatalError(f"step input cannot be decoded: {exc}")
        return _failed(correlation_id, error, _Attempt(definition, workflow.run_id, attempt))
    step_token = STEP_METADATA.set(
        _step_metadata(
            run_id=workflow.run_id,
            step_id=correlation_id,
            step_name=definition.step_id,
            attempt=attempt,
        )
    )
    # Set by the delivery for its whole drive already (then nothing to set here).
    workflow_token = None if _current_workflow() is workflow else WORKFLOW_METADATA.set(workflow)
    try:
        # ``is_async`` was read off ``definition.fn``; only a closure copy needs a look.
        is_async = definition.is_async or (
            fn is not definition.fn and inspect.iscoroutinefunction(fn)
        )
        if is_async:  # on this loop: named by the heartbeat if it blocks the loop
            running, entry = STEPS_HERE.steps, (definition.name, wall_monotonic())
            running.append(entry)
            try:
                result = await fn(*args, **kwargs)
            finally:
                running.remove(entry)
        elif not sync_in_thread:
            running, entry = STEPS_HERE.steps, (definition.name, wall_monotonic())
            running.append(entry)
            try:
                result = fn(*args, **kwargs)
            finally:
                running.remove(entry)
        elif quick_inline and runs_inline(fn):
            # A quick function, inline: timed, to send it back to the threads if slow.
            # (When the two clocks are one, the heartbeat's reading times it too.)
            began = wall_monotonic()
            running, entry = STEPS_HERE.steps, (definition.name, began)
            running.append(entry)
            if not _ONE_CLOCK:
                began = wall_perf_counter()
            try:
                result = fn(*args, **kwargs)
            finally:
                running.remove(entry)
                ran_inline(fn, (wall_monotonic() if _ONE_CLOCK else wall_perf_counter()) - began)
        else:
            result = await run_in_step_thread(fn, *args, **kwargs)
    except FatalError as exc:
        return _failed(correlation_id, exc, _Attempt(definition, workflow.run_id, attempt))
    except asyncio.CancelledError:
        raise  # the delivery is cancelled: not the step's outcome
    except BaseException as exc:  # any user error is an outcome, never a crash
        if passes_through(exc):  # an interrupt of the host (the simulator's watchdog)
            raise
        where = _Attempt(definition, workflow.run_id, attempt)
        return _retry_or_fail(definition, correlation_id, exc, where=where, now=now)
    finally:
        STEP_METADATA.reset(step_token)
        if workflow_token is not None:
            WORKFLOW_METADATA.reset(workflow_token)
    scalar = plain_scalar(result)  # the common result: refers to nothing
    if scalar is not None:
        if payloads is not None:  # the replay decodes these very bytes next: no need
            payloads.plain_result = (scalar, result)
        return _outcome(request=step_completed_request(correlation_id, scalar))
    try:
        root = f"result of step {definition.name}"
        if payloads is None:
            data = serialize(result, root=root)
        else:  # a result made from the input refers to it (a grown history: a delta)
            data = payloads.encode_result(result, root=root)
    except SerializationError as exc:
        return _failed(correlation_id, exc, _Attempt(definition, workflow.run_id, attempt))
    return _outcome(request=step_completed_request(correlation_id, data))


@attrs.frozen
class _Attempt:
    """Which attempt of which step of which run ended: the fields of its log record."""

    definition: StepDef
    run_id: str
    attempt: int


def _log_attempt(
    where: _Attempt,
    correlation_id: str,
    error: BaseException,
    retry_at: datetime | None,
    now: datetime,
) -> None:
    """One record per failed attempt: the run, the step, the attempt, the delay, the traceback."""
    if not failures_log.isEnabledFor(logging.WARNING):
        return
    name = where.definition.name
    fields = {
        "run_id": where.run_id,
        "step": name,
        "step_id": correlation_id,
        "attempt": where.attempt,
    }
    if retry_at is None:
        failures_log.error(
            "run %s: step %s (%s) failed on attempt %d; no retry left\n%s",
            where.run_id,
            name,
            correlation_id,
            where.attempt,
            ErrorText(error),
            extra={**fields, "outcome": "failed"},
        )
        return
    delay = max(0.0, (retry_at - now).total_seconds())
    failures_log.warning(
        "run %s: step %s (%s) attempt %d failed (%s: %s); retry %d in %.3g s\n%s",
        where.run_id,
        name,
        correlation_id,
        where.attempt,
        type(error).__name__,
        error,
        where.attempt + 1,
        delay,
        ErrorText(error),
        extra={**fields, "outcome": "retrying", "retry_in": delay},
    )


def _failed(
    correlation_id: str, error: BaseException, where: _Attempt | None = None
) -> StepOutcome:
    if where is not None:
        _log_attempt(where, correlation_id, error, None, datetime.min)
    return StepOutcome(
        EventRequest.of("step_failed", correlation_id, error=_error_bytes(error)),
        _for_span(error),
    )


def _retry_or_fail(
    definition: StepDef,
    correlation_id: str,
    error: BaseException,
    *,
    where: _Attempt,
    now: datetime,
) -> StepOutcome:
    if where.attempt > definition.max_retries:
        return _failed(correlation_id, error, where)
    retry_after = now + backoff(where.attempt)
    if isinstance(error, RetryableError) and error.retry_after is not None:
        retry_after = _absolute(error.retry_after, now)
    _log_attempt(where, correlation_id, error, retry_after, now)
    return StepOutcome(
        EventRequest.of(
            "step_retrying", correlation_id, error=_error_bytes(error), retry_after=retry_after
        ),
        _for_span(error),
    )


def _for_span(error: BaseException) -> BaseException | None:
    """The error an outcome carries: only for the span that reports it (:func:`_traced`).

    Logged and serialized into the request already, it goes no further: on Python
    3.12+ its traceback's frames keep their callers (``f_back``), and the caller holds
    the outcome, so a kept error would tie the delivery into a reference cycle.
    """
    return error if tracing_enabled() else None


def _absolute(retry_after: Any, now: datetime) -> datetime:
    if isinstance(retry_after, datetime):
        return retry_after
    if isinstance(retry_after, timedelta):
        return now + retry_after
    return now + timedelta(seconds=float(retry_after))


def _error_bytes(error: BaseException) -> bytes:
    try:
        return serialize(error, root="step error")
    except SerializationError:
        # An exception carrying unserializable args still fails the step, by name.
        return serialize(FatalError(f"{type(error).__name__}: {error}"), root="step error")
