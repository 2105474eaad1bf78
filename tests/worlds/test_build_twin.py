"""Values built through a twin class (``_build``) are the class's own, equal to ``__init__``'s."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import EventRequest, EventType
from durasim.worlds._build import builder, copier, twin_of
from durasim.worlds._entities import (
    BatchResult,
    EventResult,
    HookRecord,
    RunRecord,
    Snapshot,
    StepRecord,
    StepStatus,
    WaitRecord,
)
from durasim.worlds._events import Event, Payload

AT = datetime(2024, 1, 1, tzinfo=UTC)


def test_the_hot_classes_have_a_twin() -> None:
    for cls in (Event, EventRequest, RunRecord, StepRecord, HookRecord, WaitRecord, Snapshot):
        assert twin_of(cls) is not None, cls
    for cls in (EventResult, BatchResult):
        assert twin_of(cls) is not None, cls


@given(
    seq=st.integers(min_value=1, max_value=10**6),
    type_=st.sampled_from(list(EventType)),
    correlation_id=st.one_of(st.none(), st.text(min_size=1, max_size=5)),
    in_band=st.booleans(),
    data=st.dictionaries(st.text(max_size=3), st.binary(max_size=3), max_size=3),
)
def test_a_built_event_is_the_one_init_builds(
    seq: int, type_: EventType, correlation_id: str | None, in_band: bool, data: dict[str, bytes]
) -> None:
    fields = {
        "run_id": "r1",
        "seq": seq,
        "type": type_,
        "created_at": AT,
        "correlation_id": correlation_id,
        "in_band": in_band,
        "data": Payload(data),
    }
    built, made = builder(Event)(**fields), Event(**fields)
    assert type(built) is Event
    assert built == made
    assert hash(built) == hash(made)
    assert repr(built) == repr(made)
    assert attrs.asdict(built, recurse=False) == attrs.asdict(made, recurse=False)
    assert pickle.loads(pickle.dumps(built)) == made
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.seq = 0  # type: ignore[misc]


def test_a_copied_step_is_the_one_evolve_builds() -> None:
    step = StepRecord(
        run_id="r1",
        step_id="s1",
        step_name="step//m//f",
        status=StepStatus.RUNNING,
        input=b"i",
        attempt=1,
        created_at=AT,
        updated_at=AT,
        started_at=AT,
    )
    done = copier(StepRecord, "status", "output")(step, StepStatus.COMPLETED, b"o")
    assert type(done) is StepRecord
    assert done == attrs.evolve(step, status=StepStatus.COMPLETED, output=b"o")


def test_a_class_with_a_weakref_slot_is_built_through_its_slots() -> None:
    @attrs.frozen(kw_only=True)
    class Weak:
        a: int
        b: str = "x"

    assert twin_of(Weak) is None  # a __weakref__ slot: no twin (3.11 refuses the layout)
    built = builder(Weak)(a=1, b="y")
    assert type(built) is Weak
    assert built == Weak(a=1, b="y")
