"""Write the timeline pages of docs/timeline.md and their screenshots (headless Chromium).

    python docs/make_screenshots.py [--out docs]

1. a run that fails (three charges, a durable sleep, a step that raises) is
   simulated and drawn from its log, as ``durasim inspect run ID --html`` draws
   a stored run: ``timeline-run.png``;
2. an exploration finds a non-idempotent step (an email sent twice after a
   crash) and its seed is replayed and drawn, as ``durasim reproduce SEED
   --html`` does: ``timeline-reproduce.png``.

The pages themselves go to ``--pages DIR`` (default: a temporary folder).

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from durasim.checkers import render_timeline_html, timeline_from_log
from durasim.runtime import FatalError, Run, sleep, step, workflow
from durasim.scenarios import explore, write_reproduction_html
from durasim.sim import RunOutcome, Sim
from durasim.worlds import Event

SENT: list[str] = []


@step
def charge(amount: int) -> int:
    return amount


@step(max_retries=0)
def ship(order: str) -> str:
    raise FatalError(f"no shipping address for order {order}")


@workflow
async def checkout(items: int) -> str:
    for amount in range(items):
        await charge(amount)
    await sleep(3600)  # a durable hour: a jump of the virtual clock
    return await ship("o-17")


@step
def send_email(to: str) -> str:
    SENT.append(to)  # not idempotent: a body that runs twice sends twice
    return f"sent to {to}"


@workflow
async def welcome(user: str) -> str:
    await charge(1)
    return await send_email(user)


def sent_once(outcome: RunOutcome, log: Sequence[Event]) -> bool:
    return len(SENT) <= 1


def _run_page(path: Path) -> None:
    sim = Sim()

    async def script(sim: Sim) -> list[Event]:
        outcome = await sim.run(checkout, 3)
        return await Run(run_id=outcome.run_id, world=sim.store).events()

    events = sim.run_sync(script)
    timeline = timeline_from_log(events, title=f"durasim run {events[0].run_id}")
    path.write_text(render_timeline_html(timeline), encoding="utf-8")


def _reproduce_page(path: Path) -> None:
    result = explore(welcome, "ann", property=sent_once, setup=SENT.clear, seed=0, max_examples=300)
    if result.failure is None:
        raise SystemExit("the exploration found no failure to draw")
    SENT.clear()
    write_reproduction_html(result.failure.seed, path)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("no Chromium found: apt-get install -y chromium")


def _screenshot(page: Path, png: Path, *, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(  # noqa: S603 -- the local browser, our own file
            [
                _chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=10000",
                f"--window-size=1400,{height}",
                f"--screenshot={png.resolve()}",
                page.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent, help="PNG folder")
    parser.add_argument("--pages", default=None, help="HTML folder (default: a temporary one)")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    pages = Path(parser.parse_args().pages or tempfile.mkdtemp(prefix="durasim-timeline-"))
    pages.mkdir(parents=True, exist_ok=True)
    _run_page(pages / "timeline-run.html")
    _screenshot(pages / "timeline-run.html", out / "timeline-run.png", height=900)
    _reproduce_page(pages / "timeline-reproduce.html")
    _screenshot(pages / "timeline-reproduce.html", out / "timeline-reproduce.png", height=1150)
    for name in ("timeline-run", "timeline-reproduce"):
        print(f"wrote {pages / (name + '.html')} and {out / (name + '.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
