"""``durasim inspect run ID --html FILE`` and ``durasim reproduce SEED --html FILE``."""

from __future__ import annotations

import json
from pathlib import Path

import exploreflows as flows
import pytest
from _browser import Dom, dump_dom

from durasim.scenarios import explore, main


def test_inspect_run_html_draws_the_runs_steps_hooks_and_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "world.db"
    assert main(["demo", "--db", str(db)]) == 0
    assert main(["inspect", "runs", "--world", str(db), "--json"]) == 0
    capsys.readouterr()
    assert main(["inspect", "runs", "--world", str(db), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    page = tmp_path / "run.html"
    assert main(["inspect", "run", row["run_id"], "--world", str(db), "--html", str(page)]) == 0
    assert f"({12} events) written to {page}" in capsys.readouterr().out
    dom = Dom(dump_dom(page, tmp_path / "profile"))
    lanes = [a for t, a in dom.elements if t == "text" and "lane-label" in a.get("class", "")]
    assert len(lanes) == 4  # the run, the step, the hook, the wait
    assert dom.count("tr", "mark-row") == 12
    assert dom.count("tr", "failure") == 0
    assert "Nothing failed." in page.read_text()
    rows = dom.text["rows"]
    for lane in ("step charge#1", "hook approval#1", "wait nap#1"):
        assert lane in rows
    assert "step_retrying" in rows


def test_inspect_html_wants_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "world.db"
    main(["demo", "--db", str(db)])
    with pytest.raises(SystemExit):
        main(["inspect", "runs", "--world", str(db), "--html", str(tmp_path / "x.html")])
    assert "--html draws one run" in capsys.readouterr().err
    assert main(["inspect", "run", "--world", str(db), "--html", str(tmp_path / "x.html")]) == 1
    assert "--html needs a run id" in capsys.readouterr().err
    assert (
        main(
            ["inspect", "run", "wrun_nope", "--world", str(db), "--html", str(tmp_path / "x.html")]
        )
        == 1
    )
    assert "wrun_nope" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_reproduce_html_shows_every_writers_calls_and_the_failed_property(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flows.reset()
    failure = explore(
        flows.welcome, "ann", property=flows.sent_once, setup=flows.reset, seed=0, max_examples=300
    ).failure
    assert failure is not None
    flows.reset()
    page = tmp_path / "seed.html"
    capsys.readouterr()
    assert main(["reproduce", failure.seed, "--no-trace", "--html", str(page)]) == 1
    out = capsys.readouterr().out
    assert "verdict: property" in out
    assert f"timeline written to {page}" in out
    dom = Dom(dump_dom(page, tmp_path / "profile"))
    lanes = dom.text["rows"]
    # The crash of the first delivery, then the second delivery sends again.
    for writer in ("orch d1", "step:send_email d1", "orch d2", "step:send_email d2"):
        assert writer in lanes
    assert "crash orch d1 at step:send_email d1" in lanes
    assert dom.count("div", "verdict") == 1
    assert dom.count("tr", "failure") >= 1
    assert dom.count("circle", "failure-ring") >= 1
    # One square per World call, a circle per other line (events outside calls, deliveries):
    # d1 crashes at its 6th call; d2 reads the run and its log, writes step_started, then
    # step_completed with run_completed in one batch (the run, no child, is not read again).
    assert dom.count("rect", "call") == 6 + 4
    assert "property" in page.read_text()
