"""Streams: steps write serialized chunks to named per-run streams; anyone reads them live.

A :class:`Writable` is a value (run id + namespace), so workflow code can make
one without I/O and pass it to a step; it reaches the World only when a step
body writes.  The World stores each chunk as a *frame*: the writing step's
identity, its attempt and the chunk's position among that step's writes,
followed by the serialized value.  The frame is what makes retries safe:

    a step's writes are idempotent by position.  Attempt k > 1 of a step first
    collects what earlier attempts of the same step wrote to the stream; its
    n-th write is skipped if an earlier attempt already wrote the same bytes
    there, and raises :class:`StreamRewriteError` (a ``FatalError``) if it
    wrote something else.  ``await writable.resume()`` moves past the earlier
    attempts' chunks for a step that continues instead of starting over.

Readers never see a chunk twice, live readers see chunks as they are written,
and a stream index means the same chunk for every reader, at any time.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs

from durasim.worlds import DurasimError, InvalidRequest, World

from ._context import running
from ._metadata import StepMetadata, step_world
from .serialization import FatalError, deserialize, serializable, serialize

__all__ = [
    "DEFAULT_NAMESPACE",
    "StreamRewriteError",
    "Writable",
    "get_writable",
    "read_stream",
]

#: The namespace of ``get_writable()`` and ``read_stream(...)`` without one.
DEFAULT_NAMESPACE = "default"

# A namespace is the World's stream name as is (docs/protocol.md §9), so
# ``world.streams.list(run_id)`` lists namespaces.
_NAMESPACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,127}")

#: Frames start with this; anything else in a stream is read as a bare serialized value.
FRAME_PREFIX = b"dsc1:"

_PAGE = 1000
_POLL_FIRST = 0.02
_POLL_MAX = 0.5


@serializable(class_id="error//durasim//StreamRewriteError")
class StreamRewriteError(FatalError):
    """A retried step wrote a different chunk where an earlier attempt already wrote one.

    A ``FatalError``: the step fails at once (another retry would diverge again).

    Attributes:
        run_id: the stream's run.
        namespace: the stream.
        step_id: the writing step's correlation id.
        position: the chunk's position among the step's writes to the stream (0-based).
    """

    run_id: str
    namespace: str
    step_id: str
    position: int


def _check_namespace(namespace: str | None) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise InvalidRequest(
            f"stream namespace {namespace!r} is malformed: use 1-128 characters from "
            "[A-Za-z0-9_.:/-] starting with a letter, a digit or '_' (e.g. 'progress' or "
            "'llm/tokens'), or None for the default stream",
            namespace=namespace,
        )
    return namespace


@serializable(class_id="class//durasim//Writable")
@attrs.frozen(kw_only=True)
class Writable:
    """A handle on one stream of one run; write to it from a step body.

    Made by :func:`get_writable`.  It holds no connection: it is a value that
    crosses step boundaries like any argument, and binds to the running step's
    World at each call.  Chunks may be any serializable value.
    """

    run_id: str
    namespace: str

    async def write(self, chunk: Any) -> None:
        """Append ``chunk`` (serialized now) to the stream; readers see it at once.

        Raises:
            SerializationError: ``chunk`` cannot be serialized.
            StreamClosed: the stream was closed.
            StreamRewriteError: a retried step wrote another chunk at a position
                an earlier attempt filled (see the module docstring).
            DurasimError: called outside a step body.
        """
        world, step = self._bind("write")
        payload = serialize(chunk, root=f"chunk of stream {self.namespace!r}")
        state = _state(step, self)
        async with state.lock:
            previous = await state.previous(world, self, step)
            position = state.position
            if position < len(previous):
                if previous[position] != payload:
                    raise StreamRewriteError(
                        f"step {step.step_id} (attempt {step.attempt}) wrote chunk "
                        f"#{position} of stream {self.namespace!r} of run {self.run_id!r} "
                        "differently from an earlier attempt, which readers may have seen: a "
                        "retried step must write the same chunks again, or call "
                        "'await writable.resume()' first to continue after them",
                        run_id=self.run_id,
                        namespace=self.namespace,
                        step_id=step.step_id,
                        position=position,
                    )
                state.position += 1
                return  # already in the stream
            await world.streams.write(
                self.run_id, self.namespace, _frame(step, self, position, payload)
            )
            state.position += 1

    async def close(self) -> None:
        """Close the stream (idempotent): readers end after its last chunk."""
        world, _ = self._bind("close")
        await world.streams.close(self.run_id, self.namespace)

    async def resume(self) -> int:
        """Continue after the chunks earlier attempts of this step wrote; return their count.

        For a step that can pick up where a failed attempt stopped
        (``for token in tokens[await writable.resume():]``), or that cannot
        reproduce its output and writes a marker instead.  0 on a first attempt.
        """
        world, step = self._bind("resume")
        state = _state(step, self)
        async with state.lock:
            done = len(await state.previous(world, self, step))
            state.position = max(state.position, done)
            return done

    def _bind(self, what: str) -> tuple[World, StepMetadata]:
        now = running()
        step = now.step
        if step is None:
            where = "in workflow code" if now.workflow else "outside a step body"
            raise DurasimError(
                f"Writable.{what}() on stream {self.namespace!r} was called {where}: pass "
                "the writable to a step and call it from the step body"
            )
        return step_world(), step


@attrs.define(eq=False)
class _AttemptState:
    """One step attempt's writes to one stream."""

    position: int = 0
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _earlier: list[bytes] | None = None

    async def previous(self, world: World, writable: Writable, step: StepMetadata) -> list[bytes]:
        """What earlier attempts of this step wrote, by position (read once per attempt)."""
        if self._earlier is None:
            self._earlier = [] if step.attempt <= 1 else await _earlier(world, writable, step)
        return self._earlier


# Keyed by the identity of the attempt's metadata object (a value equal to another
# run's attempt when two Worlds hold the same run id), dropped when the attempt ends.
_ATTEMPTS: dict[int, tuple[weakref.ref[StepMetadata], dict[tuple[str, str], _AttemptState]]] = {}


def _state(step: StepMetadata, writable: Writable) -> _AttemptState:
    key = id(step)
    entry = _ATTEMPTS.get(key)
    if entry is None or entry[0]() is not step:

        def forget(ref: weakref.ref[StepMetadata]) -> None:
            if _ATTEMPTS.get(key, (None,))[0] is ref:
                del _ATTEMPTS[key]

        entry = _ATTEMPTS[key] = (weakref.ref(step, forget), {})
    return entry[1].setdefault((writable.run_id, writable.namespace), _AttemptState())


def _writer(step: StepMetadata, writable: Writable) -> list[Any]:
    # The run is named only when a step writes to another run's stream.
    return [step.step_id] if step.run_id == writable.run_id else [step.step_id, step.run_id]


def _frame(step: StepMetadata, writable: Writable, position: int, payload: bytes) -> bytes:
    header = [*_writer(step, writable), step.attempt, position]
    return FRAME_PREFIX + json.dumps(header, separators=(",", ":")).encode() + b"\n" + payload


def _unframe(data: bytes) -> tuple[list[Any] | None, bytes]:
    if not data.startswith(FRAME_PREFIX):
        return None, data
    end = data.index(b"\n")
    return json.loads(data[len(FRAME_PREFIX) : end]), data[end + 1 :]


async def _earlier(world: World, writable: Writable, step: StepMetadata) -> list[bytes]:
    writer = _writer(step, writable)
    found: dict[int, bytes] = {}
    index = 0
    while True:
        page = await world.streams.read(
            writable.run_id, writable.namespace, start=index, limit=_PAGE
        )
        for chunk in page.chunks:
            header, payload = _unframe(chunk.data)
            if header is not None and header[:-2] == writer:
                found.setdefault(header[-1], payload)
        index = page.next_index
        if not page.has_more:
            break
    # Each attempt writes its positions in order, so earlier attempts filled 0..k-1.
    filled: list[bytes] = []
    while len(filled) in found:
        filled.append(found[len(filled)])
    return filled


def get_writable(namespace: str | None = None) -> Writable:
    """A handle on stream ``namespace`` (default ``"default"``) of the current run.

    In a step body it writes at once; in workflow code it does no I/O and is
    meant to be passed to a step (it is serializable).

    Raises:
        InvalidRequest: ``namespace`` is not 1-128 characters from ``[A-Za-z0-9_.:/-]``.
        DurasimError: called outside a workflow or a step body.
    """
    name = _check_namespace(namespace)
    now = running()
    step = now.step
    if step is not None:
        step_world()  # fail here rather than at the first write
        return Writable(run_id=step.run_id, namespace=name)
    workflow = now.workflow
    if workflow is not None:
        return Writable(run_id=workflow.run_id, namespace=name)
    raise DurasimError(
        "get_writable() was called outside a workflow or step: call it from workflow code "
        "or a step body; outside a run, read streams with read_stream()"
    )


#: How a reader waits between polls: a module seam, so a test can record the delays without
#: patching ``asyncio.sleep`` for every task of the process (a World's connection pool too).
_poll_sleep = asyncio.sleep


async def _backoff_poll(delays: list[float]) -> None:
    delay = delays[0] if delays else _POLL_FIRST
    delays[:] = [min(_POLL_MAX, delay * 2)]
    await _poll_sleep(delay)


async def read_stream(
    world: World,
    run_id: str,
    namespace: str | None = None,
    start: int = 0,
    *,
    poll: Callable[[], Awaitable[object]] | None = None,
) -> AsyncIterator[Any]:
    """Yield the chunks of a run's stream from index ``start``, live, until it ends.

    ``start`` counts from 0 (negative: from the end).  When the reader has
    caught up with an open stream it awaits ``poll()`` and reads again; the
    default waits 20 ms, doubling to 500 ms while nothing arrives.  The stream
    ends at its close, or once the run has ended and every chunk is read (no
    step can write after the run ends).

    Raises:
        InvalidRequest: a malformed namespace.
        RunNotFound: no such run.
    """
    name = _check_namespace(namespace)
    delays: list[float] = []
    wait = poll if poll is not None else lambda: _backoff_poll(delays)
    index = start
    run_ended = False
    while True:
        page = await world.streams.read(run_id, name, start=index, limit=_PAGE)
        for chunk in page.chunks:
            yield deserialize(_unframe(chunk.data)[1])
        index = page.next_index
        if page.done:
            return
        if page.chunks:
            delays.clear()
            continue
        if run_ended:
            return
        # Read once more after seeing the run end: a write may have landed in between.
        run_ended = (await world.runs.get(run_id)).status.terminal
        if not run_ended:
            await wait()
