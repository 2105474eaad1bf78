"""One workflow id however its module is loaded (issue 15, bug B).

A script's ``__main__`` is named as a worker would import it; ``durasim run
path.py:wf`` and ``durasim worker pkg.mod`` agree; a file imported under two
names keeps one id; a script nothing can import is refused, saying how to run it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from durasim.runtime import DefinitionNotFound, InvalidDefinition, Worker, get_run
from durasim.runtime._modules import importable_name, module_name_of
from durasim.runtime.lowlevel import find_workflow, step_definition, workflow_definition
from durasim.scenarios import main
from durasim.scenarios._cli_runs import import_module, load_target
from durasim.worlds import SQLiteWorld

FLOWS = """\
import asyncio
import sys

from durasim.runtime import start, step, workflow


@step
def square(x):
    return x * x


@workflow
async def squares(n):
    return [await square(i) for i in range(n)]


async def _start(path):
    from durasim.worlds import SQLiteWorld

    world = SQLiteWorld(path)
    run = await start(squares, 4, world=world, run_id="sq")
    print(run.run_id, (await world.runs.get("sq")).workflow_name)
    await world.close()


if __name__ == "__main__":
    asyncio.run(_start(sys.argv[1]))
"""


def _project(root: Path, package: str) -> Path:
    """``root/<package>/__init__.py`` and ``root/<package>/flows.py``; the flows file."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    flows = root / package / "flows.py"
    flows.write_text(FLOWS)
    return flows


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Modules a test imports from its tmp project are forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))


# -- the importable name of a file --------------------------------------------------


def test_a_file_is_named_below_the_current_directory_with_its_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    flows = _project(tmp_path, "shop")
    (tmp_path / "scripts").mkdir()
    loose = tmp_path / "scripts" / "tool.py"
    loose.write_text("")
    monkeypatch.chdir(tmp_path)
    assert importable_name(flows) == "shop.flows"
    assert importable_name(tmp_path / "shop" / "__init__.py") == "shop"
    assert importable_name(loose) == "scripts.tool"  # a folder without __init__: a namespace
    # Run as a script, a file's own folder is on sys.path for that process only.
    monkeypatch.setattr(sys, "path", [str(flows.parent), *sys.path])
    assert importable_name(flows, script=True) == "shop.flows"
    monkeypatch.chdir(tmp_path / "scripts")
    assert importable_name(loose, script=True) == "tool"  # its folder is the current one


def test_the_deepest_import_root_wins_and_outside_every_root_there_is_no_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    flows = _project(tmp_path / "src", "shop")
    monkeypatch.chdir(tmp_path)
    assert importable_name(flows) == "src.shop.flows"
    monkeypatch.syspath_prepend(str(tmp_path / "src"))  # an editable install's src/
    assert importable_name(flows) == "shop.flows"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outside = _project(tmp_path / "other", "tools")
    assert importable_name(outside) is None
    bad = tmp_path / "src" / "my-tools.py"
    bad.write_text("")
    assert importable_name(bad) is None  # not an identifier: nothing imports it


def test_a_script_below_no_root_is_named_by_its_stem_unless_it_is_in_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    loose = tmp_path / "far" / "farscript.py"
    loose.parent.mkdir()
    loose.write_text("")
    packaged = _project(tmp_path / "proj", "farpkg")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    # As Python runs a script: its folder first on sys.path, for this process only.
    monkeypatch.setattr(sys, "path", [str(loose.parent), *sys.path])
    assert importable_name(loose, script=True) == "farscript"  # a worker run in far/ imports it
    monkeypatch.setattr(sys, "path", [str(packaged.parent), *sys.path[1:]])
    assert importable_name(packaged, script=True) is None  # `flows` would not be farpkg.flows


def test_main_is_named_by_python_m_or_by_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    flows = _project(tmp_path, "shop")
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("shop.flows", flows)
    assert module_name_of({"__name__": "__main__", "__spec__": spec}) == "shop.flows"
    script = {"__name__": "__main__", "__spec__": None, "__file__": str(flows)}
    assert module_name_of(script) == "shop.flows"
    assert module_name_of({"__name__": "__main__"}) is None  # an interactive session
    assert module_name_of({"__name__": "shop.flows"}) == "shop.flows"


# -- refusals ---------------------------------------------------------------------------


def test_a_workflow_in_an_interactive_main_is_refused_saying_how_to_run_it() -> None:
    source = textwrap.dedent(
        """
        from durasim.runtime import workflow

        @workflow
        async def typed_in():
            return 1
        """
    )
    with pytest.raises(InvalidDefinition) as info:
        exec(source, {"__name__": "__main__"})
    message = str(info.value)
    assert "typed_in is defined in __main__ (an interactive session" in message
    assert "python -m pkg.mod" in message
    assert "module='pkg.mod'" in message

    named = source.replace("@workflow", "@workflow(module='typed_in_module')")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(named, namespace)
    definition = workflow_definition(namespace["typed_in"])
    assert definition.workflow_id == "workflow//typed_in_module//typed_in"


def test_a_script_no_worker_can_import_is_refused_at_definition(tmp_path: Path) -> None:
    flows = _project(tmp_path / "elsewhere", "loose")
    (tmp_path / "work").mkdir()
    done = _python(str(flows), str(tmp_path / "w.db"), cwd=tmp_path / "work")
    assert done.returncode != 0
    assert "InvalidDefinition" in done.stderr
    assert f"square is defined in __main__ (the script {flows})" in done.stderr
    assert "python -m pkg.mod" in done.stderr


def test_a_file_imported_under_two_names_keeps_the_id_of_its_first_import(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    isolated: None,
) -> None:
    _project(tmp_path, "twice_pkg")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = importlib.import_module("twice_pkg.flows")
    assert workflow_definition(first.squares).workflow_id == "workflow//twice_pkg.flows//squares"
    monkeypatch.syspath_prepend(str(tmp_path / "twice_pkg"))
    with caplog.at_level(logging.WARNING, logger="durasim.runtime"):
        second = importlib.import_module("flows")  # the same file, as a top-level module
    assert second is not first
    assert workflow_definition(second.squares).fn.__module__ == "flows"
    definition = workflow_definition(second.squares)
    assert definition.workflow_id == "workflow//twice_pkg.flows//squares"
    assert step_definition(second.square).step_id == "step//twice_pkg.flows//square"
    # One registration per id, of the latest copy (the same code).
    assert find_workflow("workflow//twice_pkg.flows//squares") is definition
    with pytest.raises(DefinitionNotFound):
        find_workflow("workflow//flows//squares")
    assert "was imported again as module 'flows' (first as 'twice_pkg.flows')" in caplog.text
    assert "keeps its id 'workflow//twice_pkg.flows//squares'" in caplog.text


# -- a script, the CLI and a worker agree ---------------------------------------------------


def test_a_run_started_by_a_script_is_finished_by_a_worker_importing_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated: None
) -> None:
    _project(tmp_path, "scriptshop")
    world_path = tmp_path / "w.db"
    started = _python("scriptshop/flows.py", str(world_path), cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["sq", "workflow//scriptshop.flows//squares"]

    # What `durasim worker scriptshop.flows` does, here: import the module, serve.
    monkeypatch.chdir(tmp_path)
    import_module("scriptshop.flows")

    async def serve() -> Any:
        world = SQLiteWorld(str(world_path))
        try:
            return await Worker(world).run_until_complete(get_run("sq", world=world))
        finally:
            await world.close()

    assert asyncio.run(serve()) == [0, 1, 4, 9]


def test_python_m_names_the_workflow_as_the_script_does(tmp_path: Path) -> None:
    _project(tmp_path, "mshop")
    started = _python("-m", "mshop.flows", str(tmp_path / "w.db"), cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["sq", "workflow//mshop.flows//squares"]


def test_durasim_run_with_a_path_and_with_a_module_give_one_workflow_id(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    isolated: None,
) -> None:
    _project(tmp_path, "clishop")
    monkeypatch.chdir(tmp_path)
    by_path = load_target("clishop/flows.py:squares")
    by_name = load_target("clishop.flows:squares")
    assert by_path is by_name  # one module, imported once, under the worker's name
    assert workflow_definition(by_path).workflow_id == "workflow//clishop.flows//squares"
    assert main(["run", "clishop/flows.py:squares", "3", "--world", "w.db"]) == 0
    assert json.loads(capsys.readouterr().out) == [0, 1, 4]
    assert main(["inspect", "runs", "--json", "--world", "w.db"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["workflow"] == "workflow//clishop.flows//squares"


def test_durasim_run_of_a_file_outside_the_current_directory_says_what_it_did(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    isolated: None,
) -> None:
    flows = tmp_path / "far" / "farflows.py"
    flows.parent.mkdir()
    flows.write_text(FLOWS)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    target = load_target(f"{flows}:squares")
    assert workflow_definition(target).workflow_id == "workflow//farflows//squares"
    err = capsys.readouterr().err
    assert "is not below the current directory or a sys.path entry" in err
    assert "loaded it as module 'farflows'" in err
    assert f"cd {flows.parent} && durasim worker farflows" in err
