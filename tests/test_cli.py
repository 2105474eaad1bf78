"""The ``durasim`` command: the README's main job works on a fresh file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from durasim.scenarios import main
from durasim.worlds import RunStatus, SQLiteWorld


def test_demo_journals_a_completed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "#1 run_created" in out
    assert "#12 run_completed" in out

    async def inspect() -> tuple[RunStatus, int]:
        world = SQLiteWorld(db)
        try:
            page = await world.runs.list()
            (run,) = page.runs
            log = await world.events.list(run.run_id)
            world._check()
            return run.status, log.snapshot.seq
        finally:
            await world.close()

    assert asyncio.run(inspect()) == (RunStatus.COMPLETED, 12)
    assert main(["log", str(db)]) == 0
    assert "completed" in capsys.readouterr().out


def test_log_of_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no World at"):
        main(["log", str(tmp_path / "absent.db")])


def test_log_of_an_unknown_run_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    main(["demo", "--db", str(db)])
    capsys.readouterr()
    assert main(["log", str(db), "wrun_nope"]) == 1
    assert "does not exist" in capsys.readouterr().err
