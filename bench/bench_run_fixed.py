"""The fixed cost of a run: back-to-back short runs, each by a fresh Worker on a fresh MemoryWorld.

Run by hand (never in CI):

    .venv/bin/python bench/bench_run_fixed.py --runs 300 --steps 1 --kind sync

prints the median wall microseconds of each phase of a run (``start()``, the
``Worker``'s construction, its ``drain()``) and their sum, over ``--runs`` runs
(the first ``--warm`` runs are not counted).  ``--instructions`` counts, with
callgrind, the instructions of ``--runs`` runs minus those of none (the import
and the set-up), per run: repeatable where wall time drifts.  ``--compare OLD NEW``
runs two interpreters in turns and prints the median per-round ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_runtime import sequential, sequential_async  # the same workflows as --targets

from durasim.runtime import Worker, start
from durasim.worlds import CountingIds, FixedClock, MemoryWorld


async def _runs(count: int, steps: int, kind: str, phases: dict[str, list[float]]) -> None:
    wf = sequential if kind == "sync" else sequential_async
    clock = time.perf_counter
    for _ in range(count):
        world = MemoryWorld(clock=FixedClock(), ids=CountingIds())
        a = clock()
        run = await start(wf, steps, world=world)
        b = clock()
        worker = Worker(world)
        c = clock()
        await worker.drain()
        d = clock()
        assert await run.result() == steps * (steps - 1) // 2
        await world.close()
        phases["start"].append((b - a) * 1e6)
        phases["worker"].append((c - b) * 1e6)
        phases["drain"].append((d - c) * 1e6)
        phases["total"].append((d - a) * 1e6)


def measure(runs: int, steps: int, kind: str, warm: int) -> dict[str, float]:
    phases: dict[str, list[float]] = {"start": [], "worker": [], "drain": [], "total": []}
    asyncio.run(_runs(runs + warm, steps, kind, phases))
    if not runs:
        return {}
    return {key: statistics.median(values[warm:]) for key, values in phases.items()}


def compare(pythons: list[str], args: argparse.Namespace) -> None:
    here = Path(__file__).resolve()
    per: dict[str, list[float]] = {p: [] for p in pythons}
    for _ in range(args.rounds):
        for python in pythons:
            command = [python, str(here), "--runs", str(args.runs), "--steps", str(args.steps)]
            out = subprocess.run(
                [*command, "--kind", args.kind],
                capture_output=True,
                text=True,
                check=True,
                cwd=here.parent,
            )
            per[python].append(float(out.stdout.split("total ")[1].split()[0]))
    ratios = [b / a for a, b in zip(per[pythons[0]], per[pythons[1]], strict=True)]
    print(
        f"{args.kind} {args.steps}-step runs, drain+start+worker us (medians): "
        f"{statistics.median(per[pythons[0]]):.0f} vs {statistics.median(per[pythons[1]]):.0f}; "
        f"median per-round ratio {statistics.median(ratios):.3f} "
        f"({', '.join(f'{r:.2f}' for r in ratios)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--kind", choices=("async", "sync"), default="sync")
    parser.add_argument("--warm", type=int, default=5, help="runs first, not counted")
    parser.add_argument("--instructions", action="store_true", help="callgrind, per run")
    parser.add_argument("--compare", nargs=2, metavar="PYTHON", help="two interpreters, in turns")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-gc", action="store_true", help="gc.disable() (to see its share)")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare, args)
        return
    if args.instructions:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _callgrind import instructions, require_valgrind

        require_valgrind()
        me = str(Path(__file__).resolve())
        common = ["--steps", str(args.steps), "--kind", args.kind, "--warm", "5"]
        none = instructions(me, "--runs", "0", *common)
        some = instructions(me, "--runs", str(args.runs), *common)
        per = (some - none) / args.runs
        print(f"{per:,.0f} instructions per {args.steps}-step {args.kind} run")
        return
    if args.no_gc:
        gc.disable()
    if args.runs == 0:
        measure(0, args.steps, args.kind, args.warm)
        return
    med = measure(args.runs, args.steps, args.kind, args.warm)
    print(" ".join(f"{key} {value:.1f}" for key, value in med.items()) + " us (medians)")


if __name__ == "__main__":
    main()
