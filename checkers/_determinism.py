"""The determinism check: the same scenario and seed twice must give the same trace."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from durasim.sim import Sim

__all__ = ["DeterminismVerdict", "check_determinism"]


@attrs.frozen
class DeterminismVerdict:
    """Whether two runs of one scenario with one seed traced alike, and where they parted."""

    seed: int
    hashes: tuple[str, str]
    line: int = 0  # 1-based number of the first differing trace line (0: none)
    first: str = ""
    second: str = ""

    @property
    def ok(self) -> bool:
        """Whether both traces were byte-identical."""
        return self.hashes[0] == self.hashes[1]

    def render(self) -> str:
        """One line when deterministic; else the first differing line of each trace."""
        if self.ok:
            return f"deterministic: seed {self.seed}, trace {self.hashes[0][:16]}"
        return (
            f"NOT deterministic: seed {self.seed}, traces part at line {self.line}:\n"
            f"  first:  {self.first}\n  second: {self.second}"
        )


def check_determinism(
    scenario: Callable[[Sim], Coroutine[Any, Any, Any]],
    seed: int,
    *,
    sim: Callable[[int], Sim] | None = None,
) -> DeterminismVerdict:
    """Run ``scenario`` twice in fresh simulations seeded ``seed``; compare the traces.

    Args:
        scenario: ``async def scenario(sim)``, a script of the simulator.
        seed: the seed of both runs.
        sim: makes the Sim for a seed (default ``Sim(seed=seed)``); use it to pass a
            store factory, faults or budgets, identical for both runs.
    """
    make = sim or (lambda s: Sim(seed=s))
    traces: list[list[str]] = []
    hashes: list[str] = []
    for _ in range(2):
        one = make(seed)
        one.run_sync(scenario)
        traces.append(list(one.trace_lines))
        hashes.append(one.trace_hash)
    first, second = traces
    if hashes[0] == hashes[1]:
        return DeterminismVerdict(seed, (hashes[0], hashes[1]))
    for number, (a, b) in enumerate(zip(first, second, strict=False), 1):
        if a != b:
            return DeterminismVerdict(seed, (hashes[0], hashes[1]), number, a, b)
    number = min(len(first), len(second)) + 1
    missing = "(the trace ends here)"
    return DeterminismVerdict(
        seed,
        (hashes[0], hashes[1]),
        number,
        first[number - 1] if len(first) >= number else missing,
        second[number - 1] if len(second) >= number else missing,
    )
