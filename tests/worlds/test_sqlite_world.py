"""What only the SQLite World promises: files, reopening, several connections, bad files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from durasim.worlds import (
    CountingIds,
    EntityConflict,
    EventRequest,
    FixedClock,
    InvalidRequest,
    RunStatus,
    SQLiteWorld,
    StepNotFound,
    WorldError,
)


def _e(type_: str, correlation_id: str | None = None, **data: object) -> EventRequest:
    return EventRequest.of(type_, correlation_id, **data)


async def _running_run(world: SQLiteWorld, run_id: str = "r1") -> str:
    await world.events.create(run_id, _e("run_created", workflow_name="wf", input=b"in"))
    await world.events.create(run_id, _e("run_started"))
    return run_id


async def _two_connections(tmp_path: Path) -> tuple[SQLiteWorld, SQLiteWorld, str]:
    """Two Worlds on one file and a running run written by the first."""
    path = tmp_path / "w.db"
    a = SQLiteWorld(path, ids=CountingIds(namespace="a"))
    b = SQLiteWorld(path, ids=CountingIds(namespace="b"))
    return a, b, await _running_run(a)


async def test_committed_events_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    clock = FixedClock()
    first = SQLiteWorld(path, clock=clock, ids=CountingIds())
    run_id = await _running_run(first)
    await first.events.create(run_id, _e("step_created", "s#1", step_name="s", input=b"x" * 5000))
    before = await first.events.list(run_id)
    await first.close()
    second = SQLiteWorld(path, clock=clock, ids=CountingIds())
    after = await second.events.list(run_id)
    assert after == before
    step = await second.steps.get(run_id, "s#1")
    assert step.input == b"x" * 5000
    second._check()
    await second.close()


async def test_a_second_connection_sees_what_the_first_wrote(tmp_path: Path) -> None:
    """The run cache of one connection is dropped when another connection commits."""
    path = tmp_path / "w.db"
    a = SQLiteWorld(path, ids=CountingIds(namespace="a"))
    b = SQLiteWorld(path, ids=CountingIds(namespace="b"))
    run_id = await _running_run(a)
    await a.events.create(run_id, _e("step_created", "s#1", step_name="s", input=b""))  # cached
    await b.events.create(run_id, _e("run_cancelled", reason="operator"))
    with pytest.raises(EntityConflict):
        await a.events.create(run_id, _e("step_created", "s#2", step_name="s", input=b""))
    result = await a.events.create(run_id, _e("run_cancelled"))
    assert result.event is None
    assert result.run.status is RunStatus.CANCELLED
    page = await a.events.list(run_id)
    assert [e.type.value for e in page.events][-1] == "run_cancelled"
    assert page.snapshot.seq == 4
    a._check()
    await a.close()
    await b.close()


async def test_a_step_another_connection_finished_is_not_finished_again(tmp_path: Path) -> None:
    """The step cache of one connection is dropped when another connection commits."""
    path = tmp_path / "w.db"
    a = SQLiteWorld(path, ids=CountingIds(namespace="a"))
    b = SQLiteWorld(path, ids=CountingIds(namespace="b"))
    run_id = await _running_run(a)
    started = [_e("step_created", "s#1", step_name="s", input=b""), _e("step_started", "s#1")]
    await a.events.create_batch(run_id, started)  # s#1 running, in a's cache
    await b.events.create(run_id, _e("step_completed", "s#1", result=b"b"))
    with pytest.raises(EntityConflict, match="completed"):
        await a.events.create(run_id, _e("step_completed", "s#1", result=b"a"))
    with pytest.raises(EntityConflict, match="completed"):
        await a.events.create_batch(run_id, [_e("step_failed", "s#1", error=b"a")])
    assert (await a.steps.get(run_id, "s#1")).output == b"b"
    a._check()
    await a.close()
    await b.close()


async def test_steps_cached_across_writes_match_the_stored_ones(tmp_path: Path) -> None:
    """A run written step after step, reading back only what it must, folds as stored."""
    world = SQLiteWorld(tmp_path / "w.db", clock=FixedClock())
    run_id = await _running_run(world)
    await world.events.create_batch(
        run_id, [_e("step_created", "s#1", step_name="s", input=b"1"), _e("step_started", "s#1")]
    )
    for k in range(1, 6):
        await world.events.create_batch(run_id, [_e("step_retrying", f"s#{k}", error=b"e")])
        await world.events.create(run_id, _e("step_started", f"s#{k}"))
        await world.events.create_batch(
            run_id,
            [
                _e("step_completed", f"s#{k}", result=str(k).encode()),
                _e("step_created", f"s#{k + 1}", step_name="s", input=b"i"),
                _e("step_started", f"s#{k + 1}"),
            ],
        )
    with pytest.raises(EntityConflict, match="already exists"):
        await world.events.create(run_id, _e("step_created", "s#3", step_name="s", input=b""))
    step = await world.steps.get(run_id, "s#6")
    assert (step.status.value, step.attempt) == ("running", 1)
    world._check()
    await world.close()


async def test_a_batch_creating_a_step_that_exists_unread_is_refused_whole(
    tmp_path: Path,
) -> None:
    """A batch takes a step it creates as absent unread; a stored one makes it decide again.

    The step exists but this connection does not remember it (finished, or
    written by another connection): the batch is refused with the error the
    stored rows give, first request first, and writes nothing.
    """
    a, b, run_id = await _two_connections(tmp_path)
    await a.events.create_batch(
        run_id, [_e("step_created", "s#1", step_name="s", input=b"1"), _e("step_started", "s#1")]
    )
    await a.events.create(run_id, _e("step_completed", "s#1", result=b"r"))  # finished: forgotten
    await b.events.create(run_id, _e("step_created", "s#2", step_name="s", input=b"2"))
    before = (await a.events.list(run_id)).snapshot
    for world, step_id in ((a, "s#1"), (a, "s#2"), (b, "s#1")):
        with pytest.raises(EntityConflict, match="already exists"):
            await world.events.create_batch(
                run_id,
                [
                    _e("step_created", step_id, step_name="s", input=b"x"),
                    _e("step_completed", "s#9", result=b"x"),  # refused too, but later
                ],
            )
        with pytest.raises(EntityConflict, match="already exists"):
            await world.events.create_batch(
                run_id, [_e("step_created", step_id, step_name="s", input=b"x")]
            )
    assert (await a.events.list(run_id)).snapshot == before
    batch = await a.events.create_batch(
        run_id, [_e("step_created", "s#3", step_name="s", input=b"3"), _e("step_started", "s#3")]
    )
    assert [e.seq for e in batch.events] == [before.seq + 1, before.seq + 2]
    assert (await b.steps.get(run_id, "s#2")).input == b"2"
    a._check()
    await a.close()
    await b.close()


async def test_a_batch_beside_a_known_step_creating_an_unread_one_is_refused_whole(
    tmp_path: Path,
) -> None:
    """Steps go in a few rows per statement, known and assumed-new together.

    A stored step this connection does not remember, among many new ones and
    beside a known step's change, still makes the batch decide again and refuse
    whole; a large batch of new steps goes in (several statements) and reads back.
    """
    a, b, run_id = await _two_connections(tmp_path)
    await b.events.create(run_id, _e("step_created", "s#x", step_name="s", input=b"x"))
    await a.events.create(run_id, _e("step_created", "s#1", step_name="s", input=b"1"))
    await a.events.create(run_id, _e("step_started", "s#1"))  # a remembers s#1 (b wrote before)
    before = (await a.events.list(run_id)).snapshot
    new = [_e("step_created", f"n#{i}", step_name="s", input=b"%d" % i) for i in range(120)]
    with pytest.raises(EntityConflict, match="already exists"):
        await a.events.create_batch(
            run_id,
            [
                _e("step_completed", "s#1", result=b"r"),
                *new,
                _e("step_created", "s#x", step_name="s", input=b"y"),
            ],
        )
    assert (await a.events.list(run_id)).snapshot == before
    assert (await a.steps.get(run_id, "s#1")).status.value == "running"
    batch = await a.events.create_batch(run_id, [_e("step_completed", "s#1", result=b"r"), *new])
    assert len(batch.events) == 121
    assert (await b.steps.get(run_id, "s#1")).output == b"r"
    assert (await b.steps.get(run_id, "n#119")).input == b"119"
    assert len(await b.steps.list(run_id)) == 122
    a._check()
    await a.close()
    await b.close()


async def test_in_band_counts_are_shared_between_connections(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    a, b = SQLiteWorld(path), SQLiteWorld(path)
    run_id = await _running_run(a)
    await a.events.create(
        run_id,
        _e("step_created", "s#1", step_name="s", input=b""),
        in_band=True,
        expected_seq_in_band=1,
    )
    accepted = await b.events.create(
        run_id,
        _e("step_created", "s#2", step_name="s", input=b""),
        in_band=True,
        expected_seq_in_band=2,
    )
    assert accepted.event is not None
    assert accepted.event.seq == 4
    page = await a.events.list(run_id)
    assert (page.snapshot.seq, page.snapshot.seq_in_band) == (4, 3)
    await a.close()
    await b.close()


def test_unknown_durability_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="durability='fast'"):
        SQLiteWorld(tmp_path / "w.db", durability="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize(("durability", "power_safe"), [("power", True), ("process", False)])
async def test_durability_sets_synchronous(
    tmp_path: Path, durability: str, power_safe: bool
) -> None:
    world = SQLiteWorld(tmp_path / "w.db", durability=durability)  # type: ignore[arg-type]
    level = world._db.execute("PRAGMA synchronous").fetchone()[0]
    assert level == (2 if power_safe else 1)  # FULL = 2, NORMAL = 1
    assert world.capabilities.power_safe is power_safe
    assert world.capabilities.durable
    assert world.capabilities.multi_process
    assert world._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    await world.close()


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are not the pages you are looking for" * 100)
    with pytest.raises(WorldError, match=r"cannot open .* as a SQLite World"):
        SQLiteWorld(path)
    assert path.read_bytes().startswith(b"these are not")


def test_someone_elses_database_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    db.commit()
    db.close()
    with pytest.raises(WorldError, match=r"not a durasim World .*customers"):
        SQLiteWorld(path)
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert tables == {"customers"}


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    world = SQLiteWorld(path)
    await world.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(WorldError, match="schema version 999, newer"):
        SQLiteWorld(path)


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(WorldError, match="cannot open SQLite World"):
        SQLiteWorld(tmp_path / "no" / "such" / "dir" / "w.db")


async def test_a_closed_world_says_so(tmp_path: Path) -> None:
    world = SQLiteWorld(tmp_path / "w.db")
    run_id = await _running_run(world)
    await world.close()
    await world.close()  # idempotent
    with pytest.raises(WorldError, match="is closed"):
        await world.events.list(run_id)
    with pytest.raises(WorldError, match="is closed"):
        await world.events.create(run_id, _e("run_cancelled"))


async def test_a_failed_write_commits_nothing_and_the_next_one_works(tmp_path: Path) -> None:
    """A storage error inside the transaction rolls the whole write back."""
    world = SQLiteWorld(tmp_path / "w.db")
    run_id = await _running_run(world)
    # Make the next event insert fail inside the transaction, after the guards passed.
    world._db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.correlation_id = 'boom' "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    with pytest.raises(WorldError, match=r"rolled back .*disk on fire"):
        await world.events.create(run_id, _e("step_created", "boom", step_name="s", input=b""))
    page = await world.events.list(run_id)
    assert page.snapshot.seq == 2
    with pytest.raises(StepNotFound):
        await world.steps.get(run_id, "boom")
    ok = await world.events.create(run_id, _e("step_created", "fine", step_name="s", input=b""))
    assert ok.event is not None
    assert ok.event.seq == 3
    world._check()
    await world.close()


async def test_a_world_made_before_the_token_index_gets_it_at_open(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    await SQLiteWorld(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX hooks_token")
    db.commit()
    db.close()
    world = SQLiteWorld(path)
    try:
        found = world._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert found == ("1",)
        assert world._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'hooks_token'"
        ).fetchone() == (1,)
    finally:
        await world.close()
