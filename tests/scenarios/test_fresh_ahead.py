"""The fresh-process replay sent ahead of the in-process oracle judges what it judged after it.

run_example sends the fresh-process replay once the invariants hold, before the
cold-replay oracle runs here, with every log the oracle judges
(``replay_skipped`` is None); the answer counts only when every in-process
verdict passed, and is dropped unread otherwise.  The plain rule it stands for:
after all in-process verdicts, send the logs whose cold replay agreed here, and
only when there are some and nothing failed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import exploreflows as flows
import freshflows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durasim.checkers import (
    ReplayVerdict,
    child_hash_seed,
    replay_in_fresh_process,
    replay_skipped,
    verify_replay_log,
)
from durasim.scenarios import ExampleConfig, _example
from durasim.scenarios._seeds import object_ref
from durasim.sim import FAULT_KINDS, SequenceChoices
from durasim.worlds import Event

#: Failures the fresh-process replay's answer comes after (the plain rule's "nothing failed").
_OWN_KINDS = frozenset(_example.VERDICT_KINDS) - {"determinism", "fresh-process"}

_FLOWS: list[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]]] = [
    (flows.ten_steps, (3,), ()),
    (flows.approval, ("tok",), (("tok", "yes"),)),
    (flows.welcome, ("ada",), ()),
    (freshflows.calls_a_workflow, (), ()),
    (freshflows.set_order, (), ()),
]


@contextmanager
def _spied() -> Iterator[tuple[list[list[Sequence[Event]]], list[tuple[Sequence[Event], Any]]]]:
    """What run_example sends to the fresh process, and every in-process oracle verdict."""
    sent: list[list[Sequence[Event]]] = []
    judged: list[tuple[Sequence[Event], ReplayVerdict]] = []

    def send(logs: Sequence[Sequence[Event]], **options: Any) -> Any:
        sent.append(list(logs))
        return replay_in_fresh_process(logs, **options)

    async def oracle(events: Sequence[Event], **options: Any) -> ReplayVerdict:
        verdict = await verify_replay_log(events, **options)
        judged.append((events, verdict))
        return verdict

    saved = _example.replay_in_fresh_process, _example.verify_replay_log
    _example.replay_in_fresh_process, _example.verify_replay_log = send, oracle  # type: ignore[assignment]
    try:
        yield sent, judged
    finally:
        _example.replay_in_fresh_process, _example.verify_replay_log = saved


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    flow=st.sampled_from(_FLOWS),
    answers=st.lists(st.integers(0, 25), max_size=50),
    faults=st.lists(st.sampled_from(FAULT_KINDS), unique=True, max_size=4).map(tuple),
    cancel_at=st.integers(0, 14),
    hook_point=st.integers(0, 14),
)
def test_the_logs_sent_ahead_are_the_logs_whose_cold_replay_agreed(
    flow: tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]],
    answers: list[int],
    faults: tuple[str, ...],
    cancel_at: int,
    hook_point: int,
) -> None:
    workflow, args, hooks = flow
    config = ExampleConfig(
        workflow=object_ref(workflow),
        args=args,
        faults=faults,
        hooks=hooks,
        hook_points=tuple(hook_point for _ in hooks),
        cancel_at=cancel_at,
        fresh_process=child_hash_seed(),
    )
    with _spied() as (sent, judged):
        report = _example.run_example(
            config, workflow, choices=SequenceChoices(answers), determinism=False
        )
    for events, verdict in judged:
        # The oracle's own skip rule, asked without replaying.
        assert replay_skipped(events) == (verdict if verdict.kind == "replay.skipped" else None)
    kinds = {kind for kind, _ in report.failures}
    agreed = [events for events, verdict in judged if verdict.kind == "ok"]
    if not kinds & _OWN_KINDS:
        # Nothing failed here: the plain rule sends the agreed logs (if any), as sent.
        assert sent == ([agreed] if agreed else [])
    else:
        # Something failed here: the plain rule sends nothing, and no answer counts.
        assert "fresh-process" not in kinds
        assert all(replay_skipped(events) is None for logs in sent for events in logs)
