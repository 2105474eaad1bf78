"""Headless Chromium for the tests of the timeline page: the DOM after its script ran.

A test that needs the browser calls :func:`chromium`: where Chromium is not
installed it is skipped with the reason, except in CI (``CI`` set), where
``.ci/run`` installs it and its absence is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium() -> str:
    """The path of a Chromium executable (or skip, or fail in CI)."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail(
            "headless Chromium is not installed: .ci/run installs it (apt-get install -y chromium)"
        )
    pytest.skip(
        "headless Chromium is not installed here (apt-get install -y chromium); CI runs this test"
    )


def _flags(profile: Path) -> list[str]:
    return [
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        # Lets the page's script finish before the dump, in virtual time.
        "--virtual-time-budget=10000",
    ]


def dump_dom(page: Path, profile: Path) -> str:
    """The page's DOM, serialized after its script ran."""
    done = subprocess.run(
        [chromium(), *_flags(profile), "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """Every element of a dumped DOM: ``(tag, attributes)``, and the text by element id."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []
        self.title = ""
        self._in_title = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.elements.append((tag, values))
        self._in_title = tag == "title" and not self.title
        if "id" in values:
            self.text.setdefault(values["id"], "")
        self._open.append(values.get("id"))

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        for key in self._open:
            if key is not None:
                self.text[key] += data

    def count(self, tag: str, cls: str) -> int:
        """Elements ``tag`` whose class list has ``cls``."""
        return sum(t == tag and cls in a.get("class", "").split() for t, a in self.elements)

    def tags(self, tag: str) -> list[dict[str, str]]:
        """The attributes of every ``tag`` element."""
        return [a for t, a in self.elements if t == tag]
