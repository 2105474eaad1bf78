"""Time and id sources: exact microsecond round trips, monotonic clocks, counting ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import EPOCH, CountingIds, FixedClock, RandomIds, SystemClock
from durasim.worlds._time import from_micros, to_micros

_UNIX = datetime(1970, 1, 1, tzinfo=UTC)


@given(st.datetimes(timezones=st.just(UTC)))
def test_micros_round_trip_exactly(moment: datetime) -> None:
    assert from_micros(to_micros(moment)) == moment


@pytest.mark.parametrize(
    "micros", [0, 1, 999_999, 2**33 * 1_000_000 - 1, 2**33 * 1_000_000, -1, -(10**12)]
)
def test_boundaries_of_the_fast_path(micros: int) -> None:
    assert from_micros(micros) == _UNIX + timedelta(microseconds=micros)


def test_aware_datetimes_in_other_zones_convert() -> None:
    moment = datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert from_micros(to_micros(moment)) == moment


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        to_micros(datetime(2024, 1, 1))


def test_fixed_clock_moves_forward_only() -> None:
    clock = FixedClock()
    assert clock.now() == EPOCH
    clock.advance(1.5)
    assert clock.now() == EPOCH + timedelta(seconds=1.5)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_system_clock_never_goes_back() -> None:
    clock = SystemClock()
    readings = [clock.now() for _ in range(100)]
    assert readings == sorted(readings)


def test_counting_ids_are_deterministic_per_prefix() -> None:
    a, b = CountingIds(), CountingIds()
    assert [a.new_id("wrun"), a.new_id("msg"), a.new_id("wrun")] == [
        "wrun_000001",
        "msg_000001",
        "wrun_000002",
    ]
    assert b.new_id("wrun") == "wrun_000001"
    assert CountingIds(namespace="x").new_id("msg") == "msg_x000001"


def test_random_ids_carry_128_bits() -> None:
    ids = {RandomIds().new_id("wrun") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == len("wrun_") + 32 for i in ids)
