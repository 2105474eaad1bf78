"""durasim.scenarios: the user-facing top.

* :func:`explore` / :func:`explores`: Hypothesis searches schedules and faults
  of a workflow, shrinks a failure and prints a seed, a regression script and
  a trace (docs/exploration.md); :func:`sometimes` marks situations an
  exploration must reach; :func:`reproduce` (``durasim reproduce SEED``)
  replays a seed; :func:`write_reproduction_html` and :func:`write_run_html`
  draw a seed's execution or a stored run as a timeline page (docs/timeline.md).
* the ``durasim`` command (:func:`main`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ._cli import main
    from ._example import AUTHORING_ERRORS, LEASE_TAKEOVER, VERDICT_KINDS, ExampleReport
    from ._explore import explore, explores
    from ._harness import drive
    from ._reproduce import reproduce, write_reproduction_html
    from ._results import ExploreFailure, ExploreResult, ExploreStats
    from ._schedulers import PCTScheduler, RandomScheduler, RecordingSource, Scheduling
    from ._seeds import SEED_PREFIX, ExampleConfig, SeedError
    from ._sometimes import Reachability, sometimes
    from ._timeline_run import write_run_html

__all__ = [
    "AUTHORING_ERRORS",
    "LEASE_TAKEOVER",
    "SEED_PREFIX",
    "VERDICT_KINDS",
    "ExampleConfig",
    "ExampleReport",
    "ExploreFailure",
    "ExploreResult",
    "ExploreStats",
    "PCTScheduler",
    "RandomScheduler",
    "Reachability",
    "RecordingSource",
    "Scheduling",
    "SeedError",
    "drive",
    "explore",
    "explores",
    "main",
    "reproduce",
    "sometimes",
    "write_reproduction_html",
    "write_run_html",
]

# Every public name is imported when first used (see ._lazy: the pytest plugin lives
# in this package). The imports above are for static tools; tests/test_plugin.py
# checks that both lists agree.
_LAZY = {
    "AUTHORING_ERRORS": "._example",
    "ExampleConfig": "._seeds",
    "ExampleReport": "._example",
    "ExploreFailure": "._results",
    "ExploreResult": "._results",
    "ExploreStats": "._results",
    "LEASE_TAKEOVER": "._example",
    "PCTScheduler": "._schedulers",
    "RandomScheduler": "._schedulers",
    "Reachability": "._sometimes",
    "RecordingSource": "._schedulers",
    "SEED_PREFIX": "._seeds",
    "Scheduling": "._schedulers",
    "SeedError": "._seeds",
    "VERDICT_KINDS": "._example",
    "drive": "._harness",
    "explore": "._explore",
    "explores": "._explore",
    "main": "._cli",
    "reproduce": "._reproduce",
    "sometimes": "._sometimes",
    "write_reproduction_html": "._reproduce",
    "write_run_html": "._timeline_run",
}


if not TYPE_CHECKING:  # static tools see the imports above, and no catch-all attribute
    __getattr__, __dir__ = _lazy_exports(__name__, _LAZY)
