"""durasim.checkers: oracles that turn an execution (or a World) into a verdict.

* :func:`check_invariants` re-derives every run, step, hook and wait of a World
  from its log and checks the log's rules (docs/invariants.md lists them);
  :func:`check_log` / :func:`check_logs` do the same for logs without a World.
"""

from ._invariants import Report, StoredRun, Violation, check_invariants, check_log, check_logs
from ._rules import RULES

__all__ = [
    "RULES",
    "Report",
    "StoredRun",
    "Violation",
    "check_invariants",
    "check_log",
    "check_logs",
]
