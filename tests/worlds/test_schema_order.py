"""Events the World completes keep their data in the schema's order (equal events render alike)."""

from __future__ import annotations

from datetime import timedelta

from durasim.worlds import EventRequest, FixedClock, MemoryWorld, Payload
from durasim.worlds._events import _SCHEMA


def test_payload_first_and_last_place_the_field_and_copy() -> None:
    data = Payload({"a": 1, "b": 2})
    assert list(data.first("c", 3)) == ["c", "a", "b"]
    assert list(data.first("b", 9).items()) == [("b", 9), ("a", 1)]
    assert list(data.last("a", 0).items()) == [("b", 2), ("a", 0)]
    assert list(data) == ["a", "b"]  # the original is untouched


async def test_fields_the_world_adds_sit_where_the_schema_has_them() -> None:
    clock = FixedClock()
    world = MemoryWorld(clock=clock)
    created = await world.events.create(
        None, EventRequest.of("run_created", workflow_name="wf", input=b"x")
    )
    run_id = created.run.run_id
    fence = 1

    async def write(*requests: EventRequest) -> None:
        nonlocal fence
        result = await world.events.create_batch(
            run_id, list(requests), in_band=True, expected_seq_in_band=fence
        )
        fence += len(result.events)

    await world.events.create(
        run_id, EventRequest.of("run_started"), in_band=True, expected_seq_in_band=fence
    )
    fence += 1
    await write(
        EventRequest.of("step_created", "s#1", step_name="s", input=b"i"),
        EventRequest.of("step_started", "s#1", start_reason="first", owner_message_id="m"),
        EventRequest.of("wait_created", "w#1", resume_at=clock.now() + timedelta(seconds=1)),
    )
    await world.events.create(
        run_id,
        EventRequest.of("hook_created", "h#1", token="tok"),
        in_band=True,
        expected_seq_in_band=fence,
    )
    fence += 1
    clock.advance(2)
    await write(EventRequest.of("wait_completed", "w#1", early=False))
    # A resume comes from outside the run: not in-band.
    await world.events.create(
        run_id, EventRequest.of("hook_received", "h#1", payload=b"p", resume_id="r")
    )
    page = await world.events.list(run_id)
    for event in page.events:
        order = [name for name in _SCHEMA[event.type] if name in event.data]
        assert list(event.data) == order, event.label
    added = {e.type.value: e.data for e in page.events}
    assert added["step_started"]["attempt"] == 1
    assert added["wait_completed"]["resume_at"] is not None
    assert added["hook_received"]["token"] == "tok"
