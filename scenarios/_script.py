"""A failed example as a runnable regression test (the simulator's script API)."""

from __future__ import annotations

import textwrap

from durasim.runtime.lowlevel import DEFAULT_LEASE_SECONDS

from ._seeds import ExampleConfig

__all__ = ["render_script"]


def _name(ref: str) -> tuple[str, str]:
    module, _, qualname = ref.partition(":")
    head = qualname.split(".")[0]
    return f"from {module} import {head}", qualname


def render_script(config: ExampleConfig, *, verdict: str, seed: str, workflow_label: str) -> str:
    """A pytest test that replays ``config`` and asserts what failed.

    Workflows, properties and factories that are not importable by name are
    left as a ``<...>`` placeholder to fill in.
    """
    imports = {
        "from durasim.scenarios import drive",
        "from durasim.sim import SequenceChoices, Sim",
    }
    wf = workflow_label
    if config.workflow:
        line, wf = _name(config.workflow)
        imports.add(line)
    sim_args = []
    if config.world:
        line, factory = _name(config.world)
        imports.add(line)
        sim_args.append(f"{factory},")
    choices = ", ".join(str(c) for c in _trimmed(config.choices))
    wrapped = textwrap.fill(
        f"choices=SequenceChoices([{choices}]),",
        width=92,
        subsequent_indent="        ",
        break_on_hyphens=False,
    )
    sim_args.append(wrapped)
    if config.faults:
        sim_args += [
            f"faults={config.faults!r},",
            f"fault_odds={config.fault_odds},",
            f"max_faults={config.max_faults},",
        ]
    if config.lease_seconds != DEFAULT_LEASE_SECONDS:
        sim_args.append(f"lease_seconds={config.lease_seconds!r},")
    if config.renew_every is not None:
        sim_args.append(f"renew_every={config.renew_every!r},")
    checks = {k for k in verdict.split(",") if k}
    if "stuck" in checks:
        sim_args.append("max_wall_seconds=10.0,  # code that never yields is interrupted then")
    call = [wf, *(repr(a) for a in config.args)]
    if config.hooks:
        call.append(f"hooks={list(config.hooks)!r}")
        call.append(f"hook_points={list(config.hook_points)!r}")
    if config.cancel_at:
        call.append(f"cancel_at={config.cancel_at}")
    if config.wake_up_at:
        call.append(f"wake_up_at={list(config.wake_up_at)!r}")
    if config.upgrade:
        line, upgrade = _name(config.upgrade)
        imports.add(line)
        call += [f"upgrade={upgrade}", f"upgrade_at={config.upgrade_at}", "code=code"]
    body = [f"outcome = await drive(sim, {', '.join(call)})"]
    if "stuck" in checks:
        body.append("assert outcome.idle.stuck is None, outcome.idle.reason")
    if "invariants" in checks:
        imports.add("from durasim.checkers import check_invariants")
        body.append("assert (await check_invariants(sim.store)).ok")
    if "replay" in checks:
        imports.add("from durasim.checkers import verify_replay")
        body += [
            "snapshot = await sim.snapshot()",
            "for run in snapshot.runs:",
            "    assert (await verify_replay(sim.store, run.run_id)).ok",
        ]
    if "property" in checks:
        prop = "<the property>"
        if config.property:
            line, prop = _name(config.property)
            imports.add(line)
        body += [
            "log = (await sim.snapshot()).events[outcome.run_id]",
            f"assert {prop}(outcome, log)",
        ]
    if "upgrade" in checks:
        body.append('assert "CORRUPTED_EVENT_LOG" not in repr(outcome.error), outcome.error')
    if "authoring" in checks:
        body.append('assert outcome.status.value != "failed", outcome.error')
    after: list[str] = []
    probe: list[str] = []
    if "fresh-process" in checks:
        imports.add("from durasim.checkers import finished_logs, replay_in_fresh_process")
        imports.add("from durasim.sim import FifoChoices")
        probe_args = [a for a in sim_args if not a.startswith("choices=")]
        probe_call = [*call[: 1 + len(config.args)]]
        if config.hooks:
            probe_call.append(f"hooks={list(config.hooks)!r}")
        probe = [
            "# explore() ran the workflow once (FIFO, no fault) before its examples; so",
            "# does this test, leaving the same module state behind.",
            "Sim(",
            *(f"    {a}" for a in probe_args),
            "    choices=FifoChoices(),",
            f").run_sync(lambda sim: drive(sim, {', '.join(probe_call)}))",
            "logs: list = []",
        ]
        body.append("logs.extend(await finished_logs(sim.store))")
        after = [
            f"fresh = replay_in_fresh_process(logs, hash_seed={config.fresh_process})",
            "verdicts = fresh.verdicts()",
            "assert all(v.ok for v in verdicts), [v.render() for v in verdicts]",
        ]
    if "determinism" in checks or not checks - {"determinism", "error"}:
        body.append("print(sim.trace_text)")
    setup = ""
    if config.setup:
        line, setup = _name(config.setup)
        imports.add(line)
    lines = sorted(imports, key=lambda s: (not s.startswith("from durasim"), s))
    out = [
        f'"""Regression test from durasim explore: {verdict or "ok"}.',
        "",
        f"Seed: {seed}",
        '"""',
        "",
        *lines,
        "",
        "",
        "def test_explored_schedule() -> None:",
    ]
    if setup:
        out.append(f"    {setup}()  # the exploration's per-example set-up")
    out += [f"    {p}" for p in probe]
    out.append("    sim = Sim(")
    out += [f"        {a}" for a in sim_args]
    out += ["    )", "", "    async def scenario(sim: Sim) -> None:"]
    if config.upgrade:  # judged on the code the run ended on: the upgrade holds till then
        imports_line = "import contextlib"
        out.insert(out.index("def test_explored_schedule() -> None:") - 1, imports_line)
        out.append("        with contextlib.ExitStack() as code:")
        out += [f"            {b}" for b in body]
    else:
        out += [f"        {b}" for b in body]
    out += ["", "    sim.run_sync(scenario)", *(f"    {a}" for a in after), ""]
    return "\n".join(out)


def _trimmed(choices: tuple[int, ...]) -> list[int]:
    found = list(choices)
    while found and found[-1] == 0:
        found.pop()
    return found
