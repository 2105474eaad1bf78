"""A :class:`~durasim.checkers.Timeline` as one self-contained HTML page.

Nothing is fetched: the styles, the script and the drawing (SVG, built by the
script) are inline, and the page's content security policy forbids any other
source, so it opens from a file, offline, and an attachment cannot call home.

Every string of the timeline (payloads, step names, errors) is either escaped
here (the head, the verdicts) or set by the script as text (``textContent``),
never parsed as markup.  The marks travel as JSON in a ``<script
type="application/json">`` element with ``<``, ``>`` and ``&`` written as
``\\u003c``... so no payload can close it.

A long log stays usable: the script shows one page of marks at a time (lanes,
spans and the table of that page), with a filter over lanes, kinds and details;
the model itself is bounded (``MAX_MARKS``, ``MAX_DETAIL``).
"""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any

from ._timeline import Timeline

__all__ = ["PAGE_SIZE", "render_timeline_html"]

#: Marks per page of the table and the chart.
PAGE_SIZE = 250


def render_timeline_html(timeline: Timeline, *, page_size: int = PAGE_SIZE) -> str:
    """The page (a complete HTML document) showing ``timeline``.

    Args:
        timeline: what to show.
        page_size: marks per page.
    """
    esc = html.escape
    summary = "".join(
        f"<tr><th>{esc(name)}</th><td>{esc(value)}</td></tr>" for name, value in timeline.summary
    )
    failures = [m.index for m in timeline.marks if m.failure]
    if timeline.verdicts:
        verdicts = "".join(
            f'<div class="verdict"><h2>{esc(v.kind)}</h2><pre>{esc(v.detail)}</pre></div>'
            for v in timeline.verdicts
        )
        if failures:
            verdicts += (
                '<p class="goto">Failure point: '
                + " ".join(
                    f'<button type="button" class="goto-failure" data-mark="{i}">'
                    f"mark {i + 1}</button>"
                    for i in failures[:20]
                )
                + "</p>"
            )
    else:
        verdicts = '<p class="ok">Nothing failed.</p>'
    left_out = (
        f'<p class="left-out">{timeline.left_out} marks in the middle were left out '
        f"(the first and last {len(timeline.marks) // 2} and every failure are shown).</p>"
        if timeline.left_out
        else ""
    )
    return _PAGE.format(
        title=esc(timeline.title),
        css=_asset("timeline.css"),
        js=_asset("timeline.js"),
        summary=summary,
        verdicts=verdicts,
        left_out=left_out,
        data=_script_json(_data(timeline, page_size)),
    )


def _data(timeline: Timeline, page_size: int) -> dict[str, Any]:
    lanes = {lane.key: i for i, lane in enumerate(timeline.lanes)}
    return {
        "page": page_size,
        "lanes": [[lane.label, lane.kind] for lane in timeline.lanes],
        "marks": [
            [
                round(m.at, 6),
                lanes.get(m.lane, 0),
                m.kind,
                m.label,
                m.detail,
                m.seq,
                m.status,
                1 if m.failure else 0,
            ]
            for m in timeline.marks
        ],
        "spans": [
            [lanes.get(s.lane, 0), s.start, s.end, s.status, s.label]
            for s in timeline.spans
            if s.lane in lanes
        ],
    }


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` left as such."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _asset(name: str) -> str:
    return resources.files("durasim.checkers").joinpath(name).read_text(encoding="utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<header>
<h1>{title}</h1>
<table class="summary">{summary}</table>
</header>
<section id="verdicts">{verdicts}</section>
{left_out}
<noscript><p>The timeline is drawn by the page's script: enable JavaScript to see it.</p></noscript>
<nav id="pager">
<button type="button" id="prev">&larr; earlier</button>
<span id="page-label"></span>
<button type="button" id="next">later &rarr;</button>
<input id="filter" type="search" placeholder="filter: lane, kind, text">
</nav>
<p class="legend"><span class="key event"></span>event committed \
<span class="key call"></span>World call <span class="key sim"></span>delivery, fault, note \
<span class="key failed"></span>failed or refused <span class="key retry"></span>retrying \
<span class="key ring"></span>failure point &middot; bars: a step, hook or wait from start \
to end &middot; the axis is the order things happened in, labelled with their time</p>
<div id="chart"></div>
<table id="marks">
<thead><tr><th>#</th><th>time</th><th>lane</th><th>what</th><th>detail</th></tr></thead>
<tbody id="rows"></tbody>
</table>
<script type="application/json" id="timeline-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""
