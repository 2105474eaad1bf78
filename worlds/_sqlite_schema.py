"""The SQLite World's schema and statements.

Version 1.  The schema is created inside the first write transaction of a new
file and its version recorded in ``meta``; a file with a newer version is
refused.  Counters live on the events: each row carries ``in_band_seq`` (in-band
events up to and including it), so a run's snapshot is its last event's
``(seq, in_band_seq)`` and no row is rewritten per append.
"""

from __future__ import annotations

from . import _sqlite_codec as codec

__all__ = [
    "CACHED_RUNS",
    "CACHED_STEP_RUNS",
    "CHECKED_STEPS",
    "EVENT_COLUMNS",
    "HAS_HOOKS_BY_KEY_INDEX",
    "HOOKS_BY_KEY_INDEX",
    "INSERT_EVENTS",
    "INSERT_RUN",
    "MESSAGE_COLUMNS",
    "ROWS_PER_STATEMENT",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "SELECT_COUNTERS",
    "SELECT_RUN",
    "UPDATE_RUN",
    "UPSERT_HOOK",
    "UPSERT_STEPS",
    "UPSERT_WAIT",
]

SCHEMA_VERSION = 1

SCHEMA_SQL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    workflow_name TEXT NOT NULL,
    status TEXT NOT NULL,
    input BLOB NOT NULL,
    deployment_id TEXT,
    execution_context BLOB,
    output BLOB,
    error BLOB,
    error_code TEXT,
    cancel_reason TEXT,
    attributes TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER
);
CREATE INDEX IF NOT EXISTS runs_newest ON runs (created_at DESC, run_id DESC);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    correlation_id TEXT,
    in_band INTEGER NOT NULL,
    in_band_seq INTEGER NOT NULL,
    data TEXT,
    blob BLOB,
    resume_id TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS events_resume
    ON events (run_id, resume_id) WHERE resume_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    step_name TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    input_seq INTEGER,  -- NULL only in an upsert that keeps the stored one
    output_seq INTEGER,
    error_seq INTEGER,
    retry_after INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    completed_at INTEGER,
    inline INTEGER NOT NULL,
    PRIMARY KEY (run_id, step_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hooks (
    {codec.HOOK_COLUMNS.replace(", ", " ,")},
    UNIQUE (run_id, hook_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS hooks_live_token ON hooks (token) WHERE status = 'active';
CREATE INDEX IF NOT EXISTS hooks_token ON hooks (token);
CREATE TABLE IF NOT EXISTS waits (
    {codec.WAIT_COLUMNS.replace(", ", " ,")},
    UNIQUE (run_id, wait_id)
);
CREATE TABLE IF NOT EXISTS messages (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    queue_name TEXT NOT NULL,
    payload BLOB NOT NULL,
    available_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    run_id TEXT,
    orchestrator INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    lease_id TEXT,
    lease_expires_at INTEGER,
    due_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_due ON messages (due_at, ord);
CREATE INDEX IF NOT EXISTS messages_leased_orchestrators
    ON messages (lease_expires_at) WHERE orchestrator = 1;
CREATE TABLE IF NOT EXISTS dead_letters (
    ord INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    queue_name TEXT NOT NULL,
    payload BLOB NOT NULL,
    available_at INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    run_id TEXT,
    orchestrator INTEGER NOT NULL,
    idempotency_key TEXT
);
CREATE TABLE IF NOT EXISTS streams (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    closed INTEGER NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
    run_id TEXT NOT NULL,
    name TEXT NOT NULL,
    idx INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (run_id, name, idx)
) WITHOUT ROWID;
"""

MESSAGE_COLUMNS = (
    "message_id, queue_name, payload, available_at, enqueued_at, attempt, run_id, "
    "orchestrator, idempotency_key"
)


def _upsert_sql(table: str, columns: str, key: str) -> str:
    names = [c.strip() for c in columns.split(",")]
    keys = {k.strip() for k in key.split(",")}
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
    marks = ", ".join("?" for _ in names)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


# Nullable parameters arrive as codec.NULL (no adapter lookup in sqlite3).
_N = f"nullif(?, {codec.NULL})"
#: Rows per multi-row statement: within SQLite's oldest parameter limit (999).
ROWS_PER_STATEMENT = 50
_STEP_VALUES = f"(?, ?, ?, ?, ?, {_N}, {_N}, {_N}, {_N}, ?, ?, {_N}, {_N}, ?)"
_STEP_UPDATE = (
    "ON CONFLICT (run_id, step_id) DO UPDATE SET status = excluded.status, "
    "attempt = excluded.attempt, output_seq = coalesce(excluded.output_seq, output_seq), "
    "error_seq = coalesce(excluded.error_seq, error_seq), retry_after = excluded.retry_after, "
    "updated_at = excluded.updated_at, started_at = excluded.started_at, "
    "completed_at = excluded.completed_at"
)
#: ``UPSERT_STEPS[n]`` upserts n step rows; a ``None`` position keeps the stored one.
UPSERT_STEPS: tuple[str, ...] = tuple(
    f"INSERT INTO steps ({codec.STEP_COLUMNS}) VALUES {', '.join([_STEP_VALUES] * n)} "
    f"{_STEP_UPDATE}"
    for n in range(ROWS_PER_STATEMENT + 1)
)
#: ``CHECKED_STEPS[n]`` writes n step rows some of which the write assumed new
#: without reading them: a new step's row (it carries ``input_seq``) that
#: already exists is left as it is and not counted in the rows changed, so the
#: write, seeing fewer rows changed than it sent, is decided again.  A step row
#: with ``input_seq`` is always a new step (the guards refuse ``step_created``
#: for a step that exists).
CHECKED_STEPS: tuple[str, ...] = tuple(
    f"{statement} WHERE excluded.input_seq IS NULL" for statement in UPSERT_STEPS
)
UPSERT_HOOK = _upsert_sql("hooks", codec.HOOK_COLUMNS, "run_id, hook_id")
UPSERT_WAIT = _upsert_sql("waits", codec.WAIT_COLUMNS, "run_id, wait_id")
INSERT_RUN = f"INSERT INTO runs ({codec.RUN_COLUMNS}) VALUES ({', '.join('?' for _ in range(15))})"
UPDATE_RUN = (
    "UPDATE runs SET status = ?, output = ?, error = ?, error_code = ?, cancel_reason = ?, "
    "attributes = ?, updated_at = ?, started_at = ?, completed_at = ? "
    "WHERE run_id = ?"
)
_EVENT_VALUES = f"(?, ?, ?, ?, {_N}, ?, ?, {_N}, {_N}, {_N})"
#: ``INSERT_EVENTS[n]`` inserts n event rows (:func:`._sqlite_codec.event_row`).
INSERT_EVENTS: tuple[str, ...] = tuple(
    "INSERT INTO events (run_id, seq, type, created_at, correlation_id, in_band, in_band_seq, "
    f"data, blob, resume_id) VALUES {', '.join([_EVENT_VALUES] * n)}"
    for n in range(ROWS_PER_STATEMENT + 1)
)
SELECT_RUN = f"SELECT {codec.RUN_COLUMNS} FROM runs WHERE run_id = ?"
# The counters live on the last event: (seq, in-band events up to and including it).
SELECT_COUNTERS = "SELECT seq, in_band_seq FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1"
#: Hooks by token in any status (``hooks.last_by_token``); added to older files at open.
HOOKS_BY_KEY_INDEX = "CREATE INDEX IF NOT EXISTS hooks_token ON hooks (token)"
HAS_HOOKS_BY_KEY_INDEX = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'hooks_token'"
#: Runs whose (row, counters) are cached between writes of this connection.
CACHED_RUNS = 4096
#: Runs whose unfinished steps are cached too (they hold the steps' input bytes).
CACHED_STEP_RUNS = 64
EVENT_COLUMNS = "run_id, seq, type, created_at, correlation_id, in_band, data, blob"
