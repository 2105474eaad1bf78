"""The cold-replay oracle: a finished run's log must make the real runtime end it the same way.

:func:`verify_replay` takes the log of a run that ended ``completed`` or
``failed`` (by the workflow's own hand), seeds every event before the terminal
one into a fresh in-memory World (each event written as its writer wrote it:
in-band under the fence with the time it carries, out-of-band at its own
time), sets the clock to the terminal event's time, and runs ONE orchestrator
delivery of the real runtime (:meth:`durasim.runtime.lowlevel.Engine.deliver`).  The delivery
must write exactly the terminal event again: same type, byte-equal output (or
error and error code), nothing else.  Step outcomes recorded after the end
(a step that was still running) are not seeded: they came after the outcome
and cannot have decided it.

No step body runs during the check: the seeded World refuses every
``step_started`` (as a superseded writer is refused), so a workflow that asks
for a new step is stopped before the body starts, and the verdict says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from durasim.runtime import Limits
from durasim.runtime.lowlevel import Engine
from durasim.runtime.serialization import without_tracebacks
from durasim.worlds import (
    RUN_TERMINAL_TYPES,
    CountingIds,
    DurasimError,
    Event,
    EventRequest,
    EventType,
    FixedClock,
    InBandSuperseded,
    MemoryWorld,
    World,
    WorldError,
)

__all__ = ["VERDICTS", "ReplayVerdict", "verify_replay", "verify_replay_log"]

T = EventType
#: Fields a World fills in itself: never sent back when seeding.
_WORLD_ONLY = {
    T.STEP_STARTED: ("attempt",),
    T.HOOK_RECEIVED: ("token",),
    T.WAIT_COMPLETED: ("resume_at",),
}

VERDICTS = {
    "ok": "the delivery wrote exactly the recorded terminal event",
    "replay.diverged": "the workflow no longer matches its log, or asked for new work",
    "replay.suspended": "the delivery suspended: the workflow waits for what the log never gave",
    "replay.status-differs": "the delivery ended the run with another status",
    "replay.output-differs": "same status, but another output (or error, or error code)",
    "replay.log-differs": "the delivery wrote other events than the one terminal event",
    "replay.budget": "the delivery ran out of its replay budget or a run limit",
    "replay.unseedable": "the log cannot be written back into a World (it breaks the contract)",
    "replay.skipped": "not a run the oracle judges (not ended, cancelled, or ended by the runtime)",
}


@attrs.frozen
class ReplayVerdict:
    """The oracle's verdict on one run, with its evidence."""

    run_id: str
    kind: str
    detail: str = ""
    expected: Event | None = None
    written: tuple[Event, ...] = ()
    steps_started: int = 0

    @property
    def ok(self) -> bool:
        """Whether the replay reproduced the run's end (a skipped run is not a failure)."""
        return self.kind in ("ok", "replay.skipped")

    def render(self) -> str:
        """One line, plus the events the delivery wrote."""
        lines = [f"{self.kind}: run {self.run_id}: {self.detail or VERDICTS[self.kind]}"]
        lines += [
            f"  wrote #{e.seq} {e.type.value} {e.correlation_id or ''}".rstrip()
            for e in self.written
        ]
        return "\n".join(lines)


class _Refused(InBandSuperseded):
    """The oracle's World refuses a step start: no body may run during the check."""


class _Guard:
    """An events facet that refuses ``step_started`` and records what is written."""

    def __init__(self, inner: Any, log: list[Event], refused: list[str]) -> None:
        self._inner = inner
        self._log = log
        self._refused = refused

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _check(self, requests: Sequence[EventRequest]) -> None:
        for request in requests:
            if request.type is T.STEP_STARTED:
                self._refused.append(request.correlation_id or "?")
                raise _Refused(
                    f"the oracle refuses step_started of {request.correlation_id}: no step "
                    "body runs during a replay check",
                    seq=0,
                    seq_in_band=0,
                )

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> Any:
        self._check([request])
        result = await self._inner.create(run_id, request, **kw)
        if result.event is not None and result.allocated:
            self._log.append(result.event)
        return result

    async def create_batch(self, run_id: str, requests: Sequence[EventRequest], **kw: Any) -> Any:
        self._check(requests)
        result = await self._inner.create_batch(run_id, requests, **kw)
        self._log.extend(result.events)
        return result


class _OracleWorld:
    """A MemoryWorld whose events facet is guarded (everything else passes through)."""

    def __init__(self, inner: MemoryWorld, log: list[Event], refused: list[str]) -> None:
        self._inner = inner
        self.events = _Guard(inner.events, log, refused)
        # The other facets as attributes: the runtime reads them at every call.
        self.runs, self.steps, self.hooks = inner.runs, inner.steps, inner.hooks
        self.waits, self.queue, self.streams = inner.waits, inner.queue, inner.streams

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _request(event: Event) -> EventRequest:
    data = {k: v for k, v in event.data.items() if k not in _WORLD_ONLY.get(event.type, ())}
    return EventRequest.of(event.type, event.correlation_id, **data)


async def _seed(world: MemoryWorld, clock: FixedClock, events: Sequence[Event]) -> None:
    in_band = 0
    placeholders: list[tuple[str, str]] = []
    for event in events:
        clock.current = max(clock.current, event.created_at)
        if event.type is T.HOOK_CONFLICT:
            # Recreate the holder the World saw, so the same hook_created conflicts again.
            holder_run = str(event.data["conflicting_run_id"])
            holder_hook = str(event.data["conflicting_hook_id"])
            await _placeholder_holder(world, holder_run, holder_hook, str(event.data["token"]))
            placeholders.append((holder_run, holder_hook))
            request = EventRequest.of(
                "hook_created",
                event.correlation_id,
                token=event.data["token"],
                metadata=event.data.get("metadata"),
                is_webhook=event.data.get("is_webhook"),
            )
        elif event.type is T.NOOP:
            raise DurasimError(f"#{event.seq} is a noop, which no client can write back")
        else:
            request = _request(event)
        if event.in_band:
            result = await world.events.create(
                event.run_id,
                request,
                in_band=True,
                expected_seq_in_band=in_band,
                occurred_at=event.created_at,
            )
            in_band += 1
        else:
            result = await world.events.create(event.run_id, request)
        written = result.event
        if written is None or (written.seq, written.type) != (event.seq, event.type):
            got = "nothing" if written is None else f"#{written.seq} {written.type.value}"
            raise DurasimError(f"#{event.seq} {event.type.value} was written back as {got}")
    for run_id, hook_id in placeholders:  # free the tokens again, as they were at the end
        try:
            await world.events.create(run_id, EventRequest.of("hook_disposed", hook_id))
        except WorldError:
            continue


def _loads_as_is(events: Sequence[Event]) -> bool:
    """Whether :func:`_seed` would write ``events`` back exactly as they are.

    True for a log a MemoryWorld's guards accepted in this order, unless it holds
    a ``hook_conflict`` (seeded with a placeholder holder run) or a ``noop``, or an
    out-of-band event is older than one before it (seeded at the later time).
    """
    latest = None
    for number, event in enumerate(events, 1):
        if event.seq != number or event.type is T.HOOK_CONFLICT or event.type is T.NOOP:
            return False
        created = event.created_at
        if latest is None or created > latest:
            latest = created
        elif not event.in_band and created != latest:
            return False
    return bool(events) and events[0].type is T.RUN_CREATED


async def _placeholder_holder(world: MemoryWorld, run_id: str, hook_id: str, token: str) -> None:
    try:
        await world.runs.get(run_id)
    except WorldError:
        await world.events.create(
            run_id, EventRequest.of("run_created", workflow_name="durasim.oracle.holder", input=b"")
        )
        await world.events.create(run_id, EventRequest.of("run_started"))
    try:
        await world.events.create(run_id, EventRequest.of("hook_created", hook_id, token=token))
    except WorldError:
        return  # already there


async def verify_replay(
    world: World, run_id: str, *, limits: Limits | None = None
) -> ReplayVerdict:
    """Judge one run of ``world`` (read through its public API)."""
    return await verify_replay_log(await read_log(world, run_id), limits=limits)


async def read_log(world: World, run_id: str) -> list[Event]:
    """A run's whole log, page by page, through the World's public API."""
    events: list[Event] = []
    page = await world.events.list(run_id, limit=10_000)
    events.extend(page.events)
    while page.has_more:
        page = await world.events.list(run_id, after_seq=events[-1].seq, limit=10_000)
        events.extend(page.events)
    return events


async def verify_replay_log(
    events: Sequence[Event], *, limits: Limits | None = None, checked: bool = False
) -> ReplayVerdict:
    """Judge one run from its log alone (its workflow must be importable here).

    ``checked``: the caller vouches that a :class:`MemoryWorld` wrote this log (its
    guards accepted every event, in this order) and that ``check_invariants``
    passed on it.  Such a log is loaded as it is (:meth:`MemoryWorld.load_checked_log`)
    instead of written back event by event, when writing it back would give
    exactly these events again (see :func:`_loads_as_is`); the verdict is the same.
    """
    run_id = events[0].run_id if events else "?"
    terminal = next((e for e in events if e.type in RUN_TERMINAL_TYPES), None)
    if terminal is None:
        return ReplayVerdict(run_id, "replay.skipped", "the run has not ended")
    if terminal.type is T.RUN_CANCELLED:
        return ReplayVerdict(run_id, "replay.skipped", "the run was cancelled", terminal)
    if terminal.data.get("error_code") not in (None, "USER_ERROR"):
        return ReplayVerdict(
            run_id,
            "replay.skipped",
            f"the runtime ended the run ({terminal.data['error_code']}), not the workflow",
            terminal,
        )
    prefix = [e for e in events if e.seq < terminal.seq]
    clock = FixedClock(prefix[0].created_at if prefix else terminal.created_at)
    store = MemoryWorld(clock=clock, ids=CountingIds())
    try:
        if checked and _loads_as_is(prefix):
            store.load_checked_log(prefix)
            if prefix:
                clock.current = max(clock.current, *(e.created_at for e in prefix))
        else:
            await _seed(store, clock, prefix)
    except (DurasimError, ValueError) as exc:
        return ReplayVerdict(run_id, "replay.unseedable", str(exc), terminal)
    clock.current = max(clock.current, terminal.created_at)
    written: list[Event] = []
    refused: list[str] = []
    oracle = _OracleWorld(store, written, refused)
    limits = _ORACLE_LIMITS if limits is None else _oracle_limits(limits)
    # Its own engine, as a fresh process's: nothing kept from another delivery.
    report = await Engine(oracle).deliver(run_id, limits=limits)
    return _judge(run_id, terminal, report, tuple(written), refused)


def _oracle_limits(limits: Limits) -> Limits:
    """``limits`` as the oracle's one delivery runs: no kept replay, steps inline, no queue."""
    return attrs.evolve(limits, keep_replays=False, sync_steps="inline", queue_steps=False)


#: The oracle's limits when the caller gives none (a frozen value, made once).
_ORACLE_LIMITS = _oracle_limits(Limits())


def _judge(
    run_id: str, expected: Event, report: Any, written: tuple[Event, ...], refused: list[str]
) -> ReplayVerdict:
    def verdict(kind: str, detail: str) -> ReplayVerdict:
        return ReplayVerdict(run_id, kind, detail, expected, written, steps_started=0)

    if refused:
        return verdict(
            "replay.diverged",
            f"the workflow asked for step {refused[0]} where the log has its end "
            f"#{expected.seq} {expected.type.value}",
        )
    if report.divergences:
        return verdict(
            "replay.diverged", report.divergence or "the replay met a log it cannot match"
        )
    ends = [e for e in written if e.type in RUN_TERMINAL_TYPES]
    if not ends:
        new = ", ".join(f"{e.type.value} {e.correlation_id or ''}".strip() for e in written)
        return verdict(
            "replay.suspended",
            f"the delivery ended {report.status} without ending the run"
            + (f"; it wrote {new}" if new else "")
            + ": the workflow now waits for something the log never gave it",
        )
    end = ends[0]
    if end.data.get("error_code") not in (None, "USER_ERROR"):
        return verdict("replay.budget", f"the delivery failed the run: {end.data['error_code']}")
    if end.type is not expected.type:
        return verdict(
            "replay.status-differs",
            f"the log ends with {expected.type.value}; the replay wrote {end.type.value}",
        )
    field = "output" if end.type is T.RUN_COMPLETED else "error"
    if not _same_failure(end.data.get(field), expected.data.get(field)) or end.data.get(
        "error_code"
    ) != expected.data.get("error_code"):
        return verdict(
            "replay.output-differs",
            f"the {field} of #{expected.seq} differs from the replay's "
            f"({_preview(expected.data.get(field))} vs {_preview(end.data.get(field))})",
        )
    if len(written) != 1:
        others = ", ".join(
            f"{e.type.value} {e.correlation_id or ''}".strip() for e in written if e is not end
        )
        return verdict("replay.log-differs", f"besides the end the delivery wrote: {others}")
    return verdict("ok", "")


def _same_failure(ours: Any, theirs: Any) -> bool:
    """Equal values; two errors are the same failure whatever their tracebacks say."""
    if ours == theirs:
        return True
    if isinstance(ours, bytes) and isinstance(theirs, bytes):
        return without_tracebacks(ours) == without_tracebacks(theirs)
    return False


def _preview(value: Any) -> str:
    if isinstance(value, bytes):
        return repr(value[:60]) + ("..." if len(value) > 60 else "")
    return repr(value)
