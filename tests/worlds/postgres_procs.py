"""Child processes for the PostgreSQL tests: ``python postgres_procs.py MODE DSN SCHEMA START ...``.

Each waits until the wall-clock time START so that all children hit the server
together, then prints one JSON line with what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from durasim.worlds import EventRequest, InBandSuperseded, PostgresWorld


async def writer(world: PostgresWorld, run_id: str, rounds: int) -> list[int]:
    """In-band writes, each on a freshly read count; returns the counts that won."""
    won = []
    for i in range(rounds):
        page = await world.events.list(run_id, limit=1)
        count = page.snapshot.seq_in_band
        try:
            await world.events.create(
                run_id,
                EventRequest.of("attr_set", changes={"w": str(i)}),
                in_band=True,
                expected_seq_in_band=count,
            )
            won.append(count)
        except InBandSuperseded:
            pass
    return won


async def claimer(world: PostgresWorld) -> list[str]:
    """Claim and ack until the queue is empty; returns the claimed message ids."""
    seen = []
    while (delivery := await world.queue.claim(lease_seconds=60)) is not None:
        seen.append(delivery.message_id)
        await world.queue.ack(delivery)
    return seen


async def main(mode: str, dsn: str, schema: str, start: float, args: list[str]) -> None:
    world = PostgresWorld(dsn, schema=schema, pool_size=2)
    if mode != "migrate":
        await world.open()
    await asyncio.sleep(max(0.0, start - time.time()))
    if mode == "migrate":
        await world.open()
        result: object = "ok"
    elif mode == "writer":
        result = await writer(world, args[0], int(args[1]))
    else:
        result = await claimer(world)
    await world.close()
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:]))
