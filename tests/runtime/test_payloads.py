"""RunPayloads without a World: random runs of frozen values through the writer and the reader.

A run is simulated at the payload level: the workflow builds each step's input
from values it holds (earlier inputs, decoded results, new messages, enum
members, lists), the writer encodes it, the reader decodes it for the step,
the step returns something made from its input, the reader encodes that, and
the writer decodes it for the workflow.  Then every payload must decode from
the log alone, and a second replay must compute the same input bytes.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import serializable
from durasim.runtime.lowlevel import RunPayloads
from durasim.runtime.serialization import serialize
from durasim.worlds import Event, EventType

T = EventType
NOW = datetime(2024, 1, 1, tzinfo=UTC)


@serializable(class_id="tests.payloads.Role")
class Role(enum.Enum):
    USER = "user"
    BOT = "bot"


@serializable(class_id="tests.payloads.Note")
@attrs.frozen
class Note:
    role: Role
    text: str


def _event(seq: int, type: EventType, correlation_id: str | None, **data: Any) -> Event:
    return Event(
        run_id="r",
        seq=seq,
        type=type,
        created_at=NOW,
        correlation_id=correlation_id,
        in_band=True,
        data=data,  # type: ignore[arg-type]
    )


def _build(op: int, a: Any, b: Any, text: str) -> Any:
    """The workflow's next step input, from values it holds."""
    if op == 0:
        return Note(Role.USER, text)
    if op == 1:
        return (a, b)
    if op == 2:
        return (*a, Note(Role.USER, text)) if type(a) is tuple else (a, Note(Role.BOT, text))
    if op == 3:
        return [a, b, text]
    if op == 4:
        return (Role.BOT, a, text)
    return a


def _answer(op: int, value: Any, text: str) -> Any:
    """The step's result, from its decoded input."""
    if op == 0:
        return value
    if op == 1:
        return (*value, Note(Role.BOT, text)) if type(value) is tuple else (value,)
    if op == 2:
        return (value, value)
    return Note(Role.BOT, text)


Turn = tuple[int, int, int, int, str]
turns = st.lists(
    st.tuples(
        st.integers(0, 5), st.integers(0, 50), st.integers(0, 50), st.integers(0, 3), st.text()
    ),
    min_size=1,
    max_size=25,
)


def _workflow(
    plan: list[Turn],
    payloads: RunPayloads,
    log: list[Event] | None,
    *,
    shared: bool = False,
    refuse: frozenset[int] = frozenset(),
) -> list[Event]:
    """Run ``plan``; with ``log``, replay it (results come from the log, inputs must match).

    ``shared``: the steps decode with the replay's own RunPayloads (inline steps)
    rather than another process's (a queued step's worker).  ``refuse``: steps
    whose input the replay writes whole, i.e. computes other bytes for (as a set
    with no canonical order could make it).
    """
    truth = RunPayloads.from_log(log) if log is not None else None
    refused = False
    events = [_event(1, T.RUN_CREATED, None, workflow_name="w", input=serialize({"args": []}))]
    payloads.note(events[0])
    pool: list[Any] = [Note(Role.USER, "hello"), ()]
    reader = (payloads if shared else RunPayloads()) if log is None else None
    if reader is not None and not shared:
        reader.note(events[0])
    for n, (op, a, b, answer_op, text) in enumerate(plan, start=1):
        cid = f"step//t//s#{n}"
        value = _build(op, pool[a % len(pool)], pool[b % len(pool)], text)
        if n in refuse:
            refused = True
            data = payloads._writer.serialize({"args": [value]}, record=cid, whole=True)
            payloads._computed[cid] = data
            payloads._indexed.add(cid)
        else:
            data = payloads.encode_step_input(cid, {"args": [value]}, root="s")
        if log is not None:
            assert truth is not None
            created = next(e for e in log if e.correlation_id == cid and e.type is T.STEP_CREATED)
            if not refused:
                assert created.data["input"] == data, cid  # the same bytes on replay
            # What the replay computed decodes, from the log, to what the log holds.
            assert truth.decode(data) == truth.decode(created.data["input"], record=cid)
            done = next(e for e in log if e.correlation_id == cid and e.type is T.STEP_COMPLETED)
            payloads.note(created)
            got = payloads.decode_event(_note(payloads, done))
            assert got == truth.decode(done.data["result"])
        else:
            assert reader is not None
            created = _event(len(events) + 1, T.STEP_CREATED, cid, step_name="s", input=data)
            events.append(created)
            payloads.note(created)
            if not shared:
                reader.note(created)
            received = reader.decode(data, record=cid)["args"][0]
            assert received == value
            result = _answer(answer_op, received, text)
            done = _event(
                len(events) + 1,
                T.STEP_COMPLETED,
                cid,
                result=reader.encode_result(result, root="result"),
            )
            events.append(done)
            if not shared:
                reader.note(done)
            got = payloads.decode_event(_note(payloads, done))
            assert got == result
        pool += [value, got]
    return events


def _note(payloads: RunPayloads, event: Event) -> Event:
    payloads.note(event)
    return event


@settings(max_examples=60, deadline=None)
@given(turns, st.booleans())
def test_random_runs_decode_from_the_log_and_replay_to_the_same_bytes(
    plan: list[Turn], shared: bool
) -> None:
    log = _workflow(plan, RunPayloads(), None, shared=shared)
    # From the log alone: every payload, in any order (newest first here).
    cold = RunPayloads.from_log(log)
    first = RunPayloads.from_log(log)
    for event in reversed(log):
        if event.type is T.STEP_CREATED:
            key = event.correlation_id
            assert cold.decode(event.data["input"], record=key) == first.decode(
                event.data["input"], record=key
            )
        elif event.type is T.STEP_COMPLETED:
            assert cold.decode(event.data["result"]) == first.decode(event.data["result"])
    # A replay computes the same inputs (asserted inside) and decodes the same results.
    _workflow(plan, RunPayloads(), log)


@settings(max_examples=60, deadline=None)
@given(turns, st.sets(st.integers(1, 25), max_size=3))
def test_a_replay_that_computes_other_bytes_for_some_inputs_still_decodes_right(
    plan: list[Turn], refuse: set[int]
) -> None:
    log = _workflow(plan, RunPayloads(), None)
    _workflow(plan, RunPayloads(), log, refuse=frozenset(refuse))


def test_a_growing_tuple_is_written_as_deltas_in_both_directions() -> None:
    plan: list[Turn] = [(2, 2 * n + 1 if n else 1, 0, 1, f"t{n}") for n in range(30)]
    log = _workflow(plan, RunPayloads(), None)
    inputs = [e.data["input"] for e in log if e.type is T.STEP_CREATED]
    results = [e.data["result"] for e in log if e.type is T.STEP_COMPLETED]
    assert sum(b'"#":"t+"' in d or b'"#":"@"' in d for d in inputs[1:]) > 20
    assert sum(b'"#":"t+"' in d for d in results[1:]) > 10
    _workflow(plan, RunPayloads(), log)
