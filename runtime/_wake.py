"""Queueing a delivery of a run: the one message format every waker uses."""

from __future__ import annotations

import json

from durasim.worlds import World

__all__ = ["ORCHESTRATOR_QUEUE", "QUEUE_PREFIX", "STEP_QUEUE", "enqueue_wake", "wake_message"]

ORCHESTRATOR_QUEUE = "durasim.run"
STEP_QUEUE = "durasim.step"
#: What workers claim: every durasim queue.
QUEUE_PREFIX = "durasim."


def wake_message(run_id: str, *, divergences: int = 0) -> bytes:
    """The payload of an orchestrator message."""
    return json.dumps({"run": run_id, "divergences": divergences}, sort_keys=True).encode()


async def enqueue_wake(
    world: World,
    run_id: str,
    *,
    key: str | None = None,
    delay: float = 0.0,
    divergences: int = 0,
) -> None:
    """Queue a delivery of ``run_id`` (deduplicated by ``key`` while it is pending)."""
    await world.queue.enqueue(
        ORCHESTRATOR_QUEUE,
        wake_message(run_id, divergences=divergences),
        run_id=run_id,
        orchestrator=True,
        idempotency_key=key,
        delay=delay,
    )
