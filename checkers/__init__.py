"""durasim.checkers: oracles that turn an execution (or a World) into a verdict.

* :func:`check_invariants` re-derives every run, step, hook and wait of a World
  from its log and checks the log's rules (docs/invariants.md lists them);
  :func:`check_log` / :func:`check_logs` do the same for logs without a World.
* :func:`verify_replay`: the cold-replay oracle; one delivery of the real
  runtime over a finished run's log must write the same end.
* :func:`check_determinism`: a simulated scenario run twice with one seed must
  trace byte for byte alike, and its finished runs must replay in a fresh process.
* :func:`replay_in_fresh_process`: the cold-replay oracle in a replay server
  process with another hash seed, environment, wall clock and fresh module state.
* :class:`WorldModel`, :func:`run_world_model`, :func:`world_model_for`: a
  Hypothesis state machine that drives a World under test side by side with the
  reference :class:`~durasim.worlds.MemoryWorld` and compares every answer.
* :func:`run_concurrency`: seeded groups of concurrent calls across every facet,
  from several instances of the World at once, whose history must be
  linearizable against the reference (:func:`check_linearizable`); an anomaly
  is named (:data:`ANOMALIES`) and shrunk to a minimal witness.
* :class:`Timeline`: what a run's log (:func:`timeline_from_log`) or a simulation
  (:func:`timeline_from_sim`) did, lane by lane, with its failure highlighted;
  :func:`render_timeline_html` draws it as one self-contained HTML page.
* :func:`check_crashes`: kills a durable World inside its calls (SIGKILL of a
  child process, or a cancelled task), reopens it and checks that everything
  acknowledged is there, nothing is half-applied and no position is reused.
"""

from durasim.worlds._public import publish as _publish

from ._anomalies import ANOMALIES, Anomaly, name_anomaly, read_anomalies
from ._concurrent import ConcurrencyResult, ConcurrencyWitness, replay_witness, run_concurrency
from ._crash import (
    DEFAULT_CRASH_OPS,
    DEFAULT_CRASH_TRIALS,
    CrashFinding,
    CrashReport,
    check_crashes,
)
from ._crash_compare import CRASH_CLASSES
from ._crash_run import CrashCheckError, factory_reference
from ._determinism import DeterminismVerdict, check_determinism
from ._export import (
    LogFileError,
    annotated_event_json,
    event_from_json,
    event_to_json,
    load_logs,
)
from ._fresh import (
    CLOCK_SHIFT,
    DEFAULT_CHILD_HASH_SEED,
    FRESH_ENV_VAR,
    FRESH_TZ,
    FreshProcessUnavailable,
    FreshReplay,
    child_hash_seed,
    describe_fresh_process,
    finished_logs,
    replay_in_fresh_process,
    start_replay_server,
)
from ._histories import (
    HistoryVerdict,
    assert_histories_replay,
    export_history,
    migrate_run,
    replay_histories,
    replay_history,
    replay_world,
)
from ._invariants import Report, StoredRun, Violation, check_invariants, check_log, check_logs
from ._linear import Call, Linearization, Record, check_linearizable
from ._model import WorldModel
from ._model_run import WorldModelFailure, run_world_model, world_model_for
from ._oracle import VERDICTS, ReplayVerdict, verify_replay, verify_replay_log
from ._rules import RULES
from ._timeline import (
    MAX_DETAIL,
    MAX_MARKS,
    Timeline,
    TimelineLane,
    TimelineMark,
    TimelineSpan,
    TimelineVerdict,
    timeline_from_log,
)
from ._timeline_html import PAGE_SIZE, render_timeline_html
from ._timeline_sim import timeline_from_sim

__all__ = [
    "ANOMALIES",
    "CLOCK_SHIFT",
    "CRASH_CLASSES",
    "DEFAULT_CHILD_HASH_SEED",
    "DEFAULT_CRASH_OPS",
    "DEFAULT_CRASH_TRIALS",
    "FRESH_ENV_VAR",
    "FRESH_TZ",
    "MAX_DETAIL",
    "MAX_MARKS",
    "PAGE_SIZE",
    "RULES",
    "VERDICTS",
    "Anomaly",
    "Call",
    "ConcurrencyResult",
    "ConcurrencyWitness",
    "CrashCheckError",
    "CrashFinding",
    "CrashReport",
    "DeterminismVerdict",
    "FreshProcessUnavailable",
    "FreshReplay",
    "HistoryVerdict",
    "Linearization",
    "LogFileError",
    "Record",
    "ReplayVerdict",
    "Report",
    "StoredRun",
    "Timeline",
    "TimelineLane",
    "TimelineMark",
    "TimelineSpan",
    "TimelineVerdict",
    "Violation",
    "WorldModel",
    "WorldModelFailure",
    "annotated_event_json",
    "assert_histories_replay",
    "check_crashes",
    "check_determinism",
    "check_invariants",
    "check_linearizable",
    "check_log",
    "check_logs",
    "child_hash_seed",
    "describe_fresh_process",
    "event_from_json",
    "event_to_json",
    "export_history",
    "factory_reference",
    "finished_logs",
    "load_logs",
    "migrate_run",
    "name_anomaly",
    "read_anomalies",
    "render_timeline_html",
    "replay_histories",
    "replay_history",
    "replay_in_fresh_process",
    "replay_witness",
    "replay_world",
    "run_concurrency",
    "run_world_model",
    "start_replay_server",
    "timeline_from_log",
    "timeline_from_sim",
    "verify_replay",
    "verify_replay_log",
    "world_model_for",
]

_publish(__name__, globals(), __all__)
