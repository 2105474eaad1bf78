"""The per-step fast paths write and read exactly what the general paths do.

* a step call of JSON scalars is encoded by ``plain_call`` (no dict, no walk):
  the same bytes as the general encoder, the same record bookkeeping;
* a step body whose recorded input is the very call this replay encoded takes
  the call's scalars instead of decoding them: the values are those decoding
  would give;
* ``Replay.deliver`` leaves noting an event's record to its handler: every
  event type that carries a record has a handler that notes it;
* the routing of ``asyncio.wait`` while workflow code runs restores the very
  objects it replaced, also around nested and threaded runs.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import Worker, _loop, _replay, start, step, workflow
from durasim.runtime._authoring import find_workflow
from durasim.runtime._errors import ReplayDivergence
from durasim.runtime._payloads import RECORD_TYPES
from durasim.runtime._replay import Replay
from durasim.runtime.lowlevel import RunPayloads
from durasim.runtime.serialization import SerializationError, deserialize
from durasim.runtime.serialization._api import plain_call
from durasim.worlds import RUN_TERMINAL_TYPES, Event, FixedClock, MemoryWorld, Payload, Types

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.tuples(scalars))
names = st.text(min_size=1).filter(lambda s: s.isidentifier())


def _general(correlation_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    payloads = RunPayloads()
    value = {"args": list(args), "kwargs": kwargs, "closure": {}}
    return payloads.encode_step_input(correlation_id, value, root="f(...)")


@settings(max_examples=300, deadline=None)
@given(args=st.lists(values, max_size=4), kwargs=st.dictionaries(names, values, max_size=3))
def test_a_step_call_encodes_as_the_general_path_does(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    try:
        expected: bytes | None = _general("f#1", tuple(args), dict(kwargs))
    except SerializationError:
        expected = None
    payloads = RunPayloads()
    try:
        got: bytes | None = payloads.encode_step_call(
            "f#1", tuple(args), dict(kwargs), {}, step_name="f"
        )
    except SerializationError:
        got = None
    assert got == expected
    fast = plain_call(tuple(args), kwargs)
    if fast is not None:
        assert fast == expected
        decoded = deserialize(fast)
        assert decoded == {"args": list(args), "kwargs": kwargs, "closure": {}} or any(
            isinstance(v, float) and math.isnan(v) for v in [*args, *kwargs.values()]
        )
    if got is not None:
        # Either way the record is taken: encoding it again is refused.
        with pytest.raises(SerializationError, match="already encoded"):
            payloads.encode_step_call("f#1", tuple(args), dict(kwargs), {}, step_name="f")


def test_a_closure_or_a_shared_empty_dict_takes_the_general_path() -> None:
    shared: dict[str, Any] = {}
    assert _general("f#1", (1,), shared) == RunPayloads().encode_step_call(
        "f#1", (1,), {}, {}, step_name="f"
    )
    general = RunPayloads().encode_step_input(
        "f#1", {"args": [1], "kwargs": shared, "closure": shared}, root="f(...)"
    )
    assert RunPayloads().encode_step_call("f#1", (1,), shared, shared, step_name="f") == general
    closure = {"x": 2}
    assert RunPayloads().encode_step_call(
        "f#1", (1,), {}, closure, step_name="f"
    ) == RunPayloads().encode_step_input(
        "f#1", {"args": [1], "kwargs": {}, "closure": closure}, root="f(...)"
    )


@settings(max_examples=200, deadline=None)
@given(args=st.lists(scalars, max_size=4), kwargs=st.dictionaries(names, scalars, max_size=3))
def test_a_step_body_gets_what_decoding_its_input_gives(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    payloads = RunPayloads()
    try:
        data = payloads.encode_step_call("f#1", tuple(args), dict(kwargs), {}, step_name="f")
    except SerializationError:
        return
    call = payloads.plain_call_of("f#1", data)
    decoded = RunPayloads().decode(data, record="f#1")
    if call is None:
        return
    got_args, got_kwargs = call
    assert repr(list(got_args)) == repr(decoded["args"])
    assert repr(dict(got_kwargs)) == repr(decoded["kwargs"])
    assert decoded["closure"] == {}
    # Taken once: a second attempt decodes the recorded bytes again.
    assert payloads.plain_call_of("f#1", data) is None


def test_other_recorded_bytes_are_decoded() -> None:
    payloads = RunPayloads()
    payloads.encode_step_call("f#1", (1, 2), {}, {}, step_name="f")
    other = RunPayloads().encode_step_call("f#1", (1, 3), {}, {}, step_name="f")
    assert payloads.plain_call_of("f#1", other) is None
    assert payloads.plain_call_of("g#1", other) is None


def test_every_record_type_is_noted_by_its_handler() -> None:
    noting = {
        _replay.Replay._on_noted,
        _replay.Replay._on_step_created,
        _replay.Replay._on_step_completed,
        _replay.Replay._on_hook_received,
    }
    for event_type in RECORD_TYPES:
        assert _replay._HANDLERS[event_type] in noting, event_type
    for event_type, handler in _replay._HANDLERS.items():
        if handler in noting:
            assert event_type in RECORD_TYPES, event_type


def test_routes_restore_what_they_replaced() -> None:
    stdlib_wait, stdlib_as_completed = asyncio.wait, asyncio.as_completed
    routes = _loop._routes
    routes.enter()
    try:
        assert asyncio.wait is not stdlib_wait
        assert asyncio.tasks.wait is not stdlib_wait
        routes.enter()  # nested: still routed after the inner exit
        routes.exit()
        assert asyncio.wait is not stdlib_wait
    finally:
        routes.exit()
    assert asyncio.wait is stdlib_wait
    assert asyncio.tasks.wait is stdlib_wait
    assert asyncio.as_completed is stdlib_as_completed
    assert asyncio.tasks.as_completed is stdlib_as_completed


def test_a_route_on_an_object_that_is_no_module() -> None:
    class Holder:
        value = "original"

    routes = _loop._Routes()
    routes.add(Holder, "value", "routed")
    routes.enter()
    assert Holder.value == "routed"
    routes.exit()
    assert Holder.value == "original"


@step
def _double(n: int) -> int:
    return 2 * n


@workflow
async def _doubles(n: int) -> int:
    total = 0
    for i in range(n):
        total += await _double(i)
    return total


def _replay_of(events: list[Event]) -> Replay:
    created = events[0]
    replay = Replay(
        find_workflow(created.data["workflow_name"]),
        run_id=created.run_id,
        input=created.data["input"],
        started_at=events[1].created_at,
    )
    replay.preload(events)
    replay.begin()
    return replay


def _logged() -> list[Event]:
    async def go() -> list[Event]:
        world = MemoryWorld(clock=FixedClock())
        run = await start(_doubles, 4, world=world)
        assert await Worker(world).run_until_complete(run) == 12
        return list(await run.events())

    return asyncio.run(go())


def _batches(events: list[Event]) -> list[list[Event]]:
    """The log cut where the time changes (a run-ahead batch shares its time)."""
    batches: list[list[Event]] = []
    for event in events:
        if batches and batches[-1][-1].created_at == event.created_at:
            batches[-1].append(event)
        else:
            batches.append([event])
    return batches


def test_take_feeds_a_log_as_deliver_does(monkeypatch: pytest.MonkeyPatch) -> None:
    events = _logged()
    body = [e for e in events if e.type not in RUN_TERMINAL_TYPES]
    by_deliver = _replay_of(events)
    for event in body:
        by_deliver.deliver(event)
    by_take = _replay_of(events)
    # The run-ahead batches share their moment (one object): their new events go
    # straight to their handlers, not through deliver.
    delivered: list[Event] = []
    monkeypatch.setattr(
        by_take, "deliver", lambda e: (delivered.append(e), Replay.deliver(by_take, e))
    )
    for batch in _batches(body):
        by_take.take(batch)
        by_take.take(batch)  # a second time: nothing new
    assert by_take.consumed == by_deliver.consumed == len(body)
    assert by_take.outcome() == by_deliver.outcome() == (True, 12)
    assert by_take.new_commands() == by_deliver.new_commands() == []
    assert len(delivered) < len(body) / 2


def _feed(replay: Replay, how: str, events: list[Event]) -> None:
    """The last of ``events`` by ``deliver``, or all of them by ``take``."""
    if how == "deliver":
        replay.deliver(events[-1])
    else:
        replay.take(events)


@pytest.mark.parametrize(
    "change",
    [
        {"step_name": "step//elsewhere//other"},
        {"input": RunPayloads().encode_step_call("x#1", (7,), {}, {}, step_name="x")},
    ],
)
def test_take_judges_a_changed_event_as_deliver_does(change: dict[str, Any]) -> None:
    events = _logged()
    at = next(i for i, e in enumerate(events) if e.type is Types.STEP_CREATED and i > 3)
    tampered = attrs.evolve(events[at], data=Payload({**events[at].data, **change}))
    messages = []
    for feed in ("deliver", "take"):
        replay = _replay_of(events)
        for event in events[:at]:
            replay.deliver(event)
        with pytest.raises(ReplayDivergence) as caught:
            _feed(replay, feed, [events[at - 1], tampered])
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_take_refuses_a_hole() -> None:
    events = _logged()
    replay = _replay_of(events)
    for event in events[:3]:
        replay.deliver(event)
    with pytest.raises(ReplayDivergence, match="with a hole"):
        replay.take(events[4:6])


def test_the_run_ahead_compares_events_as_their_equality_does() -> None:
    from datetime import UTC, datetime, timedelta

    from durasim.runtime._delivery import _same_event

    at = datetime(2024, 1, 1, tzinfo=UTC)
    base = Event(
        run_id="r",
        seq=3,
        type=Types.STEP_COMPLETED,
        created_at=at,
        correlation_id="s#1",
        in_band=True,
        data=Payload({"result": b"dj1:j1"}),
    )
    changes: list[dict[str, Any]] = [
        {},
        {"run_id": "q"},
        {"seq": 4},
        {"type": Types.STEP_FAILED},
        {"created_at": at + timedelta(microseconds=1)},
        {"created_at": datetime(2024, 1, 1, tzinfo=UTC)},  # equal, not the same object
        {"correlation_id": "s#2"},
        {"correlation_id": None},
        {"in_band": False},
        {"data": Payload({"result": b"dj1:j2"})},
        {"data": Payload({"result": b"dj1:j1"})},  # equal, not the same object
        {"data": Payload({"result": b"dj1:j1", "extra": 1})},
    ]
    for change in changes:
        other = attrs.evolve(base, **change)
        assert _same_event(other, base) == (other == base), change
        assert _same_event(base, base)


def test_the_single_new_step_is_what_new_commands_holds() -> None:
    from durasim.runtime._replay import StepCommand

    events = _logged()
    replay = _replay_of(events)
    seen = 0
    for event in [e for e in events if e.type not in RUN_TERMINAL_TYPES]:
        replay.deliver(event)
        state = replay.single_new_step()
        if state is not None:
            seen += 1
            assert replay.new_commands() == [
                StepCommand(state.correlation_id, state.definition, state.input)
            ]
    assert seen >= 4


def test_the_workflow_loop_is_never_in_debug_mode() -> None:
    # get_debug answers without a frame; it must stay False on every Python (a bare
    # functools.partial is a method descriptor from 3.14: it would answer bool(loop)).
    import warnings

    from durasim.runtime._loop import WorkflowLoop

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop = WorkflowLoop(on_timer=lambda _: None, on_timer_cancelled=lambda _: None, now=0.0)
        try:
            assert loop.get_debug() is False
            loop.set_debug(True)
            assert loop.get_debug() is False
        finally:
            loop.close()
