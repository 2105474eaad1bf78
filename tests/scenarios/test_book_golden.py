"""Golden traces of a few scenarios, and the generated docs/scenario-book.md.

Both are compared byte for byte.  After an intended change, regenerate with
``DURASIM_UPDATE_GOLDEN=1 pytest tests/scenarios/test_book_golden.py`` and
commit the diff (read it first: a trace change is a behaviour change).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durasim.scenarios.book import BOOK, render_book, run_scenario

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "book"
UPDATE = bool(os.environ.get("DURASIM_UPDATE_GOLDEN"))

TRACED = [
    "hook-at-step-started",
    "fork-hook-after-timeout",
    "stale-read-step-count-fork",
    "fenced-overlap-after-lease-expiry",
    "crash-between-step-end-and-record",
    "cancel-mid-step",
    "lease-lapses-mid-step",
    "stalled-heartbeat-resumes-after-takeover",
    "renewal-fails-mid-step",
]


def _compare(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with DURASIM_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs: run with DURASIM_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", TRACED)
def test_golden_trace(name: str) -> None:
    scenario = next(s for s in BOOK if s.name == name)
    result = run_scenario(scenario)
    assert result.ok, result.detail
    _compare(GOLDEN / f"{name}.txt", result.trace)


def test_the_docs_page_matches_the_book() -> None:
    _compare(ROOT / "docs" / "scenario-book.md", render_book(BOOK))
