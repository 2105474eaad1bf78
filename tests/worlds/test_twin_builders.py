"""Records built through a mutable twin (``_entities.twin``): the very value ``__init__`` builds.

Each builder and copier must give an instance of the frozen class itself (never its
twin), equal to ``cls(**fields)`` / ``attrs.evolve``, as frozen, hashable, picklable
and weak-referenceable as one built the ordinary way; the audit event its
``__class__`` assignment raises must reach a hook as ``object.__setattr__``.
"""

from __future__ import annotations

import pickle
import sys
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import (
    Payload,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    _fold,
    _guards,
)
from durasim.worlds._entities import Snapshot, twin, twin_builder, twin_copier
from durasim.worlds._events import Event, EventRequest, EventType
from durasim.worlds._fold import STEP_CHANGES

_times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
_text = st.text(min_size=1, max_size=12)
_steps = st.builds(
    StepRecord,
    run_id=_text,
    step_id=_text,
    step_name=_text,
    status=st.sampled_from(StepStatus),
    input=st.binary(max_size=8),
    attempt=st.integers(0, 9),
    created_at=_times,
    updated_at=_times,
    output=st.none() | st.binary(max_size=8),
    error=st.none() | st.binary(max_size=8),
    retry_after=st.none() | _times,
    started_at=st.none() | _times,
    completed_at=st.none() | _times,
    inline=st.booleans(),
)

_build_step = twin_builder(StepRecord)


def _fields(value: Any) -> dict[str, Any]:
    return {a.name: getattr(value, a.name) for a in attrs.fields(type(value))}


def _same(built: Any, expected: Any) -> None:
    assert type(built) is type(expected)
    assert built == expected
    assert _fields(built) == _fields(expected)
    assert hash(built) == hash(expected)
    assert repr(built) == repr(expected)
    assert pickle.loads(pickle.dumps(built)) == expected
    assert weakref.ref(built)() is built
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.run_id = "other"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        del built.run_id


@given(_steps)
def test_builder_builds_what_init_builds(step: StepRecord) -> None:
    _same(_build_step(**_fields(step)), step)


_events = st.builds(
    Event,
    run_id=_text,
    seq=st.integers(1, 10**6),
    type=st.sampled_from(EventType),
    created_at=_times,
    correlation_id=st.none() | _text,
    in_band=st.booleans(),
    data=st.dictionaries(st.sampled_from(["result", "input", "attempt"]), st.binary(max_size=4)),
)


@given(_events)
def test_event_builder_builds_what_init_builds(event: Event) -> None:
    """The guards' event builder (a twin; ``data`` passed as the Payload it converts to)."""
    _same(twin_builder(Event, converted=True)(**_fields(event)), event)
    _same(_guards._event(**_fields(event)), event)


def test_builder_defaults_are_the_class_defaults() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    required = {
        "run_id": "r",
        "step_id": "s",
        "step_name": "n",
        "status": StepStatus.PENDING,
        "input": b"",
        "attempt": 0,
        "created_at": at,
        "updated_at": at,
    }
    _same(_build_step(**required), StepRecord(**required))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _build_step(run_id="r")


@given(_steps, st.data())
def test_copier_copies_what_evolve_copies(step: StepRecord, data: st.DataObject) -> None:
    names = [a.name for a in attrs.fields(StepRecord)]
    changed = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    other = data.draw(_steps)
    values = [getattr(other, name) for name in changed]
    copy = twin_copier(StepRecord, *changed)
    _same(copy(step, *values), attrs.evolve(step, **dict(zip(changed, values, strict=True))))


@given(_steps, _times, st.binary(max_size=8))
def test_fold_changes_equal_evolve(step: StepRecord, at: datetime, blob: bytes) -> None:
    """The fold's step transitions (twin copiers) against attrs.evolve."""
    kinds = {
        "step_started": ({}, {"attempt": step.attempt + 1, "status": StepStatus.RUNNING}),
        "step_completed": ({"result": blob}, {"status": StepStatus.COMPLETED, "output": blob}),
        "step_failed": ({"error": blob}, {"status": StepStatus.FAILED, "error": blob}),
        "step_retrying": (
            {"error": blob, "retry_after": at + timedelta(seconds=1)},
            {"status": StepStatus.PENDING, "error": blob, "retry_after": at + timedelta(seconds=1)},
        ),
    }
    for kind, (data, changes) in kinds.items():
        request = EventRequest.of(kind, "step#1", **data)
        event = Event(
            run_id=step.run_id,
            seq=1,
            type=request.type,
            created_at=at,
            correlation_id=request.correlation_id,
            data=request.data,
        )
        if kind == "step_started":
            changes |= {"retry_after": None, "started_at": step.started_at or at}
        elif kind in ("step_completed", "step_failed"):
            changes["completed_at"] = at
        expected = attrs.evolve(step, updated_at=at, **changes)
        _same(STEP_CHANGES[request.type](step, event), expected)


def test_twin_never_escapes_and_is_refused_for_other_classes() -> None:
    made = twin(StepRecord)
    assert issubclass(made, StepRecord)
    assert made is not StepRecord
    at = datetime(2024, 1, 1, tzinfo=UTC)
    built = _build_step(
        run_id="r",
        step_id="s",
        step_name="n",
        status=StepStatus.RUNNING,
        input=b"",
        attempt=1,
        created_at=at,
        updated_at=at,
    )
    assert type(built) is StepRecord
    assert built.__class__ is StepRecord

    @attrs.define
    class Validated:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    with pytest.raises(TypeError, match="not a plain field"):
        twin_builder(Validated)
    with pytest.raises(TypeError, match="not a plain field"):
        twin_builder(EventRequest)  # its _validated is not an __init__ argument
    with pytest.raises(TypeError, match="not a plain field"):
        twin_builder(Event)  # its data has a converter (converted=True: the caller's job)
    with pytest.raises(TypeError, match="no field"):
        twin_copier(Snapshot, "nope")

    class Plain:
        pass

    with pytest.raises(TypeError, match="slotted"):
        twin(Plain)


def test_audit_hook_sees_a_class_assignment() -> None:
    """An audit hook sees ``object.__setattr__`` (``__class__``) once per record built."""
    seen: list[tuple[str, Any]] = []
    recording = [False]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if recording[0] and event == "object.__setattr__":
            seen.append((args[1], args[2]))

    sys.addaudithook(hook)  # cannot be removed: it records only while asked to
    at = datetime(2024, 1, 1, tzinfo=UTC)
    recording[0] = True
    try:
        _build_step(
            run_id="r",
            step_id="s",
            step_name="n",
            status=StepStatus.RUNNING,
            input=b"",
            attempt=1,
            created_at=at,
            updated_at=at,
        )
    finally:
        recording[0] = False
    assert seen == [("__class__", StepRecord)]


def test_a_class_with_a_slot_besides_its_fields_is_refused() -> None:
    # A cached hash is a slot __init__ fills and a twin would leave empty: refused at once.
    @attrs.frozen(kw_only=True, cache_hash=True)
    class Hashed:
        a: int

    with pytest.raises(TypeError, match="slots besides its fields"):
        twin_builder(Hashed)
    with pytest.raises(TypeError, match="slots besides its fields"):
        twin_copier(Hashed, "a")


# --- positional builders (``twin_builder(cls, positional=True)``) -----------------


def _values(value: Any) -> list[Any]:
    return [getattr(value, a.name) for a in attrs.fields(type(value))]


@given(_events)
def test_positional_event_builder_builds_what_init_builds(event: Event) -> None:
    _same(_guards._event_at(*_values(event)), event)
    _same(twin_builder(Event, converted=True, positional=True)(*_values(event)), event)


@given(_steps)
def test_positional_step_builders_build_what_init_builds(step: StepRecord) -> None:
    _same(_fold._step_at(*_values(step)), step)  # the one the fold and the guards build through


def test_positional_builder_takes_every_field_and_no_keyword() -> None:
    build = twin_builder(StepRecord, positional=True)
    width = len(attrs.fields(StepRecord))
    with pytest.raises(TypeError):
        build(*["x"] * (width - 1))  # no default: every field is given
    with pytest.raises(TypeError):
        build(run_id="r")


_runs = st.builds(
    RunRecord,
    run_id=_text,
    workflow_name=_text,
    status=st.sampled_from(RunStatus),
    input=st.binary(max_size=8),
    created_at=_times,
    updated_at=_times,
    deployment_id=st.none() | _text,
    execution_context=st.none() | st.binary(max_size=8),
    output=st.none() | st.binary(max_size=8),
    error=st.none() | st.binary(max_size=8),
    error_code=st.none() | _text,
    cancel_reason=st.none() | _text,
    attributes=st.none()
    | st.dictionaries(_text, _text, max_size=3)
    | st.dictionaries(_text, _text, max_size=3).map(Payload),
    started_at=st.none() | _times,
    completed_at=st.none() | _times,
)


#: A field a request may carry (printable ASCII: no NUL, which a request refuses).
_field_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=12)


@given(_runs, _times, st.binary(max_size=8), _field_text)
def test_fold_run_changes_equal_evolve(run: RunRecord, at: datetime, blob: bytes, why: str) -> None:
    """The fold's run start and ends (twin copiers) against attrs.evolve."""
    kinds: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "run_started": (
            {},
            {
                "status": RunStatus.RUNNING,
                "started_at": run.started_at or at,
                "output": None,
                "error": None,
                "error_code": None,
                "completed_at": None,
            },
        ),
        "run_completed": ({"output": blob}, {"status": RunStatus.COMPLETED, "output": blob}),
        "run_failed": (
            {"error": blob, "error_code": why},
            {"status": RunStatus.FAILED, "error": blob, "error_code": why},
        ),
        "run_cancelled": ({"reason": why}, {"status": RunStatus.CANCELLED, "cancel_reason": why}),
    }
    for kind, (data, changed) in kinds.items():
        request = EventRequest.of(kind, **data)
        event = Event(run_id=run.run_id, seq=2, type=request.type, created_at=at, data=request.data)
        changes = changed
        if kind != "run_started":
            changes = {
                "output": None,
                "error": None,
                "error_code": None,
                "cancel_reason": None,
                **changed,
                "completed_at": at,
            }
        expected = attrs.evolve(run, updated_at=at, **changes)
        folded, _, _, _ = _fold.apply(event, run=run)
        _same(folded, expected)
        assert folded.attributes is run.attributes


def test_a_converted_copier_refuses_to_change_a_converted_field() -> None:
    with pytest.raises(TypeError, match="converter"):
        twin_copier(RunRecord, "attributes", converted=True)
    with pytest.raises(TypeError, match="attributes"):
        twin_copier(RunRecord, "status")


@given(
    _text,
    _times,
    st.fixed_dictionaries(
        {"workflow_name": _text, "input": st.binary(max_size=8)},
        optional={
            "deployment_id": _text,
            "execution_context": st.binary(max_size=8),
            "attributes": st.lists(st.tuples(_text, st.none() | _text), max_size=3).map(tuple),
        },
    ),
)
def test_fold_run_creation_equals_init(run_id: str, at: datetime, data: dict[str, Any]) -> None:
    """The fold's new run (twin builder) against ``RunRecord(...)``."""
    event = Event(
        run_id=run_id, seq=1, type=EventType.RUN_CREATED, created_at=at, data=Payload(data)
    )
    expected = RunRecord(
        run_id=run_id,
        workflow_name=data["workflow_name"],
        status=RunStatus.PENDING,
        input=data["input"],
        deployment_id=data.get("deployment_id"),
        execution_context=data.get("execution_context"),
        attributes={k: v for k, v in data.get("attributes", ()) if v is not None},
        created_at=at,
        updated_at=at,
    )
    folded, _, _, _ = _fold.apply(event, run=None)
    _same(folded, expected)
