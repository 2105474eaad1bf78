"""One explored example: build the simulation, drive it, judge it.

:func:`run_example` is shared by ``explore()`` (choices drawn by Hypothesis)
and by ``reproduce`` (choices replayed from a seed); both give the same trace
and the same verdicts for the same choices.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from durasim.checkers import (
    FreshProcessUnavailable,
    FreshReplay,
    check_invariants,
    describe_fresh_process,
    finished_logs,
    replay_in_fresh_process,
    verify_replay_log,
)
from durasim.runtime import (
    DefinitionNotFound,
    InvalidDefinition,
    ManifestError,
    RevivedError,
    Run,
    WorkflowCallError,
    WorkflowSandboxError,
)
from durasim.runtime.serialization import deserialize
from durasim.sim import (
    BudgetExceeded,
    ChoiceSource,
    QueueContractBroken,
    RunOutcome,
    SequenceChoices,
    Sim,
    SimError,
    StuckCode,
)
from durasim.worlds import Event, EventType, MemoryWorld, WorldFactory

from ._harness import drive
from ._seeds import ExampleConfig, resolve_ref
from ._sometimes import sometimes

__all__ = [
    "AUTHORING_ERRORS",
    "LEASE_TAKEOVER",
    "VERDICT_KINDS",
    "ExampleReport",
    "Property",
    "run_example",
]

#: ``property(outcome, log)``: falsy or raising means the example failed.
Property = Callable[[RunOutcome, Sequence[Event]], Any]

#: Verdict kinds of a failed example, most severe first.
VERDICT_KINDS = {
    "error": "the simulation itself failed (an exception escaped the runtime or the harness)",
    "queue": "the World's own queue broke its contract under the runtime (queue='world'): "
    "an acked message redelivered, a claimed message lost, a delay not kept, an idempotency "
    "key that queued twice, a lease refused or kept wrongly, a wrong next_due",
    "stuck": "code never yielded: the wall-time budget interrupted it (the detail names where)",
    "authoring": "a run failed with a sandbox or authoring error (WorkflowSandboxError, "
    "InvalidDefinition...): the workflow breaks a rule of durasim",
    "upgrade": "the code changed mid-run (explore(upgrade=...)) and a run then failed with "
    "CORRUPTED_EVENT_LOG: the new version does not replay what the old one recorded (an "
    "edit without patched(), or a patch that forgets a branch)",
    "invariants": "check_invariants found a broken log rule or a row that differs from the log",
    "replay": "verify_replay: a finished run's log does not make the runtime end it the same way",
    "fresh-process": "the cold replay agrees in this process but not in a fresh one (another "
    "hash seed, environment, wall clock, fresh module state)",
    "property": "the exploration's property returned falsy or raised",
    "determinism": "the recorded choices replayed to another trace",
}

#: The ``sometimes()`` name of an example in which a delivery claimed a message whose
#: lease lapsed while the delivery holding it still ran (a lease takeover).
LEASE_TAKEOVER = "lease taken over from a running delivery"

#: Errors that say the workflow broke a rule of durasim, not that it failed on its own terms.
AUTHORING_ERRORS: tuple[type[BaseException], ...] = (
    WorkflowSandboxError,
    InvalidDefinition,
    DefinitionNotFound,
    WorkflowCallError,
    ManifestError,
)
_AUTHORING_NAMES = frozenset(cls.__name__ for cls in AUTHORING_ERRORS)


@attrs.frozen(kw_only=True)
class ExampleReport:
    """What one example did and how it was judged.

    Attributes:
        config: the example (its seed is ``config.to_seed()``).
        failures: ``(kind, detail)`` per failed verdict, most severe first (empty: ok).
        status: the run's status at rest, or ``stalled`` / ``budget`` when it could not end.
        trace: the simulation's trace text; ``trace_hash`` its sha256.
        faults: the kinds of the faults injected, in order.
        rejections: the error type of every refused World call, in order.
        outcome: the run's outcome (``None`` when the simulation failed).
    """

    config: ExampleConfig
    failures: tuple[tuple[str, str], ...] = ()
    status: str = ""
    trace: str = ""
    trace_hash: str = ""
    faults: tuple[str, ...] = ()
    rejections: tuple[str, ...] = ()
    outcome: RunOutcome | None = None

    @property
    def ok(self) -> bool:
        """Whether every verdict passed."""
        return not self.failures

    @property
    def verdict(self) -> str:
        """``ok`` or the most severe failed verdict's kind."""
        return self.failures[0][0] if self.failures else "ok"

    def render_verdict(self) -> str:
        """The verdicts as text: one paragraph per failure."""
        if self.ok:
            return f"ok (run {self.status})"
        return "\n".join(f"{kind}: {detail}" for kind, detail in self.failures)


def run_example(
    config: ExampleConfig,
    workflow: Callable[..., Any],
    *,
    choices: ChoiceSource,
    world_factory: WorldFactory | None = None,
    property: Property | None = None,
    setup: Callable[[], Any] | None = None,
    determinism: bool = True,
    max_wall_seconds: float = 60.0,
    observe: Callable[[Sim], Any] | None = None,
    judge: bool = True,
    created: Callable[[Sim], object] | None = None,
) -> ExampleReport:
    """Run one example and judge it (see the module docstring).

    Args:
        config: the example's faults and external actions (``choices`` unused here).
        workflow: the workflow function named by ``config.workflow``.
        choices: the choice source (a recording one while exploring, a sequence when
            reproducing); ``determinism`` replays what it recorded.
        world_factory: builds the store (default: the in-memory World).
        property: the user's property over the outcome and the run's log.
        setup: called before the example (and before its determinism replay).
        determinism: replay the recorded choices and require the same trace.
        max_wall_seconds: the simulation's wall-time budget: code that never
            yields is interrupted when it runs out (verdict ``stuck``).
        observe: called with the simulation once the run is at rest (before
            judging); awaited if it returns an awaitable.
        judge: check invariants, replay and the property (without: only ``stuck``
            and ``error`` can fail the example).
        created: called with the simulation as soon as it is made (even one that
            then fails): ``reproduce`` keeps it to draw its timeline.
    """
    if setup is not None:
        setup()
    sim = _make_sim(config, choices, world_factory, max_wall_seconds)
    if created is not None:
        created(sim)
    failures: list[tuple[str, str]] = []
    outcome: RunOutcome | None = None
    agreed: list[list[Event]] = []
    checked: list[bool] = []  # _judge: whether the logs may be loaded as they are

    async def script(sim: Sim) -> RunOutcome:
        # An upgrade stays in force until the run is judged: on the code it ended on.
        with contextlib.ExitStack() as code:
            outcome = await _drive(sim, workflow, config, code)
            if observe is not None and inspect.isawaitable(seen := observe(sim)):
                await seen
            if judge and outcome.idle.stuck is None:  # a stuck run is judged by that alone
                failures.extend(
                    await _judge(
                        sim, outcome, property, agreed, checked, upgraded=bool(config.upgrade)
                    )
                )
            return outcome

    try:
        outcome = sim.run_sync(script)
    except (SimError, Exception) as exc:
        stuck = getattr(exc, "stuck", None) if isinstance(exc, BudgetExceeded) else None
        if isinstance(exc, QueueContractBroken):
            failures.insert(0, ("queue", f"({exc.check}) {exc}"))
        elif isinstance(stuck, StuckCode):
            failures.insert(0, ("stuck", _describe_stuck(str(exc), stuck)))
        else:
            failures.insert(0, ("error", _describe(exc)))
    else:
        if outcome.idle.stuck is not None:
            failures.insert(0, ("stuck", _describe_stuck(outcome.idle.reason, outcome.idle.stuck)))
    fresh: FreshReplay | None = None
    if config.fresh_process is not None and agreed and not failures:
        # Sent now, answered after the determinism replay: the replay server
        # works on another core meanwhile.
        fresh = replay_in_fresh_process(
            agreed, hash_seed=config.fresh_process, checked=all(checked)
        )
    faults = tuple(sim.faults_injected)
    for kind in faults:
        sometimes(f"fault: {kind}", True)
    if sim.takeovers:
        sometimes(LEASE_TAKEOVER, True)
    answers = getattr(choices, "answers", None)
    if answers is not None:
        config = attrs.evolve(config, choices=tuple(answers))
    trace, trace_hash = sim.trace_text, sim.trace_hash
    # A stuck example is not replayed: it would cost another wall budget, and
    # where the interrupt lands (hence the trace's last line) is wall-clock luck.
    unreplayable = any(k in ("error", "stuck", "queue") for k, _ in failures)
    if determinism and answers is not None and not unreplayable:
        if setup is not None:
            setup()
        again = _make_sim(config, SequenceChoices(answers), world_factory, max_wall_seconds)
        raised = ""
        try:
            again.run_sync(lambda s: _drive(s, workflow, config))
        except Exception as exc:
            raised = f"(the replay raised {_describe(exc)})"
        if not again.same_trace(sim):
            second = raised or again.trace_text
            failures.append(("determinism", _first_difference(trace, second)))
    if fresh is not None:
        failures += _fresh_failures(fresh)
    failures.sort(key=lambda failure: _SEVERITY.get(failure[0], len(_SEVERITY)))
    status = "error"
    if outcome is not None:
        status = outcome.status.value
        if outcome.idle.status != "idle":
            status = outcome.idle.status
    rejections = tuple(_rejections(trace))
    for name in rejections:
        sometimes(f"rejected: {name}", True)
    return ExampleReport(
        config=config,
        failures=tuple(failures),
        status=status,
        trace=trace,
        trace_hash=trace_hash,
        faults=faults,
        rejections=rejections,
        outcome=outcome,
    )


def _make_sim(
    config: ExampleConfig,
    choices: ChoiceSource,
    world_factory: WorldFactory | None,
    max_wall_seconds: float,
) -> Sim:
    return Sim(
        world_factory,
        choices=choices,
        faults=config.faults,
        fault_odds=config.fault_odds,
        max_faults=config.max_faults,
        lease_seconds=config.lease_seconds,
        renew_every=config.renew_every,
        max_wall_seconds=max_wall_seconds,
        queue=config.queue,
    )


async def _drive(
    sim: Sim,
    workflow: Callable[..., Any],
    config: ExampleConfig,
    code: contextlib.ExitStack | None = None,
) -> RunOutcome:
    return await drive(
        sim,
        workflow,
        *config.args,
        hooks=config.hooks,
        hook_points=config.hook_points,
        cancel_at=config.cancel_at,
        wake_up_at=config.wake_up_at,
        upgrade=resolve_ref(config.upgrade) if config.upgrade else None,
        upgrade_at=config.upgrade_at,
        code=code,
    )


_SEVERITY = {kind: rank for rank, kind in enumerate(VERDICT_KINDS)}


async def _judge(
    sim: Sim,
    outcome: RunOutcome,
    property: Property | None,
    agreed: list[list[Event]],
    trusted: list[bool],
    *,
    upgraded: bool = False,
) -> list[tuple[str, str]]:
    """The example's verdicts; ``agreed`` gets the logs whose cold replay agreed here."""
    failures: list[tuple[str, str]] = []
    store = sim.store
    report = await check_invariants(store)
    if not report.ok:
        failures.append(("invariants", report.render()))
    # The reference World's guards accepted every event of its logs, and the checker
    # re-derived them: the oracle may load them as they are (same verdict, no guards).
    checked = report.ok and type(store) is MemoryWorld
    trusted.append(checked)
    for events in await finished_logs(store):
        broken = _authoring_failure(events)
        if broken:
            failures.append(("authoring", broken))
        if upgraded and (diverged := _upgrade_failure(events)):
            failures.append(("upgrade", diverged))
        verdict = await verify_replay_log(events, checked=checked)
        if not verdict.ok:
            failures.append(("replay", verdict.render()))
        elif verdict.kind == "ok":
            agreed.append(events)
    if property is not None:
        log = tuple(await Run(run_id=outcome.run_id, world=store).events())
        try:
            held = property(outcome, log)
            if inspect.isawaitable(held):
                held = await held
        except Exception as exc:
            failures.append(("property", _describe(exc)))
        else:
            if not held and held is not None:
                failures.append(("property", f"the property returned {held!r}"))
    return failures


def _upgrade_failure(events: Sequence[Event]) -> str:
    """Why a run failed with CORRUPTED_EVENT_LOG after an upgrade ("" when it did not)."""
    end = next((e for e in events if e.type is EventType.RUN_FAILED), None)
    if end is None or end.data.get("error_code") != "CORRUPTED_EVENT_LOG":
        return ""
    try:
        error: object = deserialize(end.data["error"])
    except Exception:
        error = "(undecodable error)"
    return (
        f"run {end.run_id} failed with CORRUPTED_EVENT_LOG on the new code: {error}\n"
        "The new version does not replay what the old one recorded: keep the old behaviour "
        "behind `if patched(...)` with both branches (docs/versioning.md)."
    )


def _authoring_failure(events: Sequence[Event]) -> str:
    """Why the run's failure is a sandbox or authoring error ("" when it is not one)."""
    end = events[-1] if events else None
    if end is None or end.type is not EventType.RUN_FAILED:
        end = next((e for e in events if e.type is EventType.RUN_FAILED), None)
    if end is None or not isinstance(end.data.get("error"), bytes):
        return ""
    try:
        error: BaseException | None = deserialize(end.data["error"])
    except Exception:
        return ""
    while isinstance(error, BaseException):
        name = type(error).__name__
        if isinstance(error, RevivedError):
            name = error.type_name.rpartition(".")[2]
        if isinstance(error, AUTHORING_ERRORS) or name in _AUTHORING_NAMES:
            return (
                f"run {end.run_id} failed with {name}: {error}\n"
                "The workflow broke a rule of durasim (its sandbox, or how workflows and steps "
                "are defined and called), so the exploration did not explore what it would do: "
                "fix the workflow (see the message), then explore again."
            )
        error = error.__cause__ or error.__context__
    return ""


def _fresh_failures(fresh: FreshReplay) -> list[tuple[str, str]]:
    failures = []
    try:
        verdicts = fresh.verdicts()
    except FreshProcessUnavailable:
        raise  # not the example's fault: explore() stops and says how to fix it
    except (RuntimeError, TimeoutError) as exc:
        # The replaying process died or hung: in a fresh process, this run's replay
        # does not even end (the workflow exits the process, or loops).
        return [("fresh-process", f"the cold replay in a fresh process did not answer: {exc}")]
    for verdict in verdicts:
        if not verdict.ok:
            failures.append(
                (
                    "fresh-process",
                    f"{verdict.render()}\n"
                    "The same log replays to the same end in this process, but not in a fresh "
                    f"one ({describe_fresh_process(fresh.hash_seed)}): the workflow depends on "
                    "something tied to the process, such as the iteration order of a set (the "
                    "hash seed), os.environ, the wall clock (datetime.now()) or a module "
                    "global that an earlier run filled (a memo, a counter).  In production "
                    "this fails the run with CORRUPTED_EVENT_LOG after a worker restart.",
                )
            )
    return failures


def _describe(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return "".join(lines).strip() + where


def _first_difference(first: str, second: str) -> str:
    a, b = first.splitlines(), second.splitlines()
    for number, (x, y) in enumerate(zip(a, b, strict=False), 1):
        if x != y:
            return f"the traces part at line {number}:\n  first:  {x}\n  replay: {y}"
    number = min(len(a), len(b)) + 1
    return f"the traces part at line {number}: one ends, the other goes on"


_REJECTED = re.compile(r"^!!.*? [a-z_]+\.[a-z_]+(?: \([^)]*\))? (\w+): ")

#: What ``str.splitlines`` ends a line at.
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_END = re.compile(f"[{_BREAKS}]")
#: ``_REJECTED`` without its ``^``: matched at a line's start inside the trace.
_REJECTED_AT = re.compile(_REJECTED.pattern.removeprefix("^"))


def _rejections(trace: str) -> list[str]:
    """The error type of every line that starts with ``!!`` (a refused World call).

    Found without splitting the trace into lines: only where ``!!`` occurs is a
    line looked at (it starts at the text's start or after a break, and ends
    before the next break, as ``str.splitlines`` has it).
    """
    found = []
    at = trace.find("!!")
    while at >= 0:
        if at and trace[at - 1] not in _BREAKS:
            at = trace.find("!!", at + 1)
            continue
        end = _LINE_END.search(trace, at)
        stop = end.start() if end is not None else len(trace)
        match = _REJECTED_AT.match(trace, at, stop)
        found.append(match.group(1) if match else "?")
        at = trace.find("!!", stop)
    return found


def _describe_stuck(reason: str | None, stuck: StuckCode) -> str:
    stack = "".join(f"\n  in {frame}" for frame in stuck.stack)
    return f"{reason or stuck}{stack}"
