"""A scenario of the book, its result, and how one runs.

A scenario is a plain ``async def script(sim) -> None``: it starts runs, holds
writers at chosen interception points, injects faults, asserts the log it must
produce, and ends by checking every finished run (invariants and cold replay,
see :func:`~durasim.scenarios.book._check.finish`).  :func:`run_scenario` runs
one in a fresh :class:`~durasim.sim.Sim` over any World factory: the
conformance suite runs the whole :data:`BOOK` against third-party Worlds.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import attrs

from durasim.runtime import Limits
from durasim.sim import QueueContractBroken, QueueModeUnsupported, Sim
from durasim.worlds import Capabilities, DurasimError, World, WorldFactory, check_factory

from . import _workflows

__all__ = ["Scenario", "ScenarioFailed", "ScenarioResult", "Script", "run_scenario"]

#: A scripted race: ``async def script(sim) -> None``; it raises when the log is wrong.
Script = Callable[[Sim], Coroutine[Any, Any, None]]

_CAPABILITIES = frozenset(f.name for f in attrs.fields(Capabilities))


def _frozen(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


class ScenarioFailed(DurasimError, AssertionError):
    """A scenario's log, outcome or checks differ from what its docstring promises."""


def _known_capabilities(_instance: Any, _attribute: Any, value: frozenset[str]) -> None:
    unknown = value - _CAPABILITIES
    if unknown:
        raise ValueError(
            f"scenario requires unknown capabilities {sorted(unknown)}: "
            f"name fields of durasim.worlds.Capabilities ({sorted(_CAPABILITIES)})"
        )


@attrs.frozen(kw_only=True)
class Scenario:
    """One scripted race of the book.

    Attributes:
        name: a stable kebab-case name (``hook-at-step-started``).
        doc: the race and the log it must produce (the script's docstring).
        script: ``async def script(sim) -> None``.
        workflows: the module whose workflows the script drives (importable
            wherever the scenario runs: the replay oracle needs them).
        requires: names of :class:`~durasim.worlds.Capabilities` fields the
            World must declare true; otherwise the scenario is skipped.
        limits: runtime limits of the simulation (``None``: the sim's default).
        known_red: why the scenario fails today (a known bug), or ``None``.
    """

    name: str
    doc: str
    script: Script
    workflows: str = _workflows.__name__
    requires: frozenset[str] = attrs.field(
        default=frozenset({"in_band_fence", "batch"}),
        converter=_frozen,
        validator=_known_capabilities,
    )
    limits: Limits | None = None
    known_red: str | None = None


@attrs.frozen(kw_only=True)
class ScenarioResult:
    """How one run of a scenario ended.

    Attributes:
        name: the scenario's name.
        ok: whether the script finished and every check held (a skipped
            scenario is ok).
        detail: ``"ok"``, why it was skipped, or what failed (the assertion's
            message, or the error and where it was raised).
        trace: the simulation's trace text.
        trace_hash: sha256 of ``trace``.
        skipped: the missing capabilities, when the World lacks some.
    """

    name: str
    ok: bool
    detail: str
    trace: str = ""
    trace_hash: str = ""
    skipped: str | None = None


def _missing(world: World, requires: frozenset[str]) -> list[str]:
    capabilities = world.capabilities
    return sorted(name for name in requires if not getattr(capabilities, name))


def run_scenario(
    scenario: Scenario, *, store: WorldFactory | None = None, seed: int = 0, queue: str = "sim"
) -> ScenarioResult:
    """Run ``scenario`` in a fresh simulation over a fresh World; its result.

    Args:
        scenario: the scenario.
        store: builds the World, ``make(setup: WorldSetup) -> World`` (default:
            a :class:`~durasim.worlds.MemoryWorld`).  Called once (twice when
            the script needs the simulator's queue, see ``queue``).
        queue: ``"world"`` drives the World's own queue (``Sim(queue="world")``); a
            script that needs what only the simulator's queue does (dropping a
            queued message ...) is run again with ``"sim"``.

    Raises:
        FactoryError: ``store`` does not take a :class:`~durasim.worlds.WorldSetup`.
        seed: the scheduler's seed (scripts pin their races with holds, so
            most do not depend on it).
    """
    if store is not None:
        check_factory(store)
    _workflows.CALLS.clear()
    _workflows.ATTEMPTS.clear()
    sim = Sim(store, seed=seed, limits=scenario.limits, queue=queue)
    missing = _missing(sim.store, scenario.requires)
    script: Script = scenario.script
    if missing:

        async def script(_sim: Sim) -> None:
            return None

    try:
        sim.run_sync(script)
    except QueueModeUnsupported:
        return run_scenario(scenario, store=store, seed=seed, queue="sim")
    except QueueContractBroken as exc:
        detail = f"the World's queue broke its contract ({exc.check}): {exc}"
        return _result(scenario, sim, ok=False, detail=detail)
    except AssertionError as exc:
        return _result(scenario, sim, ok=False, detail=f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        where = "".join(traceback.format_exception(exc, limit=-3)).rstrip()
        return _result(scenario, sim, ok=False, detail=where)
    if missing:
        why = f"the World lacks {', '.join(missing)}"
        return _result(scenario, sim, ok=True, detail=f"skipped: {why}", skipped=why)
    return _result(scenario, sim, ok=True, detail="ok")


def _result(
    scenario: Scenario, sim: Sim, *, ok: bool, detail: str, skipped: str | None = None
) -> ScenarioResult:
    return ScenarioResult(
        name=scenario.name,
        ok=ok,
        detail=detail,
        trace=sim.trace_text,
        trace_hash=sim.trace_hash,
        skipped=skipped,
    )
