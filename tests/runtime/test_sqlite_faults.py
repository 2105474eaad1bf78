"""SQLite World faults met by a careless operator, with real processes and file systems.

A foreign database is refused without a byte changed; a World file deleted or
replaced under a running worker stops it before anything more is written into
the lost file; a World on a read-only file system can be inspected; a full disk
makes the worker wait and retry, and every run finishes once space returns.
The tests wait on the workers' pipes, never on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from durasim.runtime import get_run, start
from durasim.worlds import (
    EventRequest,
    RunStatus,
    SQLiteWorld,
    StorageFull,
    WorldError,
    WorldFileChanged,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses signals, mounts, /proc")

FLOWS = textwrap.dedent(
    """
    from pathlib import Path
    from durasim.runtime import step, workflow

    GATE = Path(__file__).with_name(f"gate-{Path(__file__).stem}")

    @step
    def work(run, i, size):
        print(f"step {run} {i}", flush=True)
        if run == 0 and i == 20 and GATE.exists():
            GATE.read_text()  # a FIFO: blocks until the test writes it
        return "x" * size + str(i)

    @workflow
    async def many(run, n, size):
        total = 0
        for i in range(n):
            total += len(await work(run, i, size))
        return total
    """
)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _durasim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from durasim.scenarios._cli import main; raise SystemExit(main())",
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
        timeout=120,
    )


def _worker(world: Path, module: str, cwd: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from durasim.scenarios._cli import main; raise SystemExit(main())",
            "worker",
            module,
            "--world",
            str(world),
            *options,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )


@pytest.fixture
def flows(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    # One module name per test: step ids include it.
    name = f"faultflows_{request.node.name.removeprefix('test_')}"
    (tmp_path / f"{name}.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


async def _start_runs(path: Path, module: str, runs: int, steps: int, size: int) -> None:
    many = __import__(module).many
    world = SQLiteWorld(path)
    try:
        for r in range(runs):
            await start(many, r, steps, size, world=world, run_id=f"many-{r}")
    finally:
        await world.close()


# -- a foreign database --------------------------------------------------------------


def _foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    db.executemany("INSERT INTO customers (name) VALUES (?)", [("ada",), ("grace",)])
    db.commit()
    db.close()


@pytest.mark.parametrize("content", ["database", "text", "durasim-newer"])
def test_a_foreign_file_is_refused_and_left_byte_identical(tmp_path: Path, content: str) -> None:
    path = tmp_path / "foreign.db"
    if content == "database":
        _foreign(path)
        expected = r"not a durasim World .*customers.*nothing was changed"
    elif content == "text":
        path.write_bytes(b"name,amount\nada,1\n" * 100)
        expected = r"cannot open .* as a SQLite World.*nothing was changed"
    else:
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '99')")
        db.commit()
        db.close()
        expected = r"schema version 99, newer"
    before = _sha(path)
    with pytest.raises(WorldError, match=expected):
        SQLiteWorld(path)
    assert _sha(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]  # no -wal, no -shm
    for command in (["inspect", "runs"], ["worker", "json"]):
        done = _durasim(*command, "--world", str(path), cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert _sha(path) == before


# -- a World file deleted or replaced under a running process ------------------------


def test_a_world_replaced_under_an_open_world_refuses_every_write(tmp_path: Path) -> None:
    async def go() -> None:
        path = tmp_path / "w.db"
        world = SQLiteWorld(path)
        created = await world.events.create(
            None, EventRequest.of("run_created", workflow_name="w", input=b"")
        )
        other = SQLiteWorld(tmp_path / "other.db")
        await other.close()
        os.replace(tmp_path / "other.db", path)
        with pytest.raises(WorldFileChanged, match=r"w\.db.* was replaced by another file"):
            await world.events.create(created.run.run_id, EventRequest.of("run_started"))
        with pytest.raises(WorldFileChanged):  # and every later write
            await world.queue.enqueue("q", b"x")
        assert (await world.runs.get(created.run.run_id)).status is RunStatus.PENDING
        await world.close()

    asyncio.run(go())


def _read_until(stream: Iterator[str] | None, wanted: str, seen: list[str]) -> None:
    assert stream is not None
    for line in stream:
        seen.append(line)
        if wanted in line:
            return
    raise AssertionError(f"the stream ended before {wanted!r}: {''.join(seen[-20:])}")


def test_a_world_deleted_under_a_running_worker_stops_it(tmp_path: Path, flows: str) -> None:
    path = tmp_path / "w.db"
    asyncio.run(_start_runs(path, flows, runs=1, steps=100_000, size=10))
    gate = tmp_path / f"gate-{flows}"
    os.mkfifo(gate)
    # A second name for the file: after the unlink, what the worker wrote into
    # the lost inode can still be read.
    kept = tmp_path / "kept.db"
    worker = _worker(path, flows, tmp_path, "--concurrency", "1")
    try:
        printed: list[str] = []
        _read_until(worker.stdout, "step 0 20", printed)  # the body now waits on the gate
        os.link(path, kept)  # the file and its write-ahead log, where commits land first
        os.link(f"{path}-wal", f"{kept}-wal")
        path.unlink()
        gate.write_text("go\n")  # the step ends; its record is the first write after the unlink
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 1, err
    assert "w.db' was deleted while this process had it open" in err
    assert "Traceback" not in err
    assert out == ""  # no step body ran after the one in flight

    async def count() -> int:
        world = SQLiteWorld(kept)
        try:
            events = await get_run("many-0", world=world).events()
            world._check()
            return sum(e.type.value == "step_completed" for e in events)
        finally:
            await world.close()

    # The lost file holds the 20 steps recorded before the unlink, not one more.
    assert asyncio.run(count()) == 20


# -- a read-only World ----------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_world_on_a_read_only_file_system_can_be_inspected(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "4m") as mnt:
        path = mnt / "w.db"

        async def make() -> str:
            world = SQLiteWorld(path)
            created = await world.events.create(
                None, EventRequest.of("run_created", workflow_name="w", input=b"")
            )
            await world.close()
            return created.run.run_id

        run_id = asyncio.run(make())
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        before = _sha(path)

        async def read() -> None:
            world = SQLiteWorld(path)
            assert world.read_only
            assert (await world.runs.get(run_id)).status is RunStatus.PENDING
            with pytest.raises(WorldError, match=r"read-only.*make both writable"):
                await world.events.create(run_id, EventRequest.of("run_started"))
            await world.close()

        asyncio.run(read())
        for command, shown in (
            (["inspect", "runs"], run_id),
            (["inspect", "run", run_id], run_id),
            (["inspect", "events", run_id], "run_created"),
        ):
            done = _durasim(*command, "--world", str(path), cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert shown in done.stdout
        done = _durasim("cancel", run_id, "--world", str(path), cwd=tmp_path)
        assert done.returncode == 1
        assert "read-only" in done.stderr
        assert "Traceback" not in done.stderr
        assert _sha(path) == before


# -- a full disk ----------------------------------------------------------------------


def _fill(directory: Path) -> Path:
    """Fill the file system ``directory`` is on, to its last byte.

    Unbuffered writes: a buffered file would raise ENOSPC again when it flushes on
    close. ``os.write`` writes what still fits, then raises.
    """
    filler = directory / "filler"
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:  # already full (the World's own writes got there first)
        return filler
    try:
        for size in (65536, 512, 1):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while os.write(fd, chunk):
                    pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_makes_the_worker_wait_and_every_run_finishes(
    tmp_path: Path, flows: str
) -> None:
    runs, steps, size = 3, 40, 4000
    with _tmpfs(tmp_path / "mnt", "8m") as mnt:
        path = mnt / "w.db"
        asyncio.run(_start_runs(path, flows, runs, steps, size))
        worker = _worker(path, flows, tmp_path)
        # A worker that never prints what is awaited is killed (the reads then end)
        # instead of stalling the suite.
        guard = threading.Timer(300, worker.kill)
        guard.start()
        try:
            printed: list[str] = []
            _read_until(worker.stdout, "step 0 3", printed)
            filler = _fill(mnt)
            log: list[str] = []
            _read_until(worker.stderr, "storage is full", log)
            _read_until(worker.stderr, "retrying in", log)
            filler.unlink(missing_ok=True)
            (mnt / "filler-tail").unlink(missing_ok=True)
            for _ in range(runs):
                _read_until(worker.stderr, " completed", log)
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
        finally:
            guard.cancel()
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        assert worker.returncode == 0, "".join(log) + err
        text = "".join(log)
        assert "accepts writes again" in text
        assert "Traceback" not in text + err

        async def check() -> None:
            world = SQLiteWorld(path)
            try:
                for r in range(runs):
                    run = get_run(f"many-{r}", world=world)
                    assert await run.result() == sum(size + len(str(i)) for i in range(steps))
                    completed = [
                        e.correlation_id
                        for e in await run.events()
                        if e.type.value == "step_completed"
                    ]
                    assert len(completed) == len(set(completed)) == steps
                world._check()
            finally:
                await world.close()

        asyncio.run(check())


def test_storage_full_is_typed_and_nothing_is_committed(tmp_path: Path) -> None:
    """The seam: SQLITE_FULL from the driver becomes StorageFull; the write rolls back."""

    async def go() -> None:
        world = SQLiteWorld(tmp_path / "w.db")
        created = await world.events.create(
            None, EventRequest.of("run_created", workflow_name="w", input=b"")
        )
        run_id = created.run.run_id
        full = sqlite3.OperationalError("database or disk is full")
        full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
        original = world._store

        def failing(*args: object, **kwargs: object) -> None:
            raise full

        world._store = failing  # type: ignore[method-assign]
        with pytest.raises(StorageFull, match=r"the disk is full.*nothing committed is lost"):
            await world.events.create(run_id, EventRequest.of("run_started"))
        world._store = original  # type: ignore[method-assign]
        assert (await world.runs.get(run_id)).status is RunStatus.PENDING
        await world.events.create(run_id, EventRequest.of("run_started"))
        assert (await world.runs.get(run_id)).status is RunStatus.RUNNING
        world._check()
        await world.close()

    asyncio.run(go())
