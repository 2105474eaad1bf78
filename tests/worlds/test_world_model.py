"""Model test: each World driven side by side with the reference MemoryWorld.

The machine is :class:`durasim.checkers.WorldModel` (see docs/checkers.md,
"World model"); this module only hands it factories.  The SQLite and PostgreSQL
Worlds run with ``durability="process"``: the model compares behaviour, and
skipping the flush per commit keeps the CI budget.  Both are durable, so the
machine also restarts them: a restart reopens the same file or schema.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import settings

from durasim.checkers import world_model_for
from durasim.worlds import MemoryWorld, SQLiteWorld, World, WorldSetup


def memory_world(setup: WorldSetup) -> World:
    """The reference itself."""
    return MemoryWorld(clock=setup.clock, ids=setup.ids, max_deliveries=setup.max_deliveries)


def sqlite_world(setup: WorldSetup) -> World:
    """A SQLite World in the example's scratch directory (reopened on a restart)."""
    return SQLiteWorld(
        setup.directory / "world.db",
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        durability="process",
    )


_schemas: dict[Path, str] = {}


def postgres_world(setup: WorldSetup) -> World:
    """A PostgresWorld in a fresh schema per example (the same one on a restart).

    Skips (or fails, under ``DURASIM_REQUIRE_PG=1``) when no server answers.
    """
    from _postgres_support import new_schema, require_postgres

    from durasim.worlds import PostgresWorld

    dsn = require_postgres()
    schema = _schemas.get(setup.directory) or _schemas.setdefault(setup.directory, new_schema())
    return PostgresWorld(
        dsn,
        schema=schema,
        clock=setup.clock,
        ids=setup.ids,
        max_deliveries=setup.max_deliveries,
        pool_size=4,
        durability="process",
    )


TestSQLiteAgainstMemory = world_model_for(sqlite_world)
# The memory-memory pairing was the scaffold before SQLite existed; a few examples
# still guard the determinism of the reference and of the machine itself.
TestMemoryAgainstMemory = world_model_for(
    memory_world, max_examples=min(settings.default.max_examples, 50)
)
# Each example builds a schema and a pool: fewer examples, same depth.
TestPostgresAgainstMemory = world_model_for(
    postgres_world, max_examples=min(settings.default.max_examples, 30)
)
