"""Steps per second of an n-step sequential workflow on vercel-workflow's local world.

Run with the peers' venv, never the project's (bench_runtime.py does this):

    /tmp/bench-peers/bin/python bench/peers/vercel_steps.py --n 100 500

Prints one JSON object: per n, the seconds from ``start`` to the run's return
value, steps/s, and the events the run's log holds.  The runs share one fresh
data directory (``WORKFLOW_LOCAL_DATA_DIR``, each run in its own folder); the
embedded queue and the workflow handler run in this process, as the local world
sets them up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


async def main(sizes: list[int]) -> None:
    import _vercel_flow
    from vercel.workflow import start
    from vercel.workflow._internal import world as w

    data = Path(os.environ["WORKFLOW_LOCAL_DATA_DIR"])
    results = []
    try:
        for n in sizes:
            begin = time.perf_counter()
            run = await start(_vercel_flow.sequential, n)
            value = await run.return_value()
            elapsed = time.perf_counter() - begin
            assert value == n * (n - 1) // 2, value
            events = sum(1 for _ in (data / "events" / run.run_id).glob("*.json"))
            results.append(
                {"n": n, "seconds": elapsed, "steps_per_s": n / elapsed, "events": events}
            )
    finally:
        await w.get_world().aclose()  # type: ignore[attr-defined]
    print(
        json.dumps(
            {
                "peer": "vercel-workflow",
                "version": version("vercel-workflow"),
                "world": "local (files under WORKFLOW_LOCAL_DATA_DIR, embedded queue)",
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, nargs="+", default=[100, 500])
    args = parser.parse_args()
    os.environ["WORKFLOW_TARGET_WORLD"] = "local"
    os.environ["WORKFLOW_LOCAL_DATA_DIR"] = tempfile.mkdtemp(prefix="vercel-bench-")
    asyncio.run(main(args.n))
