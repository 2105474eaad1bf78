"""The runtime's batch (outcome, step_created, step_started) planned in one call
decides exactly as the request-by-request loop does: same events, rows and errors."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.worlds import EventRequest, FixedClock, MemoryWorld, WorldError, _guards

RUN = "run-1"
IDS = ["s1", "s2", "s3"]
#: How each step of the set-up is left: absent, pending, running, retrying, done, failed.
STATES = st.sampled_from(["absent", "pending", "running", "retrying", "completed", "failed"])
OUTCOMES = st.sampled_from(
    [
        ("step_completed", {"result": b"r"}),
        ("step_failed", {"error": b"e"}),
        ("step_retrying", {"error": b"e"}),
        ("step_retrying", {"error": b"e", "retry_after": "later"}),
    ]
)
RUN_STATES = st.sampled_from(["pending", "running", "completed", "failed", "cancelled"])


async def _setup(world: MemoryWorld, steps: dict[str, str], run_state: str) -> None:
    ev = world.events
    await ev.create(RUN, EventRequest.of("run_created", workflow_name="wf", input=b"i"))
    if run_state != "pending":
        await ev.create(RUN, EventRequest.of("run_started"))
    for cid, state in steps.items():
        if state == "absent" or run_state == "pending":
            continue
        await ev.create(
            RUN, EventRequest.of("step_created", cid, step_name="step//m//f", input=b"x")
        )
        if state == "pending":
            continue
        await ev.create(RUN, EventRequest.of("step_started", cid))
        if state == "retrying":
            later = world.clock.now() + timedelta(seconds=5)
            await ev.create(
                RUN, EventRequest.of("step_retrying", cid, error=b"e", retry_after=later)
            )
        elif state == "completed":
            await ev.create(RUN, EventRequest.of("step_completed", cid, result=b"r"))
        elif state == "failed":
            await ev.create(RUN, EventRequest.of("step_failed", cid, error=b"e"))
    if run_state == "completed":
        await ev.create(RUN, EventRequest.of("run_completed", output=b"o"))
    elif run_state == "failed":
        await ev.create(RUN, EventRequest.of("run_failed", error=b"e"))
    elif run_state == "cancelled":
        await ev.create(RUN, EventRequest.of("run_cancelled"))


def _batch(world: MemoryWorld, case: dict[str, Any]) -> object:
    async def go() -> object:
        await _setup(world, case["steps"], case["run_state"])
        kind, data = case["outcome"]
        data = dict(data)
        if data.get("retry_after") == "later":
            data["retry_after"] = world.clock.now() + timedelta(seconds=9)
        requests = [
            EventRequest.of(kind, case["a"], **data),
            EventRequest.of(
                "step_created", case["b"], step_name="step//m//g", input=b"y", inline=True
            ),
            EventRequest.of("step_started", case["c"], **case["started"]),
        ]
        if not case["validated"]:  # built by hand: the World checks them again
            requests = [
                EventRequest(type=r.type, correlation_id=r.correlation_id, data=r.data)
                for r in requests
            ]
        log = world._runs[RUN].events
        seq = len(log) if case["expected_seq"] == "right" else case["expected_seq"]
        fence = sum(e.in_band for e in log) if case["fence"] == "right" else case["fence"]
        try:
            result = await world.events.create_batch(
                RUN,
                requests,
                in_band=case["in_band"],
                expected_seq_in_band=fence if case["in_band"] else None,
                seen_seq=case["seen_seq"],
                occurred_at=world.clock.now() if case["in_band"] else None,
                expected_seq=seq,
            )
        except WorldError as exc:
            return ("refused", type(exc), str(exc), exc.__dict__)
        return ("written", result)

    answer = asyncio.run(go())
    world._check()
    record = world._runs[RUN]
    return answer, list(record.events), record.state, (record.state.seq, record.state.seq_in_band)


CASES = st.fixed_dictionaries(
    {
        "steps": st.fixed_dictionaries(dict.fromkeys(IDS, STATES)),
        "run_state": RUN_STATES,
        "outcome": OUTCOMES,
        "a": st.sampled_from(IDS),
        "b": st.sampled_from(IDS),
        "c": st.sampled_from(IDS),
        "started": st.sampled_from([{}, {"owner_message_id": "m1"}]),
        "validated": st.booleans(),
        "in_band": st.booleans(),
        "fence": st.sampled_from(["right", 0, 99]),
        "expected_seq": st.sampled_from(["right", None, 1, 99]),
        "seen_seq": st.sampled_from([None, 0, 3, 99]),
    }
)


@settings(max_examples=400, deadline=None)
@given(CASES)
def test_fast_batch_decides_as_the_loop(case: dict[str, Any]) -> None:
    fast = _batch(MemoryWorld(clock=FixedClock()), case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_guards, "_OUTCOMES", frozenset())  # every batch takes the loop
        slow = _batch(MemoryWorld(clock=FixedClock()), case)
    assert fast == slow


def test_the_runtime_batch_takes_the_fast_path() -> None:
    """A step completed, the next born running: one call plans all three."""
    calls: list[object] = []
    case = {
        "steps": {"s1": "running", "s2": "absent", "s3": "absent"},
        "run_state": "running",
        "outcome": ("step_completed", {"result": b"r"}),
        **{"a": "s1", "b": "s2", "c": "s2", "started": {}, "validated": True},
        **{"in_band": True, "fence": "right", "expected_seq": "right", "seen_seq": 3},
    }
    original = _guards._Overlay
    with pytest.MonkeyPatch.context() as patch:
        # plan_batch's loop reads through an _Overlay (the plan's own writes first);
        # the runtime's batch is planned without one.
        def overlay(*a: Any) -> Any:
            if sys._getframe(1).f_code.co_name == "plan_batch":
                calls.append(a)
            return original(*a)

        patch.setattr(_guards, "_Overlay", overlay)
        (answer, events, state, _) = _batch(MemoryWorld(clock=FixedClock()), case)
    assert calls == []
    assert answer[0] == "written"
    assert [e.type.value for e in events[-3:]] == ["step_completed", "step_created", "step_started"]
    assert state.steps["s1"].status == "completed"
    assert state.steps["s2"].attempt == 1
