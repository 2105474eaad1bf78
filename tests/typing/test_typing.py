"""``mypy --strict`` on a module that uses the public API as the docs show it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def test_the_public_api_type_checks_strictly() -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if mypy is None:
        pytest.skip("mypy is not installed in this environment (pip install -e '.[dev]')")
    done = subprocess.run(
        [
            mypy,
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-incremental",
            str(HERE / "check_public_api.py"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
