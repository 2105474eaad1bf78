"""Contract: the log itself: positions, reads, bump-and-report, the in-band fence."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from durasim.worlds import (
    Capabilities,
    EntityConflict,
    EventNotFound,
    EventType,
    FixedClock,
    InBandSuperseded,
    InvalidRequest,
    RunNotFound,
    RunStatus,
    Snapshot,
    World,
)

from ._fixtures import MakeWorld, clock, make_world, require, world  # noqa: F401 -- fixtures
from ._helpers import (
    all_events,
    assert_refused,
    new_run,
    new_running_run,
    new_step,
    req,
    world_state,
)

# --- creation and identity ----------------------------------------------------------


async def test_run_created_is_position_one_in_band(world: World, clock: FixedClock) -> None:
    result = await world.events.create(
        None,
        req(
            "run_created",
            workflow_name="wf",
            input=b"x",
            deployment_id="dpl",
            attributes={"a": "1"},
        ),
    )
    event = result.event
    assert event is not None
    assert (event.seq, event.type, event.in_band, event.correlation_id) == (
        1,
        EventType.RUN_CREATED,
        True,
        None,
    )
    assert event.created_at == clock.now()
    assert result.allocated == 1
    run = result.run
    assert run.run_id == event.run_id
    assert run.run_id.startswith("wrun_")
    assert (run.status, run.workflow_name, run.input, run.deployment_id) == (
        RunStatus.PENDING,
        "wf",
        b"x",
        "dpl",
    )
    assert dict(run.attributes) == {"a": "1"}
    assert run.created_at == run.updated_at == clock.now()
    assert await world.runs.get(run.run_id) == run
    page = await world.events.list(run.run_id)
    assert page.snapshot == Snapshot(seq=1, seq_in_band=1)
    assert page.events == (event,)
    assert await world.events.get(run.run_id, 1) == event


async def test_run_created_with_explicit_id(world: World) -> None:
    result = await world.events.create(
        "order-42", req("run_created", workflow_name="wf", input=b"")
    )
    assert result.run.run_id == "order-42"
    assert result.event is not None
    assert result.event.run_id == "order-42"


async def test_minted_run_ids_are_distinct(world: World) -> None:
    ids = {await new_run(world) for _ in range(5)}
    assert len(ids) == 5


async def test_duplicate_run_created_is_refused(world: World) -> None:
    await new_run(world, "r1")
    exc = await assert_refused(
        world,
        EntityConflict,
        lambda: world.events.create("r1", req("run_created", workflow_name="other", input=b"")),
    )
    assert exc.run_id == "r1"  # type: ignore[attr-defined]
    assert (await world.runs.get("r1")).workflow_name == "wf"


async def test_positions_are_dense_and_stamped_by_the_clock(
    world: World, clock: FixedClock
) -> None:
    run_id = await new_running_run(world)
    for i in range(5):
        clock.advance(1)
        await world.events.create(run_id, req("attr_set", changes={"k": str(i)}))
    events = await all_events(world, run_id)
    assert [e.seq for e in events] == list(range(1, 8))
    assert [e.created_at for e in events[2:]] == [
        events[1].created_at + timedelta(seconds=i) for i in range(1, 6)
    ]
    assert all(e.run_id == run_id for e in events)


async def test_events_get_out_of_range(world: World) -> None:
    run_id = await new_run(world)
    for seq in (0, 2, -1):
        with pytest.raises(EventNotFound) as caught:
            await world.events.get(run_id, seq)
        assert caught.value.run_id == run_id  # type: ignore[attr-defined]


async def test_unknown_run_reads_and_writes(world: World) -> None:
    for read in (
        lambda: world.events.list("nope"),
        lambda: world.events.get("nope", 1),
        lambda: world.runs.get("nope"),
        lambda: world.steps.list("nope"),
        lambda: world.hooks.list("nope"),
        lambda: world.waits.list("nope"),
    ):
        await assert_refused(world, RunNotFound, read)
    await assert_refused(
        world, RunNotFound, lambda: world.events.create("nope", req("run_started"))
    )
    await assert_refused(
        world,
        RunNotFound,
        lambda: world.events.create_batch(
            "nope", [req("step_created", "s", step_name="a", input=b"")]
        ),
    )


# --- paging ---------------------------------------------------------------------------


async def test_events_list_paging(world: World) -> None:
    run_id = await new_running_run(world)
    for i in range(8):
        await world.events.create(run_id, req("attr_set", changes={"k": str(i)}))
    everything = await world.events.list(run_id)
    assert [e.seq for e in everything.events] == list(range(1, 11))
    assert not everything.has_more
    assert everything.snapshot == Snapshot(seq=10, seq_in_band=1)

    first = await world.events.list(run_id, limit=4)
    assert [e.seq for e in first.events] == [1, 2, 3, 4]
    assert first.has_more
    assert first.next_after == 4
    assert first.snapshot == everything.snapshot
    second = await world.events.list(run_id, after_seq=first.next_after, limit=4)
    assert [e.seq for e in second.events] == [5, 6, 7, 8]
    assert second.has_more
    third = await world.events.list(run_id, after_seq=second.next_after, limit=4)
    assert [e.seq for e in third.events] == [9, 10]
    assert not third.has_more
    assert first.events + second.events + third.events == everything.events

    exact = await world.events.list(run_id, after_seq=6, limit=4)
    assert [e.seq for e in exact.events] == [7, 8, 9, 10]
    assert not exact.has_more
    past = await world.events.list(run_id, after_seq=10)
    assert past.events == ()
    assert not past.has_more
    assert past.next_after == 0
    assert past.snapshot == everything.snapshot
    far = await world.events.list(run_id, after_seq=99)
    assert far.events == ()
    assert not far.has_more


async def test_events_list_rejects_bad_paging_arguments(world: World) -> None:
    run_id = await new_run(world)
    for kwargs in (
        {"limit": 0},
        {"limit": -1},
        {"after_seq": -1},
        {"limit": 1.5},
        {"after_seq": "1"},
    ):
        await assert_refused(
            world,
            InvalidRequest,
            lambda kw=kwargs: world.events.list(run_id, **kw),  # type: ignore[misc]
        )


# --- bump and report ------------------------------------------------------------------


async def test_bump_and_report_returns_unseen_events(world: World) -> None:
    run_id = await new_running_run(world)  # seq 2
    other_a = await world.events.create(run_id, req("attr_set", changes={"a": "1"}))
    other_b = await world.events.create(run_id, req("attr_set", changes={"b": "2"}))
    # A writer that only saw position 2 writes: it commits at 5, never fails.
    result = await world.events.create(
        run_id, req("step_created", "s1", step_name="st", input=b""), seen_seq=2
    )
    assert result.event is not None
    assert result.event.seq == 5
    assert result.unseen == (other_a.event, other_b.event)
    assert result.allocated == 1


async def test_bump_and_report_nothing_unseen(world: World) -> None:
    run_id = await new_running_run(world)
    current = await world.events.create(run_id, req("attr_set", changes={"a": "1"}), seen_seq=2)
    assert current.unseen == ()
    ahead = await world.events.create(run_id, req("attr_set", changes={"a": "2"}), seen_seq=10)
    assert ahead.unseen == ()
    blind = await world.events.create(run_id, req("attr_set", changes={"a": "3"}))
    assert blind.unseen == ()


async def test_bump_and_report_from_zero_reports_whole_prefix(world: World) -> None:
    run_id = await new_running_run(world)
    result = await world.events.create(run_id, req("attr_set", changes={"a": "1"}), seen_seq=0)
    assert result.unseen == (await all_events(world, run_id))[:2]


async def test_batch_bump_and_report(world: World) -> None:
    run_id = await new_running_run(world)
    await new_step(world, run_id, "s0")  # seq 3
    result = await world.events.create_batch(
        run_id,
        [req("step_created", "s1", step_name="a", input=b""), req("step_started", "s1")],
        seen_seq=1,
    )
    assert [e.seq for e in result.unseen] == [2, 3]
    assert [e.seq for e in result.events] == [4, 5]


# --- the in-band fence ----------------------------------------------------------------


async def test_in_band_write_advances_both_counters(world: World) -> None:
    run_id = await new_run(world)
    result = await world.events.create(
        run_id, req("run_started"), in_band=True, expected_seq_in_band=1
    )
    assert result.event is not None
    assert result.event.in_band
    assert result.event.seq == 2
    assert (await world.events.list(run_id)).snapshot == Snapshot(seq=2, seq_in_band=2)


async def test_out_of_band_write_moves_seq_only(world: World) -> None:
    run_id = await new_running_run(world)  # run_started out of band
    await world.events.create(run_id, req("attr_set", changes={"a": "1"}))
    page = await world.events.list(run_id)
    assert page.snapshot == Snapshot(seq=3, seq_in_band=1)
    assert [e.in_band for e in page.events] == [True, False, False]


async def test_stale_in_band_write_is_refused_and_allocates_nothing(world: World) -> None:
    run_id = await new_run(world)
    await world.events.create(run_id, req("run_started"), in_band=True, expected_seq_in_band=1)
    await world.events.create(run_id, req("attr_set", changes={"x": "1"}))  # out of band
    exc = await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create(
            run_id,
            req("step_created", "s1", step_name="a", input=b""),
            in_band=True,
            expected_seq_in_band=1,
        ),
    )
    assert (exc.run_id, exc.seq, exc.seq_in_band) == (run_id, 3, 2)  # type: ignore[attr-defined]
    # The next accepted write takes the very next position: no hole.
    fresh = await world.events.create(
        run_id,
        req("step_created", "s1", step_name="a", input=b""),
        in_band=True,
        expected_seq_in_band=2,
    )
    assert fresh.event is not None
    assert fresh.event.seq == 4
    assert (await world.events.list(run_id)).snapshot == Snapshot(seq=4, seq_in_band=3)


async def test_in_band_ahead_of_the_log_is_refused(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create(
            run_id, req("attr_set", changes={"a": "1"}), in_band=True, expected_seq_in_band=5
        ),
    )


async def test_in_band_without_expected_is_invalid(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create(run_id, req("attr_set", changes={"a": "1"}), in_band=True),
    )
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create_batch(
            run_id, [req("step_created", "s", step_name="a", input=b"")], in_band=True
        ),
    )


async def test_expected_without_in_band_is_invalid(world: World) -> None:
    run_id = await new_running_run(world)
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create(
            run_id, req("attr_set", changes={"a": "1"}), expected_seq_in_band=1
        ),
    )


async def test_fence_is_checked_before_the_entity_rules(world: World) -> None:
    # A stale in-band write is superseded even when it would also be illegal.
    run_id = await new_running_run(world)
    await world.events.create(
        run_id, req("attr_set", changes={"a": "1"}), in_band=True, expected_seq_in_band=1
    )
    await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create(
            run_id, req("step_started", "missing"), in_band=True, expected_seq_in_band=1
        ),
    )


async def test_concurrent_in_band_writers_exactly_one_wins(world: World) -> None:
    run_id = await new_running_run(world)
    count = (await world.events.list(run_id)).snapshot.seq_in_band

    async def writer(i: int) -> object:
        try:
            return await world.events.create(
                run_id,
                req("step_created", f"s{i}", step_name="a", input=b""),
                in_band=True,
                expected_seq_in_band=count,
            )
        except InBandSuperseded as exc:
            return exc

    outcomes = await asyncio.gather(*(writer(i) for i in range(8)))
    winners = [o for o in outcomes if not isinstance(o, InBandSuperseded)]
    losers = [o for o in outcomes if isinstance(o, InBandSuperseded)]
    assert len(winners) == 1
    assert len(losers) == 7
    page = await world.events.list(run_id)
    assert page.snapshot == Snapshot(seq=3, seq_in_band=count + 1)
    assert len(await world.steps.list(run_id)) == 1


async def test_in_band_batch_advances_by_its_size(world: World) -> None:
    run_id = await new_running_run(world)
    result = await world.events.create_batch(
        run_id,
        [
            req("step_created", "s1", step_name="a", input=b""),
            req("step_started", "s1"),
            req("step_created", "s2", step_name="b", input=b""),
        ],
        in_band=True,
        expected_seq_in_band=1,
    )
    assert all(e.in_band for e in result.events)
    assert (await world.events.list(run_id)).snapshot == Snapshot(seq=5, seq_in_band=4)
    await assert_refused(
        world,
        InBandSuperseded,
        lambda: world.events.create_batch(
            run_id,
            [req("step_created", "s3", step_name="c", input=b"")],
            in_band=True,
            expected_seq_in_band=1,
        ),
    )


# --- determinism ------------------------------------------------------------------------


async def _scripted(world: World, clock: FixedClock) -> object:
    run_a = await new_running_run(world)
    clock.advance(1.5)
    run_b = await new_run(world, workflow_name="other")
    await new_step(world, run_a, "s1", start=True)
    await world.events.create(run_a, req("hook_created", "h1", token="tok"))
    await world.events.create(run_b, req("run_started"))
    await world.events.create(run_b, req("hook_created", "h2", token="tok"))
    clock.advance(2)
    await world.events.create(run_a, req("hook_received", "h1", payload=b"p", resume_id="r1"))
    message = await world.queue.enqueue("q", b"m", run_id=run_a, orchestrator=True)
    delivery = await world.queue.claim(lease_seconds=5)
    await world.streams.write(run_a, "out", [b"1", b"2"])
    return (
        message,
        delivery,
        await world_state(world),
        await world.hooks.get_by_token("tok"),
        run_a,
        run_b,
    )


async def test_identical_operations_give_identical_results(
    make_world: MakeWorld,
) -> None:
    outcomes = []
    for _ in range(2):
        clock = FixedClock()
        world = make_world(clock)
        try:
            outcomes.append(await _scripted(world, clock))
        finally:
            await world.close()
    assert outcomes[0] == outcomes[1]


async def test_capabilities_are_declared(world: World) -> None:
    caps = world.capabilities
    assert isinstance(caps, Capabilities)
    assert caps.in_band_fence, "the runtime needs the in-band fence: a World must declare it"
    assert not caps.power_safe or caps.durable


# --- strict writes and writer time (run-ahead support) -----------------------------------


async def test_expected_seq_refuses_a_write_after_the_log_moved(world: World) -> None:
    from durasim.worlds import StaleView

    run_id = await new_running_run(world)  # seq 2
    accepted = await world.events.create(
        run_id, req("step_created", "s1", step_name="a", input=b""), expected_seq=2
    )
    assert accepted.event is not None
    assert accepted.event.seq == 3
    before = await world_state(world)
    with pytest.raises(StaleView) as caught:
        await world.events.create_batch(
            run_id, [req("step_created", "s2", step_name="a", input=b"")], expected_seq=2
        )
    assert caught.value.seq == 3
    assert await world_state(world) == before


async def test_occurred_at_becomes_the_in_band_events_time(world: World, clock: object) -> None:
    run_id = await new_running_run(world)
    page = await world.events.list(run_id)
    moment = page.events[-1].created_at + timedelta(seconds=1)
    result = await world.events.create_batch(
        run_id,
        [
            req("step_created", "s1", step_name="a", input=b""),
            req("step_started", "s1"),
        ],
        in_band=True,
        expected_seq_in_band=page.snapshot.seq_in_band,
        occurred_at=moment,
    )
    assert [e.created_at for e in result.events] == [moment, moment]
    require(world, "input_validation")
    with pytest.raises(InvalidRequest, match="in-band writes only"):
        await world.events.create(
            run_id, req("step_completed", "s1", result=b""), occurred_at=moment
        )
    with pytest.raises(InvalidRequest, match="ahead of the World's clock"):
        await world.events.create(
            run_id,
            req("step_completed", "s1", result=b""),
            in_band=True,
            expected_seq_in_band=page.snapshot.seq_in_band + 2,
            occurred_at=moment + timedelta(days=1),
        )
