"""What scenario scripts assert with: short logs, expectations, the closing checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durasim.checkers import check_invariants, verify_replay
from durasim.sim import Sim, step_short_name
from durasim.worlds import Event, RunStatus

from ._model import ScenarioFailed

__all__ = ["events", "expect", "expect_log", "expect_order", "finish", "numbered", "short_log"]


def _short_lines(log: Sequence[Event]) -> list[str]:
    """``"type entity"`` lines; steps by name (``charge#1``), hooks and timers by kind
    and the order they first appear in the log (``hook#1``, ``sleep#2``, ``timeout#1``):
    the book pins races, and these read the same whichever function made them."""
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}
    lines = []
    for event in log:
        cid = event.correlation_id
        if cid is None:
            lines.append(event.type.value)
            continue
        if cid.startswith("step//"):
            cid = f"{step_short_name(cid)}#{cid.rsplit('#', 1)[-1]}"
        elif cid.startswith(("hook/", "hook=", "sleep/", "timeout/", "timer/")):
            if cid not in seen:
                kind = cid[:4] if cid.startswith("hook") else cid.split("/", 1)[0]
                counts[kind] = counts.get(kind, 0) + 1
                seen[cid] = f"{kind}#{counts[kind]}"
            cid = seen[cid]
        lines.append(f"{event.type.value} {cid}")
    return lines


async def events(sim: Sim, run_id: str) -> list[Event]:
    """The run's log, read from the store (not traced, not intercepted)."""
    return list((await sim.snapshot()).events[run_id])


async def short_log(sim: Sim, run_id: str) -> list[str]:
    """The run's log as ``"type entity"`` lines (``step_completed charge#1``)."""
    return _short_lines(await events(sim, run_id))


def expect(condition: bool, message: str) -> None:
    """Raise :class:`ScenarioFailed` with ``message`` unless ``condition``."""
    if not condition:
        raise ScenarioFailed(message)


def numbered(log: Sequence[Event]) -> str:
    """The log as short lines numbered by position (``#3``), a hole shown as a hole.

    Numbers come from each event's ``seq``, not from its place in the list: a
    read that skipped position 3 shows ``#3 (missing: a hole in the log)``.
    """
    lines = []
    expected = 1
    for event, line in zip(log, _short_lines(log), strict=True):
        for hole in range(expected, event.seq):
            lines.append(f"  #{hole} (missing: a hole in the log)")
        lines.append(f"  #{event.seq} {line}")
        expected = max(expected, event.seq + 1)
    return "\n".join(lines)


async def expect_log(sim: Sim, run_id: str, expected: Sequence[str]) -> list[str]:
    """The run's short log must be ``expected``, line for line, at positions 1, 2, 3 ...

    It is returned.
    """
    log = await events(sim, run_id)
    short = _short_lines(log)
    dense = [event.seq for event in log] == list(range(1, len(log) + 1))
    if short != list(expected) or not dense:
        want = "\n".join(f"  #{i} {line}" for i, line in enumerate(expected, 1))
        raise ScenarioFailed(
            f"run {run_id}: the log is\n{numbered(log)}\nwhere the book expects\n{want}"
        )
    return short


def expect_order(log: Sequence[str], *lines: str) -> None:
    """``lines`` occur in ``log`` in this order (each the first match after the last)."""
    at = -1
    for line in lines:
        try:
            at = list(log).index(line, at + 1)
        except ValueError:
            raise ScenarioFailed(
                f"{line!r} does not follow position #{at + 1} in the log: {list(log)}"
            ) from None


async def expect_outcome(
    sim: Sim, run_id: str, status: str, value: Any = None, *, error: str | None = None
) -> None:
    """The run ended with ``status`` and ``value`` (or an error whose text has ``error``)."""
    outcome = await sim.outcome(run_id)
    expect(
        outcome.status is RunStatus(status),
        f"run {run_id} is {outcome.status.value}, expected {status}",
    )
    if error is not None:
        expect(
            outcome.error is not None and error in str(outcome.error),
            f"run {run_id} raised {outcome.error!r}, expected an error with {error!r}",
        )
    elif status == "completed":
        expect(
            outcome.value == value, f"run {run_id} returned {outcome.value!r}, expected {value!r}"
        )


async def finish(sim: Sim, *run_ids: str) -> None:
    """Every check every scenario ends with, on each run given.

    ``check_invariants`` over the whole store (every run of it, so children and
    bystanders count), then ``verify_replay`` of each run: a finished run's
    cold replay must write its recorded end.
    """
    report = await check_invariants(sim.store)
    expect(report.ok, report.render())
    for run_id in run_ids:
        verdict = await verify_replay(sim.store, run_id)
        expect(verdict.ok, verdict.render())
