"""One declaration per concept: the source declares each shared vocabulary once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("worlds", "runtime", "sim", "checkers", "scenarios")
_TERMINAL_NAMES = {"RUN_COMPLETED", "RUN_FAILED", "RUN_CANCELLED"}


def _sources() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


def test_the_terminal_run_events_are_declared_once() -> None:
    """Only ``durasim.worlds.RUN_TERMINAL_TYPES`` lists the three terminal run events."""
    found = []
    for path in [*_sources(), *sorted((ROOT / "tests").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Set | ast.Tuple | ast.List):
                continue
            names = {e.attr for e in node.elts if isinstance(e, ast.Attribute)}
            if names >= _TERMINAL_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(found) == 1, f"the terminal run events are declared more than once: {found}"
    assert found[0].startswith("worlds/_events.py:"), found
