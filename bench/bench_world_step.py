"""Instructions per step of the World side of a step, as the runtime makes it.

Each step builds the runtime's three requests with its own builders
(``step_completed_request``, ``step_created_request``, ``step_started_request``)
and writes them with one ``MemoryWorld.events.create_batch``, with the arguments
the runtime's writer passes.  Run by hand under callgrind, twice, and take the
difference (never in CI):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/bench_world_step.py 200
    (the same with 2200; per step = (I(2200) - I(200)) / 2000)
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine
from typing import Any

from durasim.worlds import EventRequest, FixedClock, MemoryWorld
from durasim.worlds._events import (
    step_completed_request,
    step_created_request,
    step_started_request,
)


def drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """The coroutine's result: MemoryWorld's writes never suspend."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("a MemoryWorld write suspended")


def main(n: int) -> None:
    world = MemoryWorld(clock=FixedClock())
    events = world.events
    created = drive(
        events.create(None, EventRequest.of("run_created", workflow_name="wf", input=b"x"))
    )
    run_id = created.run.run_id
    drive(events.create(run_id, EventRequest.of("run_started")))
    first = [
        step_created_request("s#0", "step//a//b", b"i", True),
        step_started_request("s#0"),
    ]
    drive(events.create_batch(run_id, first, in_band=True, expected_seq_in_band=1))
    seq, fence, at = 4, 3, world.clock.now()
    ids = [f"s#{i}" for i in range(n + 1)]
    for i in range(1, n + 1):
        cid = ids[i]
        requests = [
            step_completed_request(ids[i - 1], b"r"),
            step_created_request(cid, "step//a//b", b"i", True),
            step_started_request(cid),
        ]
        drive(
            events.create_batch(
                run_id,
                requests,
                in_band=True,
                expected_seq_in_band=fence,
                seen_seq=seq,
                occurred_at=at,
                expected_seq=seq,
            )
        )
        seq += 3
        fence += 3
    assert len(drive(events.list(run_id, limit=10_000)).events) == min(seq, 10_000)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
