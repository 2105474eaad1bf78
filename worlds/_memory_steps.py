"""The memory World's write of the runtime's batch every step, decided and stored at once.

A sequential workflow writes one batch a step: the outcome of the step that just
ran (``step_completed``, ``step_failed`` or ``step_retrying``), then the next step's
``step_created`` and ``step_started``.  :func:`write_step_batch` takes that batch
only when every check of :func:`._guards.plan_batch` is known to pass (the requests
were built validated by ``EventRequest.of`` or the runtime's builders, the fence
and ``expected_seq`` match, the run is running, the finished step is running and
the new one does not exist) and then appends what :func:`plan_batch` would plan:
the same events, the same rows.  Anything else returns ``None`` and takes the
general path, which raises the same error as it always did.

The validated mark cannot be forged by input: it is not an ``__init__`` argument,
``attrs.evolve`` does not copy it, and a pickled request comes back without it
(see ``EventRequest.__reduce__``).  tests/worlds/test_step_batch_fast.py compares
this path with the general one on generated request sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

from ._build import builder
from ._entities import BatchResult, RunStatuses, StepStatuses
from ._events import Event, EventRequest, Types
from ._fold import STEP_CHANGES, _complete
from ._guards import started_step

if TYPE_CHECKING:
    from ._memory import _RunRecord

__all__ = ["write_step_batch"]

T = Types

_event = builder(Event)
_batch_result = builder(BatchResult)
_OUTCOMES: Final = frozenset({T.STEP_COMPLETED, T.STEP_FAILED, T.STEP_RETRYING})
_RUNNING_RUN: Final = RunStatuses.RUNNING
_RUNNING_STEP: Final = StepStatuses.RUNNING
_COMPLETED: Final = StepStatuses.COMPLETED


def write_step_batch(
    record: _RunRecord,
    run_id: str,
    requests: Sequence[EventRequest],
    at: datetime,
    *,
    expected_seq_in_band: int | None,
    expected_seq: int | None,
    seen_seq: int | None,
) -> BatchResult | None:
    """Append an in-band ``outcome, step_created, step_started`` batch, or ``None``.

    ``None`` (nothing changed) unless :func:`plan_batch` would surely accept the
    batch; the caller then plans it in full.  ``seen_seq`` must be ``None`` or an
    int the caller checked (a non-negative one).
    """
    outcome, created, started = requests
    if not (
        type(outcome) is EventRequest
        and type(created) is EventRequest
        and type(started) is EventRequest
        and outcome._validated
        and created._validated
        and started._validated
        and outcome.type in _OUTCOMES
        and created.type is T.STEP_CREATED
        and started.type is T.STEP_STARTED
    ):
        return None
    state = record.state
    run = state.run
    seq = state.seq
    seq_in_band = state.seq_in_band
    done_id = outcome.correlation_id
    cid = created.correlation_id
    steps = state.steps
    step = steps.get(done_id)  # type: ignore[arg-type]
    if not (
        run is not None
        and run.status is _RUNNING_RUN
        and type(expected_seq_in_band) is int
        and expected_seq_in_band == seq_in_band
        and (expected_seq is None or (type(expected_seq) is int and expected_seq == seq))
        and started.correlation_id == cid
        and cid != done_id
        and step is not None
        and step.status is _RUNNING_STEP
        and cid not in steps
    ):
        return None
    assert cid is not None
    assert done_id is not None
    kind = outcome.type
    first = _event(
        run_id=run_id,
        seq=seq + 1,
        type=kind,
        created_at=at,
        correlation_id=done_id,
        in_band=True,
        data=outcome.data,
    )
    data = created.data
    start, new = started_step(
        run_id, cid, seq + 3, at=at, in_band=True, created=data, started=started.data
    )
    events = (
        first,
        _event(
            run_id=run_id,
            seq=seq + 2,
            type=T.STEP_CREATED,
            created_at=at,
            correlation_id=cid,
            in_band=True,
            data=data,
        ),
        start,
    )
    # What the writer has not seen, read before the batch lands (as _unseen does).
    unseen = () if seen_seq is None or seen_seq >= seq else tuple(record.events[seen_seq:seq])
    steps[done_id] = (
        # _completed(step, first), inlined: the commonest outcome
        _complete(step, _COMPLETED, outcome.data._items["result"], at, at)
        if kind is T.STEP_COMPLETED
        else STEP_CHANGES[kind](step, first)
    )
    steps[cid] = new
    record.events += events
    state.seq = seq + 3
    state.seq_in_band = seq_in_band + 3
    record.counters = None  # made again when a plan next asks (_View.counters)
    return _batch_result(events=events, run=run, unseen=unseen)
