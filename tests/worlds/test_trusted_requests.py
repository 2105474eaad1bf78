"""The runtime's own request builders give exactly what ``EventRequest.of`` gives.

``step_created_request`` and its siblings (worlds/_events.py) skip ``of``'s keyword
dict, type lookup and field loop for values already in the form its one-pass
check takes as is, and hand anything else to ``of``. For every argument, well
typed or not, the outcome must be the same: the same refusal with the same
message, or a request a World cannot tell apart (type, id, fields in order, the
fields' values and their types, the validated mark, equality and hash).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import EventRequest, InvalidRequest, MemoryWorld
from durasim.worlds._events import (
    _KNOWN_IDS_MAX,
    _WELL_FORMED_IDS,
    run_completed_request,
    step_completed_request,
    step_created_request,
    step_started_request,
    wait_completed_request,
)

#: Ids the runtime formats (``<step_id>#<n>``, timers, hooks) and ones it never would.
CORRELATION_IDS = st.one_of(
    st.sampled_from(
        ["step//shop//charge#1", "step//m//Cart#total#12", "sleep#3", "_x", "a" * 256, "a" * 257]
    ),
    st.sampled_from(["", "bad id", "#1", "step\x00#1", "é#1"]),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.:/#@+=~-]{0,20}", fullmatch=True),
    st.text(max_size=8),
    st.none(),
    st.integers(0, 3),
    st.binary(max_size=3),
)
STEP_NAMES = st.one_of(
    st.sampled_from(["step//shop//charge", "step//m//" + "n" * 231, "", "x" * 129, "x" * 513]),
    st.from_regex(r"step//[A-Za-z0-9_.:/#@+=~-]{1,30}", fullmatch=True),
    st.text(max_size=6),
    st.none(),
    st.binary(max_size=2),
)
BYTES = st.one_of(
    st.binary(max_size=8),
    st.just(b""),
    st.text(max_size=3),
    st.none(),
    st.builds(bytearray, st.binary(max_size=2)),
    st.integers(0, 2),
)
FLAGS = st.one_of(st.booleans(), st.none(), st.integers(0, 1), st.just("yes"))


def decided(build: Callable[[], EventRequest]) -> object:
    try:
        request = build()
    except InvalidRequest as exc:
        return ("refused", type(exc), str(exc))
    items = list(request.data.items())
    return (
        type(request),
        type(request.data),
        request.type,
        type(request.correlation_id),
        request.correlation_id,
        [(name, type(value), value) for name, value in items],
        request.validated,
        request,
        hash(request),
        repr(request),
    )


def agree(trusted: Callable[[], EventRequest], of: Callable[[], EventRequest]) -> None:
    # Either order first: each may leave the id in the cache of well-formed ids.
    for first_cold in (True, False):
        if first_cold:
            _WELL_FORMED_IDS.clear()
        assert decided(trusted) == decided(of)
        _WELL_FORMED_IDS.clear()
        expected = decided(of)  # now the id is cached, if well formed
        assert decided(trusted) == expected


@given(CORRELATION_IDS, STEP_NAMES, BYTES, FLAGS)
def test_step_created(correlation_id: Any, step_name: Any, data: Any, inline: Any) -> None:
    agree(
        lambda: step_created_request(correlation_id, step_name, data, inline),
        lambda: EventRequest.of(
            "step_created", correlation_id, step_name=step_name, input=data, inline=inline
        ),
    )


@given(CORRELATION_IDS)
def test_step_started(correlation_id: Any) -> None:
    agree(
        lambda: step_started_request(correlation_id),
        lambda: EventRequest.of("step_started", correlation_id),
    )


@given(CORRELATION_IDS, BYTES)
def test_step_completed(correlation_id: Any, result: Any) -> None:
    agree(
        lambda: step_completed_request(correlation_id, result),
        lambda: EventRequest.of("step_completed", correlation_id, result=result),
    )


@given(CORRELATION_IDS)
def test_wait_completed(correlation_id: Any) -> None:
    agree(
        lambda: wait_completed_request(correlation_id),
        lambda: EventRequest.of("wait_completed", correlation_id),
    )


@given(BYTES)
def test_run_completed(output: Any) -> None:
    agree(
        lambda: run_completed_request(output),
        lambda: EventRequest.of("run_completed", output=output),
    )


def test_the_cache_of_well_formed_ids_stays_bounded() -> None:
    _WELL_FORMED_IDS.clear()
    for n in range(_KNOWN_IDS_MAX + 5):
        step_created_request(f"step//m//f#{n}", "step//m//f", b"i", True)
    assert 0 < len(_WELL_FORMED_IDS) <= _KNOWN_IDS_MAX


def test_the_builders_set_every_field_of_a_request() -> None:
    # The builders set EventRequest's slots one by one: a new field must be added there.
    assert [f.name for f in attrs.fields(EventRequest)] == [
        "type",
        "correlation_id",
        "data",
        "_validated",
    ]


def test_an_edited_trusted_request_is_checked_again() -> None:
    request = step_completed_request("step//m//f#1", b"r")
    assert request.validated
    copy = attrs.evolve(request, data={"result": "not bytes"})
    assert not copy.validated


async def test_a_world_records_them_as_it_records_of() -> None:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    logs = []
    for trusted in (True, False):
        world = MemoryWorld()
        created = await world.events.create(
            None, EventRequest.of("run_created", workflow_name="wf", input=b"i")
        )
        run_id = created.event.run_id
        cid = "step//m//f#1"
        requests = (
            [
                step_created_request(cid, "step//m//f", b"in", True),
                step_started_request(cid),
                step_completed_request(cid, b"out"),
                EventRequest.of("wait_created", "sleep#1", resume_at=at),
                wait_completed_request("sleep#1"),
                run_completed_request(b"done"),
            ]
            if trusted
            else [
                EventRequest.of(
                    "step_created", cid, step_name="step//m//f", input=b"in", inline=True
                ),
                EventRequest.of("step_started", cid),
                EventRequest.of("step_completed", cid, result=b"out"),
                EventRequest.of("wait_created", "sleep#1", resume_at=at),
                EventRequest.of("wait_completed", "sleep#1"),
                EventRequest.of("run_completed", output=b"done"),
            ]
        )
        await world.events.create(run_id, EventRequest.of("run_started"))
        for request in requests:
            await world.events.create(run_id, request)
        page = await world.events.list(run_id)
        logs.append([(e.seq, e.type, e.correlation_id, dict(e.data)) for e in page.events])
    assert logs[0] == logs[1]
