"""SimWorld: a World that routes every facet call through the simulator.

The runtime gets a :class:`SimWorld`; each of its facet methods (``runs``,
``steps``, ``events``, ``hooks``, ``waits``, ``queue``, ``streams``) forwards to
the wrapped store (the queue to the simulator's recording queue) through
:meth:`Interceptor.call`, which attributes the call to a writer, makes its
``before`` and ``after`` points, and lets the scheduler park it at each.
Calls from code the simulator did not launch (the script) go straight through:
they are traced, never intercepted.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from durasim.worlds import (
    Capabilities,
    EventsFacet,
    HooksFacet,
    QueueFacet,
    RunsFacet,
    StepsFacet,
    StreamsFacet,
    WaitsFacet,
    World,
)

from ._clock import SimClock
from ._points import Writer

__all__ = ["ACTOR", "Actor", "Interceptor", "SimWorld"]


@attrs.define(eq=False)
class Actor:
    """A task the simulator launched: a delivery, a queued step, an external sender.

    Tasks it spawns (inline step bodies) share it through the context.
    """

    writer: Writer
    message_id: str | None = None
    crashed: bool = False
    duplicate: bool = False


#: The actor the current task works for; ``None`` in the script (not intercepted).
ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "durasim_sim_actor", default=None
)


class Interceptor(Protocol):
    """What :class:`SimWorld` forwards every call to (the scheduler)."""

    async def call(
        self,
        call: str,
        method: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run ``method(*args, **kwargs)`` with interception points around it."""
        ...


class _Facet:
    """Forwards each method of one facet through the interceptor (wrappers cached)."""

    def __init__(self, interceptor: Interceptor, name: str, target: object) -> None:
        self._interceptor = interceptor
        self._name = name
        self._target = target

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        fn = getattr(self._target, method)
        call = f"{self._name}.{method}"
        interceptor = self._interceptor

        def forward(*args: Any, **kwargs: Any) -> Awaitable[Any]:
            # The interceptor's coroutine itself: no coroutine of our own around it.
            return interceptor.call(call, fn, args, kwargs)

        forward.__name__ = method
        setattr(self, method, forward)
        return forward


class SimWorld:
    """The World the simulated runtime sees: ``store`` behind interception points.

    Args:
        interceptor: the scheduler.
        store: the World that stores everything (memory, SQLite, yours).
        queue: the recording queue (replaces the store's queue).
        clock: the virtual clock (the store must have been built on it).
    """

    def __init__(
        self, interceptor: Interceptor, store: World, queue: QueueFacet, clock: SimClock
    ) -> None:
        self.store = store
        self._clock = clock
        # Each forwarder stands in for the facet it wraps, typed as that facet (through
        # Any rather than seven cast() calls a Sim).
        facet: Any = _Facet
        self.runs: RunsFacet = facet(interceptor, "runs", store.runs)
        self.steps: StepsFacet = facet(interceptor, "steps", store.steps)
        self.events: EventsFacet = facet(interceptor, "events", store.events)
        self.hooks: HooksFacet = facet(interceptor, "hooks", store.hooks)
        self.waits: WaitsFacet = facet(interceptor, "waits", store.waits)
        self.queue: QueueFacet = facet(interceptor, "queue", queue)
        self.streams: StreamsFacet = facet(interceptor, "streams", store.streams)

    @property
    def capabilities(self) -> Capabilities:
        """The store's capabilities."""
        return self.store.capabilities

    if TYPE_CHECKING:

        @property
        def clock(self) -> SimClock:
            """The virtual clock."""

    else:  # the same read-only property, its getter in C (the runtime reads it at every step)
        clock = property(attrgetter("_clock"), doc="The virtual clock.")

    async def close(self) -> None:
        """Nothing: the simulation closes the store it built."""
