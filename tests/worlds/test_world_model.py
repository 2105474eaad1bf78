"""Model test: a World driven side by side with the reference MemoryWorld.

A Hypothesis state machine applies one random operation to both Worlds (same
FixedClock, a CountingIds each) and asserts they answer alike: equal results, or
errors of the same type carrying the same facts (never compared by message).  An
invariant then compares everything observable (every run's log, entities,
streams, the run listing and the queue) and runs the Worlds' self-checks.

Ids come from small pools so that collisions, conflicts and refusals are common.
The SQLite and PostgreSQL Worlds run with ``durability="process"``: the model
compares behaviour, and skipping the flush per commit keeps the CI budget.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from _helpers import build_world
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from durasim.worlds import (
    Delivery,
    EventRequest,
    FixedClock,
    MemoryWorld,
    RunStatus,
    World,
    WorldError,
)

RUNS = ["ra", "rb", "wrun_000001", "wrun_000002"]
STEPS = ["s1", "s2"]
HOOKS = ["h1", "h2"]
TOKENS = ["t1", "t2"]
WAITS = ["w1", "w2"]
STREAMS = ["out", "err"]
QUEUES = ["flow/a", "flow/b", "step/x"]

blobs = st.sampled_from([b"", b"x", b"\x00\xff"])
offsets = st.sampled_from([-5, 0, 5, 30]).map(lambda s: timedelta(seconds=s))


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict where each field is present or absent."""
    return st.fixed_dictionaries({}, optional=fields)


def _spec(type_: str, cids: list[str] | None, **fields: st.SearchStrategy[Any]) -> Any:
    required = {k: v for k, v in fields.items() if not k.startswith("opt_")}
    optional = {k[4:]: v for k, v in fields.items() if k.startswith("opt_")}
    return st.tuples(
        st.just(type_),
        st.sampled_from(cids) if cids else st.none(),
        st.fixed_dictionaries(required, optional=optional),
    )


#: (type, correlation id, data); timedelta values become ``now + delta`` when used.
_attr_set = _spec(
    "attr_set",
    None,
    changes=st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from([None, "1", "2"])),
)
#: Run writes; the run-ending ones are rarer so that runs live long enough to matter.
run_requests = st.one_of(
    _spec("run_started", None),
    _spec("run_started", None),
    _attr_set,
    _attr_set,
    _spec("run_completed", None, output=blobs),
    _spec("run_failed", None, error=blobs, opt_error_code=st.just("USER_ERROR")),
    _spec("run_cancelled", None, opt_reason=st.just("stop")),
)
step_requests = st.one_of(
    _spec("step_created", STEPS, step_name=st.just("st"), input=blobs, opt_inline=st.booleans()),
    _spec("step_started", STEPS, opt_owner_message_id=st.just("msg_000001")),
    _spec("step_retrying", STEPS, error=blobs, opt_retry_after=offsets),
    _spec("step_completed", STEPS, result=blobs),
    _spec("step_failed", STEPS, error=blobs),
)
hook_requests = st.one_of(
    _spec("hook_created", HOOKS, token=st.sampled_from(TOKENS), opt_metadata=blobs),
    _spec("hook_received", HOOKS, payload=blobs, opt_resume_id=st.sampled_from(["x1", "x2"])),
    _spec("hook_disposed", HOOKS),
)
wait_requests = st.one_of(
    _spec("wait_created", WAITS, resume_at=offsets),
    _spec("wait_completed", WAITS, opt_early=st.booleans()),
)
requests = st.one_of(run_requests, step_requests, hook_requests, wait_requests)
pair = st.sampled_from(STEPS).map(
    lambda s: [("step_created", s, {"step_name": "st", "input": b"i"}), ("step_started", s, {})]
)
batches = st.one_of(st.lists(requests, min_size=1, max_size=3), pair)
fences = st.sampled_from(["out", "out", "out", "fresh", "fresh", "stale", "missing"])
#: Mostly runs that exist (the machine starts with ra running and rb pending).
targets = st.sampled_from(["ra", "ra", "ra", "ra", "rb", "rb", "wrun_000001", "wrun_000002"])
seen = st.none() | st.integers(0, 8)

#: Malformed calls: each must be refused identically (InvalidRequest) by both Worlds.
BAD_CALLS: list[Callable[[World], Awaitable[Any]]] = [
    lambda w: w.events.create(
        "ra",
        EventRequest(type="step_completed", correlation_id="s1", data={"result": "s"}),  # type: ignore[arg-type]
    ),
    lambda w: w.events.create("a b", EventRequest.of("run_started")),
    lambda w: w.events.create(
        "x'; DROP TABLE events;--", EventRequest.of("run_created", workflow_name="w", input=b"")
    ),
    lambda w: w.events.create("ra", EventRequest(type="noop")),  # type: ignore[arg-type]
    lambda w: w.events.create_batch("ra", []),
    lambda w: w.queue.enqueue("flow/a", "text"),  # type: ignore[arg-type]
    lambda w: w.streams.write("ra", "out", bytearray(b"x")),  # type: ignore[arg-type]
    lambda w: w.runs.list(status=[]),  # not malformed: must be empty in both
]


class WorldComparison(RuleBasedStateMachine):
    """Drive the reference MemoryWorld and a subject World with the same operations."""

    subject_kind: ClassVar[str] = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        self.loop = asyncio.new_event_loop()
        self.directory = Path(tempfile.mkdtemp(prefix="durasim-model-"))
        self.reference = MemoryWorld(clock=self.clock, ids=self._ids(), max_deliveries=2)
        options: dict[str, Any] = {"max_deliveries": 2}
        if self.subject_kind in ("sqlite", "postgres"):
            options["durability"] = "process"
        self.subject = build_world(self.subject_kind, self.directory, self.clock, **options)
        self.deliveries: list[Delivery] = []

    @staticmethod
    def _ids() -> Any:
        from durasim.worlds import CountingIds

        return CountingIds()

    def teardown(self) -> None:
        try:
            # The subject's self-check reads its whole store: once per example is enough.
            check = getattr(self.subject, "_check", None)
            if check is not None:
                check()
            for world in (self.reference, self.subject):
                self.loop.run_until_complete(world.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- comparing answers -------------------------------------------------------------

    def _outcome(self, world: World, call: Callable[[World], Awaitable[Any]]) -> tuple[Any, ...]:
        try:
            return ("ok", self.loop.run_until_complete(call(world)))
        except WorldError as exc:
            return ("error", type(exc), exc.facts)

    def both(self, call: Callable[[World], Awaitable[Any]], what: str = "") -> Any:
        """Apply ``call`` to both Worlds, assert identical answers, return the reference's."""
        expected = self._outcome(self.reference, call)
        actual = self._outcome(self.subject, call)
        assert actual == expected, (
            f"{self.subject_kind} World differs from the reference on {what or call}:\n"
            f"  reference: {expected!r}\n  {self.subject_kind}: {actual!r}"
        )
        return expected[1] if expected[0] == "ok" else None

    @initialize(start_rb=st.booleans())
    def seed_runs(self, start_rb: bool) -> None:
        for run_id in ("ra", "rb"):
            request = EventRequest.of("run_created", workflow_name="wf", input=b"in")
            self.both(lambda w, r=run_id, q=request: w.events.create(r, q), "seed")
        for run_id in ("ra", "rb") if start_rb else ("ra",):
            self.both(
                lambda w, r=run_id: w.events.create(r, EventRequest.of("run_started")), "seed"
            )

    # -- the log -----------------------------------------------------------------------

    def _request(self, spec: tuple[str, str | None, dict[str, Any]]) -> EventRequest:
        type_, cid, data = spec
        now = self.clock.now()
        data = {k: now + v if isinstance(v, timedelta) else v for k, v in data.items()}
        return EventRequest.of(type_, cid, **data)

    def _fence(self, run_id: str, fence: str) -> dict[str, Any]:
        if fence == "out":
            return {}
        if fence == "missing":
            return {"in_band": True}
        count = self.both(lambda w: w.events.list(run_id, limit=1), f"snapshot of {run_id}")
        current = count.snapshot.seq_in_band if count is not None else 0
        if fence == "stale":
            current = current - 1 if current > 0 else current + 1
        return {"in_band": True, "expected_seq_in_band": current}

    @rule(
        run_id=st.sampled_from([None, "ra", "rb"]),
        name=st.sampled_from(["wf", "other"]),
        attributes=st.sampled_from([None, {"a": "1"}]),
    )
    def create_run(self, run_id: str | None, name: str, attributes: dict[str, str] | None) -> None:
        request = EventRequest.of(
            "run_created", workflow_name=name, input=b"in", attributes=attributes
        )
        self.both(lambda w: w.events.create(run_id, request), "run_created")

    def _write(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        request = self._request(spec)
        kwargs = self._fence(run_id, fence)
        self.both(
            lambda w: w.events.create(run_id, request, seen_seq=seen_seq, **kwargs),
            f"create {spec} {kwargs}",
        )

    # One rule per entity family (steps twice): rules are drawn uniformly, and
    # deep lifecycles need many writes to the same few entities.

    @rule(run_id=targets, spec=run_requests, fence=fences, seen_seq=seen)
    def write_run(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=targets, spec=step_requests, fence=fences, seen_seq=seen)
    def write_step(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=targets, spec=step_requests, fence=fences, seen_seq=seen)
    def write_step_again(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=targets, spec=hook_requests, fence=fences, seen_seq=seen)
    def write_hook(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=targets, spec=wait_requests, fence=fences, seen_seq=seen)
    def write_wait(self, run_id: str, spec: Any, fence: str, seen_seq: int | None) -> None:
        self._write(run_id, spec, fence, seen_seq)

    # Lifecycle drivers: the next legal event for one entity, read from the
    # reference (the random rules above reach deep states only rarely).

    @rule(
        run_id=targets,
        step=st.sampled_from(STEPS),
        outcome=st.sampled_from(["step_completed", "step_failed", "step_retrying"]),
        fence=st.sampled_from(["out", "out", "fresh", "stale"]),
        hops=st.integers(1, 3),
    )
    def drive_step(self, *, run_id: str, step: str, outcome: str, fence: str, hops: int) -> None:
        for _ in range(hops):
            current = self.both(lambda w: w.steps.get(run_id, step), "steps.get")
            if current is None:
                spec: Any = ("step_created", step, {"step_name": "st", "input": b"i"})
            elif current.status.value == "pending":
                spec = ("step_started", step, {})
            elif outcome == "step_completed":
                spec = (outcome, step, {"result": b"r"})
            elif outcome == "step_retrying":
                spec = (outcome, step, {"error": b"e", "retry_after": timedelta(seconds=5)})
            else:
                spec = (outcome, step, {"error": b"e"})
            self._write(run_id, spec, fence, None)

    @rule(
        run_id=targets,
        hook=st.sampled_from(HOOKS),
        token=st.sampled_from(TOKENS),
        resume_id=st.sampled_from([None, "x1", "x2"]),
        dispose=st.sampled_from([False, False, True]),
        hops=st.integers(1, 3),
    )
    def drive_hook(
        self,
        *,
        run_id: str,
        hook: str,
        token: str,
        resume_id: str | None,
        dispose: bool,
        hops: int,
    ) -> None:
        for hop in range(hops):
            current = self.both(lambda w: w.hooks.get(run_id, hook), "hooks.get")
            if current is None:
                spec: Any = ("hook_created", hook, {"token": token})
            elif dispose and hop == hops - 1:
                spec = ("hook_disposed", hook, {})
            else:
                data = {"payload": b"p"} | ({"resume_id": resume_id} if resume_id else {})
                spec = ("hook_received", hook, data)
            self._write(run_id, spec, "out", None)

    @rule(run_id=targets, wait=st.sampled_from(WAITS), early=st.booleans(), due=offsets)
    def drive_wait(self, run_id: str, wait: str, early: bool, due: timedelta) -> None:
        current = self.both(lambda w: w.waits.get(run_id, wait), "waits.get")
        if current is None:
            spec: Any = ("wait_created", wait, {"resume_at": due})
        else:
            spec = ("wait_completed", wait, {"early": early})
        self._write(run_id, spec, "out", None)

    @rule(run_id=targets, specs=batches, fence=fences, seen_seq=seen)
    def write_batch(self, run_id: str, specs: list[Any], fence: str, seen_seq: int | None) -> None:
        batch = [self._request(s) for s in specs]
        kwargs = self._fence(run_id, fence)
        self.both(
            lambda w: w.events.create_batch(run_id, batch, seen_seq=seen_seq, **kwargs),
            f"create_batch {specs} {kwargs}",
        )

    @rule(run_id=targets, fence=st.sampled_from(["fresh", "stale"]))
    def concurrent_in_band(self, run_id: str, fence: str) -> None:
        # Three orchestrators holding one count: at most one may win.
        kwargs = self._fence(run_id, fence)

        async def race(world: World) -> list[Any]:
            calls = [
                world.events.create(
                    run_id, EventRequest.of("attr_set", changes={"c": str(i)}), **kwargs
                )
                for i in range(3)
            ]
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
            return [o if not isinstance(o, WorldError) else (type(o), o.facts) for o in outcomes]

        outcomes = self.both(race, "three concurrent in-band writers")
        if outcomes is not None:
            assert sum(not isinstance(o, tuple) for o in outcomes) <= 1

    @rule(call=st.sampled_from(BAD_CALLS))
    def bad_input(self, call: Callable[[World], Awaitable[Any]]) -> None:
        self.both(call, "malformed call")

    @rule(seconds=st.sampled_from([0.5, 1, 5, 10, 30]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- reads that are not part of the invariant ---------------------------------------------

    @rule(
        run_id=targets,
        seq=st.integers(0, 8),
        limit=st.integers(1, 4),
        step=st.sampled_from(STEPS),
        hook=st.sampled_from(HOOKS),
        wait=st.sampled_from(WAITS),
        token=st.sampled_from(TOKENS),
        stream=st.sampled_from(STREAMS),
        start=st.integers(-3, 3),
    )
    def read(
        self,
        *,
        run_id: str,
        seq: int,
        limit: int,
        step: str,
        hook: str,
        wait: str,
        token: str,
        stream: str,
        start: int,
    ) -> None:
        self.both(lambda w: w.events.get(run_id, seq), "events.get")
        self.both(lambda w: w.events.list(run_id, after_seq=seq, limit=limit), "events.list")
        self.both(lambda w: w.steps.get(run_id, step), "steps.get")
        self.both(lambda w: w.hooks.get(run_id, hook), "hooks.get")
        self.both(lambda w: w.waits.get(run_id, wait), "waits.get")
        self.both(lambda w: w.hooks.get_by_token(token), "hooks.get_by_token")
        self.both(lambda w: w.streams.read(run_id, stream, start=start, limit=limit), "read")
        self.both(lambda w: w.streams.info(run_id, stream), "streams.info")

    @rule(
        name=st.sampled_from([None, "wf", "other"]),
        status=st.sampled_from([None, RunStatus.RUNNING, [RunStatus.PENDING, RunStatus.FAILED]]),
        limit=st.integers(1, 3),
    )
    def page_runs(self, name: str | None, status: Any, limit: int) -> None:
        cursor = None
        for _ in range(6):
            page = self.both(
                lambda w, c=cursor: w.runs.list(
                    workflow_name=name, status=status, limit=limit, cursor=c
                ),
                "runs.list",
            )
            if page is None or page.cursor is None:
                return
            cursor = page.cursor

    # -- the queue -----------------------------------------------------------------------

    @rule(
        queue=st.sampled_from(QUEUES),
        payload=blobs,
        run_id=st.sampled_from([None, "ra", "rb"]),
        orchestrator=st.booleans(),
        key=st.sampled_from([None, None, "k1", "k2"]),
        delay=st.sampled_from([0, 0, 5]),
    )
    def enqueue(
        self,
        *,
        queue: str,
        payload: bytes,
        run_id: str | None,
        orchestrator: bool,
        key: str | None,
        delay: float,
    ) -> None:
        self.both(
            lambda w: w.queue.enqueue(
                queue,
                payload,
                run_id=run_id,
                orchestrator=orchestrator and run_id is not None,
                idempotency_key=key,
                delay=delay,
            ),
            "enqueue",
        )

    @rule(prefix=st.sampled_from(["", "flow/", "step/"]), lease=st.sampled_from([5, 30]))
    def claim(self, prefix: str, lease: float) -> None:
        delivery = self.both(
            lambda w: w.queue.claim(queue_prefix=prefix, lease_seconds=lease), "claim"
        )
        if delivery is not None:
            self.deliveries.append(delivery)

    @rule(
        queue=st.sampled_from(QUEUES),
        run_id=st.sampled_from([None, "ra", "rb"]),
        key=st.sampled_from([None, "k1", "k2"]),
        then=st.sampled_from(["ack", "release", "release5", "expire", "keep"]),
    )
    def drive_queue(self, queue: str, run_id: str | None, key: str | None, then: str) -> None:
        # Enqueue, claim what is due, then settle it (or let its lease run out).
        self.both(
            lambda w: w.queue.enqueue(
                queue, b"m", run_id=run_id, orchestrator=run_id is not None, idempotency_key=key
            ),
            "enqueue",
        )
        delivery = self.both(lambda w: w.queue.claim(lease_seconds=5), "claim")
        if delivery is None:
            return
        self.deliveries.append(delivery)
        if then == "ack":
            self.both(lambda w: w.queue.ack(delivery), "ack")
        elif then.startswith("release"):
            delay = 5 if then == "release5" else 0
            self.both(lambda w: w.queue.release(delivery, delay=delay), "release")
        elif then == "expire":
            self.clock.advance(5)

    @precondition(lambda self: self.deliveries)
    @rule(index=st.integers(0, 7), action=st.sampled_from(["ack", "release", "release5", "extend"]))
    def settle(self, index: int, action: str) -> None:
        delivery = self.deliveries[index % len(self.deliveries)]
        if action == "ack":
            self.both(lambda w: w.queue.ack(delivery), "ack")
        elif action == "extend":
            renewed = self.both(lambda w: w.queue.extend(delivery, lease_seconds=10), "extend")
            if renewed is not None:
                self.deliveries.append(renewed)
        else:
            delay = 5 if action == "release5" else 0
            self.both(lambda w: w.queue.release(delivery, delay=delay), "release")

    # -- streams ---------------------------------------------------------------------------

    @rule(
        run_id=targets,
        name=st.sampled_from(STREAMS),
        chunks=blobs | st.lists(blobs, max_size=3),
        close=st.booleans(),
    )
    def stream_write(self, run_id: str, name: str, chunks: Any, close: bool) -> None:
        self.both(lambda w: w.streams.write(run_id, name, chunks), "streams.write")
        if close:
            self.both(lambda w: w.streams.close(run_id, name), "streams.close")

    # -- everything observable ---------------------------------------------------------------

    @staticmethod
    async def _observe(world: World) -> dict[str, Any]:
        """Everything observable, read in one pass (one event-loop run per World)."""

        async def outcome(call: Awaitable[Any]) -> tuple[Any, ...]:
            try:
                return ("ok", await call)
            except WorldError as exc:
                return ("error", type(exc), exc.facts)

        seen: dict[str, Any] = {}
        for run_id in RUNS:
            seen[f"events.list({run_id})"] = await outcome(world.events.list(run_id))
            seen[f"runs.get({run_id})"] = await outcome(world.runs.get(run_id))
            seen[f"steps.list({run_id})"] = await outcome(world.steps.list(run_id))
            seen[f"hooks.list({run_id})"] = await outcome(world.hooks.list(run_id))
            seen[f"waits.list({run_id})"] = await outcome(world.waits.list(run_id))
            names = await outcome(world.streams.list(run_id))
            seen[f"streams.list({run_id})"] = names
            for name in names[1] if names[0] == "ok" else ():
                read = world.streams.read(run_id, name, limit=1000)
                seen[f"streams.read({run_id}, {name})"] = await outcome(read)
        for token in TOKENS:
            seen[f"hooks.get_by_token({token})"] = await outcome(world.hooks.get_by_token(token))
        seen["runs.list"] = await outcome(world.runs.list(limit=100))
        seen["queue.messages"] = await outcome(world.queue.messages())
        seen["queue.dead_letters"] = await outcome(world.queue.dead_letters())
        seen["queue.next_due"] = await outcome(world.queue.next_due())
        return seen

    @invariant()
    def same_observable_state(self) -> None:
        expected = self.loop.run_until_complete(self._observe(self.reference))
        actual = self.loop.run_until_complete(self._observe(self.subject))
        for key, value in expected.items():
            assert actual.get(key) == value, (
                f"{self.subject_kind} World differs from the reference on {key}:\n"
                f"  reference: {value!r}\n  {self.subject_kind}: {actual.get(key)!r}"
            )
        assert actual.keys() == expected.keys()

    @invariant()
    def reference_self_check(self) -> None:
        self.reference._check()


class MemoryAgainstMemory(WorldComparison):
    """The reference against itself: the model and the reference are deterministic."""

    subject_kind = "memory"


class SQLiteAgainstMemory(WorldComparison):
    """The SQLite World against the reference."""

    subject_kind = "sqlite"


class PostgresAgainstMemory(WorldComparison):
    """The PostgreSQL World against the reference (skipped when no server is reachable)."""

    subject_kind = "postgres"


TestSQLiteAgainstMemory = SQLiteAgainstMemory.TestCase
TestSQLiteAgainstMemory.settings = settings(stateful_step_count=40)
# The memory-memory pairing was the scaffold before SQLite existed; a few examples
# still guard the determinism of the reference and of the machine itself.
TestMemoryAgainstMemory = MemoryAgainstMemory.TestCase
TestMemoryAgainstMemory.settings = settings(
    stateful_step_count=40, max_examples=min(settings.default.max_examples, 50)
)
# Each example builds a schema and a pool: fewer examples, same depth.
TestPostgresAgainstMemory = PostgresAgainstMemory.TestCase
TestPostgresAgainstMemory.settings = settings(
    stateful_step_count=40, max_examples=min(settings.default.max_examples, 30)
)
