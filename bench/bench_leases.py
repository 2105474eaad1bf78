"""Recovery after ``kill -9`` of a worker: how soon its run resumes elsewhere.

    .venv/bin/python bench/bench_leases.py [--repeat 5] [--lease-seconds S] [--world postgres]

Two ``durasim worker`` processes (default options unless ``--lease-seconds``)
serve one World (a SQLite file, or a PostgreSQL schema with ``DURASIM_PG_DSN``).
A run's only step starts on one of them and waits; that worker is killed with
SIGKILL and the clock runs until the step body starts again on the other one
(it appends a line to a file: the time is taken when the line appears) and
until the run completes.  No backlog: the queue holds only this run.  Prints
each sample and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

FLOWS = textwrap.dedent(
    """
    import asyncio, os
    from pathlib import Path
    from durasim.runtime import step, workflow

    @step(max_retries=3)
    async def hold(path: str) -> int:
        with open(path, "a") as out:
            out.write(f"{os.getpid()}\\n")
        if len(Path(path).read_text().splitlines()) == 1:
            await asyncio.sleep(3600)  # the first attempt waits to be killed
        return os.getpid()

    @workflow
    async def held(path: str) -> int:
        return await hold(path)
    """
)


def _world_url(kind: str, folder: Path) -> str:
    if kind == "sqlite":
        return str(folder / "w.db")
    dsn = os.environ["DURASIM_PG_DSN"]
    return f"{dsn}?schema=bench_leases_{uuid.uuid4().hex[:8]}"


async def _start(url: str, folder: Path, marks: Path) -> str:
    sys.path.insert(0, str(folder))
    import leasebench

    from durasim.runtime import start
    from durasim.scenarios._cli_world import open_world

    world = await open_world(url)
    try:
        return (await start(leasebench.held, str(marks), world=world)).run_id
    finally:
        await world.close()


async def _completed(url: str, run_id: str) -> bool:
    from durasim.scenarios._cli_world import open_world

    world = await open_world(url)
    try:
        return (await world.runs.get(run_id)).status.value == "completed"
    finally:
        await world.close()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def sample(kind: str, lease: float | None) -> tuple[float, float]:
    """(seconds from the kill to the step restarting, to the run completing)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "leasebench.py").write_text(FLOWS)
        url, marks = _world_url(kind, folder), folder / "marks"
        run_id = asyncio.run(_start(url, folder, marks))
        options = [] if lease is None else ["--lease-seconds", str(lease)]
        command = [sys.executable, "-m", "durasim.scenarios", "worker", "leasebench"]
        env = {**os.environ, "PYTHONPATH": str(folder)}
        workers = [
            subprocess.Popen(
                [*command, "--world", url, *options],
                cwd=folder,
                env=env,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        try:
            while not _lines(marks):
                time.sleep(0.005)
            victim = next(w for w in workers if str(w.pid) == _lines(marks)[0])
            time.sleep(1.5)  # let the victim renew a time or two, as a live worker does
            victim.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            while len(_lines(marks)) < 2:
                time.sleep(0.005)
            resumed = time.monotonic() - killed
            while not asyncio.run(_completed(url, run_id)):
                time.sleep(0.01)
            done = time.monotonic() - killed
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.wait(timeout=60)
        return resumed, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lease-seconds", type=float, default=None)
    parser.add_argument("--world", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    samples = []
    for i in range(args.repeat):
        resumed, done = sample(args.world, args.lease_seconds)
        samples.append((resumed, done))
        print(
            f"sample {i + 1}: step restarted {resumed:.2f} s after the kill, run done {done:.2f} s"
        )
    lease = "default" if args.lease_seconds is None else f"{args.lease_seconds:g} s"
    print(
        f"{args.world}, lease {lease}: median restart "
        f"{statistics.median(s[0] for s in samples):.2f} s, median completion "
        f"{statistics.median(s[1] for s in samples):.2f} s (n={len(samples)})"
    )


if __name__ == "__main__":
    main()
