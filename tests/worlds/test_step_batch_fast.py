"""The memory World's path for the runtime's batch every step (``_memory_steps``)
decides exactly as the general path (``plan_batch`` then store): the same answer,
events, rows and errors, for generated batches and states; and the validated mark
that lets a request skip the World's checks cannot come from input."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pickle
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_fast_path import CASES, RUN, _batch

from durasim.worlds import (
    EventRequest,
    FixedClock,
    InvalidRequest,
    MemoryWorld,
    _memory_steps,
)
from durasim.worlds._checks import check_request
from durasim.worlds._events import (
    step_completed_request,
    step_created_request,
    step_started_request,
)


@contextlib.contextmanager
def _general() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_memory_steps, "_OUTCOMES", frozenset())  # every batch is planned
        yield


@settings(max_examples=500, deadline=None)
@given(CASES)
def test_step_batch_path_decides_as_the_general_path(case: dict[str, Any]) -> None:
    fast = _batch(MemoryWorld(clock=FixedClock()), case)
    with _general():
        slow = _batch(MemoryWorld(clock=FixedClock()), case)
    assert fast == slow


#: A step's life as a sequence of batches: each entry the outcome of the step that
#: ran and whether the requests are the runtime's (validated) or made by hand.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["step_completed", "step_failed", "step_retrying"]),
        st.booleans(),
        st.sampled_from([None, "reuse", "same"]),
    ),
    min_size=1,
    max_size=8,
)


def _run_steps(world: MemoryWorld, plan: list[tuple[str, bool, str | None]]) -> list[object]:
    async def go() -> list[object]:
        ev = world.events
        await ev.create(RUN, EventRequest.of("run_created", workflow_name="wf", input=b"i"))
        await ev.create(RUN, EventRequest.of("run_started"))
        first = [step_created_request("s#0", "step//m//f", b"x", True), step_started_request("s#0")]
        await ev.create_batch(RUN, first, in_band=True, expected_seq_in_band=1)
        answers: list[object] = []
        for i, (kind, trusted, twist) in enumerate(plan, start=1):
            done = f"s#{i - 1}"
            new = {"reuse": "s#0", "same": done}.get(twist or "", f"s#{i}")
            if kind == "step_completed":
                outcome = step_completed_request(done, b"r")
            else:
                outcome = EventRequest.of(kind, done, error=b"e")
            requests = [
                outcome,
                step_created_request(new, "step//m//f", b"x", True),
                step_started_request(new),
            ]
            if not trusted:
                requests = [
                    EventRequest(type=r.type, correlation_id=r.correlation_id, data=r.data)
                    for r in requests
                ]
            log = world._runs[RUN].events
            try:
                result = await ev.create_batch(
                    RUN,
                    requests,
                    in_band=True,
                    expected_seq_in_band=sum(e.in_band for e in log),
                    seen_seq=len(log),
                    occurred_at=world.clock.now(),
                )
            except InvalidRequest as exc:
                answers.append(("invalid", str(exc)))
            except Exception as exc:  # every World refusal, compared by type and text
                answers.append(("refused", type(exc), str(exc)))
            else:
                answers.append(("written", result))
            world._check()
        return answers

    return asyncio.run(go())


@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_step_sequences_agree(plan: list[tuple[str, bool, str | None]]) -> None:
    fast_world = MemoryWorld(clock=FixedClock())
    fast = _run_steps(fast_world, plan)
    slow_world = MemoryWorld(clock=FixedClock())
    with _general():
        slow = _run_steps(slow_world, plan)
    assert fast == slow
    assert fast_world._runs[RUN].events == slow_world._runs[RUN].events
    assert fast_world._runs[RUN].state == slow_world._runs[RUN].state


def test_the_runtime_batch_takes_the_step_batch_path() -> None:
    calls: list[object] = []
    original = _memory_steps.write_step_batch

    def spy(*args: Any, **kwargs: Any) -> object:
        answer = original(*args, **kwargs)
        calls.append(answer)
        return answer

    with pytest.MonkeyPatch.context() as patch:
        from durasim.worlds import _memory

        patch.setattr(_memory, "write_step_batch", spy)
        world = MemoryWorld(clock=FixedClock())
        answers = _run_steps(world, [("step_completed", True, None)] * 3)
    assert [a[0] for a in answers] == ["written"] * 3  # type: ignore[index]
    assert len(calls) == 3
    assert all(c is not None for c in calls)


def _requests() -> list[EventRequest]:
    return [
        step_completed_request("s#1", b"r"),
        step_created_request("s#2", "step//m//f", b"x", True),
        step_started_request("s#2"),
        EventRequest.of("step_created", "s#3", step_name="n", input=b"i"),
    ]


@pytest.mark.parametrize("request_", _requests(), ids=lambda r: r.type.value)
def test_the_validated_mark_does_not_survive_bytes_or_copies(request_: EventRequest) -> None:
    assert request_.validated
    for back in (
        pickle.loads(pickle.dumps(request_)),
        copy.copy(request_),
        copy.deepcopy(request_),
        attrs.evolve(request_),
    ):
        assert back == request_
        assert type(back) is EventRequest
        assert not back.validated


def test_a_forged_mark_in_a_pickle_is_not_trusted() -> None:
    """A request unpickled from crafted bytes is checked like any other."""
    bad = EventRequest(type="step_started", correlation_id="no spaces allowed")  # type: ignore[arg-type]
    forged = pickle.loads(pickle.dumps(bad))
    assert not forged.validated
    with pytest.raises(InvalidRequest):
        check_request(forged)


def test_a_subclass_cannot_claim_the_mark() -> None:
    class Claims(EventRequest):
        @property
        def validated(self) -> bool:
            return True

    bad = Claims(type="step_started", correlation_id="no spaces allowed")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        check_request(bad)
    world = MemoryWorld(clock=FixedClock())

    async def go() -> None:
        ev = world.events
        await ev.create(RUN, EventRequest.of("run_created", workflow_name="wf", input=b"i"))
        await ev.create(RUN, EventRequest.of("run_started"))
        with pytest.raises(InvalidRequest):
            await ev.create_batch(RUN, [bad], in_band=True, expected_seq_in_band=2)

    asyncio.run(go())
