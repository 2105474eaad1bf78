"""SimClock.now() is remembered until the clock moves: always the instant of its micros."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from durasim.sim import SimClock
from durasim.worlds._time import from_micros

_MOVES = st.lists(
    st.one_of(
        st.tuples(st.just("jump"), st.floats(min_value=0, max_value=1e6)),
        st.tuples(st.just("to_micros"), st.integers(min_value=-(10**9), max_value=10**9)),
        st.tuples(st.just("to_seconds"), st.floats(min_value=-10.0, max_value=1e6)),
        st.tuples(st.just("now"), st.just(0)),
    ),
    max_size=30,
)


@given(_MOVES)
def test_now_is_the_instant_of_the_clock_after_any_moves(moves: list[tuple[str, float]]) -> None:
    clock = SimClock()
    start = clock.micros
    assert clock.now() == from_micros(start)
    for kind, value in moves:
        before = clock.micros
        if kind == "jump":
            clock.jump(value)
        elif kind == "to_micros":
            clock.advance_to_micros(start + int(value))
        elif kind == "to_seconds":
            clock.advance_to_seconds(value)
        assert clock.micros >= before  # never backwards
        assert clock.now() == from_micros(clock.micros)
        assert clock.now() is clock.now()  # remembered while the clock stands still


def test_the_world_sees_the_sims_clock() -> None:
    from durasim.sim import Sim

    async def script(sim: Sim) -> bool:
        return sim.world.clock is sim.clock

    assert Sim().run_sync(script)
