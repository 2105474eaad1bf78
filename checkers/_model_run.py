"""Running the World model machine against a factory, with or without pytest.

A run is bounded by examples, by time, or both.  With a time budget
(``max_seconds``) the search stops at the first example that would start once
the time is spent: the machine raises :class:`_BudgetSpent` from its
constructor, before it builds anything.  It derives from ``KeyboardInterrupt``,
the one exception Hypothesis lets through without recording the example (any
other would be a failure, or break its record of the choices made), so the run
ends at once, as if interrupted, having found nothing.  Once an example has
failed, the budget no longer applies; Hypothesis shrinks the failure for at
most ``shrink_seconds`` (ended the same way), then :mod:`._model_shrink` replays
the shortest failing example seen and deletes every rule the failure does not
need.
"""

from __future__ import annotations

import re
import time
from typing import Any

import attrs
import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis.errors import Flaky, HypothesisException
from hypothesis.stateful import run_state_machine_as_test

from durasim.worlds import DurasimError, World, WorldFactory, WorldSetup, check_factory

from ._model import WorldModel
from ._model_shrink import Step, failure_signature, minimize_steps, render_steps

__all__ = ["WorldModelFailure", "WorldModelRun", "run_world_model", "world_model_for"]

#: ``max_examples`` when only a time budget bounds the search.
_UNBOUNDED = 1_000_000


class WorldModelFailure(DurasimError, AssertionError):
    """The World under test answered differently from the reference.

    The message holds the first difference (the fields that differ) and the
    minimal reproduction (the rules that still fail once every other one is
    deleted, as ``state.rule(...)`` lines); ``steps`` holds the reproduction
    lines alone, ``examples`` how many examples passed before the failing one.
    """


@attrs.frozen(kw_only=True)
class WorldModelRun:
    """How a passing World model run went.

    Attributes:
        examples: examples run (each a fresh World and up to
            ``stateful_step_count`` rules).
        seconds: wall time.
        budget_spent: the time budget ended the search (not ``max_examples``).
    """

    examples: int
    seconds: float
    budget_spent: bool


class _BudgetSpent(KeyboardInterrupt):
    """A control-flow signal: the search's time is up (see the module docstring for why
    a KeyboardInterrupt: Hypothesis passes it on without recording the example)."""


@attrs.define(eq=False)
class _Tracker:
    """Counts a run's examples, ends it when its time is up, keeps the shortest failure."""

    deadline: float | None
    shrink_seconds: float
    examples: int = 0
    spent: bool = False
    #: The first failure's signature, when Hypothesis's shrinking must end, and
    #: the shortest example (its rules and its error) that failed that way.
    signature: tuple[str, str] | None = None
    shrink_until: float = 0.0
    best: list[Step] | None = None
    error: Exception | None = None

    @property
    def failed(self) -> bool:
        return self.signature is not None

    def starting(self, machine: WorldModel) -> None:
        now = time.monotonic()
        if self.failed:
            if now >= self.shrink_until:
                raise _BudgetSpent
        elif self.deadline is not None and now >= self.deadline:
            self.spent = True
            raise _BudgetSpent

    def ended(self, machine: WorldModel, *, error: BaseException | None) -> None:
        if not _failed_for_real(error):
            if not self.failed:
                self.examples += 1
            return
        assert isinstance(error, Exception)
        signature = failure_signature(error)
        if self.signature is None:
            self.signature = signature
            self.shrink_until = time.monotonic() + self.shrink_seconds
        if signature == self.signature and (
            self.best is None or len(machine.history) <= len(self.best)
        ):
            self.best = list(machine.history)
            self.error = error


def _label(factory: WorldFactory) -> str:
    """The factory's name, as an identifier."""
    label = getattr(factory, "__qualname__", None) or type(factory).__name__
    return re.sub(r"\W+", "_", label).strip("_") or "factory"


def _machine_for(factory: WorldFactory, tracker: _Tracker | None = None) -> type[WorldModel]:
    """A :class:`WorldModel` subclass whose subject comes from ``factory``."""
    factory = check_factory(factory)
    name = f"WorldModel_{_label(factory)}"

    def make_world(self: WorldModel, setup: WorldSetup) -> World:
        return factory(setup)

    namespace = {"make_world": make_world, "__module__": __name__, "tracker": tracker}
    machine = type(name, (WorldModel,), namespace)
    return machine


def _failed_for_real(error: BaseException | None) -> bool:
    """Whether the exception ending an example is a failure (not Hypothesis's own signals)."""
    return isinstance(error, Exception) and not isinstance(error, HypothesisException)


def _settings(
    parent: hypothesis.settings | None,
    max_examples: int | None,
    stateful_step_count: int | None,
) -> hypothesis.settings:
    base = parent or hypothesis.settings()
    changes: dict[str, Any] = {
        # The explain phase re-runs the failure hundreds of times to say which
        # lines only failing examples reach: costly, and no help for a World.
        "phases": [phase for phase in base.phases if phase is not Phase.explain],
        "deadline": None,
        # A World may be slow (files, a server): that is not the strategies' fault.
        "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
        "report_multiple_bugs": False,
    }
    if max_examples is not None:
        changes["max_examples"] = max_examples
    if stateful_step_count is not None:
        changes["stateful_step_count"] = stateful_step_count
    return hypothesis.settings(base, **changes)


def run_world_model(
    factory: WorldFactory,
    *,
    max_examples: int | None = None,
    max_seconds: float | None = None,
    stateful_step_count: int | None = 40,
    seed: int | None = None,
    settings: hypothesis.settings | None = None,
    shrink_seconds: float = 20.0,
    minimize_seconds: float = 20.0,
) -> WorldModelRun:
    """Run the World model machine against the Worlds ``factory`` builds; no pytest needed.

    Args:
        factory: ``factory(setup) -> World``, called once per example (and again
            with the same :class:`WorldSetup` to restart a durable World).
        max_examples: how many runs of the machine (default: the active
            Hypothesis profile's, or no limit when ``max_seconds`` is given).
        max_seconds: stop starting examples once this much time has passed (a
            failure found by then is still shrunk and minimized).
        stateful_step_count: rules per example.
        seed: a fixed seed for the search (reproduce a failure another machine saw).
        settings: Hypothesis settings to start from (default: the active profile).
        shrink_seconds: at most this long for Hypothesis's shrinking of a failure.
        minimize_seconds: at most this long replaying the shortest failing
            example with fewer rules (0: show Hypothesis's shrunk example as it is).

    Returns:
        A :class:`WorldModelRun`: how many examples ran, and what ended the search.

    Raises:
        WorldModelFailure: the World answered differently from the reference; the
            message holds the difference and the minimal reproduction.
    """
    started = time.monotonic()
    deadline = None if max_seconds is None else started + max_seconds
    tracker = _Tracker(deadline=deadline, shrink_seconds=shrink_seconds)
    machine = _machine_for(factory, tracker)
    if max_examples is None and max_seconds is not None:
        max_examples = _UNBOUNDED
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    try:
        run_state_machine_as_test(
            machine, settings=_settings(settings, max_examples, stateful_step_count)
        )
    except _BudgetSpent:
        if tracker.error is not None:  # shrinking ran out of time: the shortest so far
            raise _failure(factory, tracker.error, tracker, minimize_seconds) from tracker.error
    except Flaky as exc:
        raise _unrepeatable(factory, exc, tracker) from exc
    except HypothesisException:
        raise  # a misconfiguration or a flaky World: Hypothesis's own report is best
    except Exception as exc:
        raise _failure(factory, exc, tracker, minimize_seconds) from exc
    return WorldModelRun(
        examples=tracker.examples,
        seconds=time.monotonic() - started,
        budget_spent=tracker.spent,
    )


def _failure(
    factory: WorldFactory, exc: Exception, tracker: _Tracker, minimize_seconds: float
) -> WorldModelFailure:
    """The failure to raise: the difference, and the fewest rules that still show it."""
    shrunk = [str(note) for note in getattr(exc, "__notes__", ())]
    shrunk = [line for line in shrunk if not line.startswith("Failing test case")]
    history: list[Step] = tracker.best or []
    minimal = None
    if history and minimize_seconds > 0:
        # The signature of the failure ``history`` ended with: Hypothesis may have
        # shrunk toward another one (the same bug on another run) since.
        minimal = minimize_steps(
            _machine_for(factory),
            history,
            failure_signature(tracker.error or exc),
            seconds=minimize_seconds,
        )
    error: BaseException = exc
    if minimal is not None:
        steps = render_steps(f"WorldModel_{_label(factory)}", minimal[0])
        error = minimal[1]
        how = "shrunk by Hypothesis, then every rule the failure does not need deleted"
    else:
        steps = [line for line in shrunk if not line.endswith(".same_observable_state()")]
        how = "shrunk by Hypothesis"
    return WorldModelFailure(
        f"the World model found a difference in the Worlds from {_label(factory)} "
        f"(after {tracker.examples} passing examples): {type(error).__name__}: {error}"
        f"\n\nreproduction ({how}):\n" + "\n".join(f"    {line}" for line in steps),
        steps=steps,
        examples=tracker.examples,
    )


def _unrepeatable(factory: WorldFactory, exc: Flaky, tracker: _Tracker) -> WorldModelFailure:
    """The World answered one example two ways: what it answered first, and why that matters."""
    first = ""
    if tracker.error is not None:
        first = f"\n\nthe first difference seen:\n{tracker.error}"
        steps = render_steps(f"WorldModel_{_label(factory)}", tracker.best or [])
    else:
        steps = []
    return WorldModelFailure(
        f"the World model ran one example twice over fresh Worlds from {_label(factory)} and "
        f"they answered differently ({type(exc).__name__}): the World's answers depend on "
        "more than the calls made to it, e.g. state shared by the Worlds of one process "
        "(a module-level cache or pool), the wall clock, randomness, or a transient "
        f"error it does not retry{first}"
        + ("\n\nreproduction (may pass when run alone):\n" if steps else "")
        + "\n".join(f"    {line}" for line in steps),
        steps=steps,
        examples=tracker.examples,
    )


def world_model_for(
    factory: WorldFactory,
    *,
    max_examples: int | None = None,
    stateful_step_count: int | None = 40,
) -> type[Any]:
    """A ``unittest.TestCase`` class running the World model against ``factory``'s Worlds.

    Assign it to a ``Test*`` name in a test module and pytest collects it::

        TestMyWorldModel = world_model_for(my_factory)

    Settings come from the active Hypothesis profile, with the overrides given.
    """
    case: type[Any] = _machine_for(factory).TestCase
    case.settings = _settings(None, max_examples, stateful_step_count)
    return case
