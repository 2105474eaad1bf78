"""Issue 22: a step's plain result is not decoded again by the replay that just encoded it.

The attempt keeps ``(data, value)`` on the run's payloads (``data`` is
``plain_scalar(value)``); :meth:`RunPayloads.decode_record` of those very bytes
gives ``value`` itself instead of decoding them.  Proven equal to the decoding
path (value, type, repr, and the keys indexed), once only, and never for other
bytes (an equal copy, or another record).
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import Worker, start, step, workflow
from durasim.runtime._payloads import RunPayloads
from durasim.runtime.serialization._api import plain_scalar
from durasim.worlds import FixedClock, MemoryWorld

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


@settings(max_examples=500, deadline=None)
@given(value=_scalars)
def test_the_kept_result_is_what_decoding_its_bytes_gives(value: object) -> None:
    data = plain_scalar(value)
    if data is None:  # not a plain scalar (out of range, not finite): never kept
        return
    kept, decoded = RunPayloads(), RunPayloads()
    kept.plain_result = (data, value)
    got = kept.decode_record("@7", data)
    expected = decoded.decode_record("@7", data)
    assert type(got) is type(expected)
    assert repr(got) == repr(expected)
    assert got == expected  # (a NaN never gets here: not plain)
    assert kept._indexed == decoded._indexed
    assert kept._writer._loaded == decoded._writer._loaded
    assert kept.plain_result is None  # once


@settings(max_examples=200, deadline=None)
@given(value=_scalars, other=_scalars)
def test_other_bytes_are_decoded(value: object, other: object) -> None:
    data, other_data = plain_scalar(value), plain_scalar(other)
    if data is None or other_data is None:
        return
    payloads = RunPayloads()
    payloads.plain_result = (data, value)
    copy = bytes(bytearray(other_data))  # equal bytes at best, never the same object
    got = payloads.decode_record("@3", copy)
    assert repr(got) == repr(RunPayloads().decode_record("@3", copy))
    assert payloads.plain_result == (data, value)  # still kept for its own bytes


@step
def _echo(value: object) -> object:
    return value


@workflow
async def _echoes(values: list[object]) -> list[object]:
    return [await _echo(v) for v in values]


def test_a_run_of_plain_results_gets_what_its_steps_returned() -> None:
    values: list[object] = [7, -0.0, 1.5, "é\ud800", True, None, "", 2**53]

    async def go() -> list[object]:
        world = MemoryWorld(clock=FixedClock())
        run = await start(_echoes, values, world=world)
        result: list[object] = await Worker(world).run_until_complete(run)
        return result

    live = asyncio.run(go())
    assert [repr(v) for v in live] == [repr(v) for v in values]
    assert [type(v) for v in live] == [type(v) for v in values]
