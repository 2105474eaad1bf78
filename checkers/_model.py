"""The World model machine: a World under test driven side by side with the reference.

:class:`WorldModel` is a Hypothesis ``RuleBasedStateMachine``.  Each rule applies
one operation to the World under test (the *subject*, built by a factory) and to
the reference :class:`~durasim.worlds.MemoryWorld`, on one shared virtual clock,
and asserts both answer alike: equal results, or errors of the same type with
the same structured facts (never compared by message).  After every rule an
invariant compares everything observable (every run's log and entities, hook
tokens, the run listing, streams, the queue) and runs ``check_invariants`` on
the subject.  docs/checkers.md, "World model", is the user's guide.

Races are checked by linearizing them: several writers call the subject
concurrently, and the reference replays the same calls one at a time in the
order the subject committed them; any answer the reference would not give is a
bug (two in-band writers holding one count both accepted, a lost refusal ...).

:mod:`._model_run` runs it against a factory, with or without pytest; the queue
and stream rules are in :mod:`._model_queue`, the race in :mod:`._model_race`.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from durasim.worlds import (
    CountingIds,
    Delivery,
    EntityConflict,
    EventRequest,
    EventResult,
    FixedClock,
    InvalidRequest,
    MemoryWorld,
    RunExpired,
    RunPage,
    RunStatus,
    StaleView,
    TooEarly,
    World,
    WorldError,
    WorldSetup,
)

from . import _model_ops as ops
from ._diff import render_difference
from ._invariants import check_invariants
from ._model_ops import recorded
from ._model_queue import _QueueRules
from ._model_race import _RaceRules

__all__ = ["REFUSAL_NEEDS", "WorldModel"]

_T = TypeVar("_T")

#: The capability a World must declare to be asked for each refusal of the reference.
#: A call the reference refuses this way is not sent to a World lacking it (a
#: lenient World is not wrong to accept it); refusals write nothing, so the two
#: Worlds stay alike.
REFUSAL_NEEDS: dict[type[WorldError], str] = {
    InvalidRequest: "input_validation",
    EntityConflict: "strict_lifecycles",
    RunExpired: "strict_lifecycles",
    TooEarly: "strict_lifecycles",
    StaleView: "conditional_writes",
}

#: Rules that send ``max_deliveries`` to the World expect this value.
_MAX_DELIVERIES = 2


def _create(
    run_id: str | None, request: EventRequest, **options: Any
) -> Callable[[World], Awaitable[EventResult]]:
    """A call of ``events.create`` to apply to either World."""

    def create(world: World) -> Awaitable[EventResult]:
        return world.events.create(run_id, request, **options)

    return create


class WorldModel(_RaceRules, _QueueRules, RuleBasedStateMachine):
    """Drive a World under test and the reference MemoryWorld with the same operations.

    Subclass it and define :meth:`make_world`, or let :func:`world_model_for` or
    :func:`run_world_model` do it.  Rules cover runs, events of every type,
    in-band fencing with fresh, stale and missing counts, bump-and-report
    ``seen_seq``, batches, hooks across runs (token conflicts, resume dedup),
    waits, concurrent writers, queue claims and lease expiry, streams, malformed
    input, and (for a World that declares ``durable``) restarts.  Features the
    World does not declare in its capabilities are not exercised.
    """

    def make_world(self, setup: WorldSetup) -> World:
        """Build the World under test (called again with the same setup to restart it)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no World under test: define make_world(setup), "
            "or use world_model_for(factory) / run_world_model(factory)"
        )

    #: Set by :func:`~durasim.checkers.run_world_model`: counts examples, ends
    #: the search when its time budget is spent, keeps the last machine.
    tracker: Any = None

    def __init__(self) -> None:
        tracker = type(self).tracker
        if tracker is not None:
            tracker.starting(self)  # may end the search: raised before anything is built
        super().__init__()
        #: The rules run so far, with their arguments (see :func:`recorded`).
        self.history: list[tuple[str, dict[str, Any]]] = []
        self.clock = FixedClock()
        self.loop = asyncio.new_event_loop()
        self.directory = Path(tempfile.mkdtemp(prefix="durasim-model-"))
        self.reference = MemoryWorld(
            clock=self.clock, ids=CountingIds(), max_deliveries=_MAX_DELIVERIES
        )
        self.setup = WorldSetup(
            clock=self.clock,
            ids=CountingIds(),
            max_deliveries=_MAX_DELIVERIES,
            directory=self.directory,
        )
        try:
            self.subject = self.make_world(self.setup)
        except BaseException:
            if tracker is not None:
                tracker.failed = True
            self._release()
            raise
        self.name = type(self.subject).__name__
        self.caps = self.subject.capabilities
        self.deliveries: list[Delivery] = []
        #: Whether a World was called since the last comparison of everything.
        self.dirty = True

    def _release(self) -> None:
        self.loop.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def teardown(self) -> None:
        """Close both Worlds, remove the scratch directory."""
        tracker = type(self).tracker
        if tracker is not None:
            # Called from Hypothesis's ``finally``: an exception on its way out
            # is visible here, and means the example failed.
            tracker.ended(self, error=sys.exc_info()[1])
        try:
            for world in (self.reference, self.subject):
                self._run(world.close())
        finally:
            self._release()

    # -- comparing answers -------------------------------------------------------------

    def _run(self, call: Awaitable[_T]) -> _T:
        async def wrap() -> _T:
            return await call

        return self.loop.run_until_complete(wrap())

    def both(self, call: Callable[[World], Awaitable[Any]], what: str) -> Any:
        """Apply ``call`` to both Worlds, assert identical answers, return the reference's.

        Returns ``None`` when both refused.
        """
        self.dirty = True
        expected = self._run(ops.outcome(call(self.reference)))
        if expected[0] == "error" and not self.promises(expected[1]):
            return None  # a refusal the subject does not promise: it is not asked
        actual = self._run(ops.outcome(call(self.subject)))
        if actual != expected:
            self.differs(what, expected, actual)
        return expected[1] if expected[0] == "ok" else None

    def promises(self, error: type[BaseException]) -> bool:
        """Whether the subject declares the capability behind refusals of type ``error``."""
        needs = REFUSAL_NEEDS.get(error) if issubclass(error, WorldError) else None
        return needs is None or bool(getattr(self.caps, needs, True))

    def differs(self, what: str, expected: Any, actual: Any) -> NoReturn:
        """Fail the example: the subject answered ``actual`` where the reference ``expected``.

        The message names the fields that differ, not the whole answers.  Raised
        explicitly, not by ``assert``: the check must hold under ``python -O``.
        """
        detail = render_difference(expected, actual, right=self.name)
        raise AssertionError(f"{self.name} differs from the reference on {what}:\n{detail}")

    @initialize(start_rb=st.booleans(), swarm=ops.switched_off)
    @recorded
    def seed_runs(self, start_rb: bool, swarm: frozenset[str] = frozenset()) -> None:
        """Runs ``ra`` (running) and ``rb`` (pending or running).

        ``swarm`` is the set of write kinds this example leaves out (drawn here,
        first, so that it stays put while Hypothesis shrinks the later rules).
        """
        created = EventRequest.of("run_created", workflow_name="wf", input=b"in")
        for run_id in ("ra", "rb"):
            self.both(_create(run_id, created), f"seed: create {run_id}")
        for run_id in ("ra", "rb") if start_rb else ("ra",):
            self.both(_create(run_id, EventRequest.of("run_started")), f"seed: start {run_id}")

    # -- the log -----------------------------------------------------------------------

    def declares(self, spec: ops.Spec) -> bool:
        """Whether the subject declares the feature a request needs (``attr_set``)."""
        return spec[0] != "attr_set" or self.caps.attr_set

    def _request(self, spec: ops.Spec) -> EventRequest:
        type_, cid, data = spec
        now = self.clock.now()
        data = {k: now + v if isinstance(v, timedelta) else v for k, v in data.items()}
        if not self.caps.hook_resume_dedup:
            data.pop("resume_id", None)
        return EventRequest.of(type_, cid, **data)

    def _count(self, run_id: str, fence: str) -> int:
        """The in-band count a ``fresh`` or ``stale`` writer holds."""
        page = self.both(lambda w: w.events.list(run_id, limit=1), f"snapshot of {run_id}")
        current: int = page.snapshot.seq_in_band if page is not None else 0
        if fence == "stale":
            current = current - 1 if current > 0 else current + 1
        return current

    def _fence(self, run_id: str, fence: str) -> dict[str, Any]:
        if fence == "out" or not self.caps.in_band_fence:
            return {}
        if fence == "missing":
            return {"in_band": True}
        return {"in_band": True, "expected_seq_in_band": self._count(run_id, fence)}

    @rule(
        run_id=st.sampled_from([None, "ra", "rb"]),
        name=st.sampled_from(["wf", "other"]),
        attributes=st.sampled_from([None, {"a": "1"}]),
    )
    @recorded
    def create_run(self, run_id: str | None, name: str, attributes: dict[str, str] | None) -> None:
        """``run_created`` with a given id (often taken) or a minted one."""
        request = EventRequest.of(
            "run_created", workflow_name=name, input=b"in", attributes=attributes
        )
        self.both(lambda w: w.events.create(run_id, request), "run_created")

    def _write(self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None) -> None:
        if not self.declares(spec):
            return
        request = self._request(spec)
        kwargs = self._fence(run_id, fence)
        self.both(
            lambda w: w.events.create(run_id, request, seen_seq=seen_seq, **kwargs),
            f"events.create({run_id!r}, {spec}, seen_seq={seen_seq}, {kwargs})",
        )

    # One rule per entity family (steps twice): rules are drawn uniformly, and
    # deep lifecycles need many writes to the same few entities.

    @rule(run_id=ops.targets, spec=ops.run_requests, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_run(self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None) -> None:
        """A run event."""
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=ops.targets, spec=ops.step_requests, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_step(self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None) -> None:
        """A step event."""
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=ops.targets, spec=ops.step_requests, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_step_again(
        self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None
    ) -> None:
        """A step event (twice as likely: steps have the longest lifecycle)."""
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=ops.targets, spec=ops.hook_requests, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_hook(self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None) -> None:
        """A hook event."""
        self._write(run_id, spec, fence, seen_seq)

    @rule(run_id=ops.targets, spec=ops.wait_requests, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_wait(self, run_id: str, spec: ops.Spec, fence: str, seen_seq: int | None) -> None:
        """A wait event."""
        self._write(run_id, spec, fence, seen_seq)

    # Lifecycle drivers: the next legal event for one entity, read from the
    # reference (the random rules above reach deep states only rarely).

    @rule(
        run_id=ops.targets,
        step=st.sampled_from(ops.STEPS),
        outcome=st.sampled_from(["step_completed", "step_failed", "step_retrying"]),
        fence=st.sampled_from(["out", "out", "fresh", "stale"]),
        hops=st.integers(1, 3),
    )
    @recorded
    def drive_step(self, *, run_id: str, step: str, outcome: str, fence: str, hops: int) -> None:
        """Move one step along its lifecycle by up to ``hops`` events."""
        for _ in range(hops):
            current = self.both(lambda w: w.steps.get(run_id, step), "steps.get")
            spec: ops.Spec
            if current is None:
                spec = ("step_created", step, {"step_name": "st", "input": b"i"})
            elif current.status.value == "pending":
                spec = ("step_started", step, {})
            elif outcome == "step_completed":
                spec = (outcome, step, {"result": b"r"})
            elif outcome == "step_retrying":
                spec = (outcome, step, {"error": b"e", "retry_after": timedelta(seconds=5)})
            else:
                spec = (outcome, step, {"error": b"e"})
            self._write(run_id, spec, fence, None)

    @rule(
        run_id=ops.targets,
        hook=st.sampled_from(ops.HOOKS),
        token=st.sampled_from(ops.TOKENS),
        resume_id=st.sampled_from([None, "x1", "x2"]),
        dispose=st.sampled_from([False, False, True]),
        hops=st.integers(1, 3),
    )
    @recorded
    def drive_hook(
        self,
        *,
        run_id: str,
        hook: str,
        token: str,
        resume_id: str | None,
        dispose: bool,
        hops: int,
    ) -> None:
        """Create a hook (tokens are shared across runs), resume it, maybe dispose it."""
        for hop in range(hops):
            current = self.both(lambda w: w.hooks.get(run_id, hook), "hooks.get")
            spec: ops.Spec
            if current is None:
                spec = ("hook_created", hook, {"token": token})
            elif dispose and hop == hops - 1:
                spec = ("hook_disposed", hook, {})
            else:
                data: dict[str, Any] = {"payload": b"p"}
                if resume_id:
                    data["resume_id"] = resume_id
                spec = ("hook_received", hook, data)
            self._write(run_id, spec, "out", None)

    @rule(
        first=st.sampled_from(["ra", "rb"]),
        second=st.sampled_from(["ra", "rb", "wrun_000001"]),
        token=st.sampled_from(ops.TOKENS),
        hook=st.sampled_from(ops.HOOKS),
        between=st.sampled_from(["nothing", "nothing", "nothing", "dispose", "resume"]),
    )
    @recorded
    def contend_for_token(
        self, *, first: str, second: str, token: str, hook: str, between: str
    ) -> None:
        """Two hooks ask for one token (in two runs, or two hooks of one run).

        The second create is journaled as ``hook_conflict`` while the first
        holds the token, and takes it once the first is disposed.
        """
        other = ops.HOOKS[1 - ops.HOOKS.index(hook)] if second == first else hook
        self._write(first, ("hook_created", hook, {"token": token}), "out", None)
        if between == "dispose":
            self._write(first, ("hook_disposed", hook, {}), "out", None)
        elif between == "resume":
            self._write(first, ("hook_received", hook, {"payload": b"p"}), "out", None)
        self._write(second, ("hook_created", other, {"token": token}), "out", None)
        self.both(lambda w: w.hooks.get_by_token(token), "hooks.get_by_token")

    @rule(run_id=ops.targets, wait=st.sampled_from(ops.WAITS), early=st.booleans(), due=ops.offsets)
    @recorded
    def drive_wait(self, run_id: str, wait: str, early: bool, due: timedelta) -> None:
        """Create a wait, or complete it (early, or when due)."""
        current = self.both(lambda w: w.waits.get(run_id, wait), "waits.get")
        spec: ops.Spec
        if current is None:
            spec = ("wait_created", wait, {"resume_at": due})
        else:
            spec = ("wait_completed", wait, {"early": early})
        self._write(run_id, spec, "out", None)

    @precondition(lambda self: self.caps.batch)
    @rule(run_id=ops.targets, specs=ops.batches, fence=ops.fences, seen_seq=ops.seen)
    @recorded
    def write_batch(
        self, run_id: str, specs: list[ops.Spec], fence: str, seen_seq: int | None
    ) -> None:
        """``create_batch``: all or nothing, fenced once."""
        batch = [self._request(s) for s in specs if self.declares(s)]
        if not batch:
            return
        kwargs = self._fence(run_id, fence)
        self.both(
            lambda w: w.events.create_batch(run_id, batch, seen_seq=seen_seq, **kwargs),
            f"events.create_batch({run_id!r}, {specs}, seen_seq={seen_seq}, {kwargs})",
        )

    @rule(call=st.sampled_from(ops.BAD_CALLS))
    @recorded
    def bad_input(self, call: ops.BadCall) -> None:
        """A malformed call: refused alike, nothing written."""
        if call.needs is None or getattr(self.caps, call.needs):
            self.both(call.call, f"malformed call {call!r}")

    @rule(seconds=st.sampled_from([0.5, 1, 5, 10, 30]))
    @recorded
    def advance(self, seconds: float) -> None:
        """Move the shared clock."""
        self.clock.advance(seconds)

    @precondition(lambda self: self.caps.durable)
    @rule()
    @recorded
    def restart(self) -> None:
        """Close the durable subject and reopen it from its directory: nothing is lost."""
        self.dirty = True
        self._run(self.subject.close())
        self.subject = self.make_world(self.setup)

    # -- reads that are not part of the invariant ---------------------------------------------

    @rule(
        run_id=ops.targets,
        seq=st.integers(0, 8),
        limit=st.integers(1, 4),
        step=st.sampled_from(ops.STEPS),
        hook=st.sampled_from(ops.HOOKS),
        wait=st.sampled_from(ops.WAITS),
        token=st.sampled_from(ops.TOKENS),
        stream=st.sampled_from(ops.STREAMS),
        start=st.integers(-3, 3),
    )
    @recorded
    def read(
        self,
        *,
        run_id: str,
        seq: int,
        limit: int,
        step: str,
        hook: str,
        wait: str,
        token: str,
        stream: str,
        start: int,
    ) -> None:
        """Point reads and pages the invariant does not make."""
        self.both(lambda w: w.events.get(run_id, seq), "events.get")
        self.both(lambda w: w.events.list(run_id, after_seq=seq, limit=limit), "events.list")
        self.both(lambda w: w.steps.get(run_id, step), "steps.get")
        self.both(lambda w: w.hooks.get(run_id, hook), "hooks.get")
        self.both(lambda w: w.waits.get(run_id, wait), "waits.get")
        self.both(lambda w: w.hooks.get_by_token(token), "hooks.get_by_token")
        if self.caps.streams:
            self.both(
                lambda w: w.streams.read(run_id, stream, start=start, limit=limit), "streams.read"
            )
            self.both(lambda w: w.streams.info(run_id, stream), "streams.info")

    @rule(
        name=st.sampled_from([None, "wf", "other"]),
        status=st.sampled_from([None, RunStatus.RUNNING, [RunStatus.PENDING, RunStatus.FAILED]]),
        limit=st.integers(1, 3),
    )
    @recorded
    def page_runs(self, name: str | None, status: Any, limit: int) -> None:
        """Page through ``runs.list`` with filters.

        A cursor is opaque (protocol.md section 8): each World pages with its own, and
        the pages are compared with the cursor reduced to whether there is one.
        """
        cursors: dict[int, str | None] = {}

        async def list_runs(w: World) -> RunPage:
            page = await w.runs.list(
                workflow_name=name, status=status, limit=limit, cursor=cursors.get(id(w))
            )
            cursors[id(w)] = page.cursor
            return attrs.evolve(page, cursor=None if page.cursor is None else "<opaque>")

        for number in range(6):
            page = self.both(list_runs, f"runs.list(page {number + 1})")
            if page is None or page.cursor is None:
                return

    # -- everything observable ---------------------------------------------------------------

    @invariant()
    def same_observable_state(self) -> None:
        """Every log, entity, token holder, run page, stream and queued message agree.

        Also runs both Worlds' self-checks (``_check()``, when the subject has
        one).  Skipped after a rule that called neither World (moving the clock
        changes nothing a read returns), which keeps shrinking cheap: Hypothesis
        pads a shortened example with such steps.
        """
        if not self.dirty:
            return
        expected = self._run(ops.observe(self.reference, self.caps))
        actual = self._run(ops.observe(self.subject, self.caps))
        for key, value in expected.items():
            if actual.get(key) != value:
                self.differs(key, value, actual.get(key))
        if actual.keys() != expected.keys():
            self.differs("what there is to read", sorted(expected), sorted(actual))
        self.reference._check()
        # Cheap at these sizes (measured: within the noise of a 200-example
        # run), so after every comparison rather than every few.
        self.check_invariants_of_subject()
        check = getattr(self.subject, "_check", None)
        if check is not None:
            try:
                check()
            except AssertionError as exc:
                raise AssertionError(
                    f"{self.name}._check() failed: {exc or 'an internal invariant is broken'}"
                ) from exc
        self.dirty = False

    def check_invariants_of_subject(self) -> None:
        """:func:`~durasim.checkers.check_invariants` over the subject: every rule holds."""
        report = self._run(check_invariants(self.subject))
        if not report.ok:
            raise AssertionError(
                f"check_invariants found violations in {self.name}:\n{report.render()}"
            )
