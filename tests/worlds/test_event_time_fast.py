"""event_time takes the World's own ``now`` as is: decisions never change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from durasim.worlds import InvalidRequest
from durasim.worlds._checks import MAX_CLOCK_SKEW, event_time


def reference(now: datetime, occurred_at: object, *, in_band: bool) -> datetime:
    """event_time as it was before the shortcut."""
    if occurred_at is None:
        return now
    if not in_band:
        raise InvalidRequest("occurred_at is for in-band writes only: pass in_band=True")
    if not isinstance(occurred_at, datetime) or occurred_at.tzinfo is None:
        raise InvalidRequest(f"occurred_at must be an aware datetime, got {occurred_at!r}")
    if occurred_at > now + MAX_CLOCK_SKEW:
        raise InvalidRequest("ahead")
    return occurred_at


def decide(check: object, now: datetime, occurred_at: object, in_band: bool) -> object:
    try:
        return ("at", check(now, occurred_at, in_band=in_band))  # type: ignore[operator]
    except InvalidRequest as exc:
        return ("refused", str(exc)[:20])
    except OverflowError:
        return ("overflow",)


NOWS = st.one_of(
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(timezones=st.just(timezone(timedelta(hours=-3)))),
    st.datetimes(),  # naive: a clock that is wrong
    st.just(datetime.max.replace(tzinfo=UTC)),
    st.just(datetime.max.replace(tzinfo=UTC) - timedelta(minutes=3)),
)


@given(NOWS, st.booleans(), st.sampled_from(["same", "equal", "none", "later"]))
def test_own_now_decides_as_before(now: datetime, in_band: bool, which: str) -> None:
    occurred_at: object = {
        "same": now,
        "equal": now.replace(),  # another object, equal
        "none": None,
        "later": now + timedelta(seconds=1) if now.year < 9999 else now,
    }[which]
    assert decide(event_time, now, occurred_at, in_band) == decide(
        reference, now, occurred_at, in_band
    )
