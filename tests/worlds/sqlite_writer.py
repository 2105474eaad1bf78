"""A child process that writes to a SQLite World until it is killed.

Used by test_sqlite_processes.py: ``python sqlite_writer.py PATH MODE RUN_ID``.
After every committed write it prints the last committed position, so the
parent knows what the World promised before the kill.

Modes:
    append   out-of-band step events, alternating single writes and batches
    in-band  one attempt at an in-band write with the count read from the log
"""

from __future__ import annotations

import asyncio
import os
import sys

from durasim.worlds import EventRequest, InBandSuperseded, SQLiteWorld


async def append(world: SQLiteWorld, run_id: str) -> None:
    tag = os.getpid()
    n = 0
    while True:
        n += 1
        body = bytes([n % 256]) * (64 + n % 4000)
        if n % 3:
            result = await world.events.create(
                run_id,
                EventRequest.of("step_created", f"p{tag}-{n}", step_name="s", input=body),
            )
            assert result.event is not None
            last = result.event.seq
        else:
            batch = await world.events.create_batch(
                run_id,
                [
                    EventRequest.of("step_created", f"p{tag}-{n}-{i}", step_name="s", input=body)
                    for i in range(5)
                ],
            )
            last = batch.events[-1].seq
        print(last, flush=True)


async def in_band(world: SQLiteWorld, run_id: str) -> None:
    page = await world.events.list(run_id)
    print("ready", flush=True)
    sys.stdin.readline()  # all writers start together
    try:
        await world.events.create(
            run_id,
            EventRequest.of("step_created", f"fenced-{os.getpid()}", step_name="s", input=b""),
            in_band=True,
            expected_seq_in_band=page.snapshot.seq_in_band,
        )
        print("won", flush=True)
    except InBandSuperseded:
        print("superseded", flush=True)


async def main() -> None:
    path, mode, run_id = sys.argv[1:4]
    world = SQLiteWorld(path)
    try:
        await (append if mode == "append" else in_band)(world, run_id)
    finally:
        await world.close()


if __name__ == "__main__":
    asyncio.run(main())
