"""The fixtures of the contract tests: a World under test from ``durasim_world_factory``.

Each contract module imports ``world``, ``clock`` and ``make_world`` from here, so
the tests run the same way whether pytest collected them from the installed
package (``pytest --durasim-conformance``) or a repository re-exported them.
The one thing the user provides is ``durasim_world_factory``, a fixture that
returns a factory ``make(setup: WorldSetup) -> World`` (docs/conformance.md).

Capabilities gate the tests: the World handed to a test is wrapped by
:class:`GatedWorld`, and a test that uses a feature the World does not declare
(``create_batch`` without ``batch``, a ``resume_id`` without
``hook_resume_dedup``, ``expected_seq`` without ``conditional_writes``, an
``attr_set`` event without ``attr_set``, the queue or streams facets ...) is
skipped with the capability named, at the first call that needs it.  A test
that expects a refusal the World does not promise (``InvalidRequest`` without
``input_validation``, ``EntityConflict`` without ``strict_lifecycles`` ...) is
skipped where it asserts it (:func:`require`, called by ``assert_refused``).
The report counts these skips as *not applicable*.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import pytest

from durasim.worlds import (
    BatchResult,
    Capabilities,
    CountingIds,
    EventRequest,
    EventResult,
    FixedClock,
    World,
    WorldFactory,
    WorldSetup,
    check_factory,
)

__all__ = [
    "NO_DELIVERY_LIMIT",
    "GatedWorld",
    "MakeWorld",
    "clock",
    "make_world",
    "require",
    "skip_reason",
    "world",
]

#: ``max_deliveries`` of a World when a test does not ask for dead letters: no
#: test claims a message anywhere near this often.
NO_DELIVERY_LIMIT = 1_000_000


def skip_reason(capability: str) -> str:
    """The skip message for a test that needs ``capability`` (the report parses it)."""
    return f"capability {capability!r} not declared by the World (Capabilities.{capability})"


def _require(caps: Capabilities, capability: str) -> None:
    if not getattr(caps, capability, True):
        pytest.skip(skip_reason(capability))


def require(world: World, capability: str) -> None:
    """Skip the running test unless ``world`` declares ``capability`` (named in the skip)."""
    _require(world.capabilities, capability)


def _check_request(caps: Capabilities, request: object) -> None:
    # Malformed requests go through untouched: refusing them is the World's job.
    data = getattr(request, "data", None)
    if isinstance(data, Mapping) and "resume_id" in data:
        _require(caps, "hook_resume_dedup")
    if str(getattr(getattr(request, "type", None), "value", "")) == "attr_set":
        _require(caps, "attr_set")


def _check_options(caps: Capabilities, options: Mapping[str, Any]) -> None:
    if options.get("in_band") or options.get("expected_seq_in_band") is not None:
        _require(caps, "in_band_fence")
    if options.get("expected_seq") is not None:
        _require(caps, "conditional_writes")


class _GatedEvents:
    """The events facet; skips the test at the first call that needs an undeclared feature."""

    def __init__(self, inner: Any, caps: Capabilities) -> None:
        self._inner = inner
        self._caps = caps

    async def create(
        self, run_id: str | None, request: EventRequest, **options: Any
    ) -> EventResult:
        _check_options(self._caps, options)
        _check_request(self._caps, request)
        result: EventResult = await self._inner.create(run_id, request, **options)
        return result

    async def create_batch(
        self, run_id: str, requests: Sequence[EventRequest], **options: Any
    ) -> BatchResult:
        _require(self._caps, "batch")
        _check_options(self._caps, options)
        for request in requests if isinstance(requests, list | tuple) else ():
            _check_request(self._caps, request)
        result: BatchResult = await self._inner.create_batch(run_id, requests, **options)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _GatedFacet:
    """A whole facet (queue, streams) that exists only with its capability."""

    def __init__(self, inner: Any, caps: Capabilities, capability: str) -> None:
        self._inner = inner
        self._caps = caps
        self._capability = capability

    def __getattr__(self, name: str) -> Any:
        _require(self._caps, self._capability)
        return getattr(self._inner, name)


class GatedWorld:
    """A World under test as the contract tests see it: every facet, gated by capabilities.

    Anything else (``close``, ``clock``, ``_check`` ...) is the wrapped World's own.
    """

    def __init__(self, inner: World) -> None:
        self.inner = inner
        caps = inner.capabilities
        self.runs = inner.runs
        self.steps = inner.steps
        self.hooks = inner.hooks
        self.waits = inner.waits
        self.events = _GatedEvents(inner.events, caps)
        self.queue = _GatedFacet(inner.queue, caps, "queue")
        self.streams = _GatedFacet(inner.streams, caps, "streams")

    @property
    def capabilities(self) -> Capabilities:
        """The wrapped World's declared capabilities."""
        return self.inner.capabilities

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class MakeWorld(Protocol):
    """``make_world(clock, *, max_deliveries=...)``: a fresh World under test on ``clock``."""

    def __call__(self, clock: FixedClock, *, max_deliveries: int = ...) -> World: ...


@pytest.fixture
def clock() -> FixedClock:
    """A clock that moves only when the test says so (no wall-clock sleeps)."""
    return FixedClock()


@pytest.fixture
def make_world(durasim_world_factory: WorldFactory, tmp_path: Path) -> MakeWorld:
    """Builds fresh Worlds from the user's factory, each in its own empty directory."""
    factory = check_factory(durasim_world_factory)
    counter = itertools.count()

    def make(clock: FixedClock, *, max_deliveries: int = NO_DELIVERY_LIMIT) -> World:
        directory = tmp_path / f"world-{next(counter)}"
        directory.mkdir()
        setup = WorldSetup(
            clock=clock, ids=CountingIds(), max_deliveries=max_deliveries, directory=directory
        )
        return cast(World, GatedWorld(factory(setup)))

    return make


@pytest.fixture
def world(make_world: MakeWorld, clock: FixedClock) -> Iterator[World]:
    """A fresh World under test on the test's clock, closed after the test."""
    built = make_world(clock)
    yield built
    asyncio.run(built.close())
