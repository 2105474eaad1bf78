"""The timeline model (from a run's log, from a simulation) and its HTML page."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import attrs
import timelineflows as flows

from durasim.checkers import (
    MAX_MARKS,
    check_log,
    render_timeline_html,
    timeline_from_log,
    timeline_from_sim,
)
from durasim.worlds import Event, EventType

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def _data(page: str) -> dict[str, object]:
    found = re.search(r'<script type="application/json" id="timeline-data">(.*?)</script>', page)
    assert found is not None
    value: dict[str, object] = json.loads(found.group(1))
    return value


def test_a_failed_runs_log_has_a_lane_per_entity_and_its_failure_highlighted() -> None:
    _, events = flows.failed_run(3)
    timeline = timeline_from_log(events)
    labels = [lane.label for lane in timeline.lanes]
    assert labels[0] == f"run {events[0].run_id}"
    assert labels[1:] == [
        "step charge#1",
        "step charge#2",
        "step charge#3",
        "wait sleep/checkout:dd23ef#1",
        "step ship#1",
    ]
    assert [m.seq for m in timeline.marks] == [e.seq for e in events]
    assert [m.index for m in timeline.marks] == list(range(len(events)))
    # The wait lasted five virtual seconds: the marks carry the time.
    assert timeline.marks[-1].at == 5.0
    statuses = {(s.lane.rsplit("//", 1)[-1], s.status) for s in timeline.spans}
    assert ("charge#1", "completed") in statuses
    assert ("ship#1", "failed") in statuses
    assert ("sleep/checkout:dd23ef#1", "completed") in statuses
    # The failing step and the run's end are the failure point; the verdict says why.
    assert [(m.label, m.seq) for m in timeline.failures] == [
        ("step_failed", 16),
        ("run_failed", 17),
    ]
    (verdict,) = timeline.verdicts
    assert verdict.kind == "run failed (USER_ERROR)"
    assert "in step step//timelinetests//ship#1 (#16)" in verdict.detail
    assert "FatalError: <script>" in verdict.detail
    assert verdict.seqs == (16, 17)
    # Payloads are decoded in the marks' details.
    completed = next(m for m in timeline.marks if m.label == "step_completed")
    assert "result: 0" in completed.detail


def test_a_completed_run_has_no_verdict() -> None:
    _, events = flows.failed_run(2)
    ended = [
        *events[:-4],
        attrs.evolve(events[-1], seq=len(events) - 3, type=EventType.RUN_COMPLETED),
    ]
    timeline = timeline_from_log(ended)
    assert timeline.verdicts == ()
    assert timeline.failures == ()
    assert "Nothing failed." in render_timeline_html(timeline)


def test_a_broken_rule_is_a_verdict_and_the_positions_it_names_are_highlighted() -> None:
    _, events = flows.failed_run(3)
    broken = [*events, attrs.evolve(events[4], seq=len(events) + 1)]  # #5 again, after the end
    report = check_log(broken)
    assert not report.ok
    timeline = timeline_from_log(broken, report=report)
    kinds = [v.kind for v in timeline.verdicts]
    assert kinds.count("invariants") == len(report.violations)
    assert {18, 17, 5} <= {m.seq for m in timeline.failures}
    page = render_timeline_html(timeline)
    assert page.count('<div class="verdict">') == 1 + len(report.violations)
    assert "after the run ended at #17" in page


def test_every_string_is_escaped_and_nothing_is_fetched() -> None:
    _, events = flows.failed_run(1)
    page = render_timeline_html(timeline_from_log(events, title="<b>title</b>"))
    # Nothing from the run reaches the page as markup: the head and verdicts are
    # escaped, the marks are JSON with <, > and & written as \u003c...
    for raw in ("<script>document", "<img", "<b>title", "</script></script>"):
        assert raw not in page
    assert "&lt;b&gt;title&lt;/b&gt;" in page
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert page.count("<script") == 2  # the data block and the page's own script
    data = _data(page)
    details = " ".join(str(m[4]) for m in data["marks"])  # type: ignore[union-attr]
    assert flows.HOSTILE_ORDER in details  # the JSON decodes back to the very text
    # No network: no URL but the SVG namespace's name, no src or href at all.
    assert re.findall(r"https?://[^\s\"'<>]+", page) == [SVG_NAMESPACE]
    assert not re.search(r"<[^>]*\b(src|href)\s*=", page, re.IGNORECASE)
    assert "default-src 'none'" in page  # and the page's policy forbids any fetch


def test_a_huge_log_is_bounded_and_keeps_its_failure() -> None:
    _, events = flows.failed_run(1)
    start, failing = events[:5], events[-2:]
    filler = [
        attrs.evolve(
            events[3],
            seq=6 + i,
            type=EventType.STEP_STARTED,
            created_at=events[3].created_at + timedelta(seconds=i),
            data={"attempt": i + 2},
        )
        for i in range(MAX_MARKS + 5_000)
    ]
    tail = [attrs.evolve(e, seq=6 + len(filler) + i) for i, e in enumerate(failing)]
    log: list[Event] = [*start, *filler, *tail]
    timeline = timeline_from_log(log)
    assert len(timeline.marks) == MAX_MARKS
    assert timeline.left_out == len(log) - MAX_MARKS
    assert [m.label for m in timeline.failures] == ["step_failed", "run_failed"]
    assert [m.index for m in timeline.marks] == list(range(MAX_MARKS))
    # The spans moved with their marks: the run's from the first to the last; the
    # step started again and again (the filler) from the sixth mark to the end.
    run_span = next(s for s in timeline.spans if s.lane == "")
    assert (run_span.start, run_span.end) == (0, MAX_MARKS - 1)
    charge = [(s.start, s.end, s.status) for s in timeline.spans if s.lane == log[2].correlation_id]
    assert charge == [(2, 4, "completed"), (5, MAX_MARKS - 1, "running")]
    ship = next(s for s in timeline.spans if s.lane == log[-2].correlation_id)
    assert timeline.marks[ship.start].label == "step_failed"
    page = render_timeline_html(timeline)
    assert f"{timeline.left_out} marks in the middle were left out" in page
    assert len(page) < 8_000_000


def test_a_simulation_has_a_lane_per_writer_and_a_mark_per_call() -> None:
    sim, events = flows.failed_run(2)
    timeline = timeline_from_sim(sim, title="sim")
    lanes = [lane.label for lane in timeline.lanes]
    assert lanes[0] == "simulation"
    # The sleep ends the first delivery: the failing step runs in the second.
    assert {"external", "orch d1", "step:charge d1", "orch d2", "step:ship d2"} <= set(lanes)
    calls = {p.seq for p in sim.points}
    assert sum(m.kind in ("call", "reject") for m in timeline.marks) == len(calls)
    # Every committed event is in some mark's detail, in log order.
    committed = [m.seq for m in timeline.marks if m.seq is not None]
    assert committed == sorted(committed)
    details = "\n".join(m.detail for m in timeline.marks)
    for event in events:
        assert f"#{event.seq} {event.type.value}" in details
    # The durable sleep moved the virtual clock: the calls after it are at +5s.
    assert timeline.marks[0].at == 0.0
    assert timeline.marks[-1].at == 5.0
    assert [m.at for m in timeline.marks] == sorted(m.at for m in timeline.marks)
    assert timeline.verdicts == ()


def test_a_simulations_verdict_highlights_the_positions_it_names() -> None:
    sim, events = flows.failed_run(2)
    run_id = events[0].run_id
    failures = [
        ("invariants", f"[step.one_terminal] run {run_id}: #5 step_completed ended at #4"),
        ("determinism", "the traces part at line 3:\n  first:  a\n  replay: b"),
    ]
    timeline = timeline_from_sim(sim, failures=failures)
    assert [v.kind for v in timeline.verdicts] == ["invariants", "determinism"]
    assert timeline.verdicts[0].seqs == (5, 4)
    highlighted = "\n".join(m.detail for m in timeline.failures)
    assert "#4 step_started" in highlighted
    assert "#5 step_completed" in highlighted
    # The third line of the trace is a mark of its own or part of a call's.
    assert len(timeline.failures) >= 3
    page = render_timeline_html(timeline)
    assert page.count('class="goto-failure"') == len(timeline.failures)
