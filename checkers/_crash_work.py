"""The crash checker's workloads: seeded ops, validated and answered by the reference.

:func:`build_workload` draws ops from a seed and runs each on the reference
:class:`~durasim.worlds.MemoryWorld` as it goes (an op the reference refuses
is dropped), recording the reference's answer to every op and the observable
state (:class:`State`) after it: state ``i`` is what a World must hold once
ops ``0..i-1`` were acknowledged.  :func:`revalidate` replays a subset of a
workload's ops the same way (shrinking drops ops and lets the ones that no
longer make sense fall away with them).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from durasim.worlds import (
    Capabilities,
    CountingIds,
    Delivery,
    Event,
    FixedClock,
    MemoryWorld,
    World,
)

from ._crash_child import NO_DELIVERY_LIMIT, Op, apply_op, describe_op, encode_data

__all__ = [
    "State",
    "Workload",
    "build_workload",
    "observe",
    "revalidate",
    "with_probes",
]

#: A queued message as compared: every field but the id (the id is checked on its own).
QueuedMessage = tuple[bytes, datetime, datetime, int, str | None, bool, str | None]


@attrs.frozen(kw_only=True)
class State:
    """What a World shows: logs, streams and queued messages (one per queue name).

    Attributes:
        logs: each run's whole log.
        streams: ``(run_id, name)`` -> (chunks, closed).
        queue: queue name -> the message queued under it (fields but the id).
        message_ids: queue name -> the message's id.
    """

    logs: dict[str, tuple[Event, ...]]
    streams: dict[tuple[str, str], tuple[tuple[bytes, ...], bool]]
    queue: dict[str, QueuedMessage]
    message_ids: dict[str, str]

    def components(self) -> dict[tuple[str, Any], Any]:
        """Every component keyed by facet: ``("log", run)``, ``("stream", (run, name))``..."""
        found: dict[tuple[str, Any], Any] = {("log", k): v for k, v in self.logs.items()}
        found.update({("stream", k): v for k, v in self.streams.items()})
        found.update({("queue", k): v for k, v in self.queue.items()})
        return found


async def observe(world: World, *, queue: bool = True, streams: bool = True) -> State:
    """Read everything the crash checker compares, through the public read API."""
    run_ids: list[str] = []
    cursor = None
    while True:
        page = await world.runs.list(limit=1000, cursor=cursor)
        run_ids += [r.run_id for r in page.runs]
        cursor = page.cursor
        if cursor is None:
            break
    logs: dict[str, tuple[Event, ...]] = {}
    chunks: dict[tuple[str, str], tuple[tuple[bytes, ...], bool]] = {}
    for run_id in sorted(run_ids):
        events: list[Event] = []
        after = 0
        while True:
            got = await world.events.list(run_id, after_seq=after, limit=10_000)
            events += got.events
            if not got.has_more:
                break
            after = got.next_after
        logs[run_id] = tuple(events)
        if streams:
            for name in await world.streams.list(run_id):
                read = await world.streams.read(run_id, name, start=0, limit=10_000)
                chunks[(run_id, name)] = (tuple(c.data for c in read.chunks), read.closed)
    messages: dict[str, QueuedMessage] = {}
    ids: dict[str, str] = {}
    for m in await world.queue.messages() if queue else ():
        messages[m.queue_name] = (
            m.payload,
            m.available_at,
            m.enqueued_at,
            m.attempt,
            m.run_id,
            m.orchestrator,
            m.idempotency_key,
        )
        ids[m.queue_name] = m.message_id
    return State(logs=logs, streams=chunks, queue=messages, message_ids=ids)


@attrs.frozen(kw_only=True)
class Workload:
    """Ops with the reference's answers and states.

    Attributes:
        ops: the ops, each with a stable ``id`` (its index in the drawn workload).
        answers: the reference's answer to each op.
        states: ``states[i]``: the state once ops ``0..i-1`` returned.
        times: ``times[i]``: the clock when op ``i`` is called (``times[-1]``: at the end).
        child_ops: how many ops the child runs before its last kill point; the
            rest only ever run after a restart (they check the reopened World).
        features: the features the ops use (``batch``, ``queue``, ``streams``...).
    """

    ops: tuple[Op, ...]
    answers: tuple[dict[str, Any], ...]
    states: tuple[State, ...]
    times: tuple[datetime, ...]
    child_ops: int
    features: frozenset[str]

    def describe(self, index: int) -> str:
        """``op 7 events.create(...)``: how reports name op ``index``."""
        positions = {op["id"]: i for i, op in enumerate(self.ops)}
        return f"op {index} {describe_op(self.ops[index], claims=positions)}"

    def index_of(self, op_id: int) -> int | None:
        """The position of the op with ``op_id`` (``None`` if shrinking dropped it)."""
        for index, op in enumerate(self.ops):
            if op["id"] == op_id:
                return index
        return None


#: How often each kind of op is drawn (relative weights).
_WEIGHTS = {
    "run": 1.0,
    "start": 2.0,
    "step": 3.0,
    "step_start": 2.0,
    "step_end": 3.0,
    "hook": 1.0,
    "resume": 1.0,
    "dispose": 0.5,
    "wait": 1.0,
    "wake": 1.0,
    "attr": 1.0,
    "end": 0.6,
    "tick": 1.5,
    "batch": 4.0,
    "send": 3.0,
    "write": 2.0,
    "close": 0.5,
}
#: How many of a kind the ops a child runs should hold at least (1 when not named).
_QUOTAS = {"send": 5, "batch": 4, "write": 3, "step_end": 2}
#: The ops a World lacking a feature is never given.
_NEEDS = {
    "batch": ("batch",),
    "queue": ("send",),
    "streams": ("write", "close"),
}


class _Draw:
    """Draws plausible ops from the reference's current state."""

    def __init__(
        self,
        rng: random.Random,
        reference: MemoryWorld,
        features: frozenset[str],
    ):
        self.rng = rng
        self.ref = reference
        self.features = features
        self.seen: Counter[str] = Counter()
        self.boost = False
        self.kind = ""
        self.lives: dict[str, list[str]] = {}
        self.life: str | None = None
        self.count = 0
        self.slots: list[str] = []

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def data(self, tag: str) -> bytes:
        return f"{tag}:{self.rng.randrange(10**6)}".encode()

    async def runs(self, *statuses: str) -> list[str]:
        page = await self.ref.runs.list(limit=100)
        return sorted(r.run_id for r in page.runs if r.status.value in statuses)

    async def esib(self, run_id: str) -> int:
        return (await self.ref.events.list(run_id, limit=1)).snapshot.seq_in_band

    async def event(self, run_id: str, kind: str, corr: str | None, **data: Any) -> Op:
        op: Op = {"op": "create", "run": run_id, "req": [kind, corr, encode_data(data)]}
        fenced = kind != "run_created" and "in_band_fence" in self.features
        if fenced and self.rng.random() < 0.5:
            op.update(in_band=True, esib=await self.esib(run_id))
        return op

    async def draw(self) -> Op | None:
        rng, ref = self.rng, self.ref
        self.life = None
        if self.lives and rng.random() < (0.7 if self.short_lived() else 0.4):
            return await self.life_step()
        weights = dict(_WEIGHTS)
        for feature, kinds in _NEEDS.items():
            if feature not in self.features:
                for name in kinds:
                    weights.pop(name)
        running = await self.runs("running")
        live = await self.runs("running", "pending")
        if len(live) < 2:
            weights["run"] = 4.0
        elif len(live) >= 4:
            weights.pop("run")
        for name in weights:  # later on, every kind short of its quota gets its turn
            if self.boost and self.seen[name] < _QUOTAS.get(name, 1):
                weights[name] *= 5
        kind = rng.choices(list(weights), list(weights.values()))[0]
        self.kind = kind
        now = ref.clock.now()
        if kind == "run" or not live:
            return await self.event(
                self.fresh("crun-"), "run_created", None, workflow_name="crash", input=b"in"
            )
        if kind == "start":
            pending = await self.runs("pending")
            return await self.event(rng.choice(pending), "run_started", None) if pending else None
        if kind == "tick":
            return {"op": "tick", "s": rng.choice([0.25, 0.5, 1.5, 4.0])}
        if kind == "attr":
            changes = [(f"k{rng.randrange(4)}", rng.choice(["a", "b", None]))]
            return await self.event(rng.choice(live), "attr_set", None, changes=changes)
        if kind == "send":
            return await self.queue_op()
        if kind in ("write", "close"):
            run_id = rng.choice(live)
            name = rng.choice(["out", "log"])
            if kind == "close":
                return {"op": "close", "run": run_id, "name": name}
            chunks = [self.data("chunk").hex() for _ in range(rng.randrange(1, 4))]
            return {"op": "write", "run": run_id, "name": name, "chunks": chunks}
        if not running:
            return None
        run_id = rng.choice(running)
        steps = await ref.steps.list(run_id)
        hooks = [h for h in await ref.hooks.list(run_id) if h.status.value == "active"]
        waits = [w for w in await ref.waits.list(run_id) if w.status.value == "waiting"]
        busy = [s.step_id for s in steps if s.status.value == "running"]
        idle = [s.step_id for s in steps if s.status.value == "pending"]
        if kind == "step":
            name = self.fresh("s")
            return await self.event(run_id, "step_created", name, step_name="st", input=b"x")
        if kind == "step_start" and idle:
            return await self.event(run_id, "step_started", rng.choice(idle))
        if kind == "step_end" and busy:
            step = rng.choice(busy)
            how = rng.choice(["step_completed", "step_completed", "step_failed", "step_retrying"])
            if how == "step_completed":
                return await self.event(run_id, how, step, result=self.data("result"))
            if how == "step_failed":
                return await self.event(run_id, how, step, error=b"boom")
            return await self.event(run_id, how, step, error=b"again", retry_after=now)
        if kind == "hook":
            hook = self.fresh("h")
            return await self.event(run_id, "hook_created", hook, token=f"tok-{hook}")
        if kind == "resume" and hooks:
            resume = f"r{rng.randrange(3)}" if "hook_resume_dedup" in self.features else None
            extra = {"resume_id": resume} if resume else {}
            hook_id = rng.choice(hooks).hook_id
            return await self.event(
                run_id, "hook_received", hook_id, payload=self.data("p"), **extra
            )
        if kind == "dispose" and hooks:
            return await self.event(run_id, "hook_disposed", rng.choice(hooks).hook_id)
        if kind == "wait":
            resume_at = now + timedelta(seconds=5)
            return await self.event(run_id, "wait_created", self.fresh("w"), resume_at=resume_at)
        if kind == "wake" and waits:
            return await self.event(run_id, "wait_completed", rng.choice(waits).wait_id, early=True)
        if kind == "end" and len(steps) >= 3:
            how = rng.choice(["run_completed", "run_failed", "run_cancelled"])
            data = {"run_completed": {"output": b"out"}, "run_failed": {"error": b"e"}}
            return await self.event(run_id, how, None, **data.get(how, {}))
        if kind == "batch":
            return await self.batch(run_id, busy, hooks)
        return None

    async def batch(self, run_id: str, busy: list[str], hooks: Sequence[Any]) -> Op:
        rng = self.rng
        requests: list[list[Any]] = []
        if busy:
            step = rng.choice(busy)
            requests.append(["step_completed", step, encode_data({"result": self.data("r")})])
        if hooks and rng.random() < 0.3:
            hook_id = rng.choice(hooks).hook_id
            requests.append(["hook_received", hook_id, encode_data({"payload": b"bp"})])
        new = self.fresh("s")
        requests.append(["step_created", new, encode_data({"step_name": "st", "input": b"i"})])
        if len(requests) == 1 or rng.random() < 0.7:  # never a batch of one
            requests.append(["step_started", new, {}])
        if rng.random() < 0.4:
            at = self.ref.clock.now() + timedelta(seconds=5)
            requests.append(["wait_created", self.fresh("w"), encode_data({"resume_at": at})])
        op: Op = {"op": "batch", "run": run_id, "reqs": requests}
        if "in_band_fence" in self.features and rng.random() < 0.7:
            op.update(in_band=True, esib=await self.esib(run_id))
        return op

    async def queue_op(self) -> Op | None:
        """A new message (with the life it will lead), or the same key again."""
        rng = self.rng
        messages = {m.queue_name: m for m in await self.ref.queue.messages()}
        keyed = [q for q in self.slots if q in messages and messages[q].idempotency_key]
        if keyed and rng.random() < 0.2:  # the same key while still queued: the same message
            queue_name = rng.choice(keyed)
            key = messages[queue_name].idempotency_key
            return {"op": "enqueue", "q": queue_name, "p": "61", "key": key}
        queue_name = f"crash.q{len(self.slots):03d}"
        self.slots.append(queue_name)
        op: Op = {"op": "enqueue", "q": queue_name, "p": self.data("m").hex()}
        if rng.random() < 0.5:
            op["key"] = f"key-{len(self.slots)}"
        if rng.random() < 0.3:
            op["delay"] = rng.choice([0.25, 1.5])
        life = list(rng.choices(_LIVES, _LIFE_WEIGHTS)[0])
        if self.short_lived():
            life = ["claim", "release", "claim", "ack"]
        if life:
            self.lives[queue_name] = life
        return op

    async def life_step(self) -> Op | None:
        """The next step of a queued message's life (a tick first when it is not due yet)."""
        rng = self.rng
        queue_name = rng.choice(sorted(self.lives))
        step = self.lives[queue_name][0]
        messages = {m.queue_name: m for m in await self.ref.queue.messages()}
        message = messages.get(queue_name)
        if message is None:
            del self.lives[queue_name]
            return None
        self.life = queue_name
        self.kind = step
        if step == "claim":
            wait = (message.available_at - self.ref.clock.now()).total_seconds()
            if wait > 0:
                self.kind = "tick"
                return {"op": "tick", "s": math.ceil(wait * 4) / 4}
            return {"op": "claim", "q": queue_name, "lease": rng.choice([10.0, 30.0])}
        op = {"op": step, "q": queue_name, "claim": -1}  # bound to its claim below
        if step == "release":
            delays = [0.5, 1.25, 2.75] if self.seen["release"] < 2 else [0.5, 1.25, 2.75, 0.0]
            op["delay"] = rng.choice(delays)
        if step == "extend":
            op["lease"] = 45.0
        return op

    def short_lived(self) -> bool:
        """Whether, late in the ops, too few messages were acked or released yet."""
        return self.boost and min(self.seen["ack"], self.seen["release"]) < 2

    def lived(self) -> None:
        """The step :meth:`life_step` gave was kept: the message moves on."""
        if self.life is not None and self.kind != "tick":
            steps = self.lives.get(self.life, [])
            if steps:
                steps.pop(0)
            if not steps:
                self.lives.pop(self.life, None)
        self.life = None


#: What becomes of a message: the steps of its life after the enqueue.
_LIVES = (
    ("claim", "ack"),
    ("claim", "release", "claim", "ack"),
    ("claim", "extend", "ack"),
    ("claim", "release"),
    (),
)
_LIFE_WEIGHTS = (3, 3, 1, 2, 1)


def _bind(op: Op, claims: dict[str, int], deliveries: dict[int, Delivery]) -> Op | None:
    """Give an ack/release/extend the claim it settles (the latest one of its queue)."""
    if op["op"] not in ("ack", "release", "extend"):
        return op
    claim = claims.get(op["q"])
    if claim is None or claim not in deliveries:
        return None
    bound = {k: v for k, v in op.items() if k != "q"}
    bound["claim"] = claim
    return bound


def _accepted(answer: dict[str, Any], op: Op, *, tail: bool) -> bool:
    """Whether the reference's answer keeps the op in the workload."""
    if "err" in answer or "skip" in answer:
        return False
    return op["op"] != "claim" or answer["d"] is not None or tail


def _features(caps: Capabilities) -> frozenset[str]:
    names = ("in_band_fence", "batch", "hook_resume_dedup", "queue", "streams")
    return frozenset(n for n in names if getattr(caps, n))


class _Recorder:
    """Runs ops on a fresh reference and keeps the ones it accepts, with its answers."""

    def __init__(self, features: frozenset[str]) -> None:
        self.clock = FixedClock()
        self.ref = MemoryWorld(
            clock=self.clock, ids=CountingIds(namespace="r"), max_deliveries=NO_DELIVERY_LIMIT
        )
        self.features = features
        self.ops: list[Op] = []
        self.answers: list[dict[str, Any]] = []
        self.states: list[State] = []
        self.times: list[datetime] = []
        self.deliveries: dict[int, Delivery] = {}
        self.claims: dict[str, int] = {}

    async def start(self) -> None:
        self.states.append(await self._observe())

    async def _observe(self) -> State:
        return await observe(
            self.ref, queue="queue" in self.features, streams="streams" in self.features
        )

    async def offer(self, op: Op, *, tail: bool = False, quiet: bool = False) -> bool:
        """Run ``op`` on the reference; keep it (True) unless the reference refused it.

        ``quiet``: do not record the state after it (the caller has it already).
        """
        if op["op"] in ("ack", "release", "extend") and op["claim"] not in self.deliveries:
            return False
        before = self.clock.now()
        answer = await apply_op(self.ref, self.clock, op, self.deliveries)
        if not _accepted(answer, op, tail=tail):
            return False
        if op["op"] == "claim" and answer["d"] is not None:
            self.claims[op["q"]] = op["id"]
        if op["op"] in ("ack", "release"):
            self.deliveries.pop(op["claim"], None)
        self.ops.append(op)
        self.answers.append(answer)
        self.times.append(before)
        if not quiet:
            self.states.append(await self._observe())
        return True

    def workload(self, child_ops: int) -> Workload:
        return Workload(
            ops=tuple(self.ops),
            answers=tuple(self.answers),
            states=tuple(self.states),
            times=(*self.times, self.clock.now()),
            child_ops=min(child_ops, len(self.ops)),
            features=self.features,
        )


async def _build(seed: int, size: int, tail: int, features: frozenset[str]) -> Workload:
    rng = random.Random(f"durasim-crash-workload:{seed}")  # noqa: S311 -- not secrets
    recorder = _Recorder(features)
    await recorder.start()
    draw = _Draw(rng, recorder.ref, features)
    attempts = 0
    while len(recorder.ops) < size + tail and attempts < 20 * (size + tail):
        attempts += 1
        drawn = await draw.draw()
        if drawn is None:
            continue
        op = _bind(drawn, recorder.claims, recorder.deliveries)
        if op is not None:
            op["id"] = attempts
            if await recorder.offer(op, tail=len(recorder.ops) >= size):
                draw.seen[draw.kind] += 1
                draw.lived()
        draw.boost = len(recorder.ops) >= size // 3
    return recorder.workload(size)


async def with_probes(workload: Workload, stop: int) -> Workload:
    """Ops ``0..stop-1`` of ``workload``, then probes of the state they leave.

    After a restart the checker runs a few more of the workload's ops, then
    these probes, answered by the reference like every op.
    """
    recorder = _Recorder(workload.features)
    for op in workload.ops[:stop]:
        await recorder.offer(op, tail=True, quiet=True)  # the same answers: same reference
    recorder.states = list(workload.states[: stop + 1])
    for number, probe in enumerate(await _probes(recorder.ref, workload.features)):
        probe["id"] = _PROBE_IDS + number
        await recorder.offer(probe, tail=True)
    return recorder.workload(workload.child_ops)


#: Ids of probe ops (the drawn ops' ids are far below).
_PROBE_IDS = 1_000_000


async def _probes(reference: MemoryWorld, features: frozenset[str]) -> list[Op]:
    """Ops that check a reopened World the workload may not touch again: one write per
    live run (its next position), the idempotency key of every queued message, a
    claim of every queue (a live lease must still hold it, a delay still defer it)."""
    probes: list[Op] = []
    page = await reference.runs.list(limit=1000)
    for run in sorted(page.runs, key=lambda r: r.run_id):
        if not run.status.terminal:
            data = encode_data({"changes": [("probe", "1")], "writer": "crash"})
            probes.append({"op": "create", "run": run.run_id, "req": ["attr_set", None, data]})
    if "queue" in features:
        for message in await reference.queue.messages():
            if message.idempotency_key:
                key = message.idempotency_key
                probes.append({"op": "enqueue", "q": message.queue_name, "p": "70", "key": key})
            probes.append({"op": "claim", "q": message.queue_name, "lease": 30.0})
    return probes


def build_workload(
    capabilities: Capabilities, *, seed: int, size: int = 48, tail: int = 12
) -> Workload:
    """The workload of ``seed`` for the features a World declares in ``capabilities``.

    ``size`` ops may be interrupted by a kill; ``tail`` more only run after a
    restart (:func:`with_probes` adds the probes of the state a restart leaves).
    """
    return asyncio.run(_build(seed, size, tail, _features(capabilities)))


def revalidate(workload: Workload, keep: Iterable[int]) -> Workload:
    """The ops of ``workload`` whose ids are in ``keep``, re-run on a fresh reference.

    Ops the reference now refuses are dropped (removing a run's creation drops
    every op on the run); in-band ops get the fence count of the new history.
    """
    kept = set(keep)

    async def run() -> Workload:
        recorder = _Recorder(workload.features)
        await recorder.start()
        child = 0
        for index, op in enumerate(workload.ops):
            if op["id"] not in kept:
                continue
            fresh = dict(op)
            if fresh.get("in_band"):
                try:
                    fresh["esib"] = (
                        await recorder.ref.events.list(op["run"], limit=1)
                    ).snapshot.seq_in_band
                except Exception:  # noqa: S112 -- its run is gone: the op falls away
                    continue
            if await recorder.offer(fresh, tail=index >= workload.child_ops):
                child += index < workload.child_ops
        return recorder.workload(child)

    return asyncio.run(run())
