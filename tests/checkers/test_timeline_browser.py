"""The timeline page in a real browser: headless Chromium runs its script, the DOM is checked."""

from __future__ import annotations

from pathlib import Path

import timelineflows as flows
from _browser import Dom, dump_dom

from durasim.checkers import PAGE_SIZE, render_timeline_html, timeline_from_log


def _open(tmp_path: Path, n: int) -> tuple[Dom, int]:
    _, events = flows.failed_run(n)
    page = tmp_path / "run.html"
    page.write_text(render_timeline_html(timeline_from_log(events)), encoding="utf-8")
    return Dom(dump_dom(page, tmp_path / "profile")), len(events)


def test_the_script_builds_a_row_and_a_mark_per_event_and_highlights_the_failure(
    tmp_path: Path,
) -> None:
    dom, events = _open(tmp_path, 3)
    body = dom.tags("body")[0]
    assert body["data-rendered"] == str(events)  # the script ran to its end
    assert dom.count("tr", "mark-row") == events
    # The failing step and the run's end: highlighted rows, ringed marks, a verdict.
    assert dom.count("tr", "failure") == 2
    assert dom.count("circle", "failure-ring") == 2
    assert dom.count("line", "failure-line") == 2
    assert dom.count("div", "verdict") == 1
    assert dom.count("button", "goto-failure") == 2
    # One SVG mark per event, on six lanes (the run, three charges, the wait, ship).
    assert dom.count("circle", "mark") == events
    assert dom.count("text", "lane-label") == 6
    assert f"marks 1\u2013{events} of {events}" in dom.text["page-label"]


def test_hostile_strings_stay_text_in_the_browser(tmp_path: Path) -> None:
    dom, _ = _open(tmp_path, 1)
    assert dom.title.startswith("durasim run") or dom.title.startswith("run ")
    assert "pwned" not in dom.title  # no payload's script ran
    assert dom.tags("img") == []  # no payload's element was made
    rows = dom.text["rows"]
    assert flows.HOSTILE_ORDER in rows  # shown as the text it is
    assert flows.HOSTILE_ERROR in rows


def test_a_long_log_shows_one_page_at_a_time_from_the_failure(tmp_path: Path) -> None:
    dom, events = _open(tmp_path, 400)  # 1,217 events: five pages
    assert events > 4 * PAGE_SIZE
    last = events - (events - 1) // PAGE_SIZE * PAGE_SIZE
    # The page opens where the failure is: the last page.
    assert dom.count("tr", "mark-row") == last
    assert dom.count("tr", "failure") == 2
    assert f"of {events} (page 5 of 5)" in dom.text["page-label"]
    assert dom.count("circle", "mark") == last
    assert dom.tags("body")[0]["data-rendered"] == str(events)
