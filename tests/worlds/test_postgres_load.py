"""Many ``durasim worker`` processes on one PostgreSQL schema, killed with -9 at random.

Runs of a sequential workflow are started here; 4 worker processes serve them
(``durasim worker --world postgresql://...?schema=...``).  At even intervals of
the work (every few seconds) a random worker is killed with SIGKILL and a new
one started; a killed worker's
leased messages move to another worker when their (short) lease expires.  In
the end every run completed with the right result, the World passes
``check_invariants``, every run passes ``verify_replay``, and no step's outcome
is recorded twice.

The restart tests also restart the PostgreSQL server in the middle of the load:
every connection of every process (this one too) breaks, and the workers
reconnect.  A restart breaks the connections of every other test running at the
time, so those tests carry the ``pgrestart`` marker: the default run skips them
and ``.ci/run`` runs them in a serial pytest invocation of their own
(``pytest -m pgrestart -p no:xdist``).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import attrs
import pgload_flows
import psycopg
import pytest
from _postgres_support import new_schema, require_postgres

from durasim.checkers import check_invariants, verify_replay
from durasim.runtime import get_run, start
from durasim.worlds import EventType, PostgresWorld

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uses SIGKILL")

HERE = Path(__file__).parent
#: A killed worker's runs move on after this long (shorter than the worker's default, 5 s).
LEASE_SECONDS = 2.0
WORKER = [sys.executable, "-m", "durasim.scenarios", "worker", "pgload_flows"]


@attrs.frozen(kw_only=True)
class Load:
    """One load: how many runs of how many steps, and what goes wrong during it."""

    runs: int
    steps: int
    workers: int = 4
    kills: int  # spread evenly over the steps
    restart_fraction: float | None = None  # restart the server after this share of the steps
    deadline: float
    seed: int = 20260901


def _restart_server() -> None:
    for command in (
        ["pg_ctlcluster", "15", "main", "restart"],
        ["service", "postgresql", "restart"],
    ):
        if shutil.which(command[0]) and subprocess.run(command, check=False).returncode == 0:
            return
    pytest.fail("could not restart PostgreSQL (tried pg_ctlcluster and service)")


def _progress(dsn: str, schema: str) -> tuple[int, int] | None:
    """(steps recorded, runs ended), read on a fresh connection; None while unreachable."""
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM {schema}.events WHERE type = 'step_completed'), "
                f"(SELECT count(*) FROM {schema}.runs "
                "WHERE status IN ('completed', 'failed', 'cancelled'))"
            ).fetchone()
    except psycopg.OperationalError:
        return None  # the server is restarting
    assert row is not None
    return int(row[0]), int(row[1])


class _Workers:
    """``durasim worker`` processes; their output goes to files (they log every delivery)."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_of: dict[int, Path] = {}
        self.started = 0
        self.respawned = 0

    def spawn(self) -> None:
        path = self.logs / f"worker-{self.started}.log"
        log = path.open("wb")
        self.started += 1
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        self.procs.append(
            subprocess.Popen(
                [*WORKER, "--world", self.url, "--lease-seconds", str(LEASE_SECONDS)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        )
        self.log_of[self.procs[-1].pid] = path
        log.close()

    def kill_one(self, rng: random.Random) -> None:
        victim = self.procs.pop(rng.randrange(len(self.procs)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()

    def died(self) -> str:
        """The end of the log of a worker that exited by itself ("" if none did).

        A worker started while the server is down exits at once with a clear
        error (``cannot reach PostgreSQL``); it is started again, as a supervisor
        (systemd, Kubernetes) would.
        """
        for proc in list(self.procs):
            if proc.poll() is not None and b"cannot reach PostgreSQL" in (
                self.log_of[proc.pid].read_bytes()
            ):
                self.procs.remove(proc)
                self.spawn()
                self.respawned += 1
        for proc in self.procs:
            if proc.poll() is not None:
                tail = self.log_of[proc.pid].read_text(errors="replace").splitlines()[-30:]
                return f"worker {proc.pid} exited with {proc.returncode}:\n" + "\n".join(tail)
        return ""

    def stop(self) -> list[int | None]:
        # A worker still importing has no SIGTERM handler yet: wait until it serves.
        limit = time.monotonic() + 30
        for proc in self.procs:
            log = self.log_of[proc.pid]
            while b"serving" not in log.read_bytes() and proc.poll() is None:
                assert time.monotonic() < limit, f"worker {proc.pid} never started: see {log}"
                time.sleep(0.05)
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout=30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        return codes


async def _start_runs(url_world: PostgresWorld, load: Load) -> list[str]:
    ids = []
    for i in range(load.runs):
        run = await start(pgload_flows.chain, load.steps, world=url_world, run_id=f"load-{i:04d}")
        ids.append(run.run_id)
    return ids


async def _judge(world: PostgresWorld, run_ids: list[str], steps: int) -> None:
    report = await check_invariants(world)
    assert report.ok, report.render()
    for run_id in run_ids:
        run = get_run(run_id, world=world)
        assert await run.result() == pgload_flows.expected(steps), run_id
        verdict = await verify_replay(world, run_id)
        assert verdict.ok, verdict
        completed = Counter(
            e.correlation_id
            for e in await run.events()
            if e.type in (EventType.STEP_COMPLETED, EventType.STEP_FAILED)
        )
        assert len(completed) == steps, (run_id, completed)
        twice = {step: n for step, n in completed.items() if n > 1}
        assert not twice, f"run {run_id}: a step's outcome recorded twice: {twice}"
    world._check()


def run_load(load: Load, tmp_path: Path) -> dict[str, float]:
    """Start the runs, serve them with killed-and-replaced workers, then judge the World."""
    dsn = require_postgres()
    schema = new_schema()
    url = f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    rng = random.Random(load.seed)
    world = PostgresWorld(dsn, schema=schema, pool_size=2)
    run_ids = asyncio.run(_start_runs(world, load))
    workers = _Workers(url, tmp_path)
    total = load.runs * load.steps
    # Faults at fractions of the work, so that they land mid-load however fast it runs.
    kill_at = [total * (k + 1) // (load.kills + 1) for k in range(load.kills)]
    restart_at = None if load.restart_fraction is None else total * load.restart_fraction
    began = time.monotonic()
    kills = 0
    restarted = False
    try:
        for _ in range(load.workers):
            workers.spawn()
        while True:
            progress = _progress(dsn, schema)
            steps_done, runs_done = progress or (0, 0)
            if kills < load.kills and steps_done >= kill_at[kills]:
                workers.kill_one(rng)
                workers.spawn()
                kills += 1
            if restart_at is not None and not restarted and steps_done >= restart_at:
                _restart_server()
                restarted = True
            if progress is not None and runs_done == load.runs:
                break
            assert time.monotonic() - began < load.deadline, (
                f"{runs_done} of {load.runs} runs ended after {load.deadline:g} s "
                f"({kills} kills, restarted: {restarted}); worker logs in {tmp_path}"
            )
            dead = workers.died()
            assert not dead, dead
            time.sleep(0.05)
        elapsed = time.monotonic() - began
        assert kills == load.kills, f"the runs ended after {kills} of {load.kills} kills"
        assert restarted or restart_at is None, "the runs ended before the restart"
    finally:
        codes = workers.stop()
    assert codes == [0] * load.workers, f"workers did not stop cleanly: {codes}; see {tmp_path}"
    asyncio.run(_judge(world, run_ids, load.steps))
    asyncio.run(world.close())
    return {"seconds": elapsed, "kills": kills}


def test_workers_killed_at_random_finish_every_run(tmp_path: Path) -> None:
    """The bounded CI version: 20 runs x 10 steps, 2 kills."""
    run_load(Load(runs=20, steps=10, kills=2, deadline=60), tmp_path)


@pytest.mark.slow
def test_200_runs_of_20_steps_under_kill_9_every_few_seconds(tmp_path: Path) -> None:
    run_load(Load(runs=200, steps=20, kills=8, deadline=600), tmp_path)


@pytest.mark.pgrestart
def test_a_server_restart_under_load_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """The bounded version: 20 runs x 10 steps, a kill halfway, a restart at 60 %."""
    run_load(Load(runs=20, steps=10, kills=1, restart_fraction=0.6, deadline=90), tmp_path)


@pytest.mark.pgrestart
@pytest.mark.slow
def test_200_runs_of_20_steps_under_kill_9_and_a_server_restart(tmp_path: Path) -> None:
    run_load(Load(runs=200, steps=20, kills=8, restart_fraction=0.4, deadline=600), tmp_path)
