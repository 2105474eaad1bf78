"""What the crash checker compares, and how it names what it finds.

After a kill, ops ``0..acked-1`` were acknowledged and op ``acked`` may have
been in flight.  :func:`compare_restart` holds the reopened World's state
against the reference's state after the acknowledged ops (and, for each
component the in-flight op changes, after it too): a component must be one or
the other, and the in-flight op whole or absent.  :func:`compare_answer`
holds an answer (before the crash, or after the restart) against the
reference's.  Every problem carries a bug class from :data:`CRASH_CLASSES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from durasim.worlds import Event

from ._crash_child import Op
from ._crash_work import QueuedMessage, State, Workload

__all__ = ["CRASH_CLASSES", "Problem", "compare_answer", "compare_restart"]

#: The bug classes a crash finding is named by, with what each means, most severe first
#: (a trial that breaks several rules is named by the first).
CRASH_CLASSES: Mapping[str, str] = {
    "crash.lost-write": "a write that returned (event, run, chunk, close) is gone after a restart",
    "crash.half-applied": "a write that did not return is partly there (or its entities "
    "disagree with the log)",
    "crash.changed-write": "something acknowledged reads differently after a restart",
    "crash.position-reused": "a write after a restart got a position (or chunk index) already "
    "returned before the crash",
    "crash.acked-message-back": "a message whose ack returned is queued again after a restart",
    "crash.message-lost": "a message whose enqueue returned is gone after a restart",
    "crash.delay-lost": "a release's delay (or an enqueue's) is not kept across a restart",
    "crash.claim-lost": "a claim that returned (its attempt, its lease) is forgotten after a "
    "restart",
    "crash.idempotency-lost": "an idempotency key of a queued message is forgotten after a restart",
    "crash.phantom-write": "the reopened World holds data no call wrote",
    "crash.wrong-answer": "the World answers differently from the reference (before the "
    "crash: not a crash bug, but nothing after it can be trusted)",
    "crash.reopen-failed": "the World cannot be reopened or read after a crash",
    "crash.child-failed": "the child process could not run the workload (the factory or the "
    "World failed outside any call)",
}


@attrs.frozen
class Problem:
    """One thing the reopened World got wrong: its bug class and the facts."""

    kind: str
    message: str


def _label(event: Event) -> str:
    data = ", ".join(f"{k}={_short(v)}" for k, v in event.data.items())
    return f"{event.label}{' (' + data + ')' if data else ''}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Context:
    """Where each acknowledged thing came from, for messages that name ops."""

    def __init__(self, workload: Workload, acked: int) -> None:
        self.workload = workload
        self.acked = acked

    def op(self, index: int) -> str:
        return self.workload.describe(index)

    def writer_of(self, run_id: str, seq: int) -> str:
        """The op whose answer (in the reference) was position ``seq`` of ``run_id``."""
        for index, (op, answer) in enumerate(
            zip(self.workload.ops, self.workload.answers, strict=True)
        ):
            if op.get("run") != run_id:
                continue
            seqs = answer.get("seq")
            if (isinstance(seqs, list) and seq in seqs) or seqs == seq:
                return self.op(index)
        return "an earlier op"

    def queue_ops(self, queue_name: str, until: int) -> list[tuple[int, Op]]:
        """The ops before ``until`` that touched ``queue_name``."""
        ops = self.workload.ops
        claims = {op["id"]: op["q"] for op in ops if op["op"] == "claim"}
        return [
            (index, op)
            for index, op in enumerate(ops[:until])
            if op.get("q") == queue_name or claims.get(op.get("claim", -1)) == queue_name
        ]


def _log_problem(
    ctx: _Context,
    run_id: str,
    found: Sequence[Event] | None,
    before: Sequence[Event] | None,
    after: Sequence[Event] | None,
) -> Problem:
    if found is None:
        return Problem(
            "crash.lost-write",
            f"run {run_id!r} is gone after the restart; {ctx.writer_of(run_id, 1)} created it "
            f"and returned, and its log held {len(before or ())} event(s)",
        )
    if before is None:
        if after is not None and tuple(found) == tuple(after[: len(found)]):
            return Problem(
                "crash.half-applied",
                f"run {run_id!r}: the in-flight {ctx.op(ctx.acked)} left {len(found)} of its "
                f"{len(after)} event(s)",
            )
        return Problem(
            "crash.phantom-write",
            f"run {run_id!r} exists after the restart, but no call created it "
            f"(first event: {_label(found[0]) if found else 'none'})",
        )
    same = 0
    while same < min(len(found), len(before)) and found[same] == before[same]:
        same += 1
    if same < len(before):
        if same == len(found):
            return Problem(
                "crash.lost-write",
                f"run {run_id!r}: the log ends at #{len(found)} after the restart; "
                f"#{same + 1}..#{len(before)} were acknowledged ({ctx.writer_of(run_id, same + 1)} "
                "returned them)",
            )
        return Problem(
            "crash.changed-write",
            f"run {run_id!r}: #{same + 1} was acknowledged as {_label(before[same])} "
            f"({ctx.writer_of(run_id, same + 1)}); after the restart it is {_label(found[same])}",
        )
    extra = tuple(found[len(before) :])
    if after is not None and tuple(after[: len(before)]) == tuple(before):
        wanted = tuple(after[len(before) :])
        if extra == wanted[: len(extra)]:
            return Problem(
                "crash.half-applied",
                f"run {run_id!r}: the in-flight {ctx.op(ctx.acked)} left {len(extra)} of its "
                f"{len(wanted)} event(s) (#{len(before) + 1}..#{len(found)}); a write that did "
                "not return must be whole or absent",
            )
    return Problem(
        "crash.phantom-write",
        f"run {run_id!r}: after the restart the log holds {_label(extra[0])}, beyond the "
        f"{len(before)} acknowledged event(s), and no call in flight wrote it",
    )


def _stream_problem(
    ctx: _Context,
    key: tuple[str, str],
    found: tuple[tuple[bytes, ...], bool] | None,
    before: tuple[tuple[bytes, ...], bool] | None,
    after: tuple[tuple[bytes, ...], bool] | None,
) -> Problem:
    name = f"stream {key[1]!r} of run {key[0]!r}"
    chunks, closed = found if found is not None else ((), False)
    acked, acked_closed = before if before is not None else ((), False)
    if tuple(chunks[: len(acked)]) != tuple(acked):
        if len(chunks) < len(acked) and tuple(acked[: len(chunks)]) == tuple(chunks):
            return Problem(
                "crash.lost-write",
                f"{name}: {len(chunks)} chunk(s) after the restart; {len(acked)} were "
                "acknowledged by returned writes",
            )
        return Problem("crash.changed-write", f"{name}: an acknowledged chunk changed")
    if acked_closed and not closed:
        return Problem("crash.lost-write", f"{name}: its close returned, but it is open again")
    if after is not None and len(chunks) > len(acked) and len(chunks) < len(after[0]):
        return Problem(
            "crash.half-applied",
            f"{name}: the in-flight {ctx.op(ctx.acked)} left {len(chunks) - len(acked)} of its "
            f"{len(after[0]) - len(acked)} chunk(s)",
        )
    return Problem("crash.phantom-write", f"{name}: holds chunks or a close no call wrote")


def _queue_problem(
    ctx: _Context,
    queue_name: str,
    found: QueuedMessage | None,
    before: QueuedMessage | None,
) -> Problem:
    history = ctx.queue_ops(queue_name, ctx.acked)
    last = history[-1] if history else None
    where = f"queue {queue_name!r}"
    if found is None:
        sender = next((i for i, op in history if op["op"] == "enqueue"), None)
        by = ctx.op(sender) if sender is not None else "an enqueue"
        return Problem(
            "crash.message-lost",
            f"{where}: the message {by} queued (the call returned, nothing acked it) is gone "
            "after the restart",
        )
    if before is None:
        acked = [i for i, op in history if op["op"] == "ack"]
        if acked:
            return Problem(
                "crash.acked-message-back",
                f"{where}: {ctx.op(acked[-1])} returned, yet the message is queued again "
                f"after the restart (attempt {found[3]})",
            )
        return Problem("crash.phantom-write", f"{where}: a message no call queued")
    if found[1] != before[1]:
        cause = ctx.op(last[0]) if last is not None else "its enqueue"
        return Problem(
            "crash.delay-lost",
            f"{where}: due at {before[1].isoformat()} after {cause} returned; after the "
            f"restart it is due at {found[1].isoformat()}",
        )
    if found[3] != before[3]:
        return Problem(
            "crash.claim-lost",
            f"{where}: {before[3]} claim(s) returned before the crash; the message shows "
            f"attempt {found[3]} after the restart",
        )
    return Problem(
        "crash.changed-write", f"{where}: the message reads {found} after the restart, not {before}"
    )


def compare_restart(
    found: State,
    workload: Workload,
    *,
    acked: int,
    in_flight: bool,
    message_ids: Mapping[str, str],
    ignore: frozenset[str] = frozenset(),
) -> tuple[list[Problem], bool]:
    """Problems of the reopened World's ``found`` state, and whether the in-flight op is there.

    ``message_ids`` are the ids the World answered for acknowledged enqueues;
    queues named in ``ignore`` are not compared (the checker lost track of them:
    a claim in flight took a lease nobody knows).
    """
    ctx = _Context(workload, acked)
    before = workload.states[acked].components()
    after = workload.states[acked + 1].components() if in_flight else None
    got = found.components()
    changing = {k for k in {*before, *(after or {})} if after is not None}
    changing = {k for k in changing if before.get(k) != (after or {}).get(k)}
    problems: list[Problem] = []
    stayed: set[tuple[str, Any]] = set()
    moved: set[tuple[str, Any]] = set()
    for key in sorted({*got, *before, *(after or {})}, key=repr):
        if key[0] == "queue" and key[1] in ignore:
            continue
        value, old = got.get(key), before.get(key)
        new = None if after is None else after.get(key)
        if value == old:
            stayed.add(key)
            continue
        if after is not None and value == new:
            moved.add(key)
            continue
        facet, name = key
        if facet == "log":
            problems.append(_log_problem(ctx, name, value, old, new))
        elif facet == "stream":
            problems.append(_stream_problem(ctx, name, value, old, new))
        else:
            problems.append(_queue_problem(ctx, name, value, old))
    if not problems and moved and changing - moved:
        problems.append(
            Problem(
                "crash.half-applied",
                f"the in-flight {ctx.op(acked)} is only partly there: "
                f"{sorted(map(str, moved))} changed, {sorted(map(str, changing - moved))} did not",
            )
        )
    for queue_name, message_id in sorted(found.message_ids.items()):
        known = None if queue_name in ignore else message_ids.get(queue_name)
        if known is not None and known != message_id:
            problems.append(
                Problem(
                    "crash.changed-write",
                    f"queue {queue_name!r}: its enqueue returned id {known!r}; after the "
                    f"restart the message's id is {message_id!r}",
                )
            )
    order = list(CRASH_CLASSES)
    problems.sort(key=lambda p: order.index(p.kind) if p.kind in order else len(order))
    return problems, bool(moved)


def _seqs(answer: Mapping[str, Any]) -> list[int]:
    seqs = answer.get("seq")
    if isinstance(seqs, list):
        return [s for s in seqs if isinstance(s, int)]
    return [seqs] if isinstance(seqs, int) else []


def _delivery_view(answer: Mapping[str, Any]) -> Any:
    d = answer.get("d")
    return None if d is None else (d["q"], d["p"], d["at"], d["av"], d["exp"])


def _is_repeat(workload: Workload, index: int) -> bool:
    """Whether the reference answered enqueue ``index`` with the id already queued under its key."""
    op = workload.ops[index]
    if op["op"] != "enqueue" or not op.get("key"):
        return False
    first = workload.states[index].message_ids.get(op["q"])
    return first is not None and workload.answers[index].get("id") == first


def compare_answer(
    workload: Workload,
    index: int,
    got: Mapping[str, Any],
    *,
    after_restart: bool,
    returned: Mapping[str, int],
    message_ids: Mapping[str, str],
) -> Problem | None:
    """A problem if ``got`` is not the reference's answer to op ``index``.

    ``returned``: per run, the last position returned before the crash;
    ``message_ids``: per queue, the id the World gave its message (an enqueue
    the reference answers with the id already queued under its key must get
    the World's id of that message).
    """
    op = workload.ops[index]
    expected = workload.answers[index]
    repeat = _is_repeat(workload, index)
    kind = op["op"]
    when = "after the restart" if after_restart else "before any crash"
    call = workload.describe(index)
    if "skip" in got:
        return None
    if kind == "enqueue":
        if "err" in got or "err" in expected:
            same = got.get("err") == expected.get("err")
        else:
            first = message_ids.get(op["q"])
            same = (got["id"] == first) if repeat else (got["id"] != first)
            if not same and after_restart and repeat:
                return Problem(
                    "crash.idempotency-lost",
                    f"{call} answered a new id {got['id']!r} {when}; its key "
                    f"{op['key']!r} belongs to the queued message {first!r}",
                )
    elif kind == "claim":
        same = _delivery_view(got) == _delivery_view(expected) and got.get("err") == expected.get(
            "err"
        )
        if not same and after_restart and expected.get("d") is None and got.get("d"):
            return _claimed_too_soon(workload, index, call, got["d"])
    else:
        same = dict(got) == dict(expected)
    if same:
        return None
    if after_restart:
        problem = _restart_answer(op, call, expected, got, returned)
        if problem is not None:
            return problem
    return Problem(
        "crash.wrong-answer",
        f"{call} answered {dict(got)} {when}; the reference answers {dict(expected)}",
    )


def _claimed_too_soon(
    workload: Workload, index: int, call: str, delivery: Mapping[str, Any]
) -> Problem:
    """A claim after the restart got a message the reference does not hand out: why not."""
    held = workload.states[index].queue.get(workload.ops[index]["q"])
    now = workload.times[index]
    got = f"{call} got the message (attempt {delivery['at']}) after the restart"
    if held is None:
        return Problem("crash.acked-message-back", f"{got}; it was acked before the crash")
    if held[1] > now:
        return Problem(
            "crash.delay-lost",
            f"{got}; it is not due before {held[1].isoformat()} (it is {now.isoformat()})",
        )
    return Problem(
        "crash.claim-lost",
        f"{got}; a lease granted before the crash still holds it",
    )


def _restart_answer(
    op: Op,
    call: str,
    expected: Mapping[str, Any],
    got: Mapping[str, Any],
    returned: Mapping[str, int],
) -> Problem | None:
    kind = op["op"]
    if kind in ("create", "batch"):
        last = returned.get(op["run"], 0)
        reused = [s for s in _seqs(got) if s <= last]
        if reused:
            return Problem(
                "crash.position-reused",
                f"{call} got #{reused[0]} after the restart (expected "
                f"#{_seqs(expected)[0] if _seqs(expected) else '?'}); positions up to #{last} of "
                f"run {op['run']!r} were returned before the crash",
            )
    if kind in ("create", "batch") and got.get("err") in ("InBandSuperseded", "StaleView"):
        return Problem(
            "crash.position-reused",
            f"{call} was refused with {got['err']} after the restart, though the log is whole "
            f"and the reference accepts it: the run's counters went back to a count returned "
            f"before the crash ({got.get('msg', '')})",
        )
    if (
        kind == "write"
        and isinstance(got.get("last"), int)
        and got["last"] < expected.get("last", -1)
    ):
        return Problem(
            "crash.position-reused",
            f"{call} got chunk index {got['last']} after the restart; the reference "
            f"answers {expected['last']}: indices returned before the crash are reused",
        )
    if kind in ("ack", "release", "extend") and got.get("err") == "LeaseLost":
        return Problem(
            "crash.claim-lost",
            f"{call} raised LeaseLost after the restart: the lease its claim returned before "
            "the crash is gone",
        )
    return None
