"""The pytest plugin is cheap and honest: importing it (pytest does, in every run of
every project that installs durasim) imports almost nothing and changes nothing.

And durasim changes nothing global when imported: ``asyncio.wait`` and
``asyncio.as_completed`` are routed only while workflow code runs.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from durasim.runtime import run, step, workflow
from durasim.worlds import MemoryWorld

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "durasim.scenarios.conformance._plugin"


def _in_fresh_interpreter(code: str) -> object:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(out.stdout)


def test_importing_the_plugin_imports_almost_nothing() -> None:
    found = _in_fresh_interpreter(
        f"import json, sys; import {PLUGIN}; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('durasim', 'hypothesis', 'pytest', '_pytest', 'asyncio', "
        "'attrs', 'sortedcontainers'))))"
    )
    assert found == [
        "durasim",
        "durasim.scenarios",
        "durasim.scenarios._lazy",
        "durasim.scenarios.conformance",
        PLUGIN,
    ]


def test_the_plugin_is_the_entry_point() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["project"]["entry-points"]["pytest11"] == {"durasim": PLUGIN}


def test_importing_durasim_changes_no_asyncio_function() -> None:
    found = _in_fresh_interpreter(
        "import asyncio, asyncio.tasks, json; "
        "before = [asyncio.wait, asyncio.as_completed, asyncio.tasks.wait, "
        "asyncio.tasks.as_completed]; "
        "import durasim.runtime, durasim.sim, durasim.checkers, durasim.scenarios; "
        "from durasim.scenarios import explore; "
        "after = [asyncio.wait, asyncio.as_completed, asyncio.tasks.wait, "
        "asyncio.tasks.as_completed]; "
        "print(json.dumps([a is b for a, b in zip(before, after)]))"
    )
    assert found == [True, True, True, True]


_SEEN: list[str] = []
_SEEN_IN_STEPS: list[str] = []


@step
async def _noop(n: int) -> int:
    _SEEN_IN_STEPS.append(asyncio.wait.__module__)
    return n


@workflow
async def _routed(n: int) -> list[int]:
    # asyncio.wait inside workflow code is durasim's (ordered), outside the stdlib's.
    _SEEN.append(asyncio.wait.__module__)
    done, _ = await asyncio.wait([asyncio.ensure_future(_noop(i)) for i in range(n)])
    return sorted(f.result() for f in done)


def test_asyncio_wait_is_routed_only_while_workflow_code_runs() -> None:
    stdlib_wait = asyncio.wait
    _SEEN.clear()
    _SEEN_IN_STEPS.clear()
    assert run(_routed, 3, world=MemoryWorld()) == [0, 1, 2]
    assert set(_SEEN) == {"durasim.runtime._waiting"}
    assert _SEEN_IN_STEPS
    assert set(_SEEN_IN_STEPS) == {"asyncio.tasks"}  # a step body is not workflow code
    assert asyncio.wait is stdlib_wait
    assert asyncio.wait.__module__ == "asyncio.tasks"


def _lazy_and_static_names(module_name: str) -> tuple[set[str], set[str]]:
    module = importlib.import_module(module_name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text())
    static: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                static |= {alias.name for alias in statement.names}
    return set(module._LAZY), static


@pytest.mark.parametrize("name", ["durasim.scenarios", "durasim.scenarios.conformance"])
def test_lazy_packages_name_each_public_name_once(name: str) -> None:
    lazy, static = _lazy_and_static_names(name)
    exported = set(importlib.import_module(name).__all__)
    assert lazy == static == exported
