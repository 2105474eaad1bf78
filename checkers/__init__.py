"""durasim.checkers: oracles that turn an execution (or a World) into a verdict.

* :func:`check_invariants` re-derives every run, step, hook and wait of a World
  from its log and checks the log's rules (docs/invariants.md lists them);
  :func:`check_log` / :func:`check_logs` do the same for logs without a World.
* :func:`verify_replay`: the cold-replay oracle; one delivery of the real
  runtime over a finished run's log must write the same end.
* :func:`check_determinism`: a simulated scenario run twice with one seed must
  trace byte for byte alike.
* :class:`WorldModel`, :func:`run_world_model`, :func:`world_model_for`: a
  Hypothesis state machine that drives a World under test side by side with the
  reference :class:`~durasim.worlds.MemoryWorld` and compares every answer.
"""

from ._determinism import DeterminismVerdict, check_determinism
from ._export import LogFileError, event_from_json, event_to_json, load_logs
from ._invariants import Report, StoredRun, Violation, check_invariants, check_log, check_logs
from ._model import WorldFactory, WorldModel, WorldSetup
from ._model_run import WorldModelFailure, run_world_model, world_model_for
from ._oracle import VERDICTS, ReplayVerdict, verify_replay, verify_replay_log
from ._rules import RULES

__all__ = [
    "RULES",
    "VERDICTS",
    "DeterminismVerdict",
    "LogFileError",
    "ReplayVerdict",
    "Report",
    "StoredRun",
    "Violation",
    "WorldFactory",
    "WorldModel",
    "WorldModelFailure",
    "WorldSetup",
    "check_determinism",
    "check_invariants",
    "check_log",
    "check_logs",
    "event_from_json",
    "event_to_json",
    "load_logs",
    "run_world_model",
    "verify_replay",
    "verify_replay_log",
    "world_model_for",
]
