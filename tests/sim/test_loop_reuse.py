"""A Sim's loop is kept for the next Sim only when it ends exactly as a new one.

The reuse saves a socket pair and an epoll instance per Sim; it must never carry
anything from one simulation into the next: the same seed gives the same trace on
a kept loop as on a new one, and a loop left with anything in it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from simflows import chain, fan_out, sleepy

from durasim.sim import FAULT_KINDS, Sim
from durasim.sim import _loop as loops
from durasim.sim._clock import SimClock


@contextlib.contextmanager
def no_kept_loops() -> Iterator[None]:
    kept = list(loops._IDLE)
    loops._IDLE.clear()
    try:
        yield
    finally:
        for loop in loops._IDLE:
            loop.close()
        loops._IDLE[:] = kept


def _trace(seed: int, workflow: Any, *args: Any) -> str:
    async def script(sim: Sim) -> None:
        await sim.start(workflow, *args)
        await sim.run_until_idle()

    sim = Sim(seed=seed, faults=FAULT_KINDS, fault_odds=5)
    sim.run_sync(script)
    return sim.trace_text


def test_a_kept_loop_gives_the_trace_a_new_one_gives() -> None:
    cases = [
        (seed, wf, arg) for seed in range(6) for wf, arg in ((chain, 4), (fan_out, 3), (sleepy, 2))
    ]
    with no_kept_loops():
        fresh = []
        for seed, wf, arg in cases:
            fresh.append(_trace(seed, wf, arg))
            for loop in loops._IDLE:
                loop.close()
            loops._IDLE.clear()
        kept = [_trace(seed, wf, arg) for seed, wf, arg in cases]
        assert len(loops._IDLE) == 1  # one loop served every Sim after the first
    assert kept == fresh


def test_the_next_sim_takes_the_kept_loop() -> None:
    async def script(sim: Sim) -> int:
        return (await sim.run(chain, 2)).value  # type: ignore[no-any-return]

    with no_kept_loops():
        first = Sim(seed=1)
        loop = first._core.loop
        assert first.run_sync(script) == 1
        assert [loop] == loops._IDLE
        assert not loop.is_closed()
        second = Sim(seed=2)
        assert second._core.loop is loop
        assert loop.clock is second.clock
        assert loops._IDLE == []
        assert second.run_sync(script) == 1


def _used(setup: Any) -> loops.SimLoop:
    loop = loops.take_loop(SimClock())
    loop.on_idle = lambda timer: None

    async def main() -> None:
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    setup(loop)  # left behind by a run (a run's own callbacks run before it returns)
    return loop


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(lambda loop: loop.call_soon(print), id="ready callback"),
        pytest.param(lambda loop: loop.call_later(5, print), id="live timer"),
        pytest.param(
            lambda loop: loop.set_exception_handler(lambda _loop, _context: None), id="handler"
        ),
        pytest.param(lambda loop: loop.set_task_factory(None) or loop.set_debug(True), id="debug"),
        pytest.param(lambda loop: setattr(loop, "extra", 1), id="new attribute"),
        pytest.param(lambda loop: loop.call_soon_threadsafe(print), id="threadsafe callback"),
        pytest.param(lambda loop: loop._csock.send(b"\0"), id="woken self-pipe"),
    ],
)
def test_a_loop_left_with_anything_is_closed_not_kept(setup: Any) -> None:
    with no_kept_loops():
        loop = _used(setup)
        loops.release_loop(loop)
        assert loops._IDLE == []
        assert loop.is_closed()


def test_cancelled_timers_are_dropped_and_the_loop_kept() -> None:
    with no_kept_loops():
        loop = _used(lambda loop: loop.call_later(5, print).cancel())
        loops.release_loop(loop)
        assert [loop] == loops._IDLE
        assert loop._scheduled == []
        assert loop._timer_cancelled_count == 0


def test_async_generators_finished_leave_the_loop_kept() -> None:
    async def agen() -> Any:
        yield 1

    async def script(sim: Sim) -> list[int]:
        return [x async for x in agen()]

    with no_kept_loops():
        sim = Sim()
        assert sim.run_sync(script) == [1]
        assert [sim._core.loop] == loops._IDLE
        assert not sim._core.loop._asyncgens_shutdown_called  # type: ignore[attr-defined]


def test_an_async_generator_left_unfinished_closes_the_loop() -> None:
    async def agen() -> Any:
        yield 1
        yield 2

    async def script(sim: Sim) -> int:
        gen = agen()
        return await gen.__anext__()  # its finalizer wakes the loop once it is collected

    with no_kept_loops():
        sim = Sim()
        assert sim.run_sync(script) == 1
        assert loops._IDLE == []
        assert sim._core.loop.is_closed()


def test_a_forked_child_closes_the_kept_loops_without_touching_the_parents() -> None:
    with no_kept_loops():
        Sim().run_sync(_noop)
        (loop,) = loops._IDLE
        epoll = loop._selector._real  # type: ignore[attr-defined]
        loops._forget_inherited()  # as the child does after a fork (here: in this process)
        assert loop.is_closed()
        assert loops._IDLE == []
        # The shared epoll instance was closed, never had the self-pipe unregistered.
        assert epoll.get_map() is None


async def _noop(sim: Sim) -> None:
    await asyncio.sleep(0)


def test_io_in_flight_is_a_world_socket_watched() -> None:
    # The selector's in_flight flag follows its registrations: the self-pipe alone is
    # none of a World's I/O; each socket watched besides it is.
    loop = loops.SimLoop(SimClock())
    try:
        selector = loop._selector  # type: ignore[attr-defined]
        assert selector._watched == 1
        assert not loop.io_in_flight()
        pairs = [socket.socketpair() for _ in range(2)]
        for n, (mine, _) in enumerate(pairs, 2):
            loop.add_reader(mine, lambda: None)
            assert selector._watched == n
            assert loop.io_in_flight()
        for n, (mine, _) in enumerate(pairs):
            loop.remove_reader(mine)
            assert loop.io_in_flight() is (selector._watched > 1)
            assert selector._watched == 2 - n
        assert not loop.io_in_flight()
        for pair in pairs:
            for end in pair:
                end.close()
    finally:
        loop.close()
