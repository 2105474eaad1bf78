"""PostgreSQL-only tests: several processes, migrations racing, lost connections.

The contract and model tests already run on PostgreSQL through ``durasim_world_factory``;
these pin what only a shared server can get wrong.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _postgres_support import new_schema, require_postgres

from durasim.worlds import (
    EventRequest,
    EventType,
    PostgresWorld,
    World,
    WorldError,
    _postgres_views,
)
from durasim.worlds._postgres_wire import DirectStatements

HERE = Path(__file__).parent
req = EventRequest.of


@pytest.fixture
def dsn() -> str:
    return require_postgres()


async def _start_run(world: World, run_id: str) -> None:
    """Create ``run_id`` and start it (written out of band, as a test's setup)."""
    await world.events.create(run_id, req("run_created", workflow_name="wf", input=b""))
    await world.events.create(run_id, req("run_started"))


def _children(mode: str, dsn: str, schema: str, count: int, *args: str) -> list[object]:
    start = time.time() + 1.5  # every child connected and waiting by then
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "postgres_procs.py"), mode, dsn, schema, str(start), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


async def test_processes_migrating_at_once_apply_each_version_once(dsn: str) -> None:
    schema = new_schema()
    assert _children("migrate", dsn, schema, 3) == ["ok"] * 3
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT version FROM {schema}.schema_migrations").fetchall()
    assert rows == [(1,), (2,)]


async def test_of_concurrent_in_band_writers_in_processes_exactly_one_wins(dsn: str) -> None:
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema).open()
    try:
        await _start_run(world, "race")
        results = _children("writer", dsn, schema, 4, "race", "25")
        won = [count for result in results for count in result]  # type: ignore[attr-defined]
        assert len(won) == len(set(won)), "two writers won with the same count"
        page = await world.events.list("race", limit=10_000)
        assert page.snapshot.seq_in_band == 1 + len(won)
        assert sorted(won) == list(range(1, 1 + len(won)))
        world._check()
    finally:
        await world.close()


async def test_claims_under_contention_never_hand_a_message_out_twice(dsn: str) -> None:
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema).open()
    try:
        ids = [await world.queue.enqueue("work", str(i).encode()) for i in range(200)]
        # Orchestrator messages of one run: never two leased at once.
        for _ in range(3):
            await world.queue.enqueue("work", b"o", run_id="r1", orchestrator=True)
        results = _children("claimer", dsn, schema, 4)
        claimed = [m for result in results for m in result]  # type: ignore[attr-defined]
        assert len(claimed) == len(set(claimed)) == 203
        assert set(ids) <= set(claimed)
        assert await world.queue.messages() == ()
    finally:
        await world.close()


async def test_a_claim_that_skips_a_row_another_claim_holds_looks_again(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FOR UPDATE SKIP LOCKED`` passes over a row another claim holds while it
    decides (say, that the row's run is leased, after which it leaves the row): the
    claim that skipped it must not answer "nothing due" while the row stays due.

    The other claim is a transaction holding the row's lock; it ends (leaving the
    row as it was) right after the claim under test has found nothing else, which
    is the instant the race needs.
    """
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema).open()
    try:
        message_id = await world.queue.enqueue("work", b"held")
        holder = await psycopg.AsyncConnection.connect(dsn)
        try:
            await holder.execute(
                f"SELECT 1 FROM {schema}.messages WHERE message_id = %s FOR UPDATE",
                (message_id,),
            )
            queue = type(world.queue)
            skipped = queue._skipped_locked
            answers: list[bool] = []

            async def then_release(self: Any, *args: Any) -> bool:
                answer = await skipped(self, *args)
                answers.append(answer)
                if len(answers) == 1:
                    await holder.rollback()  # the other claim decides to leave the row
                return answer

            monkeypatch.setattr(queue, "_skipped_locked", then_release)
            delivery = await world.queue.claim()
            assert answers[0] is True, "the skipped row was not noticed"
            assert delivery is not None
            assert delivery.message_id == message_id
            assert await world.queue.claim() is None  # leased now: truly nothing due
        finally:
            await holder.close()
    finally:
        await world.close()


async def test_orchestrator_messages_of_one_run_are_leased_one_at_a_time(dsn: str) -> None:
    schema = new_schema()
    worlds = [await PostgresWorld(dsn, schema=schema).open() for _ in range(4)]
    try:
        for _ in range(4):
            await worlds[0].queue.enqueue("flow", b"o", run_id="r1", orchestrator=True)
        deliveries = await asyncio.gather(*(w.queue.claim() for w in worlds))
        assert sum(d is not None for d in deliveries) == 1
    finally:
        for w in worlds:
            await w.close()


def _terminate(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"durasim:{schema}",),
        ).fetchall()
    return len(rows)


async def _killer(dsn: str, schema: str, stop: asyncio.Event, *, times: int, every: float) -> int:
    """Kill the World's sessions ``times`` times, ``every`` s apart, until ``stop``; how many.

    Often enough to cut writes mid-flight, rarely enough to let them progress (a
    real server's pace: these pauses are not simulated time).
    """
    killed = 0
    for _ in range(times):
        if stop.is_set():
            break
        killed += await asyncio.to_thread(_terminate, dsn, schema)
        await asyncio.sleep(every)
    return killed


async def test_writes_survive_killed_connections_and_none_lands_twice(dsn: str) -> None:
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema, pool_size=4).open()
    try:
        await _start_run(world, "r")
        await world.events.create("r", req("hook_created", "h", token="tok-kill"))
        stop = asyncio.Event()

        async def resume(i: int) -> int:
            # No resume_id: a write applied twice would show as an extra event.
            result = await world.events.create("r", req("hook_received", "h", payload=b"%d" % i))
            assert result.event is not None
            return result.event.seq

        kill = asyncio.create_task(_killer(dsn, schema, stop, times=30, every=0.03))
        seqs = []
        for batch in range(10):
            seqs += await asyncio.gather(*(resume(batch * 8 + i) for i in range(8)))
        stop.set()
        assert await kill > 0, "no connection was killed: the test proved nothing"
        page = await world.events.list("r", limit=10_000)
        received = [e for e in page.events if e.type is EventType.HOOK_RECEIVED]
        assert len(received) == 80
        assert sorted(seqs) == [e.seq for e in received]
        assert sorted(e.data["payload"] for e in received) == sorted(b"%d" % i for i in range(80))
        world._check()
    finally:
        await world.close()


async def test_one_statement_writes_reconnect_their_connection_and_close_it(dsn: str) -> None:
    """The connection outside the pool that carries one-statement writes is reopened when lost
    and closed with the World."""
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema, pool_size=2).open()
    try:
        await _start_run(world, "r")
        for k in range(3):
            await world.events.create_batch(
                "r",
                [
                    req("step_created", f"s#{k}", step_name="s", input=b"%d" % k),
                    req("step_started", f"s#{k}"),
                ],
            )
            assert world._direct is not None, "the write did not take the one-statement path"
            assert _terminate(dsn, schema) > 0
        page = await world.events.list("r")
        assert [e.seq for e in page.events] == list(range(1, 9))
        world._check()
        await world.events.create("r", req("step_completed", "s#2", result=b"r"))
        direct = world._direct
        assert direct is not None
        assert not direct.closed
    finally:
        await world.close()
    assert direct.closed
    assert world._direct is None


async def test_an_unreachable_server_is_named_without_its_password() -> None:
    world = PostgresWorld(
        "postgresql://someone:secret@127.0.0.1:1/nowhere", schema="durasim_t_x", connect_timeout=2
    )
    with pytest.raises(WorldError) as caught:
        await world.open()
    message = str(caught.value)
    assert "secret" not in message
    assert "127.0.0.1" in message
    assert "start the server" in message
    await world.close()


async def test_a_connection_cancelled_while_it_is_set_up_is_closed_not_left_open(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lease renewal's timeout can cancel connect() between the connection and its
    # search_path; the connection must not be left for the GC to find open.
    world = PostgresWorld(dsn, schema=new_schema())
    opened: list[psycopg.AsyncConnection[Any]] = []
    real_connect = psycopg.AsyncConnection.connect

    async def connect(*args: Any, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
        conn = await real_connect(*args, **kwargs)
        opened.append(conn)

        async def cancelled(*_: Any, **__: Any) -> None:
            raise asyncio.CancelledError

        monkeypatch.setattr(conn, "execute", cancelled)
        return conn

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    with pytest.raises(asyncio.CancelledError):
        await world.connect()
    assert len(opened) == 1
    assert opened[0].closed


async def test_a_world_from_a_newer_durasim_is_refused(dsn: str) -> None:
    schema = new_schema()
    await (await PostgresWorld(dsn, schema=schema).open()).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {schema}.schema_migrations VALUES (99, 'future')")
    with pytest.raises(WorldError, match="newer than this durasim"):
        await PostgresWorld(dsn, schema=schema).open()


async def test_wait_for_work_wakes_on_an_enqueue_from_another_world(dsn: str) -> None:
    schema = new_schema()
    idle = await PostgresWorld(dsn, schema=schema).open()
    other = await PostgresWorld(dsn, schema=schema).open()
    try:
        assert await idle.queue.wait_for_work(0.05) is False
        waiting = asyncio.create_task(idle.queue.wait_for_work(10))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await other.queue.enqueue("q", b"x")
        assert await waiting is True
        assert time.monotonic() - started < 1.0
        assert await idle.queue.claim() is not None
    finally:
        await idle.close()
        await other.close()


async def test_an_idle_worker_wakes_on_new_work_without_waiting_for_its_poll(dsn: str) -> None:
    """Worker.serve on PostgreSQL sleeps on LISTEN/NOTIFY, not on its poll interval."""
    from durasim.runtime import Worker, start, step, workflow

    @step(module="pgworker", name="echo")
    def echo(x: int) -> int:
        return x

    @workflow(module="pgworker", name="one")
    async def one(x: int) -> int:
        return await echo(x)

    schema = new_schema()
    serving_world = await PostgresWorld(dsn, schema=schema).open()
    client = await PostgresWorld(dsn, schema=schema).open()
    stop = asyncio.Event()
    worker = Worker(serving_world)
    serving = asyncio.create_task(worker.serve(stop=stop, poll=60.0))
    try:
        await asyncio.sleep(0.2)  # the worker is idle, on a 60 s poll
        began = time.monotonic()
        run = await start(one, 7, world=client)
        while not (await run.status()).terminal:
            await asyncio.sleep(0.01)
            assert time.monotonic() - began < 10, "the idle worker did not wake"
        assert await run.result() == 7
    finally:
        stop.set()
        await asyncio.wait_for(serving, timeout=10)
        await serving_world.close()
        await client.close()


# -- writes decided from what a process remembers (PostgresWorld._fast_batch) ---------------


def _step_script() -> list[tuple[int, list[EventRequest]]]:
    """(writer, batch) pairs; writers 0 and 1 stand for two processes on one database."""
    created = lambda s: req("step_created", s, step_name="f", input=b"i")  # noqa: E731
    return [
        (0, [created("s1"), req("step_started", "s1")]),
        (0, [req("step_completed", "s1", result=b"1"), created("s2"), req("step_started", "s2")]),
        (1, [req("step_completed", "s2", result=b"2")]),  # writer 0's memory is now stale
        (0, [req("step_completed", "s2", result=b"2")]),  # so this is decided on the rows
        (0, [created("s3")]),
        (0, [created("s1")]),  # s1 finished: not remembered, and it exists
        (1, [req("step_started", "s3")]),
        (0, [req("step_completed", "s3", result=b"3"), created("s4"), req("step_started", "s4")]),
        (0, [req("step_failed", "s4", error=b"e"), created("s5")]),
    ]


async def _outcome(world: Any, run_id: str, batch: list[EventRequest]) -> object:
    try:
        result = await world.events.create_batch(run_id, batch)
    except WorldError as exc:
        return type(exc).__name__
    return [(e.seq, e.type.value, e.correlation_id) for e in result.events]


async def test_writes_from_memory_answer_as_the_locked_path_when_another_process_wrote(
    dsn: str,
) -> None:
    """Two Worlds (two processes) write one run: every answer equals the in-memory World's."""
    from durasim.worlds import MemoryWorld

    schema = new_schema()
    pair = [await PostgresWorld(dsn, schema=schema).open() for _ in range(2)]
    oracle = MemoryWorld()
    loads = 0
    original = _postgres_views._View.load

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal loads
        loads += 1
        return await original(*args, **kwargs)

    try:
        for world in (pair[0], oracle):
            await _start_run(world, "r")
        _postgres_views._View.load = counted  # type: ignore[method-assign]
        outcomes = []
        for writer, batch in _step_script():
            before = loads
            got = await _outcome(pair[writer], "r", batch)
            assert got == await _outcome(oracle, "r", batch), (writer, batch)
            outcomes.append((got, loads - before))
        # The second write was decided from memory (no read), the fourth was not.
        assert outcomes[1][1] == 0
        assert outcomes[3][1] == 1
        pair[0]._check()
        assert [
            (e.seq, e.type, e.correlation_id) for e in (await pair[0].events.list("r")).events
        ] == [(e.seq, e.type, e.correlation_id) for e in (await oracle.events.list("r")).events]
    finally:
        _postgres_views._View.load = original  # type: ignore[method-assign]
        for world in pair:
            await world.close()


def _hook_and_wait_script() -> list[tuple[int, str, list[EventRequest]]]:
    """(writer, run, requests): one request is a single write, more a batch.

    Writers 0 and 1 stand for two processes on one database; each line says
    what it exercises when writer 0 decides from its memory.
    """
    at = datetime(2030, 1, 1, tzinfo=UTC)
    created = lambda w: req("wait_created", w, resume_at=at)  # noqa: E731
    hook = lambda h, t: req("hook_created", h, token=t)  # noqa: E731
    received = lambda h, r: req("hook_received", h, payload=b"p", resume_id=r)  # noqa: E731
    early = lambda w: req("wait_completed", w, early=True)  # noqa: E731
    return [
        (0, "r", [created("w1")]),  # a new wait: inserted
        (0, "r", [early("w1")]),  # a remembered wait completes
        (0, "r", [created("w1")]),  # finished, not remembered, exists: refused on the rows
        (0, "r", [created("w2")]),
        (1, "r", [early("w2")]),  # writer 0's memory is now stale
        (0, "r", [early("w2")]),  # so this is decided on the rows: already completed
        (0, "r", [early("w9")]),  # no such wait
        (0, "r", [hook("h1", "t1")]),  # a new hook, its token free
        (0, "r", [received("h1", "r1")]),  # a remembered hook; resume id not recorded yet
        (0, "r", [received("h1", "r1")]),  # the same resume again: collapses on the first
        (0, "r", [received("h1", "r2"), received("h1", "r2")]),  # a batch may not repeat it
        (0, "r", [hook("h2", "t1")]),  # this run's live hook holds t1: a conflict
        (1, "q", [hook("hq", "t2")]),  # another run takes t2
        (0, "r", [hook("h3", "t2")]),  # t2 assumed free: the index says no, a conflict
        (0, "r", [req("hook_disposed", "h1")]),
        (0, "r", [hook("h4", "t1")]),  # t1 free again
        (0, "r", [received("h1", "r3")]),  # disposed: not remembered
        (0, "r", [created("w3"), created("w4")]),
        (
            0,
            "r",
            [early("w3"), req("step_created", "s1", step_name="f", input=b"i"), created("w5")],
        ),
        (1, "r", [hook("h5", "t5")]),
        (0, "r", [received("h5", "r5")]),  # decided on the rows: writer 1 made h5
        (0, "r", [received("h5", "r6")]),  # then from memory again
    ]


async def _one_or_batch(world: Any, run_id: str, requests: list[EventRequest]) -> object:
    if len(requests) > 1:
        return await _outcome(world, run_id, requests)
    try:
        result = await world.events.create(run_id, requests[0])
    except WorldError as exc:
        return type(exc).__name__
    event = result.event
    return (event.seq, event.type.value, event.correlation_id, result.allocated)


async def test_hook_and_wait_writes_from_memory_answer_as_the_locked_path(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sleeps' and hooks' writes decided from memory, with another process writing too.

    Each is one statement (one round trip, one commit), and every answer equals
    the in-memory World's.
    """
    from durasim.worlds import MemoryWorld

    schema = new_schema()
    pair = [await PostgresWorld(dsn, schema=schema).open() for _ in range(2)]
    oracle = MemoryWorld()
    loads = 0
    original = _postgres_views._View.load

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal loads
        loads += 1
        return await original(*args, **kwargs)

    statements = 0
    execute = psycopg.AsyncCursor.execute

    async def sent(*args: Any, **kwargs: Any) -> Any:
        nonlocal statements
        statements += 1
        return await execute(*args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", sent)
    first_value = DirectStatements.first_value

    async def sent_direct(*args: Any, **kwargs: Any) -> Any:  # a write sent through libpq
        nonlocal statements
        statements += 1
        return await first_value(*args, **kwargs)

    monkeypatch.setattr(DirectStatements, "first_value", sent_direct)

    try:
        for world in (pair[0], oracle):
            await _start_run(world, "r")
            await _start_run(world, "q")
        _postgres_views._View.load = counted  # type: ignore[method-assign]
        read = []
        for writer, run_id, requests in _hook_and_wait_script():
            before, sent_before = loads, statements
            got = await _one_or_batch(pair[writer], run_id, requests)
            if loads == before:
                assert statements - sent_before == 1, requests
            assert got == await _one_or_batch(oracle, run_id, requests), (writer, requests)
            read.append(loads - before)
        # Decided from memory (no read): a new wait, a remembered wait's completion,
        # a new hook, a resume, a dispose, a batch of waits, the last resume.
        # 0: decided from memory, in one statement; 1: on the rows, under the lock
        # (after stale memory, a refusal, a failed assumption, or writer 1's first).
        assert read == [0, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0]
        pair[0]._check()
        for run_id in ("r", "q"):
            assert [
                (e.seq, e.type, e.correlation_id, e.data)
                for e in (await pair[0].events.list(run_id)).events
            ] == [
                (e.seq, e.type, e.correlation_id, e.data)
                for e in (await oracle.events.list(run_id)).events
            ]
    finally:
        _postgres_views._View.load = original  # type: ignore[method-assign]
        for world in pair:
            await world.close()


async def test_step_writes_survive_killed_connections_and_none_lands_twice(dsn: str) -> None:
    """Writes sent as one statement: one cut mid-flight is looked up, never applied twice."""
    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema, pool_size=2).open()
    try:
        await _start_run(world, "r")
        await world.events.create_batch(
            "r", [req("step_created", "s0", step_name="f", input=b""), req("step_started", "s0")]
        )
        stop = asyncio.Event()
        kill = asyncio.create_task(_killer(dsn, schema, stop, times=40, every=0.02))
        steps = 400
        for i in range(steps):
            result = await world.events.create_batch(
                "r",
                [
                    req("step_completed", f"s{i}", result=b"%d" % i),
                    req("step_created", f"s{i + 1}", step_name="f", input=b""),
                    req("step_started", f"s{i + 1}"),
                ],
            )
            assert [e.seq for e in result.events] == [5 + 3 * i, 6 + 3 * i, 7 + 3 * i]
        stop.set()
        assert await kill > 0, "no connection was killed: the test proved nothing"
        events = (await world.events.list("r", limit=10_000)).events
        assert len(events) == 4 + 3 * steps
        completed = [e.data["result"] for e in events if e.type is EventType.STEP_COMPLETED]
        assert completed == [b"%d" % i for i in range(steps)]
        world._check()
    finally:
        await world.close()


async def test_a_claim_looks_again_when_another_claim_was_deciding_for_the_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due orchestrator message skipped only because another claim held its run is found.

    (Before: the claim answered "nothing due", and a worker went idle with work waiting.)
    """
    from durasim.worlds import _postgres_queue

    schema = new_schema()
    world = await PostgresWorld(dsn, schema=schema).open()
    deciding = asyncio.Event()
    original = _postgres_queue.PostgresQueue._run_busy

    async def watched(*args: Any) -> Any:
        busy = await original(*args)
        if busy == "deciding":
            deciding.set()
        return busy

    monkeypatch.setattr(_postgres_queue.PostgresQueue, "_run_busy", watched)
    try:
        message_id = await world.queue.enqueue("work", b"o", run_id="r1", orchestrator=True)
        other = await psycopg.AsyncConnection.connect(dsn)  # a transaction: holds the xact lock
        try:
            await other.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"durasim-orchestrator:{schema}:r1",),
            )
            claiming = asyncio.create_task(world.queue.claim())
            await asyncio.wait_for(deciding.wait(), 30)  # a guard: it is set within ms
            await other.commit()  # the other claim ends without taking the message
        finally:
            await other.close()
        delivery = await claiming
        assert delivery is not None
        assert delivery.message_id == message_id
    finally:
        await world.close()
