"""The crash checker's workload executor, and the child process it kills.

A workload is a list of *ops*, JSON objects naming one World call each
(``events.create``, ``create_batch``, a queue call, a stream call) or a clock
``tick``.  :func:`apply_op` performs one on any World and answers a JSON
summary of the result (positions, message ids, the error's type), so the
reference, the child process and the parent's reopened World are all driven by
the same code and their answers compared as plain data.

The child is a *zygote* (``python -c`` of :func:`main`): it imports the factory
once, then forks one grandchild per trial.  The grandchild builds the World
from a :class:`~durasim.checkers.WorldSetup` on the trial's directory, runs the
ops and reports each acknowledgement on a pipe as it returns, then dies by
SIGKILL: it kills itself at a chosen profiler event inside a chosen call (a
*point* kill, reproducible), or the parent kills it at a moment of its choosing
(a *timed* kill).  Nothing runs after the kill: no ``close()``, no ``finally``,
no ``atexit``.  Requests and reports are one JSON line each, on two pipes
given as file descriptors (stdout and stderr stay free for the World).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from durasim.worlds import (
    CountingIds,
    Delivery,
    EventRequest,
    FixedClock,
    Message,
    World,
    check_factory,
)

__all__ = [
    "Op",
    "apply_op",
    "decode_data",
    "decode_delivery",
    "describe_op",
    "encode_data",
    "encode_delivery",
    "load_reference",
    "main",
    "make_world",
]

_T = TypeVar("_T")

#: One op: a JSON object (``{"op": "create", "id": 3, "run": ..., ...}``).
Op = dict[str, Any]

#: ``max_deliveries`` of every World the crash checker builds: never reached.
NO_DELIVERY_LIMIT = 1_000_000


# --- data codec ----------------------------------------------------------------


def encode_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event request's fields as JSON (bytes as ``{"b": hex}``, times as ``{"t": iso}``)."""
    return {key: _encode(value) for key, value in data.items()}


def _encode(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b": value.hex()}
    if isinstance(value, datetime):
        return {"t": value.isoformat()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def decode_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`encode_data` (pairs come back as tuples)."""
    return {key: _decode(value) for key, value in data.items()}


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "b" in value:
            return bytes.fromhex(value["b"])
        return datetime.fromisoformat(value["t"])
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


def _request(spec: Sequence[Any]) -> EventRequest:
    kind, correlation_id, data = spec
    return EventRequest.of(kind, correlation_id, **decode_data(data))


def encode_delivery(delivery: Delivery) -> dict[str, Any]:
    """A delivery as JSON (the parent acks with it after a restart)."""
    m = delivery.message
    return {
        "id": m.message_id,
        "q": m.queue_name,
        "p": m.payload.hex(),
        "av": m.available_at.isoformat(),
        "en": m.enqueued_at.isoformat(),
        "at": m.attempt,
        "run": m.run_id,
        "orch": m.orchestrator,
        "key": m.idempotency_key,
        "lease": delivery.lease_id,
        "exp": delivery.lease_expires_at.isoformat(),
    }


def decode_delivery(data: Mapping[str, Any]) -> Delivery:
    """The inverse of :func:`encode_delivery`."""
    message = Message(
        message_id=data["id"],
        queue_name=data["q"],
        payload=bytes.fromhex(data["p"]),
        available_at=datetime.fromisoformat(data["av"]),
        enqueued_at=datetime.fromisoformat(data["en"]),
        attempt=data["at"],
        run_id=data["run"],
        orchestrator=data["orch"],
        idempotency_key=data["key"],
    )
    return Delivery(
        message=message,
        lease_id=data["lease"],
        lease_expires_at=datetime.fromisoformat(data["exp"]),
    )


# --- ops -----------------------------------------------------------------------


def _fence(op: Op) -> dict[str, Any]:
    if op.get("in_band"):
        return {"in_band": True, "expected_seq_in_band": op["esib"]}
    return {}


async def _watched(call: Awaitable[_T], watch: Callable[..., Any] | None) -> _T:
    """Await the World's call with ``watch`` as the profiler: only its own code is counted."""
    if watch is None:
        return await call
    sys.setprofile(watch)
    try:
        return await call
    finally:
        sys.setprofile(None)


async def apply_op(
    world: World,
    clock: FixedClock,
    op: Op,
    deliveries: dict[int, Delivery],
    *,
    watch: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Perform ``op`` on ``world``; a JSON summary of what it answered.

    ``deliveries`` maps a claim op's id to the delivery it got (ack, release
    and extend name the claim they settle); an op whose claim got nothing
    answers ``{"skip": ...}`` without calling the World.  Any exception is
    the answer ``{"err": type name, "msg": ...}``: the caller compares answers.
    ``watch`` is the profiler function installed while the World's call runs.
    """
    kind = op["op"]
    w = watch
    try:
        if kind == "tick":
            clock.advance(op["s"])
            return {}
        if kind == "create":
            call = world.events.create(op["run"], _request(op["req"]), **_fence(op))
            result = await _watched(call, w)
            event = result.event
            return {"seq": None if event is None else event.seq, "alloc": result.allocated}
        if kind == "batch":
            requests = [_request(r) for r in op["reqs"]]
            batch = await _watched(world.events.create_batch(op["run"], requests, **_fence(op)), w)
            return {"seq": [e.seq for e in batch.events]}
        if kind == "enqueue":
            enqueue = world.queue.enqueue(
                op["q"],
                bytes.fromhex(op["p"]),
                run_id=op.get("run"),
                orchestrator=bool(op.get("orch")),
                idempotency_key=op.get("key"),
                delay=op.get("delay", 0.0),
            )
            message_id = await _watched(enqueue, w)
            return {"id": message_id}
        if kind == "claim":
            claim = world.queue.claim(queue_prefix=op["q"], lease_seconds=op["lease"])
            delivery = await _watched(claim, w)
            if delivery is None:
                return {"d": None}
            deliveries[op["id"]] = delivery
            return {"d": encode_delivery(delivery)}
        if kind in ("ack", "release", "extend"):
            held = deliveries.get(op["claim"])
            if held is None:
                return {"skip": f"claim op {op['claim']} got no delivery"}
            if kind == "ack":
                await _watched(world.queue.ack(held), w)
                return {}
            if kind == "release":
                await _watched(world.queue.release(held, delay=op["delay"]), w)
                return {}
            extended = await _watched(world.queue.extend(held, lease_seconds=op["lease"]), w)
            deliveries[op["claim"]] = extended
            return {"exp": extended.lease_expires_at.isoformat()}
        if kind == "write":
            chunks = [bytes.fromhex(c) for c in op["chunks"]]
            return {"last": await _watched(world.streams.write(op["run"], op["name"], chunks), w)}
        if kind == "close":
            await _watched(world.streams.close(op["run"], op["name"]), w)
            return {}
    except Exception as exc:
        return {
            "err": type(exc).__name__,
            "msg": str(exc).splitlines()[0][:300] if str(exc) else "",
        }
    raise ValueError(f"unknown crash op {kind!r}")


def describe_op(op: Op, *, claims: Mapping[int, int] | None = None) -> str:
    """One line naming the call: ``events.create_batch('crun-1', [step_completed s1, ...])``.

    ``claims`` maps op ids to their indices in the workload shown (a settle
    names the claim it settles by index).
    """
    kind = op["op"]
    if kind == "tick":
        return f"clock.advance({op['s']})"
    fence = f", in_band, expected_seq_in_band={op['esib']}" if op.get("in_band") else ""
    if kind == "create":
        what, corr, _ = op["req"]
        return f"events.create({op['run']!r}, {what}{' ' + corr if corr else ''}{fence})"
    if kind == "batch":
        parts = ", ".join(f"{w}{' ' + c if c else ''}" for w, c, _ in op["reqs"])
        return f"events.create_batch({op['run']!r}, [{parts}]{fence})"
    if kind == "enqueue":
        extra = "".join(
            [
                f", idempotency_key={op['key']!r}" if op.get("key") else "",
                f", delay={op['delay']}" if op.get("delay") else "",
            ]
        )
        return f"queue.enqueue({op['q']!r}{extra})"
    if kind == "claim":
        return f"queue.claim(queue_prefix={op['q']!r}, lease_seconds={op['lease']})"
    if kind in ("ack", "release", "extend"):
        extra = {"ack": "", "release": f", delay={op.get('delay')}", "extend": ""}[kind]
        if kind == "extend":
            extra = f", lease_seconds={op['lease']}"
        claim = (claims or {}).get(op["claim"], op["claim"])
        return f"queue.{kind}(<delivery of op {claim}>{extra})"
    if kind == "write":
        return f"streams.write({op['run']!r}, {op['name']!r}, {len(op['chunks'])} chunk(s))"
    return f"streams.close({op['run']!r}, {op['name']!r})"


# --- the factory ---------------------------------------------------------------


def load_reference(ref: str) -> Callable[..., Any]:
    """Import ``pkg.module:qualname``; raises ``ImportError``/``AttributeError`` if absent."""
    module_name, _, qualname = ref.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"{ref!r} is a {type(found).__name__}, not a World factory")
    return found  # type: ignore[no-any-return]


def make_world(factory: Callable[..., Any], setup: Any) -> World:
    """``factory(setup)`` (the one factory shape; the old ``(clock, ids)`` form is refused)."""
    return check_factory(factory)(setup)


# --- the child process -----------------------------------------------------------


class _Reporter:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, **fields: Any) -> None:
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())


class _KillPoint:
    """A profiler hook that counts events inside one call and SIGKILLs the process at one."""

    def __init__(self, reporter: _Reporter, at: int | None) -> None:
        self.reporter = reporter
        self.at = at
        self.count = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        self.count += 1
        if self.count == self.at:
            self.die(where=_where(frame, event, arg))

    def die(self, *, where: str) -> None:
        sys.setprofile(None)
        self.reporter.send(point={"n": self.count, "where": where})
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # pragma: no cover - the signal is delivered before this returns


def _where(frame: FrameType, event: str, arg: Any) -> str:
    path = Path(frame.f_code.co_filename)
    place = f"{path.parent.name}/{path.name}:{frame.f_lineno}"
    if event.startswith("c_"):
        name = getattr(arg, "__qualname__", None) or getattr(arg, "__name__", repr(arg))
        return f"{event} {name} in {frame.f_code.co_name} ({place})"
    return f"{event} {frame.f_code.co_name} ({place})"


async def _drive(factory: Callable[..., Any], trial: Mapping[str, Any], out: _Reporter) -> None:
    from durasim.worlds import WorldSetup  # noqa: PLC0415 -- the zygote imported it already

    clock = FixedClock()
    setup = WorldSetup(
        clock=clock,
        ids=CountingIds(namespace=trial["ns"]),
        max_deliveries=NO_DELIVERY_LIMIT,
        directory=Path(trial["dir"]),
    )
    world = make_world(factory, setup)
    ops: list[Op] = trial["ops"]
    kill = trial["kill"]
    deliveries: dict[int, Delivery] = {}
    for index, op in enumerate(ops):
        counted = kill["mode"] == "count" or (kill["mode"] == "point" and kill["op"] == index)
        hook = _KillPoint(out, kill.get("at") if kill["mode"] == "point" else None)
        result = await apply_op(world, clock, op, deliveries, watch=hook if counted else None)
        if kill["mode"] == "point" and kill["op"] == index:
            hook.die(where="after the call returned, before the caller saw the answer")
        out.send(ack=index, r=result, n=hook.count)
    out.send(done=len(ops))
    if kill["mode"] == "timed":
        while True:  # the parent kills us; nothing of ours runs after the last op
            time.sleep(3600)  # noqa: ASYNC251 -- block the loop: no task of the World may run
    os.kill(os.getpid(), signal.SIGKILL)


def _trial(factory: Callable[..., Any], trial: Mapping[str, Any], fd: int) -> None:
    out = _Reporter(fd)
    try:
        out.send(pid=os.getpid())
        asyncio.run(_drive(factory, trial, out))
    except BaseException:
        out.send(fatal=traceback.format_exc()[-4000:])
    finally:
        os._exit(70)


def main() -> None:
    """The zygote: ``python -c "...; main()" REQUEST_FD REPORT_FD MODULE:FACTORY SYS_PATH_JSON``."""
    request_fd, report_fd, ref = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sys.path[:] = json.loads(sys.argv[4])
    out = _Reporter(report_fd)
    try:
        import durasim.checkers  # noqa: F401, PLC0415 -- WorldSetup, imported once for every fork

        factory = load_reference(ref)
    except BaseException as exc:
        out.send(fatal=f"cannot import the factory {ref!r}: {type(exc).__name__}: {exc}")
        return
    out.send(ready=True)
    with os.fdopen(request_fd, "r", encoding="utf-8") as requests:
        for line in requests:
            trial = json.loads(line)
            pid = os.fork()
            if pid == 0:  # the grandchild: never returns to this loop
                _trial(factory, trial, report_fd)
            _, status = os.waitpid(pid, 0)
            out.send(exit=os.waitstatus_to_exitcode(status))
