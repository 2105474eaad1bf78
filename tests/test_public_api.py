"""Each package's ``__all__`` imports, is complete and leaks no private name."""

from __future__ import annotations

import importlib
import inspect
import pickle
import tomllib
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
