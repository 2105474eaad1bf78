"""The scalar fast path writes the very bytes of the general path (issue 22)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.runtime import SerializationError
from durasim.runtime.serialization import deserialize, serialize
from durasim.runtime.serialization._api import HEAD_PLAIN, dumps_tree, plain_scalar
from durasim.runtime.serialization._format import INT_LIMIT

EDGES = [
    0,
    -1,
    INT_LIMIT,
    -INT_LIMIT,
    "",
    "plain",
    'quote " and \\ backslash',
    "\x00\x1f\x7f control",
    "\u00e9\u4e2d\U0001f600",
    "\ud800 lone surrogate",
    None,
    True,
    False,
    0.0,
    -0.0,
    0.1,
    1e300,
    -2.5e-308,
    5e-324,
]


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_a_scalar_is_written_as_the_general_path_writes_it(value: object) -> None:
    assert plain_scalar(value) == HEAD_PLAIN + dumps_tree(value)
    back = deserialize(serialize(value))
    assert type(back) is type(value)
    assert back == value


@given(
    st.one_of(
        st.integers(-INT_LIMIT, INT_LIMIT),
        st.text(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(),
        st.none(),
    )
)
def test_any_plain_scalar_has_the_general_paths_bytes(value: object) -> None:
    assert plain_scalar(value) == HEAD_PLAIN + dumps_tree(value)
    assert deserialize(serialize(value)) == value


@pytest.mark.parametrize("value", [INT_LIMIT + 1, -INT_LIMIT - 1, math.inf, math.nan, 1.5j])
def test_what_is_not_a_plain_scalar_takes_the_general_path(value: object) -> None:
    assert plain_scalar(value) is None
    back = deserialize(serialize(value))
    assert back == value or (math.isnan(back) and math.isnan(value))


@pytest.mark.parametrize(
    "data", [b"dj1:j", b"dj1:jNaN", b"dj1:j[1,", b"dj1:j\xff", bytearray(b"dj1:j1")]
)
def test_a_broken_plain_payload_fails_as_before(data: bytes) -> None:
    if isinstance(data, bytearray):  # not bytes: the general path, same value
        assert deserialize(data) == 1
        return
    with pytest.raises(SerializationError):
        deserialize(data)
