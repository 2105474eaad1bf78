"""Drive hook and child workflows of wf_hooks in a fresh process (used by test_hooks_cold.py).

``python hooks_proc.py DB start WORKFLOW [JSON_ARGS]`` prints the run id;
``python hooks_proc.py DB drain`` serves the World until nothing is due and
prints every run's status and result as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import wf_hooks

from durasim.runtime import Worker, get_run, start
from durasim.worlds import SQLiteWorld


async def main(path: str, command: str, rest: list[str]) -> None:
    world = SQLiteWorld(path)
    try:
        if command == "start":
            args = json.loads(rest[1]) if len(rest) > 1 else []
            run = await start(getattr(wf_hooks, rest[0]), *args, world=world)
            print(json.dumps({"run_id": run.run_id}))
            return
        await Worker(world).drain()
        out = {}
        for row in (await world.runs.list(limit=100)).runs:
            entry: dict[str, object] = {"status": row.status.value}
            if row.status.value == "completed":
                entry["result"] = await get_run(row.run_id, world=world).result()
            out[row.run_id] = entry
        print(json.dumps({"runs": out, "seen": wf_hooks.SEEN}, default=str))
    finally:
        await world.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
