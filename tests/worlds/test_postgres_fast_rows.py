"""PostgreSQL: a write decided from memory (one statement) stores what the locked path stores.

The one-statement write (``_postgres_events._fast_write``) is the fast path
of the locked write (the run's row locked, the write planned on the stored
rows); these tests run the same scripts of writes through a World that takes it
and one that never does, and compare the answers and every stored row (write
ids as present or absent, ``ord`` as the order it gives), so a change to the
statement's shape is checked against the general path it stands for.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from _postgres_support import build_postgres, drop_schemas, require_postgres
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durasim.worlds import EventRequest, FixedClock, PostgresWorld, WorldError
from durasim.worlds import _postgres_events as pe

req = EventRequest.of
START = datetime(2031, 5, 1, tzinfo=UTC)
LATER = START + timedelta(days=1)

#: One request of a script, by name: (type, correlation id, data).
REQUESTS: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    **{
        f"created {s}": ("step_created", s, {"step_name": "f", "input": b"i" + s.encode()})
        for s in ("s1", "s2", "s3")
    },
    **{f"started {s}": ("step_started", s, {}) for s in ("s1", "s2", "s3")},
    **{f"completed {s}": ("step_completed", s, {"result": b"r"}) for s in ("s1", "s2", "s3")},
    **{f"failed {s}": ("step_failed", s, {"error": b"e"}) for s in ("s1", "s2")},
    **{f"retrying {s}": ("step_retrying", s, {"error": b"e"}) for s in ("s1", "s2")},
    "wait w1": ("wait_created", "w1", {"resume_at": LATER}),
    "wait w2": ("wait_created", "w2", {"resume_at": LATER}),
    "early w1": ("wait_completed", "w1", {"early": True}),
    "early w2": ("wait_completed", "w2", {"early": True}),
    "hook h1": ("hook_created", "h1", {"token": "t1"}),
    "hook h2": ("hook_created", "h2", {"token": "t1"}),
    "received h1": ("hook_received", "h1", {"payload": b"p", "resume_id": "x1"}),
    "received h1 again": ("hook_received", "h1", {"payload": b"p", "resume_id": "x2"}),
    "disposed h1": ("hook_disposed", "h1", {}),
}
WRITES = st.lists(st.sampled_from(sorted(REQUESTS)), min_size=1, max_size=3)
#: The runtime's steps, one after the other (only the sequential test uses these).
STEPS = [f"s{i}" for i in range(10, 31)]
for _s in STEPS:
    REQUESTS[f"created {_s}"] = ("step_created", _s, {"step_name": "f", "input": _s.encode()})
    REQUESTS[f"started {_s}"] = ("step_started", _s, {})
    REQUESTS[f"completed {_s}"] = ("step_completed", _s, {"result": b"r"})
SCRIPTS = st.lists(WRITES, min_size=1, max_size=12)

TABLES = {
    "runs": "run_id",
    "events": "run_id, seq",
    "steps": "run_id, step_id",
    "hooks": "run_id, hook_id",
    "waits": "run_id, wait_id",
}


def _request(name: str) -> EventRequest:
    type_, cid, data = REQUESTS[name]
    return req(type_, cid, **data)


async def _answer(world: PostgresWorld, names: list[str]) -> object:
    try:
        if len(names) == 1:
            result = await world.events.create("r", _request(names[0]))
            event = result.event
            return (event.seq, event.type.value, event.correlation_id, result.allocated)
        batch = await world.events.create_batch("r", [_request(n) for n in names])
        return [(e.seq, e.type.value, e.correlation_id) for e in batch.events]
    except WorldError as exc:
        return type(exc).__name__


def _rows(dsn: str, schema: str) -> dict[str, Any]:
    """Every stored row (write ids as present/absent: they are per process), and ord order."""
    out: dict[str, Any] = {}
    with psycopg.connect(dsn) as conn:
        for table, key in TABLES.items():
            cur = conn.execute(f"SELECT * FROM {schema}.{table} ORDER BY {key}")
            names = [d.name for d in cur.description or ()]
            rows = []
            for row in cur.fetchall():
                record = dict(zip(names, row, strict=True))
                record.pop("ord", None)
                if "write_id" in record:
                    record["write_id"] = record["write_id"] is not None
                rows.append(record)
            out[table] = rows
            if "ord" in names:
                cur = conn.execute(f"SELECT {key} FROM {schema}.{table} ORDER BY ord")
                out[f"{table} by ord"] = cur.fetchall()
    return out


async def _run_script(script: list[list[str]], *, fast: bool) -> tuple[list[object], Any, int]:
    world = build_postgres(FixedClock(START))
    assert isinstance(world, PostgresWorld)
    if not fast:
        world._known.run = lambda run_id: None  # type: ignore[method-assign]  # never from memory
    statements = 0
    original = pe._fast_write

    def counted(*shape: Any) -> str:
        nonlocal statements
        statements += 1
        return original(*shape)

    pe._fast_write = counted  # type: ignore[assignment]
    try:
        await world.events.create("r", req("run_created", workflow_name="wf", input=b""))
        await world.events.create("r", req("run_started"))
        answers = [await _answer(world, names) for names in script]
        rows = _rows(world.dsn, world.schema)
    finally:
        pe._fast_write = original  # type: ignore[assignment]
        await world.close()
    return answers, rows, statements


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=SCRIPTS)
def test_a_write_from_memory_stores_the_rows_of_the_locked_path(script: list[list[str]]) -> None:
    require_postgres()
    try:
        fast = asyncio.run(_run_script(script, fast=True))
        locked = asyncio.run(_run_script(script, fast=False))
    finally:
        drop_schemas()
    assert locked[2] == 0
    assert fast[0] == locked[0]
    assert fast[1] == locked[1]


def test_a_sequential_run_s_writes_come_from_memory_and_store_the_same_rows() -> None:
    """The runtime's batches (an outcome, the next step created and started) on 21 steps."""
    require_postgres()
    first = STEPS[0]
    script = [[f"created {first}"], [f"started {first}"]]
    for done, following in itertools.pairwise(STEPS):
        script.append([f"completed {done}", f"created {following}", f"started {following}"])
    script.append([f"completed {STEPS[-1]}"])
    try:
        fast = asyncio.run(_run_script(script, fast=True))
        locked = asyncio.run(_run_script(script, fast=False))
    finally:
        drop_schemas()
    assert fast[2] >= len(script) - 2  # decided from memory, but for the first writes
    assert fast[0] == locked[0]
    assert fast[1] == locked[1]
