"""Queueing a delivery of a run: the one message format every waker uses.

A message is written by :func:`wake_message` and read by :func:`parse_message`
only: the worker, the simulator and the oracle never look inside a payload.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from durasim.worlds import DurasimError, World

__all__ = [
    "ORCHESTRATOR_QUEUE",
    "QUEUE_PREFIX",
    "STEP_QUEUE",
    "MalformedMessage",
    "StepMessage",
    "WakeMessage",
    "enqueue_wake",
    "is_step_queue",
    "parse_message",
    "pinned_queue",
    "wake_message",
]

ORCHESTRATOR_QUEUE = "durasim.run"
STEP_QUEUE = "durasim.step"
#: What workers claim: every durasim queue.
QUEUE_PREFIX = "durasim."


def pinned_queue(deployment: str | None, kind: str) -> str:
    """The queue of a run's ``kind`` messages (``run``, ``step``): ``durasim@<version>/<kind>``
    for a run pinned to a version (runtime/_versions.py), else ``durasim.<kind>``."""
    return f"durasim.{kind}" if deployment is None else f"durasim@{deployment}/{kind}"


def is_step_queue(queue_name: str) -> bool:
    """Whether ``queue_name`` carries queued step attempts (of any version)."""
    return queue_name == STEP_QUEUE or (
        queue_name.startswith("durasim@") and queue_name.endswith("/step")
    )


class MalformedMessage(DurasimError, ValueError):
    """A queue message whose payload is not one durasim wrote (it is dropped)."""


@attrs.frozen
class WakeMessage:
    """An orchestrator message: deliver ``run_id``.

    Attributes:
        run_id: the run to deliver.
        divergences: recovery replays the run has had after a divergence.
        seq: the position the sender wrote (0: none); the delivery must read that far.
    """

    run_id: str
    divergences: int = 0
    seq: int = 0

    def encode(self) -> bytes:
        """The payload bytes (as :func:`wake_message` writes them)."""
        return wake_message(self.run_id, divergences=self.divergences, seq=self.seq)


@attrs.frozen
class StepMessage:
    """A queued step attempt: run step ``correlation_id`` of ``run_id``.

    Attributes:
        run_id: the step's run.
        correlation_id: the step's correlation id (its name in the log).
        payload: the message's bytes, as :func:`run_queued_step` takes them.
    """

    run_id: str
    correlation_id: str
    payload: bytes


def parse_message(queue_name: str, payload: bytes | str) -> WakeMessage | StepMessage:
    """The typed message of ``payload`` on ``queue_name``.

    Raises:
        MalformedMessage: the payload is not a message durasim wrote.
    """
    try:
        body: Any = json.loads(payload)
        if is_step_queue(queue_name):
            raw = payload.encode() if isinstance(payload, str) else bytes(payload)
            return StepMessage(str(body["run"]), str(body["step"]), raw)
        return WakeMessage(
            str(body["run"]), int(body.get("divergences", 0)), int(body.get("seq", 0))
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedMessage(
            f"queue message on {queue_name!r} is malformed ({exc!r}): {payload!r}; "
            "durasim queues carry only what wake_message() and the step queue write"
        ) from exc


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
    deployment: str | None = None,
) -> None:
    """Queue a delivery of ``run_id`` (deduplicated by ``key`` while it is pending).

    ``seq``: the position of the event that needs the delivery (see :func:`wake_message`).
    ``deployment``: the version the run is pinned to, if the caller knows it (its
    queue); else the unversioned queue, where a worker of another version that
    claims it moves it to the right one.
    """
    await world.queue.enqueue(
        pinned_queue(deployment, "run"),
        wake_message(run_id, divergences=divergences, seq=seq),
        run_id=run_id,
        orchestrator=True,
        idempotency_key=key,
        delay=delay,
    )
