"""PostgreSQL for the tests: the DSN, skip-or-fail, and a fresh schema per World.

``DURASIM_PG_DSN`` names the server (default: the local one, trust auth).  When
it cannot be reached the PostgreSQL tests skip with the reason, unless
``DURASIM_REQUIRE_PG=1`` (set by ``.ci/run``), where they fail.  Every World
gets its own schema ``durasim_t_<random>``; :func:`drop_schemas` drops the
ones this process created (the conftest calls it after each test).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import pytest

from durasim.worlds import CountingIds, FixedClock, World

DSN = os.environ.get("DURASIM_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRED = os.environ.get("DURASIM_REQUIRE_PG") == "1"

_problem: list[str | None] = []  # [None] reachable, [reason] not, [] not checked yet
_created: list[str] = []


def require_postgres() -> str:
    """The DSN of a reachable server; skips (or fails, when required) otherwise."""
    if not _problem:
        try:
            import psycopg

            with psycopg.connect(DSN, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            _problem.append(None)
        except Exception as exc:  # ImportError, OperationalError ...
            _problem.append(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
    if _problem[0] is not None:
        message = (
            f"PostgreSQL at {DSN} is not reachable ({_problem[0]}); start it or set DURASIM_PG_DSN"
        )
        if REQUIRED:
            pytest.fail(f"{message} (DURASIM_REQUIRE_PG=1)", pytrace=False)
        pytest.skip(message)
    return DSN


def new_schema() -> str:
    """A fresh schema name, dropped after the test."""
    name = f"durasim_t_{secrets.token_hex(6)}"
    _created.append(name)
    return name


def build_postgres(clock: FixedClock, **options: Any) -> World:
    """A PostgresWorld in a fresh schema, on counting ids."""
    from durasim.worlds import PostgresWorld

    options.setdefault("pool_size", 4)
    return PostgresWorld(
        require_postgres(), schema=new_schema(), clock=clock, ids=CountingIds(), **options
    )


def drop_schemas() -> None:
    """Drop every schema this process created."""
    if not _created:
        return
    import psycopg

    names, _created[:] = list(_created), []
    with psycopg.connect(DSN, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
