"""Each package's ``__all__`` imports, is complete and leaks no private name.

And the public surface reads as one: every public class and function reports the
public module it is exported from as its ``__module__``, and no name is exported
by two public modules as two different objects (one name, one concept).
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from durasim import worlds

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = [
    "durasim.worlds",
    "durasim.runtime",
    "durasim.sim",
    "durasim.checkers",
    "durasim.scenarios",
]


def _public_modules() -> list[str]:
    """Every public module with an ``__all__`` (no private part in its dotted name).

    The conformance suite's test modules are left out: pytest imports them (with
    its assertion rewriting), and they export nothing.
    """
    found = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        found.append(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts) or ".conformance.suite" in info.name:
                continue
            found.append(info.name)
    return [m for m in found if hasattr(importlib.import_module(m), "__all__")]


PUBLIC_MODULES = _public_modules()


def test_the_walk_finds_every_public_module() -> None:
    assert {
        "durasim.runtime.lowlevel",
        "durasim.runtime.serialization",
        "durasim.scenarios.book",
        "durasim.scenarios.conformance",
    } <= set(PUBLIC_MODULES)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_names_report_a_public_module(name: str) -> None:
    """``durasim.runtime.Worker``, not ``durasim.runtime._worker.Worker``; found where it says."""
    module = importlib.import_module(name)
    wrong = []
    for public in module.__all__:
        value = getattr(module, public)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        where = value.__module__
        if any(part.startswith("_") for part in where.split(".")):
            wrong.append(f"{public}: {where}")
        elif getattr(importlib.import_module(where), value.__qualname__, None) is not value:
            wrong.append(f"{public}: {where}.{value.__qualname__} is not it")
    assert not wrong, f"{name} exports names whose __module__ is not where they are: {wrong}"


def test_no_name_is_two_objects_across_the_public_modules() -> None:
    """One name per concept: a name exported twice is the same object."""
    exported: dict[str, dict[int, list[str]]] = defaultdict(dict)
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for public in module.__all__:
            value = getattr(module, public)
            exported[public].setdefault(id(value), []).append(name)
    twice = {public: list(objects.values()) for public, objects in exported.items()}
    twice = {public: where for public, where in twice.items() if len(where) > 1}
    assert not twice, f"names exported as different objects (rename one): {twice}"


def test_no_public_class_name_is_defined_twice() -> None:
    """A class name outside ``_`` means one thing across the five packages."""
    import ast

    defined: dict[str, list[str]] = defaultdict(list)
    for folder in ("worlds", "runtime", "sim", "checkers", "scenarios"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "suite" in path.parts:
                continue
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    defined[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"


def test_public_classes_pickle_by_their_public_path() -> None:
    from durasim.runtime import FatalError, LeaseOptionsError
    from durasim.sim import SimError

    for error in (FatalError("x"), LeaseOptionsError("y"), SimError("z")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert b"._" not in pickle.dumps(type(error))


def test_the_runtime_top_level_is_the_authors_api() -> None:
    """Engine internals live in durasim.runtime.lowlevel, the value format in .serialization."""
    from durasim import runtime
    from durasim.runtime import lowlevel, serialization

    internals = {"Engine", "engine_for", "deliver", "find_workflow", "WorkflowDef", "serialize"}
    assert not internals & set(runtime.__all__)
    assert {"Engine", "engine_for", "find_workflow", "WorkflowDef"} <= set(lowlevel.__all__)
    assert {"serialize", "deserialize", "ClassRegistry"} <= set(serialization.__all__)
    assert not set(runtime.__all__) & set(lowlevel.__all__)
    assert len(runtime.__all__) <= 60, "keep the author's API small: put internals in lowlevel"


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_import(name: str) -> None:
    module = importlib.import_module(name)
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.__all__ names {public!r}, which is missing"
        assert not public.startswith("_")


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    for attr, value in vars(module).items():
        if attr.startswith("_") or inspect.ismodule(value):
            continue
        if getattr(value, "__module__", "").startswith(name):
            assert attr in exported, f"{name}.{attr} is public but missing from __all__"


def test_every_package_is_in_the_wheel_list() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    mapping = config["tool"]["setuptools"]["package-dir"]
    found = set()
    for top, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([top, *relative.parts]))
    assert found == listed, f"pyproject packages list differs from the tree: {found ^ listed}"


def test_errors_pickle_with_their_facts() -> None:
    error = worlds.InBandSuperseded("stale", run_id="r", seq=4, seq_in_band=3)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is worlds.InBandSuperseded
    assert (str(copy), copy.run_id, copy.seq, copy.seq_in_band) == ("stale", "r", 4, 3)
    assert isinstance(worlds.InvalidRequest("x"), ValueError)
    assert isinstance(worlds.RunNotFound("x"), LookupError)
