"""Queueing a delivery of a run: the one message format every waker uses."""

from __future__ import annotations

import json

from durasim.worlds import World

__all__ = ["ORCHESTRATOR_QUEUE", "QUEUE_PREFIX", "STEP_QUEUE", "enqueue_wake", "wake_message"]

ORCHESTRATOR_QUEUE = "durasim.run"
STEP_QUEUE = "durasim.step"
#: What workers claim: every durasim queue.
QUEUE_PREFIX = "durasim."


def wake_message(run_id: str, *, divergences: int = 0, seq: int = 0) -> bytes:
    """The payload of an orchestrator message.

    ``seq`` (when > 0) is the position of the event this wake-up is for: the
    delivery must read the log at least that far, or give the message back
    (a World may serve a stale, shorter prefix: protocol.md §8).
    """
    body: dict[str, object] = {"run": run_id, "divergences": divergences}
    if seq:
        body["seq"] = seq
    return _ENCODE(body).encode()


#: ``json.dumps(body, sort_keys=True)`` without building an encoder per message.
_ENCODE = json.JSONEncoder(sort_keys=True).encode


async def enqueue_wake(
    world: World,
    run_id: str,
    *,
    key: str | None = None,
    delay: float = 0.0,
    divergences: int = 0,
    seq: int = 0,
) -> None:
    """Queue a delivery of ``run_id`` (deduplicated by ``key`` while it is pending).

    ``seq``: the position of the event that needs the delivery (see :func:`wake_message`).
    """
    await world.queue.enqueue(
        ORCHESTRATOR_QUEUE,
        wake_message(run_id, divergences=divergences, seq=seq),
        run_id=run_id,
        orchestrator=True,
        idempotency_key=key,
        delay=delay,
    )
