"""world-postgres under durasim's virtual clock: its database's ``now()`` defaults follow it.

The factory re-points the package's time defaults to a one-row clock table that the
adapter keeps at the virtual clock (docs/vercel.md).  Needs ``DURASIM_PG_DSN``; skipped
without it unless ``DURASIM_REQUIRE_PG`` is set.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durasim.worlds import (
    CountingIds,
    EventRequest,
    FactoryError,
    FixedClock,
    WorldSetup,
    install_vercel_package,
    vercel_factory,
)
from durasim.worlds._vercel import REAL_TIME_SCHEMAS, _virtual_default

WORLD_POSTGRES = "@workflow/world-postgres@4.3.7"


def test_time_calls_in_a_default_are_re_pointed_and_nothing_else() -> None:
    assert _virtual_default("now()") == "durasim_clock.now()"
    assert _virtual_default("CURRENT_TIMESTAMP") == "(durasim_clock.now())"
    assert _virtual_default("(now() + '1 day'::interval)") == (
        "(durasim_clock.now() + '1 day'::interval)"
    )
    assert _virtual_default("LOCALTIMESTAMP(3)") == (
        "(durasim_clock.now())::timestamp without time zone"
    )
    assert _virtual_default("pg_catalog.now()") == "durasim_clock.now()"
    assert _virtual_default("CURRENT_DATE") == "(durasim_clock.now())::date"
    for untouched in ("'now()'::text", "other.now()", "know()", "nextval('s'::regclass)", "0"):
        assert _virtual_default(untouched) == untouched
    assert "graphile_worker" in REAL_TIME_SCHEMAS


def _dsn() -> str:
    dsn = os.environ.get("DURASIM_PG_DSN")
    if not dsn:
        if os.environ.get("DURASIM_REQUIRE_PG"):
            pytest.fail("DURASIM_REQUIRE_PG is set but DURASIM_PG_DSN is not")
        pytest.skip("DURASIM_PG_DSN is not set (postgresql://postgres@127.0.0.1:5432/test)")
    if shutil.which("node") is None:
        pytest.skip("Node.js is not on PATH")
    try:
        install_vercel_package(WORLD_POSTGRES)
    except FactoryError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{WORLD_POSTGRES} is not cached and the npm registry is unreachable: {exc}")
    return dsn


def test_world_postgres_stamps_the_virtual_clock(tmp_path: Path) -> None:
    dsn = _dsn()
    # a millisecond instant years from the real one: a real-time stamp cannot equal it
    clock = FixedClock(datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC))
    factory = vercel_factory(WORLD_POSTGRES, database_url=dsn)
    world = factory(WorldSetup(clock=clock, ids=CountingIds(), directory=tmp_path))
    born = clock.now()

    async def scenario() -> None:
        created = await world.events.create(
            "r1", EventRequest.of("run_created", workflow_name="wf", input=b"\0in")
        )
        assert created.event is not None
        assert created.event.created_at == clock.now()
        assert created.run.created_at == clock.now()
        assert created.run.updated_at == clock.now()
        clock.advance(90)
        started = await world.events.create("r1", EventRequest.of("run_started"))
        assert started.event is not None
        assert started.event.created_at == clock.now()
        assert started.run.created_at == born
        assert started.run.updated_at == clock.now()
        clock.advance(0.5)
        step = await world.events.create(
            "r1", EventRequest.of("step_created", "s1", step_name="s", input=b"x")
        )
        assert step.event is not None
        assert step.event.created_at == clock.now()
        assert step.step is not None
        assert step.step.created_at == clock.now()
        stepped = clock.now()
        clock.advance(7)
        began = await world.events.create("r1", EventRequest.of("step_started", "s1"))
        assert began.step is not None
        assert (began.step.created_at, began.step.updated_at) == (stepped, clock.now())
        clock.advance(30)
        await world.events.create("r1", EventRequest.of("hook_created", "h1", token="t1"))
        hook = await world.hooks.get_by_token("t1")  # Vercel's hook row, stamped by default
        assert hook.created_at == clock.now()
        clock.advance(1)
        waited = await world.events.create(
            "r1", EventRequest.of("wait_created", "w1", resume_at=clock.now() + timedelta(hours=1))
        )
        assert waited.event is not None
        assert waited.event.created_at == clock.now()

    try:
        asyncio.run(scenario())
        # the rows themselves, read beside the World: virtual time, not the server's
        conninfo = factory.clocks[(tmp_path / "database").read_text()].conninfo
        import psycopg  # the postgres extra, present with DURASIM_PG_DSN

        with psycopg.connect(conninfo) as conn:
            runs = conn.execute("SELECT created_at FROM workflow.workflow_runs").fetchall()
            waits = conn.execute("SELECT created_at FROM workflow.workflow_waits").fetchall()
            queue = conn.execute(
                "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
                "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                "WHERE d.adrelid = 'graphile_worker._private_jobs'::regclass "
                "AND a.attname = 'run_at'"
            ).fetchall()
        assert runs == [(born.replace(tzinfo=None),)]
        assert waits == [(clock.now().replace(tzinfo=None),)]
        assert queue == [("now()",)]  # graphile-worker keeps real time (REAL_TIME_SCHEMAS)
    finally:
        asyncio.run(world.close())
        factory.close()
