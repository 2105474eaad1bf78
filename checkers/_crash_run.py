"""Running a workload until it is killed: in a child process, or as a cancelled task.

:class:`ProcessRunner` owns the zygote of :mod:`._crash_child` (one per check,
forking a grandchild per trial) and kills by SIGKILL.  :class:`TaskRunner`
runs the workload in this process as an asyncio task and abandons the World
without ``close()``: it cancels the task at an await point inside a call, or
stops calling the World after a call returned.  Both answer an
:class:`Outcome`: what was acknowledged, whether a call was in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from durasim.worlds import CountingIds, Delivery, DurasimError, FixedClock, World, WorldSetup

from ._crash_child import (
    NO_DELIVERY_LIMIT,
    Op,
    apply_op,
    decode_delivery,
    load_reference,
    make_world,
)

__all__ = [
    "CrashCheckError",
    "Kill",
    "Outcome",
    "ProcessRunner",
    "TaskRunner",
    "factory_reference",
    "stored_deliveries",
]

_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[4]); "
    "from durasim.checkers._crash_child import main; main()"
)


class CrashCheckError(DurasimError, ValueError):
    """The crash checker cannot run as asked; the message says why and how to fix it."""


@attrs.frozen(kw_only=True)
class Kill:
    """Where a trial ends.

    Attributes:
        mode: ``count`` (run every op, counting interruption points in each, then
            die), ``end`` (die after the last op), ``point`` (die at the
            ``at``-th interruption point inside op ``op``; past its last one:
            right after it returned, before the answer is reported), ``after``
            (die right after op ``op`` returned and was reported) or ``timed``
            (the parent kills the child ``delay`` seconds after op ``op``
            was reported; ``op`` -1: after it started).
        op: the op's index in the workload.
        at: the interruption point (profiler event, or await) inside op ``op``.
        delay: seconds, for ``timed``.
    """

    mode: str
    op: int = -1
    at: int = 0
    delay: float = 0.0


@attrs.frozen(kw_only=True)
class Outcome:
    """What a killed workload left: answers of the acknowledged ops, and where it died.

    Attributes:
        answers: the answers of ops ``0..acked-1``, in order.
        in_flight: whether op ``acked`` may have been running at the kill.
        counts: interruption points counted in each op (``count`` mode).
        where: the kill point as a human reads it.
        fatal: the child's own failure (a traceback), if it had one.
        intervals: seconds between acknowledgements, as the parent saw them.
    """

    answers: tuple[dict[str, Any], ...]
    in_flight: bool
    counts: tuple[int, ...] = ()
    where: str = ""
    fatal: str = ""
    intervals: tuple[float, ...] = ()

    @property
    def acked(self) -> int:
        """How many ops returned (and were reported)."""
        return len(self.answers)


def factory_reference(factory: Callable[..., Any], hint: str | None = None) -> str | None:
    """``module:qualname`` that imports ``factory`` itself, or ``None``.

    ``hint`` (say, the reference a command line named) is tried first, then the
    factory's own ``__module__`` and ``__qualname__``; a closure, a lambda or a
    function of ``__main__`` has none a child process could import.
    """
    candidates = [hint] if hint and ":" in hint else []
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if module and qualname and "<" not in qualname and module != "__main__":
        candidates.append(f"{module}:{qualname}")
    for ref in candidates:
        try:
            found = load_reference(ref)
        except Exception:  # noqa: S112 -- not importable: try the next form
            continue
        if found is factory:
            return ref
    return None


class ProcessRunner:
    """Runs trials in grandchildren of one zygote process and kills them with SIGKILL."""

    def __init__(self, ref: str, *, timeout: float = 120.0) -> None:
        self.ref = ref
        self.timeout = timeout
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the runner
        request_read, self._requests = os.pipe()
        self._reports, report_write = os.pipe()
        try:
            self._process = subprocess.Popen(  # noqa: S603 -- this interpreter, our own code
                [
                    sys.executable,
                    "-c",
                    _BOOT,
                    str(request_read),
                    str(report_write),
                    ref,
                    json.dumps(sys.path),
                ],
                pass_fds=(request_read, report_write),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._errors,
            )
        finally:
            os.close(request_read)
            os.close(report_write)
        self._buffer = b""
        first = self._next(time.monotonic() + 60)
        if first is None or "ready" not in first:
            reason = (first or {}).get("fatal") or self._stderr() or "the child did not start"
            self.close()
            raise CrashCheckError(
                f"the crash checker's child process could not load {ref!r}: {reason}; make the "
                "factory importable from this sys.path, or pass mode='task'"
            )

    def _stderr(self) -> str:
        self._errors.seek(0)
        return self._errors.read().decode(errors="replace")[-2000:]

    def _next(self, deadline: float) -> dict[str, Any] | None:
        """The next report line, or ``None`` at the deadline or when the child is gone."""
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._reports], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._reports, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        found: dict[str, Any] = json.loads(line)
        return found

    def run(self, ops: list[Op], kill: Kill, directory: Path) -> Outcome:
        """Run ``ops`` in a fresh grandchild on ``directory`` until ``kill``."""
        mode = {"after": "point", "count": "count", "end": "end", "timed": "timed"}
        wire: dict[str, Any] = {"mode": mode.get(kill.mode, kill.mode)}
        if kill.mode == "point":
            wire.update(op=kill.op, at=kill.at)
            ops = ops[: kill.op + 1]
        if kill.mode == "after":
            ops = ops[: kill.op + 1]
            wire["mode"] = "end"
        trial = {"dir": str(directory), "ns": "c", "ops": ops, "kill": wire}
        os.write(self._requests, (json.dumps(trial) + "\n").encode())
        deadline = time.monotonic() + self.timeout
        answers: list[dict[str, Any]] = []
        counts: list[int] = []
        intervals: list[float] = []
        where, fatal, pid, done = "", "", 0, False
        last = time.monotonic()
        killed = False
        while True:
            report = self._next(deadline)
            if report is None:
                if pid and not killed:
                    os.kill(pid, signal.SIGKILL)  # our own grandchild: it hangs
                    killed = True
                    fatal = fatal or f"the child did not finish in {self.timeout:.0f} s; killed"
                    deadline = time.monotonic() + 30
                    continue
                raise CrashCheckError(
                    "the crash checker's child process died outside a trial: " + self._stderr()
                )
            if "exit" in report:
                break
            if "pid" in report:
                pid = report["pid"]
                if kill.mode == "timed" and kill.op < 0:
                    _kill_later(pid, kill.delay)
                    killed = True
            elif "ack" in report:
                answers.append(report["r"])
                counts.append(report["n"])
                now = time.monotonic()
                intervals.append(now - last)
                last = now
                if kill.mode == "timed" and report["ack"] == kill.op and not killed:
                    _kill_later(pid, kill.delay)
                    killed = True
            elif "point" in report:
                where = (
                    f"SIGKILL at interruption point {report['point']['n']}: "
                    f"{report['point']['where']}"
                )
            elif "done" in report:
                done = True
                if kill.mode == "timed" and not killed:
                    _kill_later(pid, 0.0)
                    killed = True
            elif "fatal" in report:
                fatal = report["fatal"]
        if kill.mode == "timed":
            where = f"SIGKILL from the parent {kill.delay * 1e6:.0f} us after op {kill.op} returned"
        elif kill.mode in ("end", "count") or (kill.mode == "after" and done):
            where = where or "SIGKILL after the last op returned (no close())"
        return Outcome(
            answers=tuple(answers),
            in_flight=not done and not fatal,
            counts=tuple(counts),
            where=where,
            fatal=fatal,
            intervals=tuple(intervals),
        )

    def close(self) -> None:
        """Stop the zygote (it ends when its request pipe closes)."""
        with contextlib.suppress(OSError):
            os.close(self._requests)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a zygote that hangs
            self._process.kill()
            self._process.wait()
        with contextlib.suppress(OSError):
            os.close(self._reports)
        self._errors.close()


def _kill_later(pid: int, delay: float) -> None:
    """SIGKILL ``pid`` after ``delay`` seconds (spin: sleep is too coarse below a ms)."""
    end = time.perf_counter() + delay
    while time.perf_counter() < end:
        pass
    os.kill(pid, signal.SIGKILL)


class TaskRunner:
    """Runs trials in this process: the World is abandoned, never closed.

    A kill inside a call cancels the task at its ``at``-th await inside op
    ``op`` (a World whose calls never await cannot be interrupted there; its
    kills fall between calls).  The abandoned World is dropped and collected
    before the checker reopens the directory.
    """

    def __init__(self, factory: Callable[..., World]) -> None:
        self.factory = factory

    def run(self, ops: list[Op], kill: Kill, directory: Path) -> Outcome:
        """Run ``ops`` on a World built on ``directory`` until ``kill``."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # the abandoned World's handles
            outcome = asyncio.run(self._run(ops, kill, directory))
            gc.collect()
        return outcome

    async def _run(self, ops: list[Op], kill: Kill, directory: Path) -> Outcome:
        clock = FixedClock()
        setup = WorldSetup(
            clock=clock,
            ids=CountingIds(namespace="c"),
            max_deliveries=NO_DELIVERY_LIMIT,
            directory=directory,
        )
        box: dict[str, Any] = {"world": make_world(self.factory, setup), "op": -1, "inside": False}
        answers: list[dict[str, Any]] = []
        counts = [0] * len(ops)
        stop = kill.op if kill.mode == "after" else len(ops) - 1
        if kill.mode == "point":
            stop = kill.op

        async def work() -> None:
            deliveries: dict[int, Delivery] = {}
            for index, op in enumerate(ops[: stop + 1]):
                box.update(op=index, inside=True)
                answer = await apply_op(box["world"], clock, op, deliveries)
                box["inside"] = False
                if kill.mode == "point" and index == kill.op:
                    return  # past its last await: dies before the answer is seen
                answers.append(answer)
                await asyncio.sleep(0)  # a point between two calls

        task = asyncio.ensure_future(work())
        seen = 0
        where = ""
        while not task.done():
            await asyncio.sleep(0)
            if box["inside"] and not task.done():
                counts[box["op"]] += 1
                if kill.mode == "point" and box["op"] == kill.op:
                    seen += 1
                    if seen >= kill.at:
                        task.cancel()
                        where = f"task cancelled at await {seen} inside op {kill.op}"
                        break
        with contextlib.suppress(asyncio.CancelledError):
            await task
        box.clear()  # abandon the World: no close(), and no reference left to it
        in_flight = kill.mode == "point"
        if kill.mode == "point" and not where:
            where = f"abandoned after op {kill.op} returned, before its answer was seen"
        return Outcome(
            answers=tuple(answers),
            in_flight=in_flight,
            counts=tuple(counts),
            where=where or f"abandoned after op {len(answers) - 1} returned (no close())",
        )


def stored_deliveries(ops: list[Op], answers: tuple[Mapping[str, Any], ...]) -> dict[int, Delivery]:
    """The deliveries the acknowledged claims got (extended where an extend returned)."""
    held: dict[int, Delivery] = {}
    for op, answer in zip(ops, answers, strict=False):
        if op["op"] == "claim" and answer.get("d"):
            held[op["id"]] = decode_delivery(answer["d"])
        elif op["op"] == "extend" and "exp" in answer and op["claim"] in held:
            held[op["claim"]] = attrs.evolve(
                held[op["claim"]], lease_expires_at=datetime.fromisoformat(answer["exp"])
            )
    return held
