"""explore() throughput, memory and scaling.

Run: ``.venv/bin/python bench/bench_explore.py [--examples N] [--memory N]``.

* examples/s of ``explore()`` on a 10-step workflow with every fault kind
  enabled (swarm), one process: with the determinism replay and the
  fresh-process replay of every example (the defaults), with the fresh-process
  replay off (``fresh_process=False``), and with both off; measured in turns
  (``--rounds`` of each, one after the other), each figure the median;
* memory: RSS after the first 100 examples (fewer when ``--memory`` is smaller)
  and after ``--memory`` examples (default 10,000; 0 skips it) of one
  exploration; the target is an end within 1.5x;
* the floor: Hypothesis's own stateful engine running a 10-rule machine that does
  nothing but add (``RuleBasedStateMachine``, ``stateful_step_count=10``, no
  database, no deadline), the same number of examples, in the same rounds; issue 22
  asks ``explore()`` with all its verdicts for at least 2x this floor (and 300/s);
* scaling: the same examples split into 2 shards in 2 processes (what
  ``@explores(shards=2)`` under ``pytest -n 2`` does), wall time vs 1 process.

``--instructions`` counts CPU instructions per explored example instead (needs
valgrind): each variant runs under ``valgrind --tool=callgrind`` at two sizes
and the difference is divided by the difference in examples.  Only this
process is counted: with the defaults, the fresh-process replay's server works
in a process of its own (what this process pays for it is counted).  The
Hypothesis floor is counted the same way, and the split printed: what the
fresh-process replay, the determinism replay and the rest (Hypothesis, the
run, its verdicts) cost per example, and the instruction ratio to the floor
(an example must cost at most half the floor's for the 2x goal).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from typing import Any

from _callgrind import instructions as count_instructions
from _callgrind import require_valgrind
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from durasim.runtime import step, workflow
from durasim.scenarios import ExploreStats, explore
from durasim.sim import FAULT_KINDS


@step(module="bench_explore")
def add(total: int, i: int) -> int:
    return total + i


@workflow(module="bench_explore")
async def ten_steps() -> int:
    total = 0
    for i in range(10):
        total = await add(total, i)
    return total


def rss_mb() -> float:
    """Resident memory now (``VmRSS``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def throughput(examples: int, seed: int = 1, **options: Any) -> tuple[float, ExploreStats]:
    result = explore(ten_steps, max_examples=examples, seed=seed, faults=FAULT_KINDS, **options)
    assert result.ok, result.render()
    return result.stats.examples_per_second, result.stats


class _TenAdds(RuleBasedStateMachine):
    """Hypothesis's stateful floor: ten rule calls per example, each an addition."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    @rule(i=st.integers(min_value=0, max_value=9))
    def add(self, i: int) -> None:
        self.total = self.total + i


def hypothesis_floor(examples: int) -> float:
    """Examples/s of Hypothesis's stateful engine alone on :class:`_TenAdds`."""
    began = time.perf_counter()
    run_state_machine_as_test(
        _TenAdds,
        settings=settings(
            max_examples=examples,
            stateful_step_count=10,
            database=None,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    return examples / (time.perf_counter() - began)


def memory(examples: int) -> tuple[int, float, float]:
    """RSS after the first ``min(100, examples)`` examples and at the end: (mark, MB, MB)."""
    first = max(1, min(100, examples))
    marks: dict[int, float] = {}

    def progress(stats: ExploreStats) -> None:
        marks.setdefault(stats.examples, rss_mb())

    result = explore(
        ten_steps,
        max_examples=examples,
        seed=2,
        faults=FAULT_KINDS,
        progress=progress,
        progress_every=first,
    )
    assert result.ok, result.render()
    # Exploration can stop early (every example already seen): the first mark then.
    mark = min(marks, default=0)
    return mark, marks.get(mark, rss_mb()), rss_mb()


def _shard(args: tuple[int, int]) -> float:
    shard, examples = args
    started = time.perf_counter()
    explore(ten_steps, max_examples=examples, seed=100 + shard, faults=FAULT_KINDS)
    return time.perf_counter() - started


def scaling(examples: int) -> tuple[float, float]:
    started = time.perf_counter()
    _shard((0, examples))
    one = time.perf_counter() - started
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2) as pool:
        started = time.perf_counter()
        pool.map(_shard, [(0, examples // 2), (1, examples // 2)])
        two = time.perf_counter() - started
    return one, two


#: --instructions: variant -> explore() options (the sizes: _SIZES examples).
_COUNTED: dict[str, dict[str, Any]] = {
    "defaults": {},
    "fresh_process=False": {"fresh_process": False},
    "determinism_every=0, fresh_process=False": {"determinism_every": 0, "fresh_process": False},
}
_SIZES = (20, 60)
#: --instructions: the Hypothesis floor's workload name.
_FLOOR = "floor"


def instructions() -> None:
    require_valgrind()
    small, large = _SIZES
    per: dict[str, float] = {}
    for variant in [*_COUNTED, _FLOOR]:
        per[variant] = (
            count_instructions(__file__, "--workload", variant, str(large))
            - count_instructions(__file__, "--workload", variant, str(small))
        ) / (large - small)
        print(f"{per[variant] / 1e6:8.2f} M instructions per example  {variant}")
    full, no_fresh, bare = (per[variant] for variant in _COUNTED)
    print(
        f"split of the defaults: fresh-process replay (this process's side) "
        f"{(full - no_fresh) / 1e6:.2f} M, determinism replay {(no_fresh - bare) / 1e6:.2f} M, "
        f"the rest (Hypothesis, the run, invariants, oracle, report) {bare / 1e6:.2f} M"
    )
    print(
        f"floor / defaults: {per[_FLOOR] / full:.2f} in instructions "
        "(goal 2.0: an example at most half the floor's instructions)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--memory", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count instructions")
    parser.add_argument("--workload", nargs=2, metavar=("VARIANT", "N"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.workload and options.workload[0] == _FLOOR:
        hypothesis_floor(int(options.workload[1]))
        return
    if options.workload:
        throughput(int(options.workload[1]), seed=10, **_COUNTED[options.workload[0]])
        return
    if options.instructions:
        instructions()
        return
    variants: dict[str, dict[str, Any]] = {
        "defaults: determinism and fresh-process replay of every example": {},
        "fresh_process=False (determinism replay only)": {"fresh_process": False},
        "determinism_every=0, fresh_process=False": {
            "determinism_every": 0,
            "fresh_process": False,
        },
    }
    floor = "Hypothesis stateful floor (10 rule calls, nothing else)"
    figures: dict[str, list[float]] = {name: [] for name in [*variants, floor]}
    stats = ExploreStats()
    throughput(50, seed=0)  # warm up: imports, Hypothesis, the replay server
    for round_ in range(options.rounds):
        for name, extra in variants.items():
            # A seed per round: the fresh-process replay reuses the verdict of a log
            # it has judged, so a round must not repeat an earlier round's examples.
            rate, stats = throughput(options.examples, seed=10 + round_, **extra)
            figures[name].append(rate)
        figures[floor].append(hypothesis_floor(options.examples))
    print(f"explore() on a 10-step workflow, all fault kinds (swarm), {options.examples} examples,")
    print(f"{options.rounds} rounds in turns (median; all figures):")
    for name, rates in figures.items():
        listed = ", ".join(f"{r:.0f}" for r in rates)
        print(f"  {statistics.median(rates):.0f} examples/s  {name}  ({listed})")
    full = next(iter(variants))
    ratios = [a / b for a, b in zip(figures[full], figures[floor], strict=True)]
    rate = statistics.median(figures[full])
    ratio = statistics.median(ratios)
    print(
        f"issue 22 target: explore() with all its verdicts {rate:.0f} examples/s (goal 300: "
        f"{'met' if rate >= 300 else 'NOT met'}); vs the Hypothesis floor, median per-round "
        f"ratio {ratio:.2f} (goal 2.0: {'met' if ratio >= 2 else 'NOT met'}; "
        f"{', '.join(f'{r:.2f}' for r in ratios)})"
    )
    print(f"  {stats.interleavings} distinct interleavings; faults: {dict(stats.faults)}")
    one, two = scaling(options.examples)
    print(
        f"scaling: {options.examples} examples, 1 process {one:.1f} s, 2 shards in 2 processes "
        f"{two:.1f} s ({one / two:.2f}x)"
    )
    if options.memory <= 0:
        print("memory: skipped (--memory 0)")
        return
    mark, first, end = memory(options.memory)
    print(
        f"memory: RSS {first:.1f} MB after {mark} examples, {end:.1f} MB after "
        f"{options.memory} ({end / first:.2f}x; target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
