"""Running the World model machine against a factory, with or without pytest."""

from __future__ import annotations

import re
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis.errors import HypothesisException
from hypothesis.stateful import run_state_machine_as_test

from durasim.worlds import DurasimError, World, WorldFactory, WorldSetup, check_factory

from ._model import WorldModel

__all__ = ["WorldModelFailure", "run_world_model", "world_model_for"]


class WorldModelFailure(DurasimError, AssertionError):
    """The World under test answered differently from the reference.

    The message holds the first difference and the shrunk reproduction (the
    rules Hypothesis kept, as ``state.rule(...)`` lines); ``steps`` holds the
    reproduction lines alone.
    """


def _label(factory: WorldFactory) -> str:
    """The factory's name, as an identifier."""
    label = getattr(factory, "__qualname__", None) or type(factory).__name__
    return re.sub(r"\W+", "_", label).strip("_") or "factory"


def _machine_for(factory: WorldFactory) -> type[WorldModel]:
    """A :class:`WorldModel` subclass whose subject comes from ``factory``."""
    factory = check_factory(factory)
    name = f"WorldModel_{_label(factory)}"

    def make_world(self: WorldModel, setup: WorldSetup) -> World:
        return factory(setup)

    machine = type(name, (WorldModel,), {"make_world": make_world, "__module__": __name__})
    return machine


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
    stateful_step_count: int | None = 40,
    seed: int | None = None,
    settings: hypothesis.settings | None = None,
) -> None:
    """Run the World model machine against the Worlds ``factory`` builds; no pytest needed.

    Args:
        factory: ``factory(setup) -> World``, called once per example (and again
            with the same :class:`WorldSetup` to restart a durable World).
        max_examples: how many runs of the machine (default: the active
            Hypothesis profile's).
        stateful_step_count: rules per example.
        seed: a fixed seed for the search (reproduce a failure another machine saw).
        settings: Hypothesis settings to start from (default: the active profile).

    Raises:
        WorldModelFailure: the World answered differently from the reference; the
            message holds the difference and the shrunk reproduction.
    """
    machine = _machine_for(factory)
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    try:
        run_state_machine_as_test(
            machine, settings=_settings(settings, max_examples, stateful_step_count)
        )
    except HypothesisException:
        raise  # a misconfiguration or a flaky World: Hypothesis's own report is best
    except Exception as exc:
        steps = [str(note) for note in getattr(exc, "__notes__", ())]
        raise WorldModelFailure(
            f"the World model found a difference in the Worlds from {_label(factory)}: "
            f"{type(exc).__name__}: {exc}\n\nreproduction (shrunk by Hypothesis):\n"
            + "\n".join(f"    {line}" for line in steps),
            steps=steps,
        ) from exc


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
