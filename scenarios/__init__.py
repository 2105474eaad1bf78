"""durasim.scenarios: the user-facing top.

* :func:`explore` / :func:`explores`: Hypothesis searches schedules and faults
  of a workflow, shrinks a failure and prints a seed, a regression script and
  a trace (docs/exploration.md); :func:`sometimes` marks situations an
  exploration must reach; :func:`reproduce` (``durasim reproduce SEED``)
  replays a seed.
* the ``durasim`` command (:func:`main`).
"""

from ._cli import main
from ._example import AUTHORING_ERRORS, VERDICT_KINDS, ExampleReport
from ._explore import ExploreFailure, ExploreResult, ExploreStats, explore, explores
from ._harness import drive
from ._reproduce import reproduce
from ._schedulers import PCTScheduler, RandomScheduler, RecordingSource, Scheduling
from ._seeds import SEED_PREFIX, ExampleConfig, SeedError
from ._sometimes import Reachability, sometimes

__all__ = [
    "AUTHORING_ERRORS",
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
]
