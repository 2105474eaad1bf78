"""The validated mark (a World may skip checking a request again) is what its docstring
says: whether ``validate_request`` built *this very object*. A copy or a pickled round
trip is checked again, and only an ``EventRequest`` itself, never a subclass, is trusted."""

from __future__ import annotations

import asyncio
import copy
import pickle

import attrs
import pytest

from durasim.worlds import EventRequest, FixedClock, InvalidRequest, MemoryWorld
from durasim.worlds._checks import check_request
from durasim.worlds._events import (
    step_completed_request,
    step_created_request,
    step_started_request,
)

RUN = "wrun_mark"


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
        assert check_request(back) == request_  # checked again, and still well formed


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
