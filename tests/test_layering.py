"""Imports point down only: scenarios -> checkers -> sim -> runtime -> worlds.

Walks every module of every layer with :mod:`ast` and fails on an import of a
higher layer (``import durasim.sim`` inside ``runtime/`` ...), naming the file,
the line and the edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["worlds", "runtime", "sim", "checkers", "scenarios"]  # bottom to top


def imported_layers(path: Path) -> list[tuple[int, str]]:
    """(line, layer) for every ``durasim.<layer>`` this file imports."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "durasim":
                names = [f"durasim.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if len(parts) >= 2 and parts[0] == "durasim" and parts[1] in LAYERS:
                found.append((node.lineno, parts[1]))
    return found


def upward_edges() -> list[str]:
    edges = []
    for rank, layer in enumerate(LAYERS):
        for path in sorted((ROOT / layer).rglob("*.py")):
            for line, target in imported_layers(path):
                if LAYERS.index(target) > rank:
                    edges.append(f"{path.relative_to(ROOT)}:{line}: {layer} -> {target}")
    return edges


def test_no_upward_imports() -> None:
    edges = upward_edges()
    assert not edges, "upward imports (fix the design, not the test):\n" + "\n".join(edges)


def test_the_walker_sees_an_upward_edge(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from durasim.sim import SimWorld\nimport durasim.checkers as c\n")
    assert imported_layers(bad) == [(1, "sim"), (2, "checkers")]


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_is_a_package(layer: str) -> None:
    assert (ROOT / layer / "__init__.py").is_file()
