"""The fold's entity copier: the same entity as ``attrs.evolve``, errors for unknown fields."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import (
    EPOCH,
    HookRecord,
    HookStatus,
    Message,
    Payload,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    WaitRecord,
    WaitStatus,
)
from durasim.worlds._entities import evolve
from durasim.worlds._memory_queue import _redelivered

LATER = EPOCH + timedelta(seconds=5)

ENTITIES = [
    RunRecord(
        run_id="wrun_1",
        workflow_name="workflow//m//f",
        status=RunStatus.PENDING,
        input=b"dj1:\x01[]",
        attributes={"a": "1"},
        created_at=EPOCH,
        updated_at=EPOCH,
    ),
    StepRecord(
        run_id="wrun_1",
        step_id="step//m//s#1",
        step_name="step//m//s",
        status=StepStatus.PENDING,
        input=b"dj1:\x01[]",
        attempt=0,
        inline=True,
        created_at=EPOCH,
        updated_at=EPOCH,
    ),
    HookRecord(
        run_id="wrun_1",
        hook_id="hook#1",
        token="tok",
        status=HookStatus.ACTIVE,
        created_at=EPOCH,
        updated_at=EPOCH,
    ),
    WaitRecord(
        run_id="wrun_1",
        wait_id="sleep#1",
        status=WaitStatus.WAITING,
        resume_at=LATER,
        created_at=EPOCH,
        updated_at=EPOCH,
    ),
]


@pytest.mark.parametrize("entity", ENTITIES, ids=lambda e: type(e).__name__)
def test_every_field_changed_or_kept_as_attrs_would(entity: object) -> None:
    for field in attrs.fields(type(entity)):
        if not field.init:
            continue
        value = getattr(entity, field.name)
        changes = {field.name: value, "updated_at": LATER}
        assert evolve(entity, **changes) == attrs.evolve(entity, **changes)
    assert evolve(entity) == entity
    assert evolve(entity) is not entity


def test_an_unknown_field_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"StepRecord has no field\(s\) \['colour'\]"):
        evolve(ENTITIES[1], colour="red", status=StepStatus.RUNNING)


def test_a_change_is_seen_and_the_rest_kept() -> None:
    step = evolve(ENTITIES[1], status=StepStatus.RUNNING, attempt=1, updated_at=LATER)
    assert (step.status, step.attempt, step.updated_at) == (StepStatus.RUNNING, 1, LATER)
    assert (step.step_id, step.input, step.created_at) == ("step//m//s#1", b"dj1:\x01[]", EPOCH)


_texts = st.text(max_size=8)
_maybe_texts = st.none() | _texts
_moments = st.datetimes(timezones=st.just(UTC))


@given(
    st.builds(
        Message,
        message_id=_texts,
        queue_name=_texts,
        payload=st.binary(max_size=8),
        available_at=_moments,
        enqueued_at=_moments,
        attempt=st.integers(0, 99),
        run_id=_maybe_texts,
        orchestrator=st.booleans(),
        idempotency_key=_maybe_texts,
    ),
    st.integers(0, 99),
)
def test_a_claim_copies_its_message_as_evolve_does(message: Message, attempt: int) -> None:
    copy = _redelivered(message, attempt)
    expected = attrs.evolve(message, attempt=attempt)
    assert type(copy) is Message
    assert copy == expected
    assert attrs.asdict(copy, recurse=False) == attrs.asdict(expected, recurse=False)


@given(
    st.one_of(
        st.none(),
        st.dictionaries(_texts, _texts, max_size=3),
        st.dictionaries(_texts, _texts, max_size=3).map(Payload),
    )
)
def test_a_run_keeps_a_payload_of_attributes_as_it_is(attributes: Any) -> None:
    run = attrs.evolve(ENTITIES[0], attributes=attributes)
    assert type(run.attributes) is Payload
    assert run.attributes == Payload(attributes or {})
    copied = evolve(run, updated_at=LATER)
    assert copied.attributes is run.attributes  # immutable: shared, as before its items were
    assert copied == attrs.evolve(run, updated_at=LATER)
