"""The concurrency checker: real concurrent calls on a World, checked for linearizability.

:func:`run_concurrency` opens the World under test the way several workers do:
two instances built by the factory from one :class:`WorldSetup` (two SQLite
connections on one file, two PostgreSQL pools on one schema), each on a thread
and an event loop of its own.  A World that cannot be opened twice (a second
instance does not see what the first wrote, or it does not declare
``multi_process``) gets one instance.  Each group of operations
(:mod:`._concurrent_groups`) runs its set-up serially, then starts its
concurrent calls at once as tasks spread over the instances, so the World's own
awaits and round trips interleave, then reads back everything it touched.

Every call is stamped from one counter shared by the threads just before it is
invoked and just after it returns: the history's real-time order.  The history
must pass the read invariants and be linearizable against the reference
:class:`MemoryWorld` (:mod:`._linear`).  On the first failure the group is
shrunk, call by call, to the fewest calls that still show the same anomaly, and
the result holds that witness with the seed and group number that found it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from durasim.worlds import (
    CountingIds,
    EventRequest,
    FixedClock,
    MemoryWorld,
    RunNotFound,
    World,
    WorldError,
    WorldFactory,
    WorldSetup,
    check_factory,
)

from ._anomalies import Anomaly, name_anomaly, read_anomalies
from ._concurrent_groups import Group, Op, applicable_kinds, make_group
from ._linear import (
    Linearization,
    Outcome,
    Record,
    check_linearizable,
    difference,
    render_outcome,
)

__all__ = ["ConcurrencyResult", "ConcurrencyWitness", "replay_witness", "run_concurrency"]

#: Seconds a group may take before it is reported as stuck (a deadlock, a lost wake-up).
GROUP_TIMEOUT = 60.0
#: Re-runs of the whole group the shrinker may spend.
SHRINK_RUNS = 120


@attrs.frozen(kw_only=True)
class ConcurrencyWitness:
    """The minimal group that shows an anomaly, and how to find it again.

    Attributes:
        anomaly: what it shows.
        group: the shrunk group (local names; ``kind`` and ``number`` say where it came from).
        records: its history, as the World answered it.
        linearization: the search's verdict on that history.
        seed: the seed of the run that found it.
        calls_before: how many calls the group had before it was shrunk.
        instances: how many World instances issued the calls.
    """

    anomaly: Anomaly
    group: Group
    records: tuple[Record, ...]
    linearization: Linearization | None
    seed: int
    calls_before: int
    instances: int

    def render(self, *, headline: bool = True) -> str:
        """The witness as text: the anomaly, every call with its answer, the explanation.

        ``headline=False`` leaves out the first line (the anomaly), for a report
        that prints it already.
        """
        records = self.records
        calls = len(records)
        size = (
            f"shrunk from {self.calls_before} to {calls} calls"
            if records
            else f"{self.calls_before} calls, not shrunk"
        )
        lines = [
            f"anomaly: {self.anomaly.name}: {self.anomaly.detail}",
            f"group {self.group.number} ({self.group.kind}) of seed {self.seed}, {size}, "
            f"over {self.instances} World instance(s)",
        ]
        titles = {
            "setup": "set-up (serial):",
            "concurrent": "concurrent (t<invoked>-<returned>: one counter for every thread):",
            "final": "final reads (serial):",
        }
        phase = ""
        for record in records:
            if record.phase != phase:
                phase = record.phase
                lines.append(titles[phase])
            mark = "*" if record.index in self.anomaly.records else " "
            where = (
                f"{record.worker} t{record.invoked}-{record.returned}  "
                if phase == "concurrent"
                else ""
            )
            lines.append(
                f" {mark}[{record.index}] {where}{record.call.render()}\n"
                f"        -> {render_outcome(record.outcome)}"
            )
            if record.message and record.index in self.anomaly.records:
                lines.append(f"           {record.message}")
        if self.linearization is not None and not self.linearization.ok:
            lines.append(explain(records, self.linearization))
        return "\n".join(lines if headline else lines[1:])


@attrs.frozen(kw_only=True)
class ConcurrencyResult:
    """What :func:`run_concurrency` found.

    Attributes:
        groups: groups run (the failing one included).
        kinds: how many groups of each kind ran.
        instances: World instances that issued the calls.
        failure: the shrunk witness of the first anomaly, or ``None``.
        failures: with ``every_kind``, the witness of the first anomaly of each kind of
            group, in the order found (otherwise ``failure`` alone).
        undecided: groups whose search ran out of budget (not failures).
        note: how the World was opened (one instance, and why).
        seconds: wall time.
    """

    groups: int
    kinds: dict[str, int]
    instances: int
    failure: ConcurrencyWitness | None = None
    failures: tuple[ConcurrencyWitness, ...] = ()
    undecided: int = 0
    note: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every group was explained."""
        return self.failure is None


def explain(records: Sequence[Record], verdict: Linearization) -> str:
    """Why no serial order explains ``records``: the longest prefix, then what blocks it."""
    prefix = " ".join(f"[{i}]" for i in verdict.prefix) or "nothing"
    lines = [f"no serial order explains every answer; the longest that explains a prefix: {prefix}"]
    if verdict.stuck:
        lines.append("after it, the reference would answer:")
        for index, answer in verdict.stuck:
            got = records[index].outcome
            lines.append(
                f"    [{index}] {render_outcome(answer)}  "
                f"(the World answered {render_outcome(got)})"
            )
            if render_outcome(answer) == render_outcome(got):
                lines.append(f"        they differ at {difference(answer, got)}")
    else:
        lines.append("after it, every call left must wait for one that has not returned yet")
    return "\n".join(lines)


class _Stamps:
    """One counter for every thread: the history's real-time order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def __call__(self) -> int:
        with self._lock:
            stamp = self._next
            self._next += 1
            return stamp


class _Instance:
    """One World instance, on a thread and an event loop of its own."""

    def __init__(self, factory: WorldFactory, setup: WorldSetup, number: int) -> None:
        self.number = number
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self._serve, name=f"durasim-concurrency-{number}", daemon=True
        )
        self.thread.start()

        async def build() -> World:
            return factory(setup)  # in this thread: a connection stays in its own thread

        try:
            self.world = self.wait(self.submit(build()))
        except BaseException:
            self._stop()
            raise

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coroutine: Any) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    @staticmethod
    def wait(future: concurrent.futures.Future[Any]) -> Any:
        return future.result(timeout=GROUP_TIMEOUT)

    def close(self) -> None:
        try:
            self.wait(self.submit(self.world.close()))
        finally:
            self._stop()

    def abandon(self) -> None:
        """Stop the loop, and cancel the calls that never returned (the World stays open)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=1.0)
        if self.thread.is_alive():  # blocked in a call that does not await: leave it
            return
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=GROUP_TIMEOUT)
        if not self.thread.is_alive():
            self.loop.close()


class _Stuck(Exception):
    """A group did not finish in time."""


class _Runner:
    """Runs groups on the open instances and records their histories."""

    def __init__(self, instances: list[_Instance], clock: FixedClock, timeout: float) -> None:
        self.instances = instances
        self.clock = clock
        self.timeout = timeout
        self.stamps = _Stamps()
        #: A group did not finish: its threads may be blocked for good.
        self.stuck = False

    async def _call(
        self, world: World, op: Op, prefix: str, *, phase: str, index: int, worker: str
    ) -> Record:
        call = op.bind(prefix, self.clock.now())
        for _ in range(op.delay):
            await asyncio.sleep(0)
        invoked = self.stamps()
        outcome: Outcome
        message = ""
        try:
            outcome = ("ok", await call.apply(world))
        except WorldError as exc:
            outcome, message = ("error", type(exc), exc.facts), str(exc)
        except Exception as exc:
            outcome = ("crash", f"{type(exc).__name__}: {exc}")
        returned = self.stamps()
        return Record(
            index=index,
            call=call,
            invoked=invoked,
            returned=returned,
            outcome=outcome,
            worker=worker,
            phase=phase,
            message=message,
        )

    async def _lane(
        self,
        instance: _Instance,
        barrier: threading.Barrier,
        items: list[tuple[int, Op]],
        prefix: str,
    ) -> list[Record]:
        # Blocks this instance's loop, which has nothing else to do: every lane
        # starts its calls at once.
        barrier.wait(timeout=self.timeout)
        return list(
            await asyncio.gather(
                *(
                    self._call(
                        instance.world,
                        op,
                        prefix,
                        phase="concurrent",
                        index=index,
                        worker=f"w{instance.number}.{task}",
                    )
                    for task, (index, op) in enumerate(items)
                )
            )
        )

    def _serial(self, op: Op, prefix: str, *, phase: str, index: int) -> Record:
        instance = self.instances[op.lane % len(self.instances)]
        call = self._call(
            instance.world, op, prefix, phase=phase, index=index, worker=f"w{instance.number}"
        )
        record: Record = self._result(instance.submit(call))
        return record

    def _result(self, future: concurrent.futures.Future[Any]) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError as exc:
            self.stuck = True
            raise _Stuck from exc

    def run(self, group: Group, prefix: str) -> list[Record]:
        """The history of ``group`` with ids prefixed by ``prefix``."""
        records: list[Record] = []
        for op in group.setup:
            records.append(self._serial(op, prefix, phase="setup", index=len(records)))
        base = len(records)
        lanes: dict[int, list[tuple[int, Op]]] = defaultdict(list)
        for position, op in enumerate(group.concurrent):
            lanes[op.lane % len(self.instances)].append((base + position, op))
        barrier = threading.Barrier(len(lanes)) if lanes else None
        futures = [
            self.instances[lane].submit(self._lane(self.instances[lane], barrier, items, prefix))
            for lane, items in lanes.items()
            if barrier is not None
        ]
        for future in futures:
            records += self._result(future)
        records.sort(key=lambda r: r.index)
        for op in group.final:
            records.append(self._serial(op, prefix, phase="final", index=len(records)))
        return records


def _check(records: list[Record], clock: FixedClock) -> tuple[Anomaly | None, Linearization]:
    """The anomaly a history shows (``None`` if it is linearizable), and the search's verdict."""
    verdict = check_linearizable(
        records, reference=lambda: MemoryWorld(clock=clock, ids=CountingIds())
    )
    if verdict.ok and not read_anomalies(records):
        return None, verdict
    anomaly = name_anomaly(records) or Anomaly(
        name="not linearizable",
        detail="no serial order of the calls explains every answer (see below)",
        records=tuple(i for i, _ in verdict.stuck),
    )
    return anomaly, verdict


def _calls(group: Group) -> int:
    return len(group.setup) + len(group.concurrent) + len(group.final)


def _shrink(
    runner: _Runner,
    group: Group,
    found: tuple[list[Record], Anomaly, Linearization],
    *,
    tries: int,
) -> tuple[Group, list[Record], Anomaly, Linearization]:
    """The group with every call removed whose removal still shows the same anomaly."""
    best = (group, *found)
    name = found[1].name
    budget = SHRINK_RUNS
    attempt = 0
    for phase in ("concurrent", "setup", "final", "concurrent"):
        position = len(getattr(best[0], phase)) - 1
        while position >= 0 and budget > 0:
            candidate = best[0].without(phase, position)
            position -= 1
            if not candidate.concurrent:
                continue
            for _ in range(tries):
                budget -= 1
                attempt += 1
                try:
                    records = runner.run(candidate, f"c{group.number}s{attempt}")
                except _Stuck:  # the instances are no longer usable: keep what we have
                    return best
                anomaly, verdict = _check(records, runner.clock)
                if anomaly is not None and anomaly.name == name:
                    best = (candidate, records, anomaly, verdict)
                    break
    return best


def _open(factory: WorldFactory, setup: WorldSetup, wanted: int) -> tuple[list[_Instance], str]:
    """The instances to issue calls from, and a note when there is only one."""
    first = _Instance(factory, setup, 0)
    if wanted < 2:
        return [first], ""
    if not first.world.capabilities.multi_process:
        return [first], "one World instance: the World does not declare multi_process"
    try:
        second = _Instance(factory, setup, 1)
    except Exception as exc:  # a World that locks its store: tested with one instance
        return [first], f"one World instance: a second one could not be opened ({exc})"
    probe = EventRequest.of("run_created", workflow_name="probe", input=b"")
    try:
        first.wait(first.submit(first.world.events.create("concurrency-probe", probe)))
        second.wait(second.submit(second.world.runs.get("concurrency-probe")))
    except RunNotFound:
        second.close()
        return [first], (
            "one World instance: a second World built from the same setup does not see what "
            "the first wrote (name the store after setup.directory to be tested with two)"
        )
    except BaseException:
        second.close()
        first.close()
        raise
    return [first, second], ""


@contextlib.contextmanager
def _session(factory: WorldFactory, wanted: int, timeout: float) -> Iterator[tuple[_Runner, str]]:
    """Instances of the World on a fresh scratch directory and clock, and a runner on them.

    Yields the runner and the note of :func:`_open`; at the end every instance is closed
    (abandoned if a group left its thread blocked) and the directory removed.
    """
    directory = Path(tempfile.mkdtemp(prefix="durasim-concurrency-"))
    clock = FixedClock()
    setup = WorldSetup(
        clock=clock, ids=CountingIds(), max_deliveries=1_000_000, directory=directory
    )
    opened: list[_Instance] = []
    runner: _Runner | None = None
    try:
        opened, note = _open(factory, setup, wanted)
        runner = _Runner(opened, clock, timeout)
        yield runner, note
    finally:
        for instance in opened:
            if runner is not None and runner.stuck:  # a blocked thread cannot close its World
                instance.abandon()
            else:
                instance.close()
        shutil.rmtree(directory, ignore_errors=True)


def replay_witness(
    factory: WorldFactory,
    witness: ConcurrencyWitness,
    *,
    tries: int = 20,
    before_try: Callable[[], None] | None = None,
    timeout: float = GROUP_TIMEOUT,
) -> tuple[Record, ...] | None:
    """Run ``witness``'s group again, each time on a fresh World, until it shows the anomaly.

    For a reproduction outside durasim: a recording World holds the calls of a run that
    showed it, from an empty World (nothing earlier groups left behind).  ``before_try``
    is called before each run.  Returns that run's history, or ``None`` when no run of
    ``tries`` showed the anomaly (a race that did not happen again, or one that needed
    what earlier groups had left in the World).
    """
    factory = check_factory(factory)
    for attempt in range(tries):
        if before_try is not None:
            before_try()
        with _session(factory, witness.instances, timeout) as (runner, _):
            try:
                records = runner.run(witness.group, f"c{witness.group.number}r{attempt}")
            except _Stuck:
                return None
            anomaly, _ = _check(records, runner.clock)
            if anomaly is not None and anomaly.name == witness.anomaly.name:
                return tuple(records)
    return None


def run_concurrency(
    factory: WorldFactory,
    *,
    groups: int = 100,
    seed: int = 0,
    only: str | None = None,
    instances: int = 2,
    timeout: float = GROUP_TIMEOUT,
    progress: Callable[[int, int], None] | None = None,
    every_kind: bool = False,
) -> ConcurrencyResult:
    """Run ``groups`` seeded concurrent groups on the World; the first anomaly, shrunk.

    Args:
        factory: ``factory(setup) -> World``; called once per instance with
            the same :class:`WorldSetup` (a fresh scratch directory).
        groups: how many groups to run (kinds in turn).
        seed: the seed of the workload: same seed, same groups.
        only: run only the kinds of groups whose name contains this.
        instances: World instances to open (more than one only for a World that
            declares ``multi_process`` and shares its store between instances).
        timeout: seconds a group may take; one that takes longer is reported
            as ``stuck`` (a deadlock, a lost wake-up) and ends the run.
        progress: called with ``(groups done, groups)`` after each group.
        every_kind: go on after an anomaly with the other kinds of groups (lifecycle
            writes, tokens, resumes, reads...), skipping the kind that showed it: one
            witness per kind in ``.failures``.  A stuck group still ends the run.

    Returns:
        A :class:`ConcurrencyResult`; ``.failure`` holds the (first) shrunk witness.
    """
    factory = check_factory(factory)
    started = time.perf_counter()
    kinds: Counter[str] = Counter()
    undecided = 0
    failures: list[ConcurrencyWitness] = []
    with _session(factory, instances, timeout) as (runner, opening):
        opened, clock, note = runner.instances, runner.clock, opening
        caps = opened[0].world.capabilities
        chosen = applicable_kinds(caps, only)
        for number in range(groups if chosen else 0):
            group = make_group(seed, number, caps, chosen)
            if any(found.group.kind == group.kind for found in failures):
                continue  # every_kind: this kind has shown its anomaly
            kinds[group.kind] += 1
            try:
                records = runner.run(group, f"c{number}")
            except _Stuck:
                failures.append(_stuck(group, seed, len(opened), timeout))
                break
            anomaly, verdict = _check(records, clock)
            undecided += verdict.exhausted
            if anomaly is not None:
                tries = 1 if len(opened) == 1 else 3
                shrunk, records, anomaly, verdict = _shrink(
                    runner, group, (records, anomaly, verdict), tries=tries
                )
                failures.append(
                    ConcurrencyWitness(
                        anomaly=anomaly,
                        group=shrunk,
                        records=tuple(records),
                        linearization=verdict,
                        seed=seed,
                        calls_before=_calls(group),
                        instances=len(opened),
                    )
                )
                if not every_kind or runner.stuck:
                    break
            if progress is not None:
                progress(number + 1, groups)
            clock.advance(1)
        if not chosen:
            note = f"no kind of group is named like {only!r}"
    return ConcurrencyResult(
        groups=sum(kinds.values()),
        kinds=dict(kinds),
        instances=len(opened),
        failure=failures[0] if failures else None,
        failures=tuple(failures),
        undecided=undecided,
        note=note,
        seconds=time.perf_counter() - started,
    )


def _stuck(group: Group, seed: int, instances: int, timeout: float) -> ConcurrencyWitness:
    now = FixedClock().now()  # only to render the calls
    calls = "".join(f"\n    {op.bind(f'c{group.number}', now).render()}" for op in group.concurrent)
    return ConcurrencyWitness(
        anomaly=Anomaly(
            name="stuck",
            detail=f"the group's calls did not all return within {timeout:g} s (a deadlock, "
            f"or a call waiting for a wake-up that never comes); the calls in flight:{calls}",
        ),
        group=group,
        records=(),
        linearization=None,
        seed=seed,
        calls_before=_calls(group),
        instances=instances,
    )
