"""Crash-restart checking: kill a durable World inside its calls, reopen it, compare.

:func:`check_crashes` draws a seeded workload of World calls (docs/conformance.md,
"The crash layer"), runs it on the reference to learn every answer and state,
then runs trials: each runs the workload on the World under test until a kill
(SIGKILL of a child process at a profiler event inside a call, or at a moment
the parent picks; for a World that cannot be rebuilt in a child, a cancelled
task and an abandoned World), reopens the World in this process from the same
:class:`~durasim.checkers.WorldSetup` without ``close()``, and checks that

* every write that returned is there, at the same positions and with the same ids;
* the call in flight is whole or absent (never half a batch);
* writes after the restart get the positions the reference gives (never one
  already returned), and the queue's acknowledged state holds (no acked
  message back, no sent message lost, delays and leases kept).

The first failing trial is shrunk (ops removed while it fails the same way) and
reported with its seed.  Trial 0 runs the whole workload and dies after the
last call; it also counts the interruption points of each call, which the
other trials pick from.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from durasim.worlds import Capabilities, CountingIds, FixedClock, World, WorldSetup

from ._crash_child import NO_DELIVERY_LIMIT, Op, apply_op, make_world
from ._crash_compare import Problem, compare_answer, compare_restart
from ._crash_run import (
    CrashCheckError,
    Kill,
    Outcome,
    ProcessRunner,
    TaskRunner,
    factory_reference,
    stored_deliveries,
)
from ._crash_work import Workload, build_workload, observe, revalidate, with_probes
from ._invariants import check_invariants

__all__ = [
    "DEFAULT_CRASH_OPS",
    "DEFAULT_CRASH_TRIALS",
    "CrashFinding",
    "CrashReport",
    "check_crashes",
]

#: Trials per check (trial 0 included): each is one killed child and one restart.
DEFAULT_CRASH_TRIALS = 64
#: Ops a child may be killed in (12 more run only after a restart).
DEFAULT_CRASH_OPS = 48
#: Ops of the workload run after a restart, before the probes of the state they leave.
_CONTINUE = 10


@attrs.frozen(kw_only=True)
class CrashFinding:
    """One crash-restart failure, shrunk.

    Attributes:
        kind: the bug class (a key of :data:`CRASH_CLASSES`), e.g. ``crash.lost-write``.
        message: what was acknowledged and what the reopened World holds.
        trial: the trial's name (``kill-7``); ``only="kill-7"`` reruns it alone.
        kill: where the World was killed.
        seed: the seed of the workload and of the kill points.
        reproduction: the ops (shrunk), which returned, the one in flight, and
            what ran after the restart.
    """

    kind: str
    message: str
    trial: str
    kill: str
    seed: int
    reproduction: str


@attrs.frozen(kw_only=True)
class CrashReport:
    """The outcome of :func:`check_crashes`.

    Attributes:
        applicable: whether the World declares ``capabilities.durable``.
        mode: ``process`` (SIGKILL of a child) or ``task`` (cancellation in this process).
        trials: trials run (kills and restarts), shrinking not counted.
        findings: the failures (the first one found, shrunk).
        note: what ran, or why nothing did.
        seconds: wall time.
    """

    applicable: bool
    mode: str = ""
    trials: int = 0
    findings: tuple[CrashFinding, ...] = ()
    note: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether no trial failed."""
        return not self.findings


def _capabilities(factory: Callable[..., World]) -> Capabilities:
    """What the factory's Worlds declare (one is built in a scratch directory and closed)."""
    with tempfile.TemporaryDirectory(prefix="durasim-crash-probe-") as scratch:
        setup = WorldSetup(
            clock=FixedClock(), ids=CountingIds(), max_deliveries=2, directory=Path(scratch)
        )
        world = make_world(factory, setup)
        try:
            return world.capabilities
        finally:
            asyncio.run(world.close())


def _category(op: Op) -> str:
    """Single writes, batches, queue calls, stream calls: the trials take them in turn."""
    kind = op["op"]
    if kind in ("enqueue", "claim", "ack", "release", "extend"):
        return "queue"
    if kind in ("write", "close"):
        return "stream"
    return str(kind)


def _plan(seed: int, trial: int, workload: Workload, census: Outcome, *, process: bool) -> Kill:
    """The kill of ``trial`` (>= 1), from the census of trial 0.

    In each six trials: three take every pair of a kind of call (single
    writes, batches, queue calls, stream calls) and a place (right after it
    returned and its answer was seen, right after it returned but before the
    answer was seen, at a seeded point inside it) in turn, on a seeded call
    of that kind; two pick a point anywhere, so long calls weigh more; one is
    a timed kill by the parent (in ``task`` mode, a kill between two calls).
    A call with no interruption point (one that never awaits, in ``task``
    mode) is killed after it returned.
    """
    rng = random.Random(f"durasim-crash:{seed}:{trial}")  # noqa: S311 -- kill points
    done = min(workload.child_ops, census.acked)
    calls = [i for i in range(done) if workload.ops[i]["op"] != "tick"]
    if not calls:
        return Kill(mode="end")
    groups: dict[str, list[int]] = {}
    for index in calls:
        groups.setdefault(_category(workload.ops[index]), []).append(index)
    order = sorted(groups)
    random.Random(f"durasim-crash:{seed}").shuffle(order)  # noqa: S311 -- not secrets
    phase = trial % 6
    where = "inside"
    if phase in (1, 3, 5):  # the k-th of these: every (kind, where) pair in turn
        k = (trial // 6) * 3 + (phase - 1) // 2
        index = rng.choice(groups[order[k % len(order)]])
        where = ("seen", "unseen", "inside")[(k // len(order)) % 3]
    else:
        weights = [census.counts[i] + 1 if i < len(census.counts) else 1 for i in calls]
        index = rng.choices(calls, weights)[0]
    points = census.counts[index] if index < len(census.counts) else 0
    if process and phase == 0:
        scale = statistics.median(census.intervals) if census.intervals else 0.001
        return Kill(mode="timed", op=index - 1, delay=rng.uniform(0, 2 * scale))
    if where == "seen" or ((phase == 0 or not points) and where == "inside"):
        return Kill(mode="after", op=index)  # its answer was seen, nothing else ran
    if where == "unseen":
        return Kill(mode="point", op=index, at=points + 1)
    # Inside: in the last two thirds, where a call writes (checking and planning come first).
    return Kill(mode="point", op=index, at=rng.randint(max(1, points // 3), points))


def _learn(
    op: Op, got: Mapping[str, Any], message_ids: dict[str, str], returned: dict[str, int]
) -> None:
    if op["op"] == "enqueue" and "id" in got:
        message_ids[op["q"]] = got["id"]
    seqs = got.get("seq")
    found = [s for s in (seqs if isinstance(seqs, list) else [seqs]) if isinstance(s, int)]
    if op["op"] in ("create", "batch") and found:
        returned[op["run"]] = max(returned.get(op["run"], 0), *found)


@attrs.define
class _Verdict:
    problems: list[Problem]
    after: list[str] = attrs.field(factory=list)


class _Checker:
    """Reopens a killed World in this process and holds it against the workload."""

    def __init__(self, factory: Callable[..., World], workload: Workload) -> None:
        self.factory = factory
        self.workload = workload
        features = workload.features
        self.queue = "queue" in features
        self.streams = "streams" in features

    async def _observe(self, world: World) -> Any:
        return await observe(world, queue=self.queue, streams=self.streams)

    async def verify(self, outcome: Outcome, directory: Path) -> _Verdict:
        w = self.workload
        if outcome.fatal and not outcome.answers:
            return _Verdict([Problem("crash.child-failed", outcome.fatal.strip()[-1500:])])
        message_ids: dict[str, str] = {}
        returned: dict[str, int] = {}
        for index, got in enumerate(outcome.answers):
            problem = compare_answer(
                w, index, got, after_restart=False, returned=returned, message_ids=message_ids
            )
            if problem is not None:
                return _Verdict([problem])
            _learn(w.ops[index], got, message_ids, returned)
        acked = outcome.acked
        clock = FixedClock(current=w.times[acked])
        setup = WorldSetup(
            clock=clock,
            ids=CountingIds(namespace="p"),
            max_deliveries=NO_DELIVERY_LIMIT,
            directory=directory,
        )
        try:
            world = make_world(self.factory, setup)
        except Exception as exc:
            return _Verdict([Problem("crash.reopen-failed", f"reopening raised {exc!r}")])
        try:
            return await self._after_restart(world, outcome, clock, message_ids, returned)
        finally:
            with contextlib.suppress(Exception):  # a broken World may fail to close too
                await world.close()

    async def _after_restart(
        self,
        world: World,
        outcome: Outcome,
        clock: FixedClock,
        message_ids: dict[str, str],
        returned: dict[str, int],
    ) -> _Verdict:
        w = self.workload
        acked = outcome.acked
        in_flight = outcome.in_flight and acked < len(w.ops)
        try:
            found = await self._observe(world)
        except Exception as exc:
            return _Verdict(
                [Problem("crash.reopen-failed", f"reading it after the restart raised {exc!r}")]
            )
        problems, applied = compare_restart(
            found, w, acked=acked, in_flight=in_flight, message_ids=message_ids
        )
        if not problems:
            problems = await self._entities(world, "after the restart")
        if problems:
            return _Verdict(problems)
        claims = {op["id"]: op["q"] for op in w.ops if op["op"] == "claim"}
        tainted: set[str] = set()
        start = acked
        if applied:
            op = w.ops[acked]
            if op["op"] == "claim":
                tainted.add(op["q"])  # its lease id died with the child
            elif op["op"] == "enqueue" and op["q"] in found.message_ids:
                message_ids[op["q"]] = found.message_ids[op["q"]]
            start = acked + 1
        deliveries = stored_deliveries(list(w.ops[:acked]), outcome.answers)
        w = await with_probes(w, min(len(w.ops), start + _CONTINUE))
        verdict = _Verdict([])
        for index in range(start, len(w.ops)):
            op = w.ops[index]
            queue = op.get("q") or claims.get(op.get("claim", -1))
            if queue in tainted or (
                op["op"] in ("ack", "release", "extend") and op["claim"] not in deliveries
            ):
                if queue is not None:
                    tainted.add(queue)
                continue
            got = await apply_op(world, clock, op, deliveries)
            verdict.after.append(f"  {w.describe(index)}  -> {_answer(got)}")
            problem = compare_answer(
                w, index, got, after_restart=True, returned=returned, message_ids=message_ids
            )
            if problem is not None and in_flight and index == acked and _settled_unseen(op, got):
                # A settle whose effect the state does not show (a release to the same due
                # time) may have landed before the kill: then doing it again finds no lease.
                verdict.after[-1] += " (it had landed before the kill)"
                continue
            if problem is not None:
                verdict.problems.append(problem)
                return verdict
            _learn(op, got, message_ids, {})
        final = await self._observe(world)
        verdict.problems, _ = compare_restart(
            final,
            w,
            acked=len(w.ops),
            in_flight=False,
            message_ids=message_ids,
            ignore=frozenset(tainted),
        )
        if not verdict.problems:
            verdict.problems = await self._entities(
                world, "after the ops that followed the restart"
            )
        return verdict

    async def _entities(self, world: World, when: str) -> list[Problem]:
        report = await check_invariants(world)
        if report.ok:
            return []
        lines = "; ".join(v.render() for v in report.violations[:3])
        return [
            Problem(
                "crash.half-applied", f"{when}, the stored entities disagree with the log: {lines}"
            )
        ]


def _settled_unseen(op: Op, got: Mapping[str, Any]) -> bool:
    return op["op"] in ("ack", "release", "extend") and got.get("err") == "LeaseLost"


def _answer(answer: Mapping[str, Any]) -> str:
    if "err" in answer:
        return f"raised {answer['err']}"
    if "seq" in answer:
        seqs = answer["seq"]
        return ", ".join(f"#{s}" for s in seqs) if isinstance(seqs, list) else f"#{seqs}"
    if "id" in answer:
        return str(answer["id"])
    if "d" in answer:
        d = answer["d"]
        return "nothing" if d is None else f"{d['id']} attempt {d['at']}"
    if "last" in answer:
        return f"index {answer['last']}"
    return "ok"


def _render(workload: Workload, outcome: Outcome, verdict: _Verdict, *, limit: int = 40) -> str:
    ops = workload.ops
    acked = outcome.acked
    lines = [f"kill: {outcome.where}"]
    shown = range(min(len(ops), max(workload.child_ops, acked + 1)))
    body = []
    for index in shown:
        if index >= acked + (1 if outcome.in_flight else 0):
            break
        if index < acked:
            body.append(f"  {workload.describe(index)}  -> {_answer(outcome.answers[index])}")
        else:
            body.append(
                f"  {workload.describe(index)}  IN FLIGHT (the reference answers "
                f"{_answer(workload.answers[index])})"
            )
    if len(body) > limit:
        body = [*body[:3], f"  ... {len(body) - limit + 3} more ...", *body[-(limit - 4) :]]
    lines.append(f"ops before the kill ({acked} returned):")
    lines += body
    if verdict.after:
        lines.append("after the restart:")
        lines += verdict.after[-12:]
    return "\n".join(lines)


class _Session:
    """One check: a workload, a runner, a scratch directory, the trials."""

    def __init__(self, factory: Callable[..., World], runner: Any, workload: Workload) -> None:
        self.factory = factory
        self.runner = runner
        self.workload = workload
        self.scratch = Path(tempfile.mkdtemp(prefix="durasim-crash-"))
        self.count = 0

    def attempt(self, workload: Workload, kill: Kill) -> tuple[Outcome, _Verdict]:
        self.count += 1
        directory = self.scratch / f"t{self.count}"
        directory.mkdir()
        try:
            outcome = self.runner.run(list(workload.ops[: workload.child_ops]), kill, directory)
            verdict = asyncio.run(_Checker(self.factory, workload).verify(outcome, directory))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return outcome, verdict

    def shrink(
        self, kill: Kill, kind: str, budget: int
    ) -> tuple[Workload, Kill, Outcome, _Verdict] | None:
        """Remove ops while the trial still fails with ``kind``; the smallest failing one."""
        current = self.workload
        target = current.ops[kill.op]["id"] if kill.op >= 0 else None
        best: tuple[Workload, Kill, Outcome, _Verdict] | None = None
        tries = 0
        chunk = max(1, len(current.ops) // 2)
        if target is not None:  # first, everything after the killed call
            cut = [op["id"] for op in current.ops[: kill.op + 1]]
            candidate = revalidate(current, cut)
            position = candidate.index_of(target)
            if position is not None and len(candidate.ops) < len(current.ops):
                tries += 1
                moved = attrs.evolve(kill, op=position)
                outcome, verdict = self.attempt(candidate, moved)
                if verdict.problems and verdict.problems[0].kind == kind:
                    current, best = candidate, (candidate, moved, outcome, verdict)
                    chunk = max(1, len(current.ops) // 2)
        while tries < budget:
            ids = [op["id"] for op in current.ops]
            start = 0
            progressed = False
            while start < len(ids) and tries < budget:
                keep = [
                    i for n, i in enumerate(ids) if not (start <= n < start + chunk) or i == target
                ]
                candidate = revalidate(current, keep)
                position = None if target is None else candidate.index_of(target)
                if len(candidate.ops) >= len(current.ops) or (
                    target is not None and position is None
                ):
                    start += chunk
                    continue
                moved = kill if position is None else attrs.evolve(kill, op=position)
                tries += 1
                outcome, verdict = self.attempt(candidate, moved)
                if verdict.problems and verdict.problems[0].kind == kind:
                    current, best, progressed = (
                        candidate,
                        (candidate, moved, outcome, verdict),
                        True,
                    )
                    ids = [op["id"] for op in current.ops]
                else:
                    start += chunk
            if chunk == 1 and not progressed:
                break
            chunk = max(1, chunk // 2)
        return best

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def check_crashes(
    factory: Callable[..., World],
    *,
    reference: str | None = None,
    seed: int = 0,
    trials: int = DEFAULT_CRASH_TRIALS,
    ops: int = DEFAULT_CRASH_OPS,
    mode: str = "auto",
    only: str | None = None,
    shrink: int = 16,
    budget: float | None = None,
) -> CrashReport:
    """Kill ``factory``'s World inside its calls, reopen it, and check what it kept.

    Args:
        factory: ``factory(setup) -> World``; called
            again with the same setup (same directory) to reopen the World.
        reference: ``module:qualname`` of a factory building the same Worlds
            (default: ``factory``'s own name, when that imports it; see
            :func:`factory_reference`).  The child process builds the World from it.
        seed: the workload's and the kill points' seed (same seed, same trials).
        trials: kills (and restarts) to run, trial 0 included.
        ops: ops a kill may land in.
        mode: ``process`` (SIGKILL of a child; POSIX, an importable factory),
            ``task`` (cancel a task, abandon the World, in this process) or
            ``auto`` (``process`` when possible).
        only: run only the trial of that name (``kill-7``).
        shrink: trial runs spent shrinking a failure (0: report it as found).
        budget: seconds after which no new trial starts (``None``: run them all).
            Trial 0 and the shrinking of a failure always run.

    Returns:
        A :class:`CrashReport`; not applicable unless the World declares ``durable``.
    """
    started = time.perf_counter()
    if mode not in ("auto", "process", "task"):
        raise CrashCheckError(f"mode={mode!r} is not known: pass 'auto', 'process' or 'task'")
    capabilities = _capabilities(factory)
    if not capabilities.durable:
        return CrashReport(applicable=False, note="the World does not declare capabilities.durable")
    ref = reference if reference is not None else factory_reference(factory)
    can_fork = hasattr(os, "fork") and os.name == "posix"
    chosen = mode if mode != "auto" else ("process" if ref and can_fork else "task")
    if chosen == "process" and not (ref and can_fork):
        raise CrashCheckError(
            "mode='process' needs POSIX and a factory importable by module:qualname "
            f"(got reference {ref!r}); use mode='task' or a module-level factory"
        )
    workload = build_workload(capabilities, seed=seed, size=ops)
    runner: Any = ProcessRunner(ref) if chosen == "process" and ref else TaskRunner(factory)
    session = _Session(factory, runner, workload)
    findings: list[CrashFinding] = []
    ran = 0
    stopped = False
    try:
        census, verdict = session.attempt(workload, Kill(mode="count"))
        ran = 1 if only in (None, "kill-0") else 0
        failing: tuple[int, Kill, Outcome, _Verdict] | None = None
        if verdict.problems and only in (None, "kill-0"):
            failing = (0, Kill(mode="end"), census, verdict)
        for trial in range(1, trials):
            if failing is not None or census.fatal:
                break
            if budget is not None and time.perf_counter() - started > budget:
                stopped = True
                break
            if only is not None and only != f"kill-{trial}":
                continue
            kill = _plan(seed, trial, workload, census, process=chosen == "process")
            outcome, verdict = session.attempt(workload, kill)
            ran += 1
            if verdict.problems:
                failing = (trial, kill, outcome, verdict)
        if failing is not None:
            findings.append(_finding(session, seed, failing, shrink, census))
    finally:
        session.close()
        if isinstance(runner, ProcessRunner):
            runner.close()
    how = "SIGKILL" if chosen == "process" else "task cancellation"
    note = f"{ran} kills x {len(workload.ops)} ops ({how})"
    if stopped:
        note += f"; stopped by the {budget:g} s budget"
    return CrashReport(
        applicable=True,
        mode=chosen,
        trials=ran,
        findings=tuple(findings),
        note=note,
        seconds=time.perf_counter() - started,
    )


def _finding(
    session: _Session,
    seed: int,
    failing: tuple[int, Kill, Outcome, _Verdict],
    budget: int,
    census: Outcome,
) -> CrashFinding:
    trial, kill, outcome, verdict = failing
    workload = session.workload
    kind = verdict.problems[0].kind
    if kill.mode == "timed":
        # A timed kill is not reproducible: look for a point kill around the call in flight
        # (its answer seen, unseen, then points spread over it) that fails the same way.
        index = outcome.acked
        points = census.counts[index] if index < len(census.counts) else 0
        spread = {points * n // 8 for n in range(1, 8)} - {0}
        tries = [Kill(mode="after", op=index - 1)] if index > 0 else []
        if index < workload.child_ops:
            tries.append(Kill(mode="point", op=index, at=points + 1))
            tries += [Kill(mode="point", op=index, at=at) for at in sorted(spread)]
        for again in tries:
            retry, again_verdict = session.attempt(workload, again)
            if again_verdict.problems and again_verdict.problems[0].kind == kind:
                kill, outcome, verdict = again, retry, again_verdict
                break
    shrunk = session.shrink(kill, kind, budget) if budget and kill.mode != "timed" else None
    if shrunk is not None:
        workload, kill, outcome, verdict = shrunk
    problem = verdict.problems[0]
    size = f"{len(workload.ops)} ops" + (
        f", shrunk from {len(session.workload.ops)}" if shrunk is not None else ""
    )
    if kill.mode == "timed":
        size += "; found by a timed kill, which a rerun may not land on again"
    elif failing[1].mode == "timed":
        size += "; found by a timed kill, replayed by the point kill below"
    return CrashFinding(
        kind=problem.kind,
        message=problem.message,
        trial=f"kill-{trial}",
        kill=outcome.where,
        seed=seed,
        reproduction=f"workload of seed {seed}, trial kill-{trial} ({size}):\n"
        + _render(workload, outcome, verdict),
    )
