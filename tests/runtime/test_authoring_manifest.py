"""``build_manifest`` and ``durasim manifest``: import a tree, list its definitions."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable, Generator
from pathlib import Path

import pytest

from durasim.runtime import InvalidDefinition, ManifestError
from durasim.runtime.lowlevel import build_manifest
from durasim.scenarios import main

PAY = """
import attrs
from durasim import runtime
from durasim.runtime import serializable, step, workflow


@step
def charge(amount):
    return amount


@step(module="TOP-payments@2", max_retries=5)
async def refund(amount):
    return -amount


@serializable
@attrs.frozen
class Cart:
    items: tuple

    @step
    def total(self):
        return sum(self.items)

    @step
    @staticmethod
    def make(*items):
        return Cart(items)

    @step
    @classmethod
    def empty(cls):
        return cls(())


@workflow
async def checkout(order):
    @runtime.step(max_retries=0)
    async def validate():
        return order > 0

    @step(name="audit_log")
    def audit():
        return order

    return await validate()
"""

MODELS = """
import enum
from durasim.runtime import serializable


@serializable
class Color(enum.Enum):
    RED = 1


class Point:
    def __init__(self, x):
        self.x = x

    def __durasim_serialize__(self):
        return self.x

    @classmethod
    def __durasim_deserialize__(cls, data):
        return cls(data)


serializable(Point)
"""


@pytest.fixture
def write_tree(tmp_path: Path) -> Generator[Callable[[str, dict[str, str]], Path], None, None]:
    """Write ``{relative path: source}`` under tmp_path/<top>; forget the modules after."""
    tops: list[str] = []

    def write(top: str, files: dict[str, str]) -> Path:
        tops.append(top)
        for relative, source in files.items():
            target = tmp_path / top / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(source).replace("TOP", top))
        return tmp_path / top

    yield write
    for name in list(sys.modules):
        if any(name == top or name.startswith(f"{top}.") for top in tops):
            del sys.modules[name]


def test_manifest_of_a_package(write_tree: Callable[[str, dict[str, str]], Path]) -> None:
    root = write_tree(
        "mshop", {"__init__.py": "", "pay.py": PAY, "sub/__init__.py": "", "sub/models.py": MODELS}
    )
    manifest = build_manifest(root)
    assert [w["workflow_id"] for w in manifest["workflows"]] == ["workflow//mshop.pay//checkout"]
    assert manifest["workflows"][0] == {
        "workflow_id": "workflow//mshop.pay//checkout",
        "name": "checkout",
        "module": "mshop.pay",
        "qualname": "checkout",
        "source": "mshop/pay.py:37",
    }
    steps = {s["step_id"]: s for s in manifest["steps"]}
    assert list(steps) == sorted(steps)
    assert set(steps) == {
        "step//mshop.pay//Cart#total",
        "step//mshop.pay//Cart.empty",
        "step//mshop.pay//Cart.make",
        "step//mshop.pay//audit_log",
        "step//mshop.pay//charge",
        "step//mshop.pay//checkout/validate",
        "step//mshop-payments@2//refund",
    }
    assert steps["step//mshop-payments@2//refund"] == {
        "step_id": "step//mshop-payments@2//refund",
        "name": "refund",
        "module": "mshop.pay",
        "qualname": "refund",
        "kind": "function",
        "max_retries": 5,
        "is_async": True,
        "source": "mshop/pay.py:12",
    }
    assert [steps[f"step//mshop.pay//{n}"]["kind"] for n in ("Cart#total", "Cart.make")] == [
        "method",
        "staticmethod",
    ]
    # Nested steps are found in the source: checkout never ran.
    assert steps["step//mshop.pay//checkout/validate"] == {
        "step_id": "step//mshop.pay//checkout/validate",
        "name": "checkout/validate",
        "module": "mshop.pay",
        "qualname": "checkout.<locals>.validate",
        "kind": "nested",
        "max_retries": 0,
        "is_async": True,
        "source": "mshop/pay.py:39",
    }
    assert steps["step//mshop.pay//audit_log"]["qualname"] == "checkout.<locals>.audit"
    classes = {c["class_id"]: c for c in manifest["classes"]}
    assert classes == {
        "class//mshop.pay//Cart": {
            "class_id": "class//mshop.pay//Cart",
            "kind": "fields",
            "module": "mshop.pay",
            "qualname": "Cart",
            "source": "mshop/pay.py:17",
        },
        "class//mshop.sub.models//Color": {
            "class_id": "class//mshop.sub.models//Color",
            "kind": "enum",
            "module": "mshop.sub.models",
            "qualname": "Color",
            "source": "mshop/sub/models.py:6",
        },
        "class//mshop.sub.models//Point": {
            "class_id": "class//mshop.sub.models//Point",
            "kind": "pair",
            "module": "mshop.sub.models",
            "qualname": "Point",
            "source": "mshop/sub/models.py:11",
        },
    }


def test_manifest_of_one_file_and_of_a_plain_folder(
    write_tree: Callable[[str, dict[str, str]], Path],
) -> None:
    root = write_tree("mfolder", {"flows.py": PAY, "notes/readme.txt": "not python"})
    one = build_manifest(root / "flows.py")
    assert "workflow//flows//checkout" in {w["workflow_id"] for w in one["workflows"]}
    assert build_manifest(root) == one
    sys.modules.pop("flows", None)


def test_cli_prints_sorted_json(
    write_tree: Callable[[str, dict[str, str]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_tree("mcli", {"__init__.py": "", "pay.py": PAY})
    assert main(["manifest", str(root)]) == 0
    out = capsys.readouterr().out
    parsed = json.loads(out)
    assert out == json.dumps(parsed, indent=2, sort_keys=True) + "\n"
    assert parsed == json.loads(json.dumps(build_manifest(root)))
    assert {"classes", "steps", "workflows"} == set(parsed)


def test_cli_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err
    assert "durasim manifest: no file or folder at" in err
    assert "absent" in err


def test_cli_import_error_names_the_module(
    write_tree: Callable[[str, dict[str, str]], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_tree("mbroken", {"__init__.py": "", "bad.py": "import no_such_module_xyz\n"})
    assert main(["manifest", str(root)]) == 1
    err = capsys.readouterr().err
    assert "importing module 'mbroken.bad'" in err
    assert "ModuleNotFoundError" in err
    assert "no_such_module_xyz" in err


def test_definition_errors_surface_with_the_module(
    write_tree: Callable[[str, dict[str, str]], Path],
) -> None:
    root = write_tree(
        "msync",
        {
            "__init__.py": "",
            "flows.py": "from durasim.runtime import workflow\n@workflow\ndef ship():\n    pass\n",
        },
    )
    with pytest.raises(ManifestError, match=r"'msync\.flows'.*InvalidDefinition.*ship") as info:
        build_manifest(root)
    assert info.value.module == "msync.flows"
    assert isinstance(info.value.__cause__, InvalidDefinition)


def test_an_unserializable_method_owner_fails_the_manifest(
    write_tree: Callable[[str, dict[str, str]], Path],
) -> None:
    root = write_tree(
        "mowner",
        {
            "__init__.py": "",
            "m.py": """
            from durasim.runtime import step

            class Plain:
                @step
                def work(self):
                    return 1
            """,
        },
    )
    with pytest.raises(
        InvalidDefinition, match=r"Plain#work' is an instance method.*@serializable"
    ):
        build_manifest(root)


def test_a_class_with_one_hook_fails_the_manifest(
    write_tree: Callable[[str, dict[str, str]], Path],
) -> None:
    root = write_tree(
        "mhalf",
        {
            "__init__.py": "",
            "m.py": """
            class Half:
                def __durasim_deserialize__(self):
                    return 1
            """,
        },
    )
    with pytest.raises(InvalidDefinition, match=r"Half defines only __durasim_deserialize__"):
        build_manifest(root)


def test_a_non_python_file_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hi")
    with pytest.raises(ManifestError, match="is not a Python file"):
        build_manifest(text)
