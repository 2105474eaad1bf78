"""Contract: bad input is refused with InvalidRequest before anything is written.

Requests here are mostly built by hand (``EventRequest(...)``), bypassing the
validation in ``EventRequest.of``: the World must check them again itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs
import pytest

from durasim.worlds import (
    EventRequest,
    EventType,
    FixedClock,
    InvalidRequest,
    World,
)

from ._fixtures import MakeWorld, clock, make_world, world  # noqa: F401 -- fixtures
from ._helpers import assert_refused, new_hook, new_running_run, new_step, new_wait, req

BAD_RUN_IDS = ["../x", "a'; DROP TABLE events;--", "a b", "", "x/y", "-lead", "a" * 129, "ä"]


def raw(type_: str, correlation_id: str | None = None, **data: Any) -> EventRequest:
    """A request built by hand: no validation at construction."""
    return EventRequest(type=type_, correlation_id=correlation_id, data=data)  # type: ignore[arg-type]


async def _busy_world(world: World) -> str:
    """A run with a step, hook and wait, a queued message and a stream: plenty to corrupt."""
    run_id = await new_running_run(world, "victim")
    await new_step(world, run_id, "s1", start=True)
    await new_hook(world, run_id, "h1", "tok")
    await new_wait(world, run_id, "w1")
    if world.capabilities.queue:
        await world.queue.enqueue("q", b"m", run_id=run_id)
    if world.capabilities.streams:
        await world.streams.write(run_id, "out", b"chunk")
    return run_id


# --- types --------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", ["bogus", "", "RUN_CREATED", "step"])
async def test_unknown_event_type(world: World, type_: str) -> None:
    run_id = await _busy_world(world)
    with pytest.raises(InvalidRequest):
        req(type_)
    await assert_refused(world, InvalidRequest, lambda: world.events.create(run_id, raw(type_)))
    await assert_refused(world, InvalidRequest, lambda: world.events.create(None, raw(type_)))


@pytest.mark.parametrize(
    "request_",
    [
        raw("noop"),
        raw(
            "hook_conflict",
            "h2",
            token="tok",
            conflicting_run_id="victim",
            conflicting_hook_id="h1",
        ),
    ],
    ids=["noop", "hook_conflict"],
)
async def test_world_only_types(world: World, request_: EventRequest) -> None:
    run_id = await _busy_world(world)
    with pytest.raises(InvalidRequest):
        req(request_.type, request_.correlation_id, **request_.data)
    await assert_refused(world, InvalidRequest, lambda: world.events.create(run_id, request_))
    await assert_refused(
        world, InvalidRequest, lambda: world.events.create_batch(run_id, [request_])
    )


async def test_not_an_event_request(world: World) -> None:
    run_id = await _busy_world(world)
    for thing in ({"type": "run_started"}, "run_started", None):
        await assert_refused(
            world,
            InvalidRequest,
            lambda t=thing: world.events.create(run_id, t),  # type: ignore[misc]
        )
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create_batch(run_id, [req("step_completed", "s1", result=b""), "x"]),  # type: ignore[list-item]
    )


# --- fields -------------------------------------------------------------------------------

_LATER = datetime(2030, 1, 1).astimezone()

BAD_FIELDS = {
    "run_created-missing-input": raw("run_created", workflow_name="wf"),
    "run_created-missing-name": raw("run_created", input=b""),
    "run_created-extra": raw("run_created", workflow_name="wf", input=b"", colour="red"),
    "run_created-int-name": raw("run_created", workflow_name=3, input=b""),
    "run_created-attributes-str": raw("run_created", workflow_name="wf", input=b"", attributes="a"),
    "run_created-attr-value-int": raw(
        "run_created", workflow_name="wf", input=b"", attributes={"a": 1}
    ),
    "run_created-attr-key-empty": raw(
        "run_created", workflow_name="wf", input=b"", attributes={"": "v"}
    ),
    "run_completed-missing-output": raw("run_completed"),
    "run_failed-error-code-int": raw("run_failed", error=b"", error_code=5),
    "run_cancelled-reason-too-long": raw("run_cancelled", reason="x" * 513),
    "run_started-extra": raw("run_started", deployment_id="d"),
    "step_created-inline-str": raw("step_created", "s9", step_name="a", input=b"", inline="yes"),
    "step_created-inline-int": raw("step_created", "s9", step_name="a", input=b"", inline=1),
    "step_started-attempt-is-world-only": raw("step_started", "s1", attempt=3),
    "step_retrying-naive-retry-after": raw(
        "step_retrying", "s1", error=b"", retry_after=datetime(2030, 1, 1)
    ),
    "step_retrying-str-retry-after": raw(
        "step_retrying", "s1", error=b"", retry_after="2030-01-01T00:00:00Z"
    ),
    "hook_created-token-with-space": raw("hook_created", "h9", token="a b"),
    "hook_created-empty-token": raw("hook_created", "h9", token=""),
    "hook_created-token-too-long": raw("hook_created", "h9", token="t" * 257),
    "hook_created-is-webhook-int": raw("hook_created", "h9", token="t9", is_webhook=1),
    "hook_received-token-is-world-only": raw("hook_received", "h1", payload=b"", token="tok"),
    "hook_received-resume-id-int": raw("hook_received", "h1", payload=b"", resume_id=7),
    "wait_created-missing-resume-at": raw("wait_created", "w9"),
    "wait_created-epoch-float": raw("wait_created", "w9", resume_at=1_900_000_000.0),
    "wait_completed-resume-at-is-world-only": raw("wait_completed", "w1", resume_at=_LATER),
    "wait_completed-early-str": raw("wait_completed", "w1", early="true"),
    "attr_set-missing-changes": raw("attr_set"),
    "attr_set-bad-pair": raw("attr_set", changes=[("a", "1", "extra")]),
    "attr_set-value-too-long": raw("attr_set", changes={"a": "v" * 4097}),
    "step_completed-missing-result": raw("step_completed", "s1"),
}


@pytest.mark.parametrize("request_", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
async def test_missing_extra_or_ill_typed_fields(world: World, request_: EventRequest) -> None:
    run_id = await _busy_world(world)
    target = None if request_.type == "run_created" else run_id
    await assert_refused(world, InvalidRequest, lambda: world.events.create(target, request_))
    with pytest.raises(InvalidRequest):
        req(request_.type, request_.correlation_id, **request_.data)


_BYTES_FIELDS = [
    ("run_created", None, {"workflow_name": "wf"}, "input"),
    ("run_created", None, {"workflow_name": "wf", "input": b""}, "execution_context"),
    ("run_completed", None, {}, "output"),
    ("run_failed", None, {}, "error"),
    ("step_created", "s9", {"step_name": "a"}, "input"),
    ("step_completed", "s1", {}, "result"),
    ("step_failed", "s1", {}, "error"),
    ("step_retrying", "s1", {}, "error"),
    ("hook_created", "h9", {"token": "t9"}, "metadata"),
    ("hook_received", "h1", {}, "payload"),
]
_NOT_BYTES = {"str": "text", "bytearray": bytearray(b"x"), "memview": memoryview(b"x"), "int": 1}


@pytest.mark.parametrize("value", _NOT_BYTES.values(), ids=_NOT_BYTES.keys())
@pytest.mark.parametrize("case", _BYTES_FIELDS, ids=[f"{t}.{f}" for t, _, _, f in _BYTES_FIELDS])
async def test_payloads_must_be_bytes(
    world: World, case: tuple[str, str | None, dict[str, Any], str], value: object
) -> None:
    type_, cid, base, field = case
    run_id = await _busy_world(world)
    request_ = raw(type_, cid, **base, **{field: value})
    target = None if type_ == "run_created" else run_id
    exc = await assert_refused(world, InvalidRequest, lambda: world.events.create(target, request_))
    assert exc.field == f"{type_}.{field}"  # type: ignore[attr-defined]
    if type_ not in ("run_created", "run_completed", "run_failed"):  # batchable ones
        await assert_refused(
            world, InvalidRequest, lambda: world.events.create_batch(run_id, [request_])
        )


async def test_request_changed_after_validation_is_checked_again(world: World) -> None:
    run_id = await _busy_world(world)
    valid = req("step_completed", "s1", result=b"ok")
    tampered = attrs.evolve(valid, data={"result": "not bytes"})
    await assert_refused(world, InvalidRequest, lambda: world.events.create(run_id, tampered))
    retyped = attrs.evolve(valid, type=EventType.NOOP, correlation_id=None, data={})
    await assert_refused(world, InvalidRequest, lambda: world.events.create(run_id, retyped))


# --- correlation ids -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        raw("step_created", None, step_name="a", input=b""),
        raw("hook_received", None, payload=b""),
        raw("wait_completed", None),
        raw("step_created", "", step_name="a", input=b""),
        raw("step_created", "a b", step_name="a", input=b""),
        raw("step_created", "x'; DROP TABLE steps;--", step_name="a", input=b""),
        raw("step_created", "s" * 257, step_name="a", input=b""),
        raw("run_started", "s1"),
        raw("run_completed", "s1", output=b""),
        raw("attr_set", "a b", changes={"a": "1"}),
    ],
    ids=[
        "step-missing",
        "hook-missing",
        "wait-missing",
        "empty",
        "space",
        "sql",
        "too-long",
        "run-event-with-id",
        "run-outcome-with-id",
        "attr-set-bad-id",
    ],
)
async def test_bad_correlation_ids(world: World, request_: EventRequest) -> None:
    run_id = await _busy_world(world)
    await assert_refused(world, InvalidRequest, lambda: world.events.create(run_id, request_))


# --- run ids ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_RUN_IDS)
async def test_bad_run_ids_are_refused_everywhere(world: World, bad: str) -> None:
    await _busy_world(world)
    calls = [
        lambda: world.events.create(bad, req("run_created", workflow_name="wf", input=b"")),
        lambda: world.events.create(bad, req("run_started")),
        lambda: world.events.create(bad, req("attr_set", changes={"a": "1"})),
        lambda: world.events.create_batch(bad, [req("step_completed", "s1", result=b"")]),
        lambda: world.events.list(bad),
        lambda: world.events.get(bad, 1),
        lambda: world.runs.get(bad),
        lambda: world.steps.list(bad),
        lambda: world.steps.get(bad, "s1"),
        lambda: world.hooks.list(bad),
        lambda: world.hooks.get(bad, "h1"),
        lambda: world.waits.list(bad),
        lambda: world.waits.get(bad, "w1"),
        lambda: world.streams.write(bad, "out", b"x"),
        lambda: world.streams.read(bad, "out"),
        lambda: world.streams.list(bad),
        lambda: world.queue.enqueue("q", b"x", run_id=bad, orchestrator=True),
    ]
    for call in calls:
        exc = await assert_refused(world, InvalidRequest, call)
        assert not isinstance(exc, LookupError)


@pytest.mark.parametrize("bad", [7, b"bytes", ("a",)])
async def test_non_string_run_ids(world: World, bad: object) -> None:
    await _busy_world(world)
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create(bad, req("run_created", workflow_name="wf", input=b"")),  # type: ignore[arg-type]
    )
    await assert_refused(world, InvalidRequest, lambda: world.runs.get(bad))  # type: ignore[arg-type]


async def test_only_run_created_may_omit_the_run_id(world: World) -> None:
    await _busy_world(world)
    await assert_refused(
        world, InvalidRequest, lambda: world.events.create(None, req("run_started"))
    )
    await assert_refused(
        world,
        InvalidRequest,
        lambda: world.events.create(None, req("step_created", "s", step_name="a", input=b"")),
    )


# --- write arguments ------------------------------------------------------------------------


async def test_bad_seen_seq(world: World) -> None:
    run_id = await _busy_world(world)
    for bad in (-1, "3", 1.5):
        await assert_refused(
            world,
            InvalidRequest,
            lambda b=bad: world.events.create(  # type: ignore[misc]
                run_id, req("attr_set", changes={"a": "1"}), seen_seq=b
            ),
        )


async def test_bad_expected_seq_in_band(world: World) -> None:
    run_id = await _busy_world(world)
    for bad in ("1", 1.0, -1):
        await assert_refused(
            world,
            InvalidRequest,
            lambda b=bad: world.events.create(  # type: ignore[misc]
                run_id, req("attr_set", changes={"a": "1"}), in_band=True, expected_seq_in_band=b
            ),
        )


async def test_refused_input_does_not_consume_ids(
    make_world: MakeWorld,
) -> None:
    # A refused run_created mints no id: the next id is the one a clean World mints.
    minted = []
    for refuse_first in (False, True):
        world = make_world(FixedClock())
        try:
            if refuse_first:
                await assert_refused(
                    world,
                    InvalidRequest,
                    lambda w=world: w.events.create(None, raw("run_created", input=b"")),  # type: ignore[misc]
                )
            result = await world.events.create(
                None, req("run_created", workflow_name="wf", input=b"")
            )
            minted.append(result.run.run_id)
        finally:
            await world.close()
    assert minted[0] == minted[1]
