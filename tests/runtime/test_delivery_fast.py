"""The delivery loop's fast paths do what the general ones do.

* ``Replay.take`` notes a batch's positions itself when no event in it is one
  ``preload`` looks into: what it learns is what ``preload`` learns;
* ``InBandWriter`` takes its lock inline when it is free and nobody waits:
  contended writes still go one at a time, in the order they asked, and a
  waiter cancelled in line neither writes nor keeps the lock.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import start, step, workflow
from durasim.runtime._decorators import workflow_definition
from durasim.runtime._orchestrator import load_log
from durasim.runtime._replay import Replay
from durasim.runtime._versions import DeploymentError
from durasim.runtime._writer import InBandWriter
from durasim.worlds import Event, EventRequest, EventType, FixedClock, MemoryWorld, Payload

_AT = datetime(2024, 1, 1, tzinfo=UTC)

#: Every type, with the data ``preload`` reads from the ones it looks into.
_DATA: dict[EventType, dict[str, Any]] = {
    EventType.HOOK_CREATED: {"token": "tok"},
    EventType.HOOK_CONFLICT: {"token": "tok"},
}
_IDS = st.sampled_from([None, "a#1", "hook#2", "sleep#3", "durasim.patch.x", "patch/p1", "s#4"])


@st.composite
def _batches(draw: st.DrawFn) -> list[Event]:
    kinds = draw(st.lists(st.sampled_from(list(EventType)), max_size=6))
    seqs = draw(st.lists(st.integers(1, 40), min_size=len(kinds), max_size=len(kinds)))
    return [
        Event(
            run_id="r",
            seq=seq,
            type=kind,
            created_at=_AT,
            correlation_id=draw(_IDS),
            in_band=True,
            data=Payload(_DATA.get(kind, {})),
        )
        for kind, seq in zip(kinds, seqs, strict=True)
    ]


@step
def _inc(n: int) -> int:
    return n + 1


@workflow
async def _counting(n: int) -> int:
    total = 0
    for _ in range(n):
        total = await _inc(total)
    return total


def _replay(horizon: int) -> Replay:
    replay = Replay(
        workflow_definition(_counting),
        run_id="r",
        input=b"",
        started_at=_AT,
    )
    replay.horizon = horizon
    replay.consumed = 10_000  # every event already consumed: take only learns from them
    return replay


def _learned(replay: Replay) -> tuple[Any, ...]:
    return (
        replay.horizon,
        sorted(replay._recorded_patches),
        sorted(replay._recorded_tokens.items()),
        replay._legacy_ids,
    )


@settings(max_examples=400, deadline=None)
@given(batches=st.lists(_batches(), max_size=4), horizon=st.integers(0, 30))
def test_take_learns_what_preload_learns(batches: list[list[Event]], horizon: int) -> None:
    by_take, by_preload = _replay(horizon), _replay(horizon)
    for batch in batches:
        by_take.take(batch)
        by_preload.preload(batch)
        assert _learned(by_take) == _learned(by_preload)


async def _writer() -> InBandWriter:
    world = MemoryWorld(clock=FixedClock())
    run = await start(_counting, 0, world=world)
    events, in_band = await load_log(world, run.run_id)
    writer = InBandWriter(world, run.run_id, events, in_band)
    await writer.write(EventRequest.of("run_started"))
    return writer


def test_contended_writes_go_one_at_a_time_in_order() -> None:
    def attr(n: int) -> EventRequest:
        return EventRequest.of("attr_set", f"a{n}", changes=((f"k{n}", "v"),), writer="workflow")

    def wait(n: int) -> EventRequest:
        return EventRequest.of("wait_created", f"sleep#{n}", resume_at=_AT)

    async def go() -> None:
        writer = await _writer()
        before = len(writer.events)
        lock = writer.lock
        await lock.acquire()  # held: every write below waits in line
        first = asyncio.ensure_future(writer.write_batch([wait(1), wait(2)]))
        cancelled = asyncio.ensure_future(writer.write(attr(3)))
        last = asyncio.ensure_future(writer.write(attr(4)))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert lock._waiters is not None
        assert len(lock._waiters) == 2
        lock.release()
        batch, one = await first, await last
        assert cancelled.cancelled()
        assert [e.seq for e in batch] == [before + 1, before + 2]
        assert one is not None
        assert one.seq == before + 3
        assert not lock.locked()
        assert not lock._waiters
        # Free again: the inline path takes it and leaves it free.
        again = await writer.write(attr(5))
        assert again is not None
        assert again.seq == before + 4
        assert not lock.locked()
        assert [e.seq for e in writer.events] == list(range(1, before + 5))
        assert writer.written == 5
        assert writer.expected == sum(e.in_band for e in writer.events)

    asyncio.run(go())


def test_served_versions_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from durasim.runtime._versions import DEPLOYMENT_ENV, VersionPolicy

    # (Unset, the derived list depends on what the suite registered so far: only
    # that it comes back once the variable is gone again is checked for it.)
    policy = VersionPolicy()
    monkeypatch.delenv(DEPLOYMENT_ENV, raising=False)
    unset = policy.served()
    assert all(d.startswith("src-") for d in unset)
    for value in ("v1", "v2", "v1"):
        monkeypatch.setenv(DEPLOYMENT_ENV, value)
        assert policy.served() == [value]
    monkeypatch.setenv(DEPLOYMENT_ENV, "bad version!")
    with pytest.raises(DeploymentError, match="DURASIM_DEPLOYMENT"):
        policy.served()
    monkeypatch.delenv(DEPLOYMENT_ENV)
    assert policy.served() == unset


def test_the_provisional_event_compares_as_the_event_of_its_fields() -> None:
    from datetime import timedelta

    from durasim.runtime._delivery import _Provisional, _same_as_provisional
    from durasim.worlds import Types

    data = Payload({"result": b"dj1:j1"})
    fields: dict[str, Any] = {
        "run_id": "r",
        "seq": 3,
        "type": Types.STEP_COMPLETED,
        "created_at": _AT,
        "correlation_id": "s#1",
        "data": data,
    }
    provisional = _Provisional(**fields)
    as_event = Event(**fields, in_band=True)
    assert provisional.label == as_event.label
    assert _Provisional(**{**fields, "correlation_id": None}).label == (
        Event(**{**fields, "correlation_id": None}, in_band=True).label
    )
    changes: list[dict[str, Any]] = [
        {},
        {"run_id": "q"},
        {"seq": 4},
        {"type": Types.STEP_FAILED},
        {"created_at": _AT + timedelta(microseconds=1)},
        {"created_at": datetime(2024, 1, 1, tzinfo=UTC)},  # equal, not the same object
        {"correlation_id": "s#2"},
        {"correlation_id": None},
        {"in_band": False},
        {"data": Payload({"result": b"dj1:j2"})},
        {"data": Payload({"result": b"dj1:j1"})},  # equal, not the same object
        {"data": Payload({"result": b"dj1:j1", "extra": 1})},
    ]
    for change in changes:
        committed = attrs.evolve(as_event, **change)
        assert _same_as_provisional(committed, provisional) == (committed == as_event), change

    class Other(Event):
        __slots__ = ()

    assert not _same_as_provisional(Other(**fields, in_band=True), provisional)
