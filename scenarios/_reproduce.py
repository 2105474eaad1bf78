"""Replay a seed: the exact execution ``explore()`` found, its verdicts and its trace.

A seed explored with the fresh-process replay on is judged with it again,
under the same hash seed there; the command line also reruns itself under the
exploring process's ``PYTHONHASHSEED`` (recorded when it was a number), so a
set iterates in the same order here as it did there.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from durasim.checkers import describe_fresh_process, render_timeline_html, timeline_from_sim
from durasim.sim import SequenceChoices, Sim

from ._example import ExampleReport, run_example
from ._explore import probe
from ._seeds import ExampleConfig, SeedError, resolve_ref

__all__ = ["cmd_reproduce", "reproduce", "write_reproduction_html"]


def reproduce(
    seed: str,
    *,
    imports: Sequence[str] = (),
    max_wall_seconds: float = 60.0,
    on_sim: Callable[[Sim], object] | None = None,
) -> ExampleReport:
    """Replay the execution ``seed`` encodes and judge it as ``explore()`` did.

    Args:
        seed: a ``durasim:v1:...`` string.
        imports: modules to import first (where the workflow's steps and
            classes are registered, when that is not the workflow's module).
        max_wall_seconds: the simulation's wall-time budget (a ``stuck`` example
            is interrupted when it runs out).
        on_sim: called with the replayed simulation as soon as it is made (to
            read its calls and trace afterwards, as ``--html`` does).

    Raises:
        SeedError: the seed is damaged or names something that cannot be imported.
    """
    config = ExampleConfig.from_seed(seed)
    for module in imports:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise SeedError(f"--import {module}: {exc}") from exc
    if not config.workflow:
        raise SeedError(
            "the seed names no workflow (it was not importable by module:qualname when "
            "explored): replay the printed script instead"
        )
    workflow = resolve_ref(config.workflow)
    prop: Any = resolve_ref(config.property) if config.property else None
    setup: Any = resolve_ref(config.setup) if config.setup else None
    world: Any = resolve_ref(_current(config.world)) if config.world else None
    if config.fresh_process is not None:
        # explore() ran the workflow once (its probe) before any example, in the
        # process whose module state the fresh-process replay is compared with:
        # so does this process, or a memo the probe filled would be empty here.
        probe(workflow, config, world, setup, max_wall_seconds)
    return run_example(
        config,
        workflow,
        choices=SequenceChoices(config.choices),
        world_factory=world,
        property=prop,
        setup=setup,
        determinism=False,
        max_wall_seconds=max_wall_seconds,
        created=on_sim,
    )


def write_reproduction_html(seed: str, path: Path, *, imports: Sequence[str] = ()) -> ExampleReport:
    """Replay ``seed`` and write its timeline page to ``path`` (see docs/timeline.md).

    The page shows every writer's World calls in order, with the verdicts that
    failed and the marks they point at highlighted.
    """
    sims: list[Sim] = []
    report = reproduce(seed, imports=imports, on_sim=sims.append)
    config = report.config
    summary = [
        ("workflow", f"{config.workflow}{config.args!r}"),
        ("verdict", report.verdict),
        ("run status", report.status),
        ("faults injected", ", ".join(report.faults) or "none"),
        ("choices", str(len(config.choices))),
        ("trace", report.trace_hash[:16]),
        ("seed", seed),
    ]
    timeline = timeline_from_sim(
        sims[-1],
        failures=report.failures,
        title=f"durasim reproduce: {config.workflow}",
        summary=summary,
    )
    path.write_text(render_timeline_html(timeline), encoding="utf-8")
    return report


#: Seeds from before the one factory shape name the conformance suite's adapter of
#: a factory, ``durasim.scenarios.conformance.stores:pkg/module:make``; the factory
#: itself, ``pkg.module:make``, is what a Sim takes now.
_OLD_ADAPTERS = "durasim.scenarios.conformance.stores:"


def _current(ref: str) -> str:
    if ref.startswith(_OLD_ADAPTERS):
        return ref.removeprefix(_OLD_ADAPTERS).replace("/", ".")
    return ref


def cmd_reproduce(
    seed: str, *, imports: Sequence[str], trace: bool, html: Path | None = None
) -> int:
    """``durasim reproduce SEED``: print the verdict (and trace); 1 if it failed.

    With ``html``, also write the execution's timeline page there.
    """
    if "" not in sys.path:
        sys.path.insert(0, "")  # the workflow's module, from where the command runs
    try:
        wanted = ExampleConfig.from_seed(seed).hash_seed
    except SeedError as exc:
        print(f"durasim reproduce: {exc}", file=sys.stderr)
        return 2
    if wanted and os.environ.get("PYTHONHASHSEED") != wanted:
        # The hash seed is fixed when the interpreter starts: rerun under the
        # exploring process's, so sets of strings iterate as they did there.
        argv = ["reproduce", seed, *(x for m in imports for x in ("--import", m))]
        command = [sys.executable, "-m", "durasim.scenarios", *argv]
        if not trace:
            command.append("--no-trace")
        if html is not None:
            command += ["--html", str(html)]
        hashed = {**os.environ, "PYTHONHASHSEED": wanted}
        return subprocess.call(command, env=hashed)  # noqa: S603 -- this interpreter, our CLI
    try:
        if html is None:
            report = reproduce(seed, imports=imports)
        else:
            report = write_reproduction_html(seed, html, imports=imports)
    except SeedError as exc:
        print(f"durasim reproduce: {exc}", file=sys.stderr)
        return 2
    config = report.config
    print(f"workflow: {config.workflow}{config.args!r}")
    print(
        f"faults enabled: {', '.join(config.faults) or 'none'}; injected: "
        f"{', '.join(report.faults) or 'none'}; choices: {len(config.choices)}"
    )
    if config.fresh_process is not None:
        print(f"fresh-process replay: {describe_fresh_process(config.fresh_process)}")
    print(f"verdict: {report.verdict}")
    if not report.ok:
        print(report.render_verdict())
    print(f"trace {report.trace_hash[:16]}:")
    if trace:
        print(report.trace, end="")
    if html is not None:
        print(f"timeline written to {html}")
    return 0 if report.ok else 1
