"""Run a bench script and report every full garbage collection longer than 2 ms.

Run by hand (never in CI):

    .venv/bin/python bench/gc_watch.py bench/bench_runtime.py --targets 3 --n 1000

Each full collection prints ``[gc] full collection <ms> ms, collected <objects>`` on stderr
as it ends, between the script's own lines: a slow round next to a long pass with little
collected is the collector walking live objects, not garbage of finished runs.
"""

from __future__ import annotations

import gc
import runpy
import sys
import time
from pathlib import Path
from typing import Any

_began = [0.0]


def _watch(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _began[0] = time.perf_counter()
    elif info["generation"] == 2:
        ms = (time.perf_counter() - _began[0]) * 1e3
        if ms > 2:
            collected = info["collected"]
            print(f"[gc] full collection {ms:.1f} ms, collected {collected}", file=sys.stderr)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: gc_watch.py SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, str(Path(script).resolve().parent))
    gc.callbacks.append(_watch)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
