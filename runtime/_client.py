"""Starting runs and reading them: the API used outside workflows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar, overload

import attrs

from durasim.worlds import (
    EntityConflict,
    Event,
    EventRequest,
    EventType,
    InvalidRequest,
    RunStatus,
    World,
)

from ._authoring import workflow_definition
from ._children import await_child, cascade_cancel, notify_parent, outcome_of, raise_or_return
from ._children import start_child as _start_child_step
from ._context import running
from ._decorators import WorkflowFunction
from ._errors import RunNotFinished
from ._signals import mark_cancelled
from ._streams import read_stream as _read_stream
from ._versions import run_deployment, start_deployment
from ._wake import enqueue_wake
from .serialization import serialize

__all__ = ["Run", "get_run", "start"]

R = TypeVar("R")


def _in_workflow() -> bool:
    return running().replay("create_hook") is not None


@attrs.define(eq=False)
class Run(Generic[R]):
    """A handle on one run in a World, typed by the workflow's return type.

    In workflow code (a child started with ``start()``) ``world`` is ``None``
    and only ``run_id`` and ``await result()`` are available.
    """

    run_id: str
    world: World | None

    @property
    def _world(self) -> World:
        if self.world is None:
            raise InvalidRequest(
                f"run {self.run_id}: workflow code can only `await child.result()`; read or "
                "cancel the child from a step or from outside the workflow",
                run_id=self.run_id,
            )
        return self.world

    async def status(self) -> RunStatus:
        """The run's status now."""
        return (await self._world.runs.get(self.run_id)).status

    async def result(
        self,
        timeout: float | None = 0,  # noqa: ASYNC109 -- a deadline on the World's clock
        *,
        poll: Callable[[], Awaitable[object]] | None = None,
        every: float = 0.5,
    ) -> R:
        """The workflow's return value, or its failure raised.

        Args:
            timeout: how long to wait for the run to end, in seconds of the World's
                clock: ``0`` (the default) does not wait, ``None`` waits as long as
                it takes.  Something else must drive the run meanwhile (a worker, in
                this process or another).
            poll: replaces the wait between two reads of the run (tests drive it
                without the wall clock); by default ``asyncio.sleep(every)``.
            every: seconds between two reads of the run while waiting.

        Raises:
            RunNotFinished: the run has not ended within ``timeout``.
            WorkflowFailed: the run failed; ``__cause__`` is the workflow's error.
            RunCancelledError: the run was cancelled.

        In workflow code (a child run) this waits durably for the child to end.
        """
        if self.world is None and _in_workflow():
            value: R = await await_child(self.run_id)
            return value
        world = self._world
        deadline = None if timeout is None else world.clock.now().timestamp() + timeout
        while True:
            run = await world.runs.get(self.run_id)
            if run.status.value not in ("pending", "running"):
                done: R = raise_or_return(outcome_of(run))
                return done
            if deadline is not None and world.clock.now().timestamp() >= deadline:
                raise RunNotFinished(
                    f"run {self.run_id} is {run.status.value}"
                    + (f" after {timeout} s" if timeout else "")
                    + ": serve it with a worker (durasim worker, Worker.serve), or wait "
                    "longer (result(timeout=...))",
                    run_id=self.run_id,
                )
            await (poll() if poll is not None else asyncio.sleep(every))

    async def cancel(self, reason: str | None = None) -> bool:
        """Cancel the run (pending or running): ``run_cancelled`` in its log.

        The run stops at its next step boundary; running steps see the signal
        (``get_step_metadata().cancelled`` / ``.cancellation()``); its hooks and
        waits are released; its unfinished child runs are cancelled too.
        Returns ``False`` if it was already cancelled.

        Raises:
            EntityConflict: the run already completed or failed.
        """
        world = self._world
        reason = reason or "cancelled"
        try:
            written = await world.events.create(
                self.run_id, EventRequest.of("run_cancelled", reason=reason)
            )
        except EntityConflict as exc:
            run = await world.runs.get(self.run_id)
            raise EntityConflict(
                f"run {self.run_id} already {run.status.value}; only pending or running runs "
                "can be cancelled",
                run_id=self.run_id,
            ) from exc
        mark_cancelled(world, self.run_id, reason)
        await cascade_cancel(world, self.run_id, reason)
        await notify_parent(world, self.run_id)
        # A delivery of the run sees the end and stops; a sleeping run needs none.
        await enqueue_wake(world, self.run_id, key=f"cancel:{self.run_id}")
        return bool(written.allocated)

    def read_stream(
        self,
        namespace: str | None = None,
        start: int = 0,
        *,
        poll: Callable[[], Awaitable[object]] | None = None,
    ) -> AsyncIterator[Any]:
        """The chunks of this run's stream ``namespace`` from ``start``, live until it ends.

        See docs/streams.md; ``poll`` replaces the wait between two reads of a
        live stream (tests drive it without the wall clock).
        """
        return _read_stream(self._world, self.run_id, namespace, start, poll=poll)

    async def events(self) -> list[Event]:
        """The run's whole log, in order."""
        events: list[Event] = []
        after = 0
        while True:
            page = await self._world.events.list(self.run_id, after_seq=after, limit=5000)
            events.extend(page.events)
            after = page.next_after
            if not page.has_more:
                return events

    async def wake_up(self) -> int:
        """Complete every open durable sleep now; returns how many were woken."""
        world = self._world
        open_waits = [w for w in await world.waits.list(self.run_id) if w.status == "waiting"]
        woken = last = 0
        for wait in open_waits:
            try:
                written = await world.events.create(
                    self.run_id, EventRequest.of("wait_completed", wait.wait_id, early=True)
                )
                woken += 1
                last = written.event.seq if written.event is not None else last
            except EntityConflict:
                continue  # completed meanwhile
        if woken:
            await enqueue_wake(world, self.run_id, seq=last)
        return woken


@overload
async def start(
    workflow: WorkflowFunction[Any, R],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> Run[R]: ...
@overload
async def start(
    workflow: Callable[..., Any],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> Run[Any]: ...
async def start(
    workflow: Callable[..., Any],
    *args: Any,
    world: World | None = None,
    run_id: str | None = None,
    **kwargs: Any,
) -> Run[Any]:
    """Start ``workflow(*args, **kwargs)`` as a durable run and queue its first delivery.

    With a caller-chosen ``run_id`` start is idempotent: starting the same run
    again returns the existing run (and re-queues its delivery, which is
    harmless).  A different workflow under an existing run id is refused.

    In workflow code (no ``world``), this starts a *child* run: a step, so a
    replay or a retry finds the same child; ``await child.result()`` waits for
    it durably.
    """
    definition = workflow_definition(workflow)
    data = serialize({"args": list(args), "kwargs": kwargs}, root=f"{definition.name}(...)")
    if world is None:
        if not _in_workflow():
            raise InvalidRequest(
                f"start({definition.name}, ...) needs world=...: pass the World to start the "
                "run in (only workflow code starts child runs without one)"
            )
        if run_id is not None:
            raise InvalidRequest(
                "a child run's id is derived from its parent's: do not pass run_id= in "
                "workflow code"
            )
        child_id = await _start_child_step(definition.workflow_id, data)
        return Run(run_id=child_id, world=None)
    deployment = start_deployment(definition)
    pinned = {} if deployment is None else {"deployment_id": deployment}
    request = EventRequest.of(
        EventType.RUN_CREATED, workflow_name=definition.workflow_id, input=data, **pinned
    )
    try:
        created = await world.events.create(run_id, request)
        run_id = created.run.run_id
    except EntityConflict:
        assert run_id is not None
        existing = await world.runs.get(run_id)
        if existing.workflow_name != definition.workflow_id:
            raise InvalidRequest(
                f"run {run_id!r} already exists for {existing.workflow_name}, not "
                f"{definition.workflow_id}: choose another run id",
                run_id=run_id,
            ) from None
        deployment = run_deployment(existing)
    await enqueue_wake(world, run_id, key=f"start:{run_id}", deployment=deployment)
    return Run(run_id=run_id, world=world)


def get_run(run_id: str, *, world: World) -> Run[Any]:
    """A handle on an existing run (no I/O until you ask it something)."""
    return Run(run_id=run_id, world=world)
