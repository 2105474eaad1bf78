"""docs/scenario-book.md, rendered from :data:`BOOK` (a test keeps the file in step)."""

from __future__ import annotations

from collections.abc import Sequence

from ._model import Scenario

__all__ = ["render_book"]

_HEAD = """\
# The scenario book

<!-- Generated from durasim.scenarios.book.BOOK by render_book(); do not edit by hand.
     Regenerate: DURASIM_UPDATE_GOLDEN=1 pytest tests/scenarios/test_book_docs.py -->

Scripted races, each a plain `async def script(sim) -> None` over the simulator
([simulator.md](simulator.md)). Every scenario pins the log it must produce (types,
entities and order of the events that matter, and the run's outcome), then checks every
finished run with `check_invariants` and `verify_replay`. The tests run each one on the
in-memory, SQLite and PostgreSQL Worlds (`tests/scenarios/test_book.py`); a handful have
golden traces under `tests/golden/book/`.

```python
from durasim.scenarios.book import BOOK, run_scenario
from durasim.worlds import World, WorldSetup

def make(setup: WorldSetup) -> World:
    return MyWorld(clock=setup.clock, ids=setup.ids)


for scenario in BOOK:
    result = run_scenario(scenario, store=make)
    print(scenario.name, result.ok, result.detail)
```

`run_scenario(scenario, *, store=None, seed=0)` runs one in a fresh `Sim` over a fresh World
from the factory `make(setup: WorldSetup) -> World` (default: `MemoryWorld`; see
[worlds.md](worlds.md#one-factory-shape)) and returns a
`ScenarioResult` (`ok`, `detail`, `trace`, `trace_hash`, `skipped`). A scenario whose
`requires` names a capability the World declares false is skipped. A scenario with
`known_red` fails today for the reason given (a known bug); its test is a strict xfail, so
the fix turns it into an error until the mark is removed.
"""


def render_book(book: Sequence[Scenario]) -> str:
    """The book as Markdown: a summary table, then one section per scenario."""
    reds = [s for s in book if s.known_red]
    lines = [
        _HEAD,
        f"{len(book)} scenarios, {len(reds)} known red.",
        "",
        "| scenario | the race |",
        "|---|---|",
    ]
    for scenario in book:
        first = scenario.doc.split("\n\n", 1)[0].replace("\n", " ")
        mark = " **(known red)**" if scenario.known_red else ""
        lines.append(f"| [`{scenario.name}`](#{scenario.name}){mark} | {first} |")
    for scenario in book:
        lines += ["", f"## {scenario.name}", "", scenario.doc]
        requires = sorted(scenario.requires - {"in_band_fence", "batch"})
        if requires:
            lines += ["", f"Requires: {', '.join(requires)}."]
        if scenario.limits is not None:
            lines += ["", f"Limits: `{scenario.limits!r}`."]
        if scenario.known_red:
            lines += ["", f"**Known red.** {scenario.known_red}."]
    return "\n".join(lines) + "\n"
