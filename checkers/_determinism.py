"""The determinism check: the same scenario and seed twice must give the same trace.

Both runs share this process, so what is tied to the process (the hash seed,
the environment, the wall clock, module state) is the same for both; the
finished runs of the first are also replayed by the cold-replay oracle in a
fresh process (:func:`~._fresh.replay_in_fresh_process`), where it is not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from durasim.sim import Sim
from durasim.worlds import Event

from ._fresh import FreshReplay, describe_fresh_process, finished_logs, replay_in_fresh_process
from ._oracle import verify_replay_log

__all__ = ["DeterminismVerdict", "check_determinism"]


@attrs.frozen
class DeterminismVerdict:
    """Whether two runs of one scenario with one seed traced alike, and where they parted.

    Attributes:
        seed: the scenario's seed.
        hashes: the two traces' hashes.
        line: 1-based number of the first differing trace line (0: none).
        first: that line in the first trace; ``second`` in the second.
        fresh: per finished run that did not replay alike in a fresh process,
            what the cold-replay oracle said there (empty: all agreed, or the
            check was off).
    """

    seed: int
    hashes: tuple[str, str]
    line: int = 0
    first: str = ""
    second: str = ""
    fresh: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether both traces were byte-identical and every run replayed alike elsewhere."""
        return self.hashes[0] == self.hashes[1] and not self.fresh

    def render(self) -> str:
        """One line when deterministic; else the first differing line, or the fresh replays."""
        if self.ok:
            return f"deterministic: seed {self.seed}, trace {self.hashes[0][:16]}"
        if self.hashes[0] != self.hashes[1]:
            return "\n".join(
                [
                    f"NOT deterministic: seed {self.seed}, traces part at line {self.line}:",
                    f"  first:  {self.first}",
                    f"  second: {self.second}",
                    *(["and in a fresh process:", *self.fresh] if self.fresh else []),
                ]
            )
        return f"NOT deterministic: seed {self.seed}, in a fresh process:\n" + "\n".join(self.fresh)


def check_determinism(
    scenario: Callable[[Sim], Coroutine[Any, Any, Any]],
    seed: int,
    *,
    sim: Callable[[int], Sim] | None = None,
    fresh_process: bool = True,
) -> DeterminismVerdict:
    """Run ``scenario`` twice in fresh simulations seeded ``seed``; compare the traces.

    With ``fresh_process`` (the default), every run the first simulation
    finished is also replayed by the cold-replay oracle in the replay server
    (another ``PYTHONHASHSEED``, an added environment variable, another ``TZ``,
    a shifted wall clock, freshly imported modules); a run that replays alike
    here but not there fails the check.  Its workflows must be importable by
    module name (defined at module level).

    Args:
        scenario: ``async def scenario(sim)``, a script of the simulator.
        seed: the seed of both runs.
        sim: makes the Sim for a seed (default ``Sim(seed=seed)``); use it to pass a
            store factory, faults or budgets, identical for both runs.
        fresh_process: also replay the finished runs in a fresh process.

    Raises:
        FreshProcessUnavailable: a workflow cannot be imported in another process
            (defined inside a function): move it to a module or pass ``fresh_process=False``.
    """
    make = sim or (lambda s: Sim(seed=s))
    traces: list[list[str]] = []
    hashes: list[str] = []
    fresh: FreshReplay | None = None
    differs: list[str] = []
    for attempt in range(2):
        one = make(seed)
        logs: list[list[Event]] = []

        async def recorded(sim: Sim, logs: list[list[Event]] = logs) -> Any:
            result = await scenario(sim)
            logs.extend(await finished_logs(sim.store))
            return result

        one.run_sync(recorded if fresh_process and attempt == 0 else scenario)
        traces.append(list(one.trace_lines))
        hashes.append(one.trace_hash)
        if logs:
            # Sent before the second run, answered after it: the server works meanwhile.
            fresh, differs = _send_fresh(logs)
    if fresh is not None:
        differs += [
            f"{v.render()}\n  (it replays alike in this process; in the fresh one: "
            f"{describe_fresh_process(fresh.hash_seed)})"
            for v in fresh.verdicts()
            if not v.ok
        ]
    first, second = traces
    if hashes[0] == hashes[1]:
        return DeterminismVerdict(seed, (hashes[0], hashes[1]), fresh=tuple(differs))
    for number, (a, b) in enumerate(zip(first, second, strict=False), 1):
        if a != b:
            return DeterminismVerdict(seed, (hashes[0], hashes[1]), number, a, b, tuple(differs))
    number = min(len(first), len(second)) + 1
    missing = "(the trace ends here)"
    return DeterminismVerdict(
        seed,
        (hashes[0], hashes[1]),
        number,
        first[number - 1] if len(first) >= number else missing,
        second[number - 1] if len(second) >= number else missing,
        tuple(differs),
    )


def _send_fresh(logs: list[list[Event]]) -> tuple[FreshReplay, list[str]]:
    """Judge the logs here; send those that agree to the replay server."""
    agreed: list[list[Event]] = []
    differs: list[str] = []
    for events in logs:
        verdict = asyncio.run(verify_replay_log(events))
        if verdict.kind == "ok":
            agreed.append(events)
        elif not verdict.ok:
            differs.append(f"{verdict.render()}\n  (in this process already)")
    return replay_in_fresh_process(agreed), differs
