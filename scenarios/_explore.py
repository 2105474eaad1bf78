"""explore(): Hypothesis searches schedules and faults, shrinks a failure, prints a seed.

Each example draws, from Hypothesis data: the fault kinds it enables (a swarm
subset of ``faults``, plus the kind of each fault it plans), the interception
points of the external actions (hook payloads, a cancel), and then, lazily,
every answer the simulator asks for (which task runs, whether a fault fires
here and which).  Every draw shrinks
toward 0, and 0 always means the plain thing (the oldest task, no fault, the
hook sent once the run waits, no cancel), so Hypothesis shrinks a failure to
the fewest fault kinds, the fewest faults and the shortest choice sequence.
The example then runs (see ``_example.py``) and is judged; the first failure
is shrunk, replayed from its recorded answers, and returned with its seed,
its script and its trace.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from durasim.checkers import (
    FreshProcessUnavailable,
    child_hash_seed,
    finished_logs,
    replay_in_fresh_process,
    start_replay_server,
)
from durasim.runtime import LeasePolicy
from durasim.runtime.lowlevel import DEFAULT_LEASE_SECONDS
from durasim.sim import FAULT_KINDS, QUEUE_MODES, FifoChoices, Sim
from durasim.worlds import Event, WorldFactory, check_factory

from ._example import ExampleReport, Property, run_example
from ._results import ExploreFailure, ExploreResult, ExploreStats
from ._schedulers import PCTScheduler, RandomScheduler, RecordingSource, Scheduling
from ._script import render_script
from ._seeds import ExampleConfig, object_ref
from ._sometimes import Reachability, pop, push

__all__ = ["explore", "explores"]

log = logging.getLogger("durasim.explore")


class _Found(Exception):
    def __init__(self, report: ExampleReport) -> None:
        super().__init__(report.render_verdict())
        self.report = report


class _BudgetSpent(KeyboardInterrupt):
    """A control-flow signal: ``max_seconds`` is spent; raised as the next example starts.

    A ``KeyboardInterrupt``: the one exception Hypothesis passes on without
    recording the example (any other, raised before a draw, breaks its record of
    the choices made: "inconsistent data generation").
    """


class _FoundStuck(BaseException):
    """A control-flow signal: a stuck example ends the exploration at once.

    A ``BaseException`` because Hypothesis does not catch those (it would shrink an
    ``Exception``, running the stuck example again).
    """

    def __init__(self, report: ExampleReport) -> None:
        super().__init__(report.render_verdict())
        self.report = report


def _resolve_scheduler(scheduler: str | Scheduling) -> Scheduling:
    if isinstance(scheduler, str):
        if scheduler == "random":
            return RandomScheduler()
        if scheduler == "pct":
            return PCTScheduler()
        raise ValueError(f"unknown scheduler {scheduler!r}: use 'random', 'pct' or a Scheduling")
    return scheduler


def swarm_subset(faults: Sequence[str], mask: int) -> tuple[str, ...]:
    """The fault kinds an example enables: ``faults[i]`` where bit ``i`` of ``mask`` is set.

    Over ``range(2 ** len(faults))`` every subset once (a coin per kind, in one draw);
    0 enables none, the shrink target.
    """
    return tuple(kind for i, kind in enumerate(faults) if mask >> i & 1)


def probe(
    workflow: Callable[..., Any],
    config: ExampleConfig,
    world_factory: WorldFactory | None,
    setup: Callable[[], Any] | None,
    max_wall_seconds: float,
) -> tuple[int, int, ExampleReport, list[list[Event]]]:
    """One plain run (FIFO, no faults): its interception points, schedule choices,
    report and finished logs.

    The report is the exploration's failure when the plain run is stuck (code
    that never yields): every example would be, each costing a wall budget.
    The probe runs the workflow in this process before any example: whatever it
    leaves in module globals, the examples see (``setup`` runs before it and
    before each example to reset such state; the fresh-process replay sees none
    of it either way).
    """
    config = attrs.evolve(
        config,
        choices=(),
        faults=(),
        hook_points=tuple(0 for _ in config.hooks),
        cancel_at=0,
        wake_up_at=(),
        fresh_process=None,
    )
    points = [0]
    steps = [0]
    logs: list[list[Event]] = []

    async def count(sim: Sim) -> None:
        for handle in (sim.orchestrator(), sim.any_step()):
            points.extend(p.ordinal for p in handle.history())
        steps[0] = len(sim.choices_made)
        logs.extend(await finished_logs(sim.store))

    report = run_example(
        config,
        workflow,
        choices=FifoChoices(),
        world_factory=world_factory,
        setup=setup,
        determinism=False,
        max_wall_seconds=max_wall_seconds,
        observe=count,
        judge=False,  # the examples judge; this run only measures (and may be stuck)
    )
    return max(points), steps[0], report, logs


def _check_fresh_process(workflow: Callable[..., Any], hash_seed: int) -> None:
    """Fail at once, naming the fix, when the replay server will not be able to import it."""
    qualname = str(getattr(workflow, "__qualname__", ""))
    if "<locals>" in qualname:
        raise FreshProcessUnavailable(
            f"explore({qualname}): the workflow is defined inside a function, so the "
            "fresh-process replay (on by default) cannot import it in another process: "
            "move it to module level of a module, or pass fresh_process=False",
            workflow=qualname,
        )
    start_replay_server(hash_seed)


def explore(
    workflow: Callable[..., Any],
    *args: Any,
    world_factory: WorldFactory | None = None,
    faults: Sequence[str] = FAULT_KINDS,
    max_examples: int = 100,
    max_seconds: float | None = None,
    property: Property | None = None,
    seed: int | None = None,
    scheduler: str | Scheduling = "random",
    swarm: bool = True,
    fault_odds: int = 20,
    max_faults: int = 3,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    renew_every: float | None = None,
    hooks: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
    cancel: bool = False,
    wake_up: bool = False,
    require: Sequence[str] = (),
    setup: Callable[[], Any] | None = None,
    determinism_every: int = 1,
    shrink: bool = True,
    progress: Callable[[ExploreStats], None] | None = None,
    progress_every: int = 100,
    max_wall_seconds: float = 60.0,
    max_draws: int = 2000,
    batch_examples: int = 1000,
    fresh_process: bool = True,
    queue: str = "sim",
    upgrade: Callable[..., Any] | None = None,
) -> ExploreResult:
    """Search schedules and faults of ``workflow(*args)``; shrink and report the first failure.

    Args:
        workflow: a ``@workflow`` function (importable by ``module:qualname`` for
            ``durasim reproduce``); ``args`` its arguments (serializable).
        world_factory: builds each example's World, ``make(setup: WorldSetup)
            -> World``, on the sim's clock and ids in a fresh scratch directory
            (default: a fresh in-memory World).  Importable by
            ``module:qualname``, ``durasim reproduce`` rebuilds it.
        faults: fault kinds to explore (``durasim.sim.FAULT_KINDS``; ``()``: none).
        max_examples: examples to generate (shrinking runs come on top).
        max_seconds: stop starting examples after this long (a failure found by
            then is still shrunk); ``stats.budget_spent`` says it ended the search.
        property: ``property(outcome, log)`` over the run's outcome and its log;
            falsy or raising fails the example.
        seed: makes the search reproducible (same seed, same examples).
        scheduler: ``"random"`` (uniform), ``"pct"`` (PCT, depth 2), or a
            :class:`Scheduling` such as ``PCTScheduler(depth=3)``.
        swarm: each example enables a random subset of ``faults`` (swarm
            testing), plus the kinds of the faults it plans; without, every
            example enables them all.
        fault_odds: the width of the sim's fault question (``choose(fault_odds)``, last
            value = fault); where faults land is planned per example (up to
            ``max_faults`` (question, kind) pairs, each one list element).
        max_faults: at most this many faults per example.
        lease_seconds: how long a delivery's lease lasts without renewal (a
            ``Worker``'s default, 5 s): a crashed delivery's message, or one whose
            heartbeat stalled or whose renewals failed, is claimable again this
            long after its last renewal.
        renew_every: how often leases are renewed (default: as a ``Worker``);
            both are validated as a worker's options are (``LeasePolicy``).
        hooks: ``{token: payload}``: each example sends each payload at a drawn
            interception point (or once the run waits for it).
        cancel: an example may (one in four) cancel the run at a drawn point.
        wake_up: an example may (one in two) call ``Run.wake_up()`` at one or two
            drawn points, completing the run's open sleeps early while deliveries
            may be completing them too.
        require: ``sometimes()`` names that must hold in at least one example.
        setup: called before the probe run, before each example and before its
            determinism replay: reset the module state the workflow or the property
            keeps (counters, memos), so no example sees what an earlier one left.
        determinism_every: replay every n-th example's recorded choices and
            require the same trace (1: every example; 0: never).
        shrink: shrink the first failure (default) or report it as found.
        progress: called with the stats every ``progress_every`` examples and at the end.
        progress_every: see ``progress``.
        max_wall_seconds: wall-time budget of one example's simulation.
        fresh_process: replay every example's finished runs with the cold-replay
            oracle in a fresh process too (another ``PYTHONHASHSEED``, environment,
            ``TZ`` and wall clock, freshly imported modules), where a workflow
            that reads a set's order, ``os.environ``, ``datetime.now()`` or module
            state is caught; the workflow must be importable by module name.
        max_draws: draws per example; later choices answer 0 (FIFO, no fault).
        batch_examples: examples per Hypothesis run (memory stays flat across runs).
        queue: ``"sim"`` (the simulator's queue) or ``"world"``: the runtime drives
            the World's own queue and every answer is checked against what it was
            asked (verdict ``queue`` when it breaks its contract; the seed keeps
            the mode for ``durasim reproduce``).
        upgrade: the workflow's next version (a ``@workflow`` or ``async def``
            importable by ``module:qualname``): each example changes the code to
            it at a drawn interception point ("the code changes here"), so runs
            started on ``workflow`` finish on ``upgrade`` under every schedule,
            and each is judged on the code it ended on: a patch that forgets a
            branch is found with a seed (docs/versioning.md).  The fresh-process
            replay is off then (a fresh process imports the old code).

    Returns:
        An :class:`ExploreResult` (``.ok``, ``.failure``, ``.stats``).
    """
    if world_factory is not None:
        check_factory(world_factory)
    if upgrade is not None:
        fresh_process = False  # a fresh process would judge the log on the old code
        upgrade_ref = object_ref(upgrade)
        if not upgrade_ref:
            raise ValueError(
                f"upgrade={upgrade!r} must be importable by module:qualname (a module-level "
                "function), so a seed can name it"
            )
    else:
        upgrade_ref = ""
    chosen = _resolve_scheduler(scheduler)
    LeasePolicy.of(lease_seconds, renew_every)  # refuse bad lease options before any example
    hook_pairs = tuple(hooks.items() if isinstance(hooks, Mapping) else hooks)
    faults = tuple(faults)
    args = tuple(args)
    refs = {
        "workflow": object_ref(workflow),
        "property": object_ref(property) if property is not None else "",
        "setup": object_ref(setup) if setup is not None else "",
        "world": object_ref(world_factory) if world_factory is not None else "",
    }
    if queue not in QUEUE_MODES:
        raise ValueError(f"queue={queue!r}: pass 'sim' or 'world'")
    plain = ExampleConfig(
        workflow=refs["workflow"],
        queue=queue,
        args=args,
        lease_seconds=lease_seconds,
        renew_every=renew_every,
        hooks=hook_pairs,
        hook_points=tuple(0 for _ in hook_pairs),
        property=refs["property"],
        setup=refs["setup"],
        world=refs["world"],
    )
    fresh_seed = child_hash_seed() if fresh_process else None
    if fresh_seed is not None:
        _check_fresh_process(workflow, fresh_seed)
    points, steps, probed, probe_logs = probe(
        workflow, plain, world_factory, setup, max_wall_seconds
    )
    if fresh_seed is not None:
        # Raises FreshProcessUnavailable before any example when a module cannot be
        # imported there; anything else it finds is the examples' to report (with a seed).
        try:
            replay_in_fresh_process(probe_logs, hash_seed=fresh_seed).verdicts()
        except FreshProcessUnavailable:
            raise
        except (RuntimeError, TimeoutError):
            pass  # the replaying process died or hung: the examples say so
    own_hash_seed = os.environ.get("PYTHONHASHSEED", "")
    stats = ExploreStats()
    reach = Reachability()
    found: list[ExampleReport] = []
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds

    def one(data: st.DataObject) -> None:
        if deadline is not None and not found and time.monotonic() >= deadline:
            stats.budget_spent = True
            raise _BudgetSpent  # before any draw: Hypothesis records nothing of it
        conjecture = data.conjecture_data
        drawn = [0]
        stopped: list[BaseException] = []

        def draw(n: int) -> int:
            # Past the cap every answer is 0 (FIFO, no fault) without drawing.
            if n <= 1 or drawn[0] >= max_draws or stopped:
                return 0
            drawn[0] += 1
            try:
                return int(conjecture.draw_integer(0, n - 1))
            except BaseException as exc:
                # Hypothesis ends this example (its data ran out while shrinking):
                # let the simulation finish cleanly, then pass the signal on.
                stopped.append(exc)
                return 0

        if swarm and faults:
            # The swarm subset in one draw: bit i enables faults[i] (the subsets of a
            # coin per kind, each bit about as likely; 0, none, is where it shrinks).
            # A coin per kind cost Hypothesis ~1M instructions an example: it walks
            # its tree of choices seen one node per draw to find the next new prefix,
            # and nine coins at the root made that walk nine nodes deep.
            enabled = swarm_subset(faults, int(conjecture.draw_integer(0, (1 << len(faults)) - 1)))
        else:
            enabled = faults
        hook_points = tuple(draw(points + 1) for _ in hook_pairs)
        cancel_at = 1 + draw(points) if cancel and conjecture.draw_boolean(0.25) else 0
        wake_up_at: tuple[int, ...] = ()
        if wake_up and conjecture.draw_boolean(0.5):
            wake_up_at = tuple(sorted(1 + draw(points) for _ in range(1 + draw(2))))
        upgrade_at = draw(points + 1) if upgrade is not None else 0
        plan: dict[int, str] = {}
        while faults and len(plan) < max_faults and conjecture.draw_boolean(0.5):
            at = 1 + draw(max(1, points))
            # A planned fault's kind is drawn from every kind and enabled with it:
            # a kind no fault uses can then be disabled, and a fault's kind changed
            # (toward the first, a crash), each in one step of the shrinker.
            plan.setdefault(at, faults[draw(len(faults))])
        enabled = tuple(k for k in faults if k in enabled or k in plan.values())
        config = ExampleConfig(
            workflow=refs["workflow"],
            queue=queue,
            args=args,
            faults=enabled,
            fault_odds=fault_odds,
            max_faults=max_faults if enabled else 0,
            lease_seconds=lease_seconds,
            renew_every=renew_every,
            hooks=hook_pairs,
            hook_points=hook_points,
            cancel_at=cancel_at,
            wake_up_at=wake_up_at,
            upgrade=upgrade_ref,
            upgrade_at=upgrade_at,
            fresh_process=fresh_seed,
            hash_seed=own_hash_seed if own_hash_seed.isdigit() else "",
            property=refs["property"],
            setup=refs["setup"],
            world=refs["world"],
        )
        source = RecordingSource(draw, chosen.policy(draw, steps=steps), plan)
        check = determinism_every > 0 and (stats.examples + 1) % determinism_every == 0
        held = dict(reach.held)
        report = run_example(
            config,
            workflow,
            choices=source,
            world_factory=world_factory,
            property=property,
            setup=setup,
            determinism=check or bool(found),
            max_wall_seconds=max_wall_seconds,
        )
        if stopped:
            raise stopped[0]
        stats.examples += 1
        for name, count in reach.held.items():
            if count > held.get(name, 0) and name not in stats.witnesses:
                stats.witnesses[name] = report.config.to_seed()
        stats.faults.update(report.faults)
        stats.traces.add(report.trace_hash)
        stats.verdicts[report.verdict] += 1
        stats.statuses[report.status] += 1
        if progress is not None and stats.examples % max(1, progress_every) == 0:
            stats.seconds = time.monotonic() - started
            progress(stats)
        if not report.ok:
            found.append(report)
            log.debug("example %d failed: %s", stats.examples, report.verdict)
            if report.verdict == "stuck":
                raise _FoundStuck(report)  # not shrunk: each try could cost a wall budget
            raise _Found(report)

    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    failure: ExploreFailure | None = None
    if probed.verdict == "stuck":
        # The plain run never yields: so would every example (each costing a
        # wall budget). The plain run is the failing example.
        stats.examples += 1
        stats.verdicts[probed.verdict] += 1
        stats.statuses[probed.status] += 1
        stats.traces.add(probed.trace_hash)
        failure = _failure(probed, workflow)
    push(reach)
    try:
        # Hypothesis keeps per-run state that grows with every example (its
        # tree of choices seen): a long exploration is run as a series of
        # Hypothesis runs of at most ``batch_examples`` each, so memory stays
        # flat; batch b of a seeded exploration uses seed + b * 1_000_003.
        batch = 0
        remaining = max_examples
        while remaining > 0 and failure is None and not stats.budget_spent:
            size = min(remaining, max(1, batch_examples))
            test = settings(
                max_examples=size,
                deadline=None,
                database=None,
                derandomize=False,
                phases=phases,
                verbosity=Verbosity.quiet,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                print_blob=False,
            )(given(st.data())(one))
            if seed is not None:
                test = hypothesis_seed(seed + batch * 1_000_003)(test)
            before = stats.examples
            try:
                test()
            except _BudgetSpent:
                break
            except (_Found, _FoundStuck) as exc:
                failure = _failure(exc.report, workflow)
            except Flaky as exc:
                last = found[-1] if found else None
                if last is None:
                    raise
                detail = f"the failure did not happen again when replayed: {exc}"
                failure = _failure(
                    attrs.evolve(last, failures=(("determinism", detail), *last.failures)),
                    workflow,
                )
            if stats.examples - before < size:
                break  # Hypothesis ran out of distinct examples: more batches repeat them
            remaining -= size
            batch += 1
    finally:
        pop(reach)
        stats.seconds = time.monotonic() - started
    stats.reached = reach.reached()
    stats.unreached = reach.unreached(tuple(require))
    unreached = tuple(n for n in require if n in stats.unreached)
    if progress is not None:
        progress(stats)
    result = ExploreResult(
        ok=failure is None and not unreached, failure=failure, stats=stats, unreached=unreached
    )
    log.info("%s", result.stats.render())
    return result


def _failure(report: ExampleReport, workflow: Callable[..., Any]) -> ExploreFailure:
    seed = report.config.to_seed()
    verdict = ",".join(dict.fromkeys(kind for kind, _ in report.failures))
    label = getattr(workflow, "__qualname__", "<the workflow>")
    return ExploreFailure(
        verdict=verdict,
        detail=report.render_verdict(),
        seed=seed,
        script=render_script(report.config, verdict=verdict, seed=seed, workflow_label=label),
        trace=report.trace,
        faults=report.faults,
        choices=report.config.choices,
        report=report,
    )


def explores(
    workflow: Callable[..., Any],
    *args: Any,
    shards: int = 1,
    **options: Any,
) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Decorator: the test explores ``workflow(*args)`` and fails with the printed failure.

    The decorated function receives the :class:`ExploreResult` when it takes a
    parameter named ``result`` (to assert on stats); otherwise its body is
    ignored.  With ``shards > 1`` the test is parametrized (``shard``): each
    shard explores ``max_examples // shards`` examples from seed ``seed +
    shard`` (``seed`` defaults to 0), so pytest-xdist spreads them over workers
    and every shard stays reproducible.

    Args:
        workflow: as for :func:`explore`; ``args`` its arguments.
        shards: how many parametrized test cases to split the examples into.
        options: keyword arguments of :func:`explore`.
    """

    def decorate(test: Callable[..., Any]) -> Callable[..., None]:
        import inspect  # noqa: PLC0415 -- only decorators need it

        wants_result = "result" in inspect.signature(test).parameters

        def run(shard: int) -> None:
            local = dict(options)
            if shards > 1:
                local["seed"] = int(local.get("seed") or 0) + shard
                local["max_examples"] = max(1, int(local.get("max_examples", 100)) // shards)
            result = explore(workflow, *args, **local)
            result.raise_for_failure()
            if wants_result:
                test(result=result)

        if shards <= 1:

            @functools.wraps(test)
            def single() -> None:
                run(0)

            # pytest must not see the decorated function's ``result`` parameter.
            setattr(single, "__signature__", inspect.Signature())  # noqa: B010
            return single

        import pytest  # noqa: PLC0415 -- pytest only where the sharded form is used

        @functools.wraps(test)
        def sharded(shard: int) -> None:
            run(shard)

        shard = inspect.Parameter("shard", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        setattr(sharded, "__signature__", inspect.Signature([shard]))  # noqa: B010
        marked: Callable[..., None] = pytest.mark.parametrize("shard", range(shards))(sharded)
        return marked

    return decorate
