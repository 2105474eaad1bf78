"""The fresh-process replay server answers requests of either checked mode in turn."""

from __future__ import annotations

import attrs

from durasim.checkers import _fresh, finished_logs, replay_in_fresh_process
from durasim.runtime import step, workflow
from durasim.sim import Sim
from durasim.worlds import Event, EventType


@step(module="test_fresh_modes")
def add(total: int, i: int) -> int:
    return total + i


@workflow(module="test_fresh_modes")
async def adds(n: int) -> int:
    total = 0
    for i in range(n):
        total = await add(total, i)
    return total


def _logs() -> tuple[list[Event], list[Event]]:
    """A finished run's log, and the same log with another output at its end."""

    async def scenario(sim: Sim) -> list[list[Event]]:
        await sim.run(adds, 3)
        return await finished_logs(sim.store)

    (events,) = Sim().run_sync(scenario)
    end = events[-1]
    assert end.type is EventType.RUN_COMPLETED
    other = attrs.evolve(end, data={**dict(end.data.items()), "output": b"other"})
    return events, [*events[:-1], other]


def test_requests_of_either_mode_in_turn_get_their_verdicts() -> None:
    # The server readies each replay for the last request's mode: a change of mode
    # is replayed without that head start, to the same verdicts.
    good, bad = _logs()
    for checked in (True, False, False, True, False):
        _fresh._KNOWN.clear()
        verdicts = replay_in_fresh_process([good, bad], checked=checked).verdicts()
        assert [v.kind for v in verdicts] == ["ok", "replay.output-differs"], checked
