"""The concurrency layer: planted races are caught and named, the real Worlds pass.

Three parts: the linearizability checker and the anomaly names on hand-written
histories (answers taken from the reference, then one of them made wrong); the
``concurrency`` layer over each planted World of ``worlds_concurrency``; the
layer over MemoryWorld, SQLiteWorld (two instances on one file, two threads)
and PostgresWorld (two pools on one schema).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from _postgres_support import new_schema, require_postgres
from worlds_concurrency import ANOMALY, PLANTED, RemoteWorld, make_control

from durasim.checkers import (
    ANOMALIES,
    Call,
    Record,
    check_linearizable,
    name_anomaly,
    read_anomalies,
    run_concurrency,
)
from durasim.checkers._linear import Outcome, settle
from durasim.scenarios.conformance import run_conformance
from durasim.scenarios.conformance._target import NarrowedWorld
from durasim.worlds import (
    CountingIds,
    EntityConflict,
    EventPage,
    EventRequest,
    FixedClock,
    MemoryWorld,
    Snapshot,
    SQLiteWorld,
    World,
    WorldSetup,
)

CLOCK = FixedClock()


def reference() -> MemoryWorld:
    return MemoryWorld(clock=CLOCK, ids=CountingIds())


def create(run_id: str, type_: str, cid: str | None = None, **data: Any) -> Call:
    return Call(method="events.create", args=(run_id, EventRequest.of(type_, cid, **data)))


def read(method: str, *args: Any, **options: Any) -> Call:
    return Call(method=method, args=args, options=tuple(options.items()))


SETUP = [create("ra", "run_created", workflow_name="wf", input=b"in"), create("ra", "run_started")]


def fresh(*calls: Call) -> MemoryWorld:
    """A reference that went through the set-up (and ``calls``) on its own."""
    world = reference()
    for call in (*SETUP, *calls):
        settle(call.apply(world))
    return world


class History:
    """A hand-written history: calls, their answers and their stamps."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.world = reference()
        for call in SETUP:
            self.serial(call)

    def answer(self, call: Call, world: MemoryWorld | None = None) -> Outcome:
        """What the reference (or ``world``) answers, applied to it."""
        return settle(call.apply(world or self.world))

    def add(
        self, call: Call, outcome: Outcome, invoked: int, returned: int, phase: str = "concurrent"
    ) -> Record:
        base = 100 * (phase == "concurrent") + 10_000 * (phase == "final")
        record = Record(
            index=len(self.records),
            call=call,
            invoked=base + invoked,
            returned=base + returned,
            outcome=outcome,
            phase=phase,
        )
        self.records.append(record)
        return record

    def serial(self, call: Call, phase: str = "setup") -> Record:
        stamp = 2 * len(self.records)
        return self.add(call, self.answer(call), stamp, stamp + 1, phase)

    def log(self, run_id: str = "ra") -> Record:
        """A final read of the whole log (as the reference has it now)."""
        return self.serial(read("events.list", run_id), phase="final")

    def check(self) -> Any:
        return check_linearizable(self.records, reference=reference)

    def named(self) -> str | None:
        anomaly = name_anomaly(self.records)
        return None if anomaly is None else anomaly.name


def page(*events: Any, seq: int | None = None, in_band: int = 1, more: bool = False) -> Outcome:
    count = len(events) if seq is None else seq
    snapshot = Snapshot(seq=count, seq_in_band=in_band)
    return ("ok", EventPage(events=tuple(events), snapshot=snapshot, has_more=more))


def event_of(outcome: Outcome) -> Any:
    return outcome[1].event


def moved(outcome: Outcome, seq: int) -> Outcome:
    """The same accepted write, answered with another position."""
    result = outcome[1]
    return ("ok", attrs.evolve(result, event=attrs.evolve(result.event, seq=seq)))


# -- the checker on hand-written histories -------------------------------------------------


def test_overlapping_terminal_writes_are_linearizable_in_either_order() -> None:
    h = History()
    complete, fail = (
        create("ra", "run_completed", output=b"o"),
        create("ra", "run_failed", error=b"e"),
    )
    done = h.answer(complete)
    refused = h.answer(fail)
    assert refused[:2] == ("error", EntityConflict)
    h.add(fail, refused, 0, 5)  # invoked first, but overlapping: it may come second
    h.add(complete, done, 1, 4)
    h.log()
    verdict = h.check()
    assert verdict.ok, verdict
    assert verdict.order.index(3) < verdict.order.index(2)
    assert read_anomalies(h.records) == []


def test_real_time_order_is_kept() -> None:
    h = History()
    complete, fail = (
        create("ra", "run_completed", output=b"o"),
        create("ra", "run_failed", error=b"e"),
    )
    done = h.answer(complete)
    refused = h.answer(fail)
    h.add(fail, refused, 0, 1)  # refused, and returned before the completion began
    h.add(complete, done, 2, 3)
    verdict = h.check()
    assert not verdict.ok
    assert verdict.prefix == (0, 1)
    assert [i for i, _ in verdict.stuck] == [2]
    assert h.named() is None  # nothing but the order is wrong: "not linearizable"


def test_read_ahead_of_its_page() -> None:
    h = History()
    write = create("ra", "attr_set", changes={"a": "1"})
    h.add(write, h.answer(write), 0, 3)
    shown = h.answer(read("events.list", "ra"))[1].events[:2]
    h.add(read("events.list", "ra"), page(*shown, seq=3), 1, 2)
    assert not h.check().ok
    assert h.named() == "read ahead of its page"


def test_page_with_a_hole() -> None:
    h = History()
    h.serial(create("ra", "attr_set", changes={"a": "1"}))
    events = h.answer(read("events.list", "ra"))[1].events
    h.add(read("events.list", "ra"), page(events[0], events[2], seq=3), 0, 1)
    assert [a.name for a in read_anomalies(h.records)] == ["page with a hole"]


def test_stale_read() -> None:
    h = History()
    write = create("ra", "attr_set", changes={"a": "1"})
    before = h.answer(read("events.list", "ra"))
    h.add(write, h.answer(write), 0, 1)
    h.add(read("events.list", "ra"), before, 2, 3)  # began after the write returned
    assert not h.check().ok
    assert h.named() == "stale read"


def test_lost_update_and_position_given_twice() -> None:
    h = History()
    first = create("ra", "attr_set", changes={"a": "1"})
    second = create("ra", "step_created", "s1", step_name="st", input=b"i")
    h.add(first, h.answer(first, fresh()), 0, 2)  # told #3 ...
    h.add(second, h.answer(second), 1, 3)  # ... and so was this one
    assert h.named() == "position given twice"
    h.log()  # the log has only the second at #3
    assert not h.check().ok
    assert h.named() == "lost update"


def test_non_atomic_batch_seen_by_a_reader() -> None:
    h = History()
    batch = Call(
        method="events.create_batch",
        args=(
            "ra",
            [
                EventRequest.of("step_created", "s1", step_name="st", input=b"i"),
                EventRequest.of("step_started", "s1"),
            ],
        ),
    )
    done = h.answer(batch)
    events = h.answer(read("events.list", "ra"))[1].events
    h.add(batch, done, 0, 3)
    h.add(read("events.list", "ra"), page(*events[:3]), 1, 2)  # ends inside the batch
    assert not h.check().ok
    assert h.named() == "non-atomic batch"


def test_refused_write_that_committed() -> None:
    h = History()
    complete = create("ra", "run_completed", output=b"o")
    h.add(complete, ("error", EntityConflict, {"run_id": "ra"}), 0, 1)
    h.answer(complete)  # ... and yet it is in the log
    h.log()
    assert not h.check().ok
    assert h.named() == "refused write that committed"


def test_two_terminal_events() -> None:
    h = History()
    complete, fail = (
        create("ra", "run_completed", output=b"o"),
        create("ra", "run_failed", error=b"e"),
    )
    done = h.answer(complete)
    failed = h.answer(fail, fresh())
    h.add(complete, done, 0, 2)
    h.add(fail, moved(failed, 4), 1, 3)
    log = h.answer(read("events.list", "ra"))[1].events
    h.add(
        read("events.list", "ra"), page(*log, event_of(moved(failed, 4)), in_band=1), 4, 5, "final"
    )
    assert not h.check().ok
    assert h.named() == "two terminal events"


def test_duplicate_token_holder() -> None:
    h = History()
    for call in (
        create("rb", "run_created", workflow_name="wf", input=b""),
        create("rb", "run_started"),
    ):
        h.serial(call)
    mine = create("ra", "hook_created", "h1", token="t")
    theirs = create("rb", "hook_created", "h1", token="t")
    other = fresh(create("rb", "run_created", workflow_name="wf", input=b""))
    settle(create("rb", "run_started").apply(other))
    h.add(mine, h.answer(mine), 0, 2)
    h.add(theirs, h.answer(theirs, other), 1, 3)  # both created, neither a conflict
    h.log("ra")
    log_b = h.answer(read("events.list", "rb"), other)
    h.add(read("events.list", "rb"), log_b, 0, 1, "final")
    assert not h.check().ok
    assert h.named() == "duplicate token holder"


def test_duplicate_resume() -> None:
    h = History()
    h.serial(create("ra", "hook_created", "h1", token="t"))
    resume = create("ra", "hook_received", "h1", payload=b"p", resume_id="x")
    first = h.answer(resume)
    h.add(resume, first, 0, 2)
    h.add(resume, moved(first, 5), 1, 3)  # appended again
    log = h.answer(read("events.list", "ra"))[1].events
    h.add(read("events.list", "ra"), page(*log, event_of(moved(first, 5))), 4, 5, "final")
    assert not h.check().ok
    assert h.named() == "duplicate resume"


def test_stream_anomalies() -> None:
    h = History()
    one = Call(method="streams.write", args=("ra", "out", b"a"))
    two = Call(method="streams.write", args=("ra", "out", b"b"))
    h.add(one, ("ok", 0), 0, 2)
    h.add(two, ("ok", 0), 1, 3)  # both told they wrote chunk 0
    assert not h.check().ok
    assert h.named() == "overwritten stream chunk"

    h = History()
    h.add(one, h.answer(one), 0, 2)
    h.add(two, h.answer(two), 1, 3)
    final = h.answer(read("streams.read", "ra", "out", limit=1000))
    short = attrs.evolve(final[1], chunks=final[1].chunks[:1], next_index=1)
    h.add(read("streams.read", "ra", "out", limit=1000), ("ok", short), 4, 5, "final")
    assert not h.check().ok
    assert h.named() == "lost stream chunk"

    h = History()
    close = Call(method="streams.close", args=("ra", "out"))
    h.add(close, ("ok", None), 0, 1)
    h.add(one, ("ok", 0), 2, 3)
    assert not h.check().ok
    assert h.named() == "write after close"


def test_crash_is_named_first() -> None:
    h = History()
    h.add(create("ra", "attr_set", changes={"a": "1"}), ("crash", "ValueError: boom"), 0, 1)
    assert not h.check().ok
    assert h.named() == "crash"


def test_every_name_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "conformance.md").read_text()
    for name in ANOMALIES:
        assert f"`{name}`" in text, name


# -- the layer over the planted Worlds --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_world_is_caught_and_named(name: str) -> None:
    report = run_conformance(PLANTED[name], target=f"planted:{name}", layers=("concurrency",))
    assert not report.ok, report.render()
    (layer,) = report.layers
    finding = layer.failed[0]  # the first found; other kinds of groups may show more
    assert finding.name.startswith(ANOMALY[name]), report.render()
    text = report.render()
    assert "seed: 0" in text
    assert "rerun: durasim conformance planted:" in text
    assert "shrunk from" in finding.reproduction
    assert "*[" in finding.reproduction  # the calls that show it are marked


def test_the_witness_is_shrunk_and_the_same_for_the_same_seed() -> None:
    first = run_concurrency(PLANTED["terminal_twice"], groups=200, seed=3)
    again = run_concurrency(PLANTED["terminal_twice"], groups=200, seed=3)
    assert first.failure is not None
    assert again.failure is not None
    assert first.failure.render() == again.failure.render()
    assert len(first.failure.records) < first.failure.calls_before
    assert first.failure.anomaly.name == "two terminal events"


class _NeverWoken(RemoteWorld):
    """A cancel waits for a wake-up that never comes (a lost notification)."""

    async def round_trip(self) -> None:
        await asyncio.Event().wait()


class _CancelWaits:
    def __init__(self, world: _NeverWoken, inner: Any) -> None:
        self.world, self.inner = world, inner

    async def create(self, run_id: str | None, request: EventRequest, **kw: Any) -> Any:
        if request.type == "run_cancelled":
            await self.world.round_trip()
        return await self.inner.create(run_id, request, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_call_that_never_returns_is_reported_stuck() -> None:
    def never_woken(setup: WorldSetup) -> World:
        world = _NeverWoken(clock=setup.clock, ids=setup.ids)
        world.events = _CancelWaits(world, world.events)  # type: ignore[assignment]
        return world

    result = run_concurrency(never_woken, groups=30, only="lifecycle", timeout=0.5)
    assert result.failure is not None
    assert result.failure.anomaly.name == "stuck"
    assert "run_cancelled" in result.failure.render()  # the calls in flight


def test_absent_facets_are_left_out_not_failed() -> None:
    def narrowed(setup: WorldSetup) -> World:
        inner = make_control(setup)
        return NarrowedWorld(inner=inner, only=frozenset({"queue"}))  # type: ignore[return-value]

    result = run_concurrency(narrowed, groups=30)
    assert result.ok
    assert set(result.kinds) == {"lifecycle", "terminal", "steps", "tokens", "resumes", "reads"}


# -- the real Worlds pass ------------------------------------------------------------------------


def sqlite_world(setup: WorldSetup) -> World:
    return SQLiteWorld(setup.directory / "w.db", clock=setup.clock, ids=setup.ids)


_schemas: dict[Path, str] = {}


def postgres_world(setup: WorldSetup) -> World:
    """Two calls with one setup open two pools on one schema (two workers)."""
    from durasim.worlds import PostgresWorld

    if setup.directory not in _schemas:
        _schemas[setup.directory] = new_schema()
    return PostgresWorld(
        require_postgres(),
        schema=_schemas[setup.directory],
        clock=setup.clock,
        ids=setup.ids,
        pool_size=3,
    )


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def real_world(request: pytest.FixtureRequest) -> Callable[[WorldSetup], World]:
    if request.param == "postgres":
        require_postgres()
    return {"memory": make_control, "sqlite": sqlite_world, "postgres": postgres_world}[
        request.param
    ]


def test_real_worlds_pass_the_default_layer(real_world: Callable[[WorldSetup], World]) -> None:
    examples = 20 if real_world is postgres_world else 50  # PostgreSQL: a bounded version
    report = run_conformance(real_world, layers=("concurrency",), examples=examples)
    assert report.ok, report.render()
    (layer,) = report.layers
    assert layer.passed == 8 * examples
    if real_world is not make_control:
        assert "2 World instance(s)" in layer.note, layer.note


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 4))
def test_real_worlds_pass_longer(real_world: Callable[[WorldSetup], World], seed: int) -> None:
    result = run_concurrency(real_world, groups=1000, seed=seed)
    assert result.ok, result.failure.render() if result.failure else ""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_worlds_are_caught_under_every_seed(name: str) -> None:
    for seed in range(20):
        result = run_concurrency(PLANTED[name], groups=400, seed=seed)
        assert result.failure is not None, f"seed {seed}"
        assert result.failure.anomaly.name == ANOMALY[name], result.failure.render()
