"""The in-memory World: the reference fold plus dictionaries.

It is the reference every other World is compared against, so it does nothing
clever: each write builds a plan with :mod:`._fold` and stores it.  Nothing it
returns can change what it stores (every value is frozen).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from ._entities import (
    BatchResult,
    Capabilities,
    Chunk,
    ChunkPage,
    Delivery,
    EventPage,
    EventResult,
    Hook,
    HookStatus,
    Message,
    Run,
    RunPage,
    RunStatus,
    Snapshot,
    Step,
    StreamInfo,
    Wait,
    WaitStatus,
)
from ._errors import (
    EventNotFound,
    HookNotFound,
    InvalidRequest,
    LeaseLost,
    RunNotFound,
    StepNotFound,
    StreamClosed,
    WaitNotFound,
)
from ._events import (
    Event,
    EventRequest,
    EventType,
    check_run_id,
    check_stream_name,
    validate_request,
)
from ._fold import FoldedRun, Plan, fold_log, plan_batch, plan_create_run, plan_write
from ._paging import (
    check_limit,
    check_queue_name,
    decode_run_cursor,
    encode_run_cursor,
    normalize_statuses,
    run_sort_key,
)
from ._time import Clock, IdSource, RandomIds, SystemClock

__all__ = ["MemoryWorld", "check_request"]


def check_request(request: object) -> EventRequest:
    """Re-validate a request whatever built it (a hand-made EventRequest skips ``of``)."""
    if not isinstance(request, EventRequest):
        raise InvalidRequest(
            f"expected an EventRequest, got {type(request).__name__}: build one with "
            "EventRequest.of(type, correlation_id, **data)"
        )
    if request.validated:
        return request
    return validate_request(request.type, request.correlation_id, request.data)


def check_delay(delay: object, *, what: str = "delay") -> float:
    """A non-negative number of seconds, at most 366 days."""
    if (
        isinstance(delay, bool)
        or not isinstance(delay, int | float)
        or not 0 <= delay <= 31_622_400
    ):
        raise InvalidRequest(f"{what} must be a number of seconds in 0..31622400, got {delay!r}")
    return float(delay)


@attrs.define
class _RunRecord:
    state: FoldedRun
    events: list[Event] = attrs.field(factory=list)


class _View:
    """The fold's StateView over the memory World's dicts."""

    def __init__(self, world: MemoryWorld, record: _RunRecord | None) -> None:
        self._world = world
        self._record = record

    def run(self) -> Run | None:
        return self._record.state.run if self._record else None

    def counters(self) -> Snapshot:
        if self._record is None:
            return Snapshot(seq=0, seq_in_band=0)
        return Snapshot(seq=self._record.state.seq, seq_in_band=self._record.state.seq_in_band)

    def step(self, step_id: str) -> Step | None:
        return self._record.state.steps.get(step_id) if self._record else None

    def hook(self, hook_id: str) -> Hook | None:
        return self._record.state.hooks.get(hook_id) if self._record else None

    def wait(self, wait_id: str) -> Wait | None:
        return self._record.state.waits.get(wait_id) if self._record else None

    def live_hook_by_token(self, token: str) -> Hook | None:
        owner = self._world._tokens.get(token)
        if owner is None:
            return None
        return self._world._runs[owner[0]].state.hooks[owner[1]]

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        return self._record.state.resume_ids.get(resume_id) if self._record else None

    def active_hooks(self) -> list[Hook]:
        if self._record is None:
            return []
        return [h for h in self._record.state.hooks.values() if h.status is HookStatus.ACTIVE]

    def waiting_waits(self) -> list[Wait]:
        if self._record is None:
            return []
        return [w for w in self._record.state.waits.values() if w.status is WaitStatus.WAITING]


@attrs.define
class _QueueSlot:
    message: Message
    order: int
    lease_id: str | None = None
    lease_expires_at: datetime | None = None

    def claimable_at(self) -> datetime:
        if self.lease_expires_at is not None:
            return self.lease_expires_at
        return self.message.available_at


@attrs.define
class _Stream:
    chunks: list[bytes] = attrs.field(factory=list)
    closed: bool = False


class MemoryWorld:
    """The reference World: every run in a dict, every rule from :mod:`._fold`.

    Args:
        clock: where every timestamp comes from (default: real time).
        ids: where run, message and lease ids come from (default: :mod:`secrets`).
        max_deliveries: a message claimed this many times without an ack goes
            to the dead letters on its next claim (``None``: never).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        max_deliveries: int | None = None,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._ids: IdSource = ids or RandomIds()
        self._max_deliveries = max_deliveries
        self._runs: dict[str, _RunRecord] = {}
        self._tokens: dict[str, tuple[str, str]] = {}
        self._queue: dict[str, _QueueSlot] = {}
        self._queue_order = 0
        self._idempotency: dict[str, str] = {}
        self._dead: list[Message] = []
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._closed = False
        self.runs = _Runs(self)
        self.steps = _Steps(self)
        self.events = _Events(self)
        self.hooks = _Hooks(self)
        self.waits = _Waits(self)
        self.queue = _Queue(self)
        self.streams = _Streams(self)

    @property
    def capabilities(self) -> Capabilities:
        """Everything but durability and sharing between processes."""
        return Capabilities()

    @property
    def clock(self) -> Clock:
        """The World's clock."""
        return self._clock

    async def close(self) -> None:
        """Nothing to release; idempotent."""
        self._closed = True

    # -- internals shared by the facets ---------------------------------------

    def _record(self, run_id: str) -> _RunRecord:
        check_run_id(run_id)
        record = self._runs.get(run_id)
        if record is None or record.state.run is None:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)
        return record

    def _store(self, run_id: str, plan: Plan) -> None:
        record = self._runs.setdefault(run_id, _RunRecord(state=FoldedRun()))
        state = record.state
        record.events.extend(plan.events)
        state.run = plan.run
        state.steps.update(plan.steps)
        state.hooks.update(plan.hooks)
        state.waits.update(plan.waits)
        state.seq, state.seq_in_band = plan.after.seq, plan.after.seq_in_band
        for event in plan.events:
            if event.type is EventType.HOOK_RECEIVED and "resume_id" in event.data:
                state.resume_ids.setdefault(event.data["resume_id"], event)
        for hook in plan.hooks.values():
            if hook.status is HookStatus.ACTIVE:
                self._tokens[hook.token] = (hook.run_id, hook.hook_id)
            elif self._tokens.get(hook.token) == (hook.run_id, hook.hook_id):
                del self._tokens[hook.token]

    def _unseen(self, run_id: str, seen_seq: int | None, before: Snapshot) -> tuple[Event, ...]:
        if seen_seq is None:
            return ()
        # Type first: a str would raise TypeError below, a float past the log pass unchecked.
        if type(seen_seq) is not int or seen_seq < 0:
            raise InvalidRequest(f"seen_seq must be a non-negative int, got {seen_seq!r}")
        if seen_seq >= before.seq:
            return ()
        return tuple(self._runs[run_id].events[seen_seq : before.seq])

    def _check(self) -> None:
        """Assert the internal invariants (property tests call this after every rule)."""
        live: dict[str, tuple[str, str]] = {}
        for run_id, record in self._runs.items():
            assert fold_log(record.events) == record.state, f"run {run_id!r}: rows differ from fold"
            assert [e.seq for e in record.events] == list(range(1, len(record.events) + 1))
            assert record.state.seq == len(record.events)
            assert record.state.seq_in_band == sum(e.in_band for e in record.events)
            for hook in record.state.hooks.values():
                if hook.status is HookStatus.ACTIVE:
                    assert hook.token not in live, f"token {hook.token!r} held twice"
                    live[hook.token] = (run_id, hook.hook_id)
        assert live == self._tokens
        for key, message_id in self._idempotency.items():
            assert self._queue[message_id].message.idempotency_key == key


class _Facet:
    def __init__(self, world: MemoryWorld) -> None:
        self._w = world


class _Runs(_Facet):
    async def get(self, run_id: str) -> Run:
        run = self._w._record(run_id).state.run
        assert run is not None
        return run

    async def list(
        self,
        *,
        workflow_name: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        check_limit(limit)
        statuses = normalize_statuses(status)
        after = decode_run_cursor(cursor) if cursor is not None else None
        runs = sorted(
            (r.state.run for r in self._w._runs.values() if r.state.run is not None),
            key=run_sort_key,
            reverse=True,
        )
        picked: list[Run] = []
        for run in runs:
            if after is not None and run_sort_key(run) >= after:
                continue
            if workflow_name is not None and run.workflow_name != workflow_name:
                continue
            if statuses is not None and run.status not in statuses:
                continue
            picked.append(run)
            if len(picked) > limit:
                break
        has_more = len(picked) > limit
        page = tuple(picked[:limit])
        return RunPage(runs=page, cursor=encode_run_cursor(page[-1]) if has_more else None)


class _Steps(_Facet):
    async def get(self, run_id: str, step_id: str) -> Step:
        step = self._w._record(run_id).state.steps.get(step_id)
        if step is None:
            raise StepNotFound(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
        return step

    async def list(self, run_id: str) -> tuple[Step, ...]:
        return tuple(self._w._record(run_id).state.steps.values())


class _Hooks(_Facet):
    async def get(self, run_id: str, hook_id: str) -> Hook:
        hook = self._w._record(run_id).state.hooks.get(hook_id)
        if hook is None:
            raise HookNotFound(f"run {run_id!r} has no hook {hook_id!r}", run_id=run_id)
        return hook

    async def get_by_token(self, token: str) -> Hook:
        owner = self._w._tokens.get(token) if isinstance(token, str) else None
        if owner is None:
            raise HookNotFound(
                f"no live hook holds token {token!r} (never created, disposed, or its run ended)",
                token=token,
            )
        return self._w._runs[owner[0]].state.hooks[owner[1]]

    async def list(self, run_id: str) -> tuple[Hook, ...]:
        return tuple(self._w._record(run_id).state.hooks.values())


class _Waits(_Facet):
    async def get(self, run_id: str, wait_id: str) -> Wait:
        wait = self._w._record(run_id).state.waits.get(wait_id)
        if wait is None:
            raise WaitNotFound(f"run {run_id!r} has no wait {wait_id!r}", run_id=run_id)
        return wait

    async def list(self, run_id: str) -> tuple[Wait, ...]:
        return tuple(self._w._record(run_id).state.waits.values())


class _Events(_Facet):
    async def create(
        self,
        run_id: str | None,
        request: EventRequest,
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
    ) -> EventResult:
        w = self._w
        request = check_request(request)
        now = w._clock.now()
        if request.type is EventType.RUN_CREATED:
            run_id = check_run_id(run_id) if run_id is not None else w._ids.new_id("wrun")
            existing = w._runs.get(run_id)
            plan = plan_create_run(run_id, request, now, existing.state.run if existing else None)
            w._store(run_id, plan)
            return EventResult(event=plan.events[0], run=plan.run, allocated=1)
        if run_id is None:
            raise InvalidRequest(
                f"{request.type.value} needs the run id; only run_created may pass None"
            )
        record = w._record(run_id)
        plan = plan_write(
            _View(w, record),
            run_id,
            request,
            now,
            in_band=in_band,
            expected_seq_in_band=expected_seq_in_band,
        )
        unseen = w._unseen(run_id, seen_seq, plan.before) if plan.events else ()
        w._store(run_id, plan)
        touched = plan.touched
        return EventResult(
            event=plan.events[0] if plan.events else plan.canonical,
            run=plan.run,
            step=touched if isinstance(touched, Step) else None,
            hook=touched if isinstance(touched, Hook) else None,
            wait=touched if isinstance(touched, Wait) else None,
            unseen=unseen,
            allocated=len(plan.events),
        )

    async def create_batch(
        self,
        run_id: str,
        requests: Sequence[EventRequest],
        *,
        in_band: bool = False,
        expected_seq_in_band: int | None = None,
        seen_seq: int | None = None,
    ) -> BatchResult:
        w = self._w
        checked = [check_request(r) for r in requests]
        record = w._record(run_id)
        plan = plan_batch(
            _View(w, record),
            run_id,
            checked,
            w._clock.now(),
            in_band=in_band,
            expected_seq_in_band=expected_seq_in_band,
        )
        unseen = w._unseen(run_id, seen_seq, plan.before)
        w._store(run_id, plan)
        return BatchResult(events=tuple(plan.events), run=plan.run, unseen=unseen)

    async def get(self, run_id: str, seq: int) -> Event:
        events = self._w._record(run_id).events
        if type(seq) is not int or not 1 <= seq <= len(events):
            raise EventNotFound(
                f"run {run_id!r} has no event #{seq} (its log has {len(events)})", run_id=run_id
            )
        return events[seq - 1]

    async def list(self, run_id: str, *, after_seq: int = 0, limit: int = 1000) -> EventPage:
        check_limit(limit)
        if type(after_seq) is not int or after_seq < 0:
            raise InvalidRequest(f"after_seq must be a non-negative int, got {after_seq!r}")
        record = self._w._record(run_id)
        snapshot = Snapshot(seq=record.state.seq, seq_in_band=record.state.seq_in_band)
        events = record.events[after_seq : after_seq + limit]
        return EventPage(
            events=tuple(events),
            snapshot=snapshot,
            has_more=after_seq + len(events) < len(record.events),
        )


class _Queue(_Facet):
    async def enqueue(
        self,
        queue_name: str,
        payload: bytes,
        *,
        run_id: str | None = None,
        orchestrator: bool = False,
        idempotency_key: str | None = None,
        delay: float = 0.0,
    ) -> str:
        w = self._w
        check_queue_name(queue_name)
        _check_message(payload, run_id, orchestrator, idempotency_key)
        delay = check_delay(delay)
        if idempotency_key is not None and idempotency_key in w._idempotency:
            return w._idempotency[idempotency_key]
        now = w._clock.now()
        message = Message(
            message_id=w._ids.new_id("msg"),
            queue_name=queue_name,
            payload=payload,
            available_at=now + timedelta(seconds=delay),
            enqueued_at=now,
            run_id=run_id,
            orchestrator=orchestrator,
            idempotency_key=idempotency_key,
        )
        w._queue_order += 1
        w._queue[message.message_id] = _QueueSlot(message=message, order=w._queue_order)
        if idempotency_key is not None:
            w._idempotency[idempotency_key] = message.message_id
        return message.message_id

    async def claim(
        self, *, queue_prefix: str = "", lease_seconds: float = 30.0
    ) -> Delivery | None:
        w = self._w
        lease = check_delay(lease_seconds, what="lease_seconds")
        now = w._clock.now()
        busy = {
            s.message.run_id
            for s in w._queue.values()
            if s.message.orchestrator
            and s.lease_expires_at is not None
            and s.lease_expires_at > now
        }
        due = sorted(
            (
                s
                for s in w._queue.values()
                if s.message.queue_name.startswith(queue_prefix) and s.claimable_at() <= now
            ),
            key=lambda s: (s.claimable_at(), s.order),
        )
        for slot in due:
            message = slot.message
            if message.orchestrator and message.run_id in busy:
                continue
            if w._max_deliveries is not None and message.attempt >= w._max_deliveries:
                self._dead_letter(slot)
                continue
            message = attrs.evolve(message, attempt=message.attempt + 1)
            slot.message = message
            slot.lease_id = w._ids.new_id("lease")
            slot.lease_expires_at = now + timedelta(seconds=lease)
            return Delivery(
                message=message, lease_id=slot.lease_id, lease_expires_at=slot.lease_expires_at
            )
        return None

    def _dead_letter(self, slot: _QueueSlot) -> None:
        w = self._w
        del w._queue[slot.message.message_id]
        if slot.message.idempotency_key is not None:
            w._idempotency.pop(slot.message.idempotency_key, None)
        w._dead.append(slot.message)

    def _held(self, delivery: Delivery) -> _QueueSlot:
        slot = self._w._queue.get(delivery.message_id)
        if slot is None or slot.lease_id != delivery.lease_id:
            raise LeaseLost(
                f"message {delivery.message_id!r}: lease {delivery.lease_id!r} is no longer "
                "held (acked, or re-claimed after it expired); the message is not yours to settle",
                message_id=delivery.message_id,
            )
        return slot

    async def ack(self, delivery: Delivery) -> None:
        slot = self._held(delivery)
        del self._w._queue[delivery.message_id]
        if slot.message.idempotency_key is not None:
            self._w._idempotency.pop(slot.message.idempotency_key, None)

    async def release(self, delivery: Delivery, *, delay: float = 0.0) -> None:
        slot = self._held(delivery)
        delay = check_delay(delay)
        slot.lease_id = None
        slot.lease_expires_at = None
        slot.message = attrs.evolve(
            slot.message, available_at=self._w._clock.now() + timedelta(seconds=delay)
        )

    async def extend(self, delivery: Delivery, *, lease_seconds: float) -> Delivery:
        slot = self._held(delivery)
        lease = check_delay(lease_seconds, what="lease_seconds")
        slot.lease_expires_at = self._w._clock.now() + timedelta(seconds=lease)
        return attrs.evolve(delivery, lease_expires_at=slot.lease_expires_at)

    async def next_due(self, *, queue_prefix: str = "") -> datetime | None:
        times = [
            s.claimable_at()
            for s in self._w._queue.values()
            if s.message.queue_name.startswith(queue_prefix)
        ]
        return min(times, default=None)

    async def messages(self) -> tuple[Message, ...]:
        slots = sorted(self._w._queue.values(), key=lambda s: s.order)
        return tuple(s.message for s in slots)

    async def dead_letters(self) -> tuple[Message, ...]:
        return tuple(self._w._dead)


def _check_message(payload: Any, run_id: Any, orchestrator: Any, key: Any) -> None:
    if type(payload) is not bytes:
        raise InvalidRequest(
            f"queue payload must be bytes, got {type(payload).__name__}: serialize it first"
        )
    if run_id is not None:
        check_run_id(run_id)
    if orchestrator and run_id is None:
        raise InvalidRequest("an orchestrator message must name its run: pass run_id=")
    if key is not None and (not isinstance(key, str) or not key or len(key) > 512):
        raise InvalidRequest(f"idempotency_key must be a str of 1-512 characters, got {key!r}")


class _Streams(_Facet):
    def _stream(self, run_id: str, name: str, *, create: bool) -> _Stream | None:
        check_stream_name(name)
        self._w._record(run_id)
        key = (run_id, name)
        if create:
            return self._w._streams.setdefault(key, _Stream())
        return self._w._streams.get(key)

    async def write(self, run_id: str, name: str, chunks: bytes | Sequence[bytes]) -> int:
        batch = _check_chunks(chunks)
        stream = self._stream(run_id, name, create=True)
        assert stream is not None
        if stream.closed:
            raise StreamClosed(
                f"stream {name!r} of run {run_id!r} is closed; open a new stream name",
                run_id=run_id,
            )
        stream.chunks.extend(batch)
        return len(stream.chunks) - 1

    async def close(self, run_id: str, name: str) -> None:
        stream = self._stream(run_id, name, create=True)
        assert stream is not None
        stream.closed = True

    async def read(self, run_id: str, name: str, *, start: int = 0, limit: int = 100) -> ChunkPage:
        check_limit(limit)
        stream = self._stream(run_id, name, create=False) or _Stream()
        first = _clamp_start(start, len(stream.chunks))
        picked = stream.chunks[first : first + limit]
        return ChunkPage(
            chunks=tuple(Chunk(index=first + i, data=d) for i, d in enumerate(picked)),
            next_index=first + len(picked),
            closed=stream.closed,
            has_more=first + len(picked) < len(stream.chunks),
        )

    async def info(self, run_id: str, name: str) -> StreamInfo:
        stream = self._stream(run_id, name, create=False) or _Stream()
        return StreamInfo(tail_index=len(stream.chunks) - 1, closed=stream.closed)

    async def list(self, run_id: str) -> tuple[str, ...]:
        self._w._record(run_id)
        return tuple(sorted(name for (rid, name) in self._w._streams if rid == run_id))


def _check_chunks(chunks: Any) -> list[bytes]:
    batch = (
        [chunks]
        if isinstance(chunks, bytes)
        else list(chunks)
        if isinstance(chunks, list | tuple)
        else None
    )
    if batch is None or not all(type(c) is bytes for c in batch):
        raise InvalidRequest(
            "stream chunks must be bytes or a list of bytes: serialize each chunk first"
        )
    return batch


def _clamp_start(start: Any, length: int) -> int:
    if type(start) is not int:
        raise InvalidRequest(f"start must be an int, got {start!r}")
    return max(0, length + start) if start < 0 else start
