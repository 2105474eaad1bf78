"""Instructions a bench script's workload costs, counted by valgrind's callgrind.

Shared by the benches' ``--instructions`` modes: the count is repeatable on these
shared machines where wall and CPU time drift.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys


def require_valgrind() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")


def instructions(script: str, *args: str) -> int:
    """Instructions of ``python script args...`` (hash seed fixed, so runs repeat)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        script,
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))
