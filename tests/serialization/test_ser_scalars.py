"""The scalar fast path writes the very bytes of the general path (issue 22)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durasim.runtime import SerializationError
from durasim.runtime.serialization import FrozenValues, deserialize, serialize
from durasim.runtime.serialization._api import HEAD_PLAIN, dumps_tree, plain_scalar
from durasim.runtime.serialization._encode import _plain, is_flat_plain, is_plain
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


_SCALARS = st.one_of(
    st.integers(-INT_LIMIT - 2, INT_LIMIT + 2),
    st.text(max_size=8),
    st.floats(),
    st.booleans(),
    st.none(),
)
_FLAT = st.dictionaries(
    st.text(max_size=4),
    st.one_of(
        _SCALARS,
        st.lists(_SCALARS, max_size=4),
        st.dictionaries(st.text(max_size=4), _SCALARS, max_size=3),
    ),
    max_size=4,
)


def _walk(value: object) -> bool:
    return _plain(value, 0, set())


@given(_FLAT)
def test_the_flat_shape_is_judged_as_the_full_walk_judges_it(value: dict[str, Any]) -> None:
    # One call for a step input's shape; never plain where the walk says otherwise.
    if is_flat_plain(value):
        assert _walk(value)
    assert is_plain(value) == _walk(value)


def test_a_container_reached_twice_is_not_flat() -> None:
    shared: list[int] = [1]
    assert not is_flat_plain({"a": shared, "b": shared})
    assert not is_flat_plain({"args": [], "kwargs": {}, 1: 2})  # type: ignore[dict-item]
    assert not is_flat_plain({"args": [[1]]})  # deeper: the walk decides
    assert is_plain({"args": [[1]]})


@given(st.lists(_SCALARS, max_size=4), st.dictionaries(st.text(max_size=4), _SCALARS, max_size=3))
def test_a_step_input_of_scalars_has_the_general_paths_bytes(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    value = {"args": args, "kwargs": kwargs, "closure": {}}
    stored = FrozenValues(_NoRecords()).serialize(value, record="s#1")
    if is_plain(value):
        assert stored == serialize(value) == HEAD_PLAIN + dumps_tree(value)
        assert deserialize(stored) == value


class _NoRecords:
    def stored(self, key: str) -> bool:
        return False

    def load(self, key: str) -> bytes:
        raise KeyError(key)
