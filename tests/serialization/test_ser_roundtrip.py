"""decode(encode(x)) is x: equal structure, exact types, the same sharing."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from _ser_support import Box, Message, Point, assert_same, values
from hypothesis import given, settings

from durasim.runtime.serialization import deserialize, serialize


@settings(max_examples=300)
@given(values)
def test_round_trip_keeps_structure_types_and_sharing(value: Any) -> None:
    assert_same(value, deserialize(serialize(value)))


@given(values)
def test_encoding_is_deterministic(value: Any) -> None:
    assert serialize(value) == serialize(value)


@given(values)
def test_a_decoded_payload_re_encodes_to_the_same_bytes(value: Any) -> None:
    data = serialize(value)
    assert serialize(deserialize(data)) == data


@pytest.mark.parametrize(
    "value",
    [
        float("inf"),
        float("-inf"),
        -0.0,
        2**64,
        -(2**1000),
        10**5000,  # beyond the 4,300-digit str conversion limit: written as hex
        [2**53 - 1, -(2**53 - 1), 2**53],
        {"#": "not a tag"},
        {1: "a", "1": "b", (1, 2): "c", None: "d", frozenset(): "e"},
        "\ud800 lone surrogate",
    ],
    ids=lambda v: type(v).__name__,
)
def test_edge_values(value: Any) -> None:
    assert_same(value, deserialize(serialize(value)))


def test_nan_stays_nan() -> None:
    assert math.isnan(deserialize(serialize(float("nan"))))


def test_plain_json_uses_the_plain_kind() -> None:
    assert serialize({"a": [1, 2.5, None, True, "x"]}) == b'dj1:j{"a":[1,2.5,null,true,"x"]}'


def test_shared_lists_leave_the_plain_kind() -> None:
    shared = [1]
    data = serialize({"a": shared, "b": shared})
    assert data.startswith(b"dj1:t")
    out = deserialize(data)
    assert out["a"] is out["b"]


def test_cycles_through_lists_dicts_and_objects() -> None:
    box = Box("b")
    items: list[Any] = [box]
    box.items.append(items)
    mapping: dict[str, Any] = {"items": items}
    mapping["me"] = mapping
    out = deserialize(serialize(mapping))
    assert out["me"] is out
    assert out["items"][0].items[0] is out["items"]


def test_a_tuple_in_a_cycle_through_a_list_round_trips_from_the_list() -> None:
    inner: list[Any] = []
    pair = (inner, 1)
    inner.append(pair)
    out = deserialize(serialize(inner))
    assert out[0][0] is out


def test_steps_receive_copies() -> None:
    original = {"user": {"email": "a@example.com"}, "tags": ["x"], "at": Point(1, [2])}
    before = copy.deepcopy(original)
    received = deserialize(serialize(original))
    received["user"]["email"] = "b@example.com"
    received["tags"].append("y")
    received["at"].y.append(3)
    assert original["user"] == before["user"]
    assert original["tags"] == before["tags"]
    assert original["at"].y == [2]


def test_frozen_attrs_instances_come_back_frozen() -> None:
    out = deserialize(serialize(Message("user", "hi")))
    assert out == Message("user", "hi")
    with pytest.raises(AttributeError):
        out.role = "x"  # type: ignore[misc]
