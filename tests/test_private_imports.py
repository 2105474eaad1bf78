"""Layers above the runtime use its public names only.

``sim/``, ``checkers/`` and ``scenarios/`` drive the runtime through
``durasim.runtime`` (the author's API) and ``durasim.runtime.lowlevel`` (the
engine's internals); none imports a private ``durasim.runtime._module``, so the
runtime can move its insides without breaking the layers above it.  Walks every
module with :mod:`ast`, like tests/test_layering.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ABOVE_THE_RUNTIME = ["sim", "checkers", "scenarios"]


def private_runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every private ``durasim.runtime`` module ``path`` imports."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module in ("durasim.runtime", "durasim.runtime.serialization"):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["durasim", "runtime"] and any(p.startswith("_") for p in parts[2:]):
                found.append((node.lineno, name))
    return found


def test_no_layer_above_the_runtime_imports_its_private_modules() -> None:
    edges = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for layer in ABOVE_THE_RUNTIME
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line, module in private_runtime_imports(path)
    ]
    assert not edges, (
        "private runtime imports (export the name from durasim.runtime.lowlevel instead):\n"
        + "\n".join(edges)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from durasim.runtime._wake import STEP_QUEUE\n", [(1, "durasim.runtime._wake")]),
        ("import durasim.runtime._engine as e\n", [(1, "durasim.runtime._engine")]),
        ("from durasim.runtime import _orchestrator\n", [(1, "durasim.runtime._orchestrator")]),
        (
            "from durasim.runtime.serialization._frozen import x\n",
            [(1, "durasim.runtime.serialization._frozen")],
        ),
        ("from durasim.runtime.lowlevel import Engine\nfrom durasim.runtime import step\n", []),
    ],
)
def test_the_walker_sees_a_private_import(
    tmp_path: Path, source: str, expected: list[tuple[int, str]]
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    assert private_runtime_imports(bad) == expected
