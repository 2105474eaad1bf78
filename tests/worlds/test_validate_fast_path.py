"""The one-pass check of common requests decides exactly as the full check does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.worlds import EventType, InvalidRequest, validate_request
from durasim.worlds._events import _validate_full

FIELD_NAMES = [
    *("workflow_name", "input", "deployment_id", "execution_context", "attributes", "output"),
    *("error", "error_code", "reason", "step_name", "inline", "creator_message_id", "attempt"),
    *("owner_message_id", "start_reason", "retry_after", "result", "token", "metadata"),
    *("is_webhook", "payload", "resume_id", "conflicting_run_id", "conflicting_hook_id"),
    *("resume_at", "early", "changes", "writer", "bogus"),
]
VALUES = st.one_of(
    st.none(),
    st.binary(max_size=4),
    st.sampled_from(["", "x", "tok en", "run-1", "a" * 600, "step//m//f"]),
    st.booleans(),
    st.integers(min_value=-1, max_value=3),
    st.just(datetime(2024, 1, 1, tzinfo=UTC)),
    st.just(datetime(2024, 1, 1)),  # naive on purpose: refused
    st.just({"k": "v"}),
    st.just([("k", None)]),
)
TYPES = st.one_of(st.sampled_from(list(EventType)), st.sampled_from(["step_created", "nope"]))
CORRELATION_IDS = st.one_of(st.none(), st.sampled_from(["s1", "add#2", "bad id", "", "_x"]))


def decide(type_: Any, correlation_id: Any, data: Any, *, fast: bool) -> object:
    check = validate_request if fast else _validate_full
    try:
        request = check(type_, correlation_id, data, world=False)
    except InvalidRequest as exc:
        return ("refused", str(exc))
    return (request, request.type, list(request.data.items()), request.validated)


@given(TYPES, CORRELATION_IDS, st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=5))
def test_fast_and_full_checks_agree(type_: Any, correlation_id: Any, data: Any) -> None:
    assert decide(type_, correlation_id, data, fast=True) == decide(
        type_, correlation_id, data, fast=False
    )


def test_common_requests_agree() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    cases: list[tuple[str, str | None, dict[str, Any]]] = [
        ("step_created", "add#2", {"step_name": "step//m//add", "input": b"i", "inline": True}),
        ("step_started", "add#2", {}),
        ("step_completed", "add#2", {"result": b"r"}),
        ("step_retrying", "add#2", {"error": b"e", "retry_after": at}),
        ("wait_created", "w1", {"resume_at": at}),
        ("run_completed", None, {"output": b"o"}),
        ("run_failed", None, {"error": b"e", "error_code": "USER_ERROR"}),
        ("run_created", None, {"workflow_name": "wf", "input": b"i", "attributes": {"k": "v"}}),
        ("hook_created", "h1", {"token": "tok", "metadata": None}),
    ]
    for type_, correlation_id, data in cases:
        fast = decide(type_, correlation_id, data, fast=True)
        assert fast[0] != "refused", fast
        assert fast == decide(type_, correlation_id, data, fast=False)


def test_the_fast_path_builds_every_field_of_a_request() -> None:
    # _validate_common sets EventRequest's fields one by one: a new field must be added there.
    import attrs

    from durasim.worlds import EventRequest

    assert [f.name for f in attrs.fields(EventRequest)] == [
        "type",
        "correlation_id",
        "data",
        "_validated",
    ]
    built = validate_request("step_completed", "add#1", {"result": b"r"})
    by_hand = EventRequest(
        type=EventType.STEP_COMPLETED, correlation_id="add#1", data={"result": b"r"}
    )
    assert built == by_hand
    assert hash(built) == hash(by_hand)
    assert repr(built) == repr(by_hand)
    assert built.validated
    assert not by_hand.validated


def decide_of(type_: Any, correlation_id: Any, data: dict[str, Any]) -> object:
    from durasim.worlds import EventRequest

    try:
        request = EventRequest.of(type_, correlation_id, **data)
    except InvalidRequest as exc:
        return ("refused", str(exc))
    return (request, request.type, list(request.data.items()), request.validated)


@settings(max_examples=500)
@given(TYPES, CORRELATION_IDS, st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES, max_size=5))
def test_of_and_the_full_check_agree(type_: Any, correlation_id: Any, data: Any) -> None:
    # EventRequest.of calls the type's compiled one-pass check itself.
    assert decide_of(type_, correlation_id, data) == decide(type_, correlation_id, data, fast=False)


@st.composite
def own_fields(draw: st.DrawFn) -> tuple[EventType, dict[str, Any]]:
    """A type and data drawn from its own schema's fields (so the one-pass check decides)."""
    from durasim.worlds._events import _SCHEMA

    type_ = draw(st.sampled_from(list(EventType)))
    names = list(_SCHEMA[type_]) or ["bogus"]
    return type_, draw(st.dictionaries(st.sampled_from(names), VALUES, max_size=len(names)))


@settings(max_examples=1000)
@given(own_fields(), CORRELATION_IDS)
def test_each_types_check_agrees_with_the_full_check(
    drawn: tuple[EventType, dict[str, Any]], correlation_id: Any
) -> None:
    type_, data = drawn
    full = decide(type_, correlation_id, data, fast=False)
    assert decide(type_, correlation_id, data, fast=True) == full
    assert decide(type_.value, correlation_id, data, fast=True) == full
    assert decide_of(type_, correlation_id, data) == full
