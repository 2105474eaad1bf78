"""Importable factories of the unmodified Worlds, for the crash layer's child process.

The PostgreSQL factory names its schema after the setup's directory (a restart
reopens the same schema); every such schema starts with :data:`PG_PREFIX`, so a
test drops them all afterwards with :func:`drop_crash_schemas`.
"""

from __future__ import annotations

import hashlib
import os

from durasim.worlds import SQLiteWorld, World, WorldSetup

DSN = os.environ.get("DURASIM_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
PG_PREFIX = "dcrash_"


def sqlite_power(setup: WorldSetup) -> World:
    """SQLiteWorld, ``durability="power"`` (synchronous=FULL)."""
    return SQLiteWorld(
        setup.directory / "world.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
    )


def sqlite_process(setup: WorldSetup) -> World:
    """SQLiteWorld, ``durability="process"`` (synchronous=NORMAL, WAL)."""
    return SQLiteWorld(
        setup.directory / "world.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


def postgres_world(setup: WorldSetup) -> World:
    """PostgresWorld in a schema named after the setup's directory."""
    from durasim.worlds import PostgresWorld

    digest = hashlib.sha1(str(setup.directory).encode()).hexdigest()[:16]
    return PostgresWorld(
        DSN,
        schema=PG_PREFIX + digest,
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        pool_size=2,
    )


def drop_crash_schemas() -> int:
    """Drop every schema :func:`postgres_world` made; how many."""
    import psycopg

    with psycopg.connect(DSN, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (PG_PREFIX + "%",)
            )
        ]
        for name in names:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    return len(names)
