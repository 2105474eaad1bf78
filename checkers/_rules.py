"""The invariant rules: stable ids and one-line descriptions (docs/invariants.md lists them)."""

from __future__ import annotations

from typing import Final

__all__ = ["RULES"]

#: Every rule the invariant checker applies, by stable id.
RULES: Final[dict[str, str]] = {
    # the log itself
    "log.dense": "positions run 1, 2, 3 ... with no hole",
    "log.unique": "no position appears twice",
    "log.run": "every event of a run's log names that run",
    "log.noop": "a noop carries no entity and no payload",
    "log.snapshot": "a read's snapshot counts the events and the in-band events it returned",
    # runs
    "run.created_first": "the log starts with run_created, and holds only one",
    "run.started_once": (
        "at most one run_started, after run_created and before any step, hook or wait"
    ),
    "run.terminal_once": "at most one terminal event (completed, failed, cancelled)",
    "run.terminal_from": (
        "completed and failed only from running; cancelled from pending or running"
    ),
    "run.after_terminal": "after the terminal event, only outcomes of steps running at the end",
    "run.row": "the run row (status, output, error, reason, attributes) equals the fold of the log",
    "run.released": (
        "once the run is terminal, none of its hooks is active and none of its waits waiting"
    ),
    # steps
    "step.created_once": "a step is created once",
    "step.order": "started, retrying and outcomes only after the step's creation",
    "step.attempt": "step_started's attempt counts the step's step_started events",
    "step.outcome_running": "retrying, completed and failed only while the step is running",
    "step.one_terminal": "a step has at most one terminal outcome",
    "step.no_start_after_terminal": "no step_started after the step's terminal outcome",
    "step.retry_after": "no step_started before the retry_after of the step_retrying before it",
    "step.row": "each step row (status, attempt, output, error) equals the fold of the log",
    "step.row_has_event": "every step row has a step_created in the log",
    # hooks
    "hook.created_once": "a hook is created once",
    "hook.received_window": (
        "hook_received only while the hook is active (after created, before disposed or released)"
    ),
    "hook.token_field": "hook_received's token is the hook's token",
    "hook.resume_dedup": "a resume_id appears on at most one hook_received of a run",
    "hook.disposed_once": "hook_disposed only of an active hook",
    "hook.row": "each hook row (token, status, received count) equals the fold of the log",
    "hook.row_has_event": "every hook row has a hook_created in the log",
    "hook.token_unique": "a token is held by at most one live hook at any time, across all runs",
    "hook.conflict_live": "a hook_conflict names a hook that held the token at that time",
    "hook.by_token": "hooks.get_by_token answers the one active holder of the token",
    # waits
    "wait.created_once": "a wait is created once",
    "wait.completed_once": "wait_completed only of a created, waiting wait",
    "wait.resume_at_stable": "wait_completed carries the resume_at its wait_created recorded",
    "wait.not_early": "a wait completes no earlier than its resume_at, unless early=True",
    "wait.row": "each wait row (status, resume_at) equals the fold of the log",
    "wait.row_has_event": "every wait row has a wait_created in the log",
}
