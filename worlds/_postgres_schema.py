"""The PostgreSQL World's schema: versioned migrations applied by the World itself.

Every table lives in one schema (``durasim`` by default), so several apps share
a database.  ``schema_migrations`` records each applied version; :func:`migrate`
applies the missing ones in one transaction under a transaction-level advisory
lock keyed by the schema name, so any number of processes may start at once:
one migrates, the others wait for it and then find nothing to do.  A schema
migrated by a newer durasim is refused.

Times are ``bigint`` microseconds since the Unix epoch (an exact round trip,
like the SQLite World).  The run row carries the counters ``seq`` and
``seq_in_band``: every write locks it (``SELECT ... FOR UPDATE``), checks the
fence and advances both in the same transaction.
"""

from __future__ import annotations

import re
from typing import Final

import psycopg

from ._errors import InvalidRequest, WorldError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "channel", "check_schema_name", "migrate"]

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")

#: (version, what it does, statements); append only, never edit a shipped one.
MIGRATIONS: Final[tuple[tuple[int, str, str], ...]] = (
    (
        1,
        "log, entities, queue, streams",
        """
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    workflow_name text NOT NULL,
    status text NOT NULL,
    input bytea NOT NULL,
    deployment_id text,
    execution_context bytea,
    output bytea,
    error bytea,
    error_code text,
    cancel_reason text,
    attributes text NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    started_at bigint,
    completed_at bigint,
    seq bigint NOT NULL,
    seq_in_band bigint NOT NULL
);
CREATE INDEX runs_newest ON runs (created_at DESC, run_id DESC);
CREATE INDEX runs_by_workflow ON runs (workflow_name, created_at DESC, run_id DESC);
CREATE TABLE events (
    run_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    created_at bigint NOT NULL,
    correlation_id text,
    in_band boolean NOT NULL,
    data text,
    blob bytea,
    resume_id text,
    write_id text,
    PRIMARY KEY (run_id, seq)
);
CREATE UNIQUE INDEX events_resume ON events (run_id, resume_id) WHERE resume_id IS NOT NULL;
CREATE INDEX events_write ON events (write_id) WHERE write_id IS NOT NULL;
CREATE TABLE steps (
    run_id text NOT NULL,
    step_id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    step_name text NOT NULL,
    status text NOT NULL,
    input bytea NOT NULL,
    attempt integer NOT NULL,
    output bytea,
    error bytea,
    retry_after bigint,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    started_at bigint,
    completed_at bigint,
    inline boolean NOT NULL,
    PRIMARY KEY (run_id, step_id)
);
CREATE TABLE hooks (
    run_id text NOT NULL,
    hook_id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    token text NOT NULL,
    status text NOT NULL,
    metadata bytea,
    is_webhook boolean NOT NULL,
    received_count integer NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (run_id, hook_id)
);
CREATE UNIQUE INDEX hooks_live_token ON hooks (token) WHERE status = 'active';
CREATE TABLE waits (
    run_id text NOT NULL,
    wait_id text NOT NULL,
    ord bigint GENERATED ALWAYS AS IDENTITY,
    status text NOT NULL,
    resume_at bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    completed_at bigint,
    PRIMARY KEY (run_id, wait_id)
);
CREATE TABLE messages (
    ord bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id text NOT NULL UNIQUE,
    queue_name text NOT NULL,
    payload bytea NOT NULL,
    available_at bigint NOT NULL,
    enqueued_at bigint NOT NULL,
    attempt integer NOT NULL,
    run_id text,
    orchestrator boolean NOT NULL,
    idempotency_key text UNIQUE,
    lease_id text,
    lease_expires_at bigint,
    due_at bigint NOT NULL
);
CREATE INDEX messages_due ON messages (due_at, ord);
CREATE INDEX messages_leased_orchestrators ON messages (run_id, lease_expires_at)
    WHERE orchestrator;
CREATE TABLE dead_letters (
    ord bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id text NOT NULL,
    queue_name text NOT NULL,
    payload bytea NOT NULL,
    available_at bigint NOT NULL,
    enqueued_at bigint NOT NULL,
    attempt integer NOT NULL,
    run_id text,
    orchestrator boolean NOT NULL,
    idempotency_key text
);
CREATE TABLE streams (
    run_id text NOT NULL,
    name text NOT NULL,
    closed boolean NOT NULL,
    length bigint NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE chunks (
    run_id text NOT NULL,
    name text NOT NULL,
    idx bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (run_id, name, idx)
);
""",
    ),
    (
        2,
        "hooks by token in any status (webhook retries after the run ended)",
        "CREATE INDEX hooks_token ON hooks (token, ord)",
    ),
)

SCHEMA_VERSION: Final = MIGRATIONS[-1][0]


def check_schema_name(schema: object) -> str:
    """A schema name the World can use unquoted: 1-48 of ``[a-z0-9_]``, not a digit first."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidRequest(
            f"PostgreSQL schema name {schema!r} is malformed: use 1-48 characters from "
            "[a-z0-9_], starting with a letter or underscore"
        )
    return schema


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's queue."""
    return f"{schema}_queue"


async def migrate(conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str) -> int:
    """Bring ``schema`` to :data:`SCHEMA_VERSION`; returns the version found before.

    One transaction under ``pg_advisory_xact_lock``: concurrent callers queue up
    behind the first, then see its migrations as applied.
    """
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"durasim-migrate:{schema}",)
        )
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {schema}.schema_migrations ("
            "version integer PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute(f"SELECT max(version) FROM {schema}.schema_migrations")
        row = await cur.fetchone()
        found = int(row[0]) if row is not None and row[0] is not None else 0  # type: ignore[call-overload]
        if found > SCHEMA_VERSION:
            raise WorldError(
                f"PostgreSQL schema {schema!r} is at version {found}, newer than this durasim "
                f"understands ({SCHEMA_VERSION}): upgrade durasim, or use another schema=",
                schema=schema,
            )
        for version, description, statements in MIGRATIONS:
            if version <= found:
                continue
            await conn.execute(f"SET LOCAL search_path TO {schema}")
            for statement in statements.split(";"):
                if statement.strip():
                    await conn.execute(statement)
            await conn.execute(
                f"INSERT INTO {schema}.schema_migrations (version, description) VALUES (%s, %s)",
                (version, description),
            )
    return found
