"""Instructions per step of the World's write path alone: 3 requests + create_batch.

Each step builds the runtime's three requests with ``EventRequest.of`` (a step's
outcome, the next step's ``step_created`` and ``step_started``) and writes them
with one ``MemoryWorld.events.create_batch``, as a sequential workflow does.  Run
by hand under callgrind, twice, and take the difference (never in CI):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/bench_world_batch.py 200
    (the same with 2200; per step = (I(2200) - I(200)) / 2000)

``--builders``: the requests are built as the runtime builds them, by its own
builders (``step_completed_request``, ``step_created_request``,
``step_started_request``: validated once, so the World trusts them), not by
``EventRequest.of``; what a step's World side costs in a real run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
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


def _of(i: int) -> list[EventRequest]:
    """Step ``i``'s batch built by ``EventRequest.of`` (i = 0: only the first step's start)."""
    start = [
        EventRequest.of("step_created", f"s#{i}", step_name="step//a//b", input=b"i", inline=True),
        EventRequest.of("step_started", f"s#{i}"),
    ]
    return (
        start if i == 0 else [EventRequest.of("step_completed", f"s#{i - 1}", result=b"r"), *start]
    )


def _builders(i: int) -> list[EventRequest]:
    """Step ``i``'s batch built by the runtime's request builders."""
    cid = f"s#{i}"
    start = [step_created_request(cid, "step//a//b", b"i", True), step_started_request(cid)]
    return start if i == 0 else [step_completed_request(f"s#{i - 1}", b"r"), *start]


def main(n: int, batch: Callable[[int], list[EventRequest]]) -> None:
    world = MemoryWorld(clock=FixedClock())
    events = world.events
    created = drive(
        events.create(None, EventRequest.of("run_created", workflow_name="wf", input=b"x"))
    )
    run_id = created.run.run_id
    drive(events.create(run_id, EventRequest.of("run_started")))
    first = batch(0)
    drive(events.create_batch(run_id, first, in_band=True, expected_seq_in_band=1))
    seq, fence, at = 4, 3, world.clock.now()
    for i in range(1, n + 1):
        requests = batch(i)
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
    words = [word for word in sys.argv[1:] if word != "--builders"]
    main(int(words[0]) if words else 2000, _builders if "--builders" in sys.argv else _of)
