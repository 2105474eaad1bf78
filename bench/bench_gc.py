"""What finished runs leave to the cyclic garbage collector, and what its passes cost.

Run by hand (never in CI):

    .venv/bin/python bench/bench_gc.py

* with the collector off, 20 back-to-back 100-step runs (async and sync steps, each on a
  fresh MemoryWorld served by a Worker), then one full collection: the objects it frees
  (0 when no reference cycle holds a finished run, issue 22);
* with the collector on, 60 back-to-back async runs (every tenth of 1,000 steps, the rest
  of 100): the process's CPU time, and the count, time and yield of full and young
  collections (``gc.callbacks``).
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from bench_step_cpu import _run  # the same workflow and Worker as the per-step figures


def left_to_the_collector(runs: int = 10) -> int:
    """Objects one full collection frees after ``2 * runs`` runs with the collector off."""
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            asyncio.run(_run(100, "async"))
            asyncio.run(_run(100, "sync"))
        return gc.collect()
    finally:
        gc.enable()


def pauses(runs: int = 60) -> dict[str, float]:
    """CPU milliseconds of ``runs`` runs and what the collector's passes took meanwhile."""
    seen: list[tuple[int, float, int]] = []
    began = [0.0]

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            seen.append((info["generation"], time.perf_counter() - began[0], info["collected"]))

    gc.collect()
    gc.callbacks.append(watch)
    try:
        cpu = time.process_time()
        for i in range(runs):
            asyncio.run(_run(1000 if i % 10 == 9 else 100, "async"))
        cpu = time.process_time() - cpu
    finally:
        gc.callbacks.remove(watch)
    full = [p for p in seen if p[0] == 2]
    young = [p for p in seen if p[0] < 2]
    return {
        "cpu_ms": cpu * 1e3,
        "full": len(full),
        "full_ms": sum(p[1] for p in full) * 1e3,
        "full_freed": sum(p[2] for p in full),
        "young": len(young),
        "young_ms": sum(p[1] for p in young) * 1e3,
    }


def main() -> None:
    freed = left_to_the_collector()
    print(f"one full collection after 20 back-to-back 100-step runs frees {freed} objects")
    p = pauses()
    print(
        f"60 runs: CPU {p['cpu_ms']:.0f} ms; {p['full']:.0f} full collections, "
        f"{p['full_ms']:.1f} ms, {p['full_freed']:.0f} objects freed; "
        f"{p['young']:.0f} young, {p['young_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
