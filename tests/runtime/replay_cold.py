"""Replay one run of a SQLite World cold, in this process; print what it did as JSON.

``python replay_cold.py DB RUN_ID`` (used by test_ordering.py in a fresh process).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import wf_ordering  # noqa: F401 -- registers the workflows

from durasim.runtime._authoring import find_workflow
from durasim.runtime._replay import Replay
from durasim.worlds import SQLiteWorld


async def main(path: str, run_id: str) -> None:
    world = SQLiteWorld(path)
    try:
        page = await world.events.list(run_id)
    finally:
        await world.close()
    events = list(page.events)
    created, started = events[0], events[1]
    replay = Replay(
        find_workflow(created.data["workflow_name"]),
        run_id=run_id,
        input=created.data["input"],
        started_at=started.created_at,
    )
    replay.begin()
    for event in events[:-1]:
        replay.deliver(event)
    ok, value = replay.outcome()
    steps = sorted(replay.steps.values(), key=lambda s: s.order)
    print(json.dumps({"ok": ok, "value": value, "issued": [s.correlation_id for s in steps]}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
