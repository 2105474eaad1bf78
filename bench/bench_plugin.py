"""What the pytest plugin costs every pytest run of a project that installs durasim (issue 16).

Run by hand (never in CI):

    .venv/bin/python bench/bench_plugin.py [--python .venv/bin/python] [--repeat 11]

With the interpreter of a venv where durasim is installed, in an empty temporary
directory (a project with no tests), times, median of ``--repeat`` (alternating):

* ``python -m pytest --co -q`` (pytest loads the ``durasim`` plugin through its
  ``pytest11`` entry point) and the same with ``-p no:durasim``, whose ratio is
  what durasim adds to a pytest start-up;
* ``python -X importtime -c "import durasim.scenarios.conformance._plugin"``: the
  cumulative import time of the plugin with everything it imports, in a fresh
  interpreter and after ``import pytest`` (what a pytest run pays).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time

PLUGIN = "durasim.scenarios.conformance._plugin"


def _wall(command: list[str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, capture_output=True, check=False)
    return time.perf_counter() - started


def _import_ms(python: str, code: str, cwd: str, tops: tuple[str, ...]) -> float:
    out = subprocess.run(
        [python, "-X", "importtime", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0
    for line in out.stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        # Top-level entries only (no indentation): their cumulative times add up.
        if found and found.group(2) == " " and found.group(3).split(".")[0] in tops:
            total += int(found.group(1))
    return total / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--repeat", type=int, default=11)
    options = parser.parse_args()
    python = options.python
    with tempfile.TemporaryDirectory() as empty:
        with_plugin: list[float] = []
        without: list[float] = []
        for _ in range(options.repeat):
            with_plugin.append(_wall([python, "-m", "pytest", "--co", "-q"], empty))
            without.append(_wall([python, "-m", "pytest", "--co", "-q", "-p", "no:durasim"], empty))
        alone = [
            _import_ms(python, f"import {PLUGIN}", empty, ("durasim",))
            for _ in range(options.repeat)
        ]
        after_pytest = [
            _import_ms(python, f"import pytest; import {PLUGIN}", empty, ("durasim",))
            for _ in range(options.repeat)
        ]
    a, b = statistics.median(with_plugin), statistics.median(without)
    print(f"python: {python}")
    print(f"pytest --co -q, empty project, durasim plugin loaded: {a * 1000:.0f} ms (median)")
    print(f"pytest --co -q, empty project, -p no:durasim:        {b * 1000:.0f} ms (median)")
    print(f"ratio: {a / b:.3f}x")
    print(f"import {PLUGIN}: {statistics.median(alone):.1f} ms (median)")
    print(f"  the same after `import pytest`: {statistics.median(after_pytest):.1f} ms")


if __name__ == "__main__":
    main()
