"""The one-pass checks remember well-formed correlation ids: decisions never change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.worlds import EventRequest, InvalidRequest
from durasim.worlds._events import _KNOWN_IDS_MAX, _WELL_FORMED_IDS, _validate_full

IDS = st.one_of(
    st.sampled_from(["s1", "add#2", "bad id", "", "_x", "a" * 256, "a" * 257, "é", "x\x00"]),
    st.text(max_size=6),
)


def decide(type_: str, correlation_id: str, *, fast: bool) -> object:
    try:
        if fast:
            request = EventRequest.of(type_, correlation_id)
        else:
            request = _validate_full(type_, correlation_id, {}, world=False)
    except InvalidRequest as exc:
        return ("refused", str(exc))
    return (request, request.validated)


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["step_started", "hook_disposed"]), IDS), max_size=8))
def test_remembered_ids_decide_as_the_full_check(calls: list[tuple[str, str]]) -> None:
    for type_, correlation_id in calls * 2:  # each id again, once it may be remembered
        assert decide(type_, correlation_id, fast=True) == decide(type_, correlation_id, fast=False)
    for known in _WELL_FORMED_IDS:
        assert type(known) is str
        assert _validate_full("step_started", known, {}, world=False).correlation_id == known


def test_the_memory_is_bounded_and_keeps_no_malformed_id() -> None:
    for i in range(3 * _KNOWN_IDS_MAX):
        EventRequest.of("step_started", f"step#{i}")
        assert len(_WELL_FORMED_IDS) <= _KNOWN_IDS_MAX
    for bad in ["bad id", "", "x" * 300]:
        with pytest.raises(InvalidRequest):
            EventRequest.of("step_started", bad)
        assert bad not in _WELL_FORMED_IDS
