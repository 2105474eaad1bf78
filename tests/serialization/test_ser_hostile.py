"""Malformed and hostile bytes: a clear SerializationError, never a crash or a hang."""

from __future__ import annotations

import base64
import contextlib
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durasim.runtime import SerializationError
from durasim.runtime.serialization import (
    MAX_DEPTH,
    FrozenValues,
    MemoryRecordStore,
    deserialize,
    serialize,
)

SAMPLE = serialize(
    {"a": (1, 2.5, b"x"), 7: {frozenset({1}), None}, "big": 2**80, "s": ["shared"] * 2}
)


def _refused(data: bytes, match: str | None = None) -> str:
    with pytest.raises(SerializationError, match=match) as info:
        deserialize(data)
    return str(info.value)


def test_every_truncation_is_refused_or_decodes() -> None:
    for end in range(len(SAMPLE)):
        with contextlib.suppress(SerializationError):
            deserialize(SAMPLE[:end])


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "not a durasim payload"),
        (b"dj1", "not a durasim payload"),
        (b"\x80\x04pickle", "not a durasim payload"),
        (b'{"a":1}', "not a durasim payload"),
        (b"dj2:j1", "written by another durasim version"),
        (b"dj1:z1", "unknown payload kind"),
        (b"dj1:j", "malformed payload"),
        (b"dj1:jNaN", "not part of the format"),
        (b"dj1:j\xff\xfe", "malformed payload"),
        (b'dj1:t{"#":"zz"}', "unknown type tag 'zz'"),
        (b'dj1:t{"#":7}', "unknown type tag 7"),
        (b'dj1:t{"#":"R","i":0}', "does not exist"),
        (b'dj1:t[{"#":"R","i":1000000000}]', "does not exist"),
        (b'dj1:t{"#":"t","v":[{"#":"R","i":0}]}', "still being built"),
        (b'dj1:t{"#":"t","v":"abc"}', "needs a list"),
        (b'dj1:t{"#":"d","v":[1]}', "a key for every value"),
        (b'dj1:t{"#":"i","v":"+1"}', "malformed hex"),
        (b'dj1:t{"#":"b","v":"!!"}', "malformed base64"),
        (b'dj1:t{"#":"o","c":"class//os//system","v":"ls"}', "not registered in this process"),
        (b'dj1:t{"#":"e","c":"class//x//Y","n":"A"}', "not registered"),
        (b'dj1:t{"#":"fn","c":"step//os//system"}', "not registered"),
        (b'dj1:t{"#":"zi","k":"../../etc/passwd"}', "malformed payload"),
        (b'dj1:f["r"]\n{"#":"@","k":0,"i":0}', "decode it with FrozenValues"),
    ],
)
def test_malformed_payloads(data: bytes, match: str) -> None:
    _refused(data, match)


def test_unknown_exception_type_never_runs_code() -> None:
    data = b'dj1:t{"#":"x","t":"os.system","a":["echo pwned"]}'
    error = deserialize(data)
    assert type(error).__name__ == "RevivedError"
    assert error.type_name == "os.system"


def test_deep_nesting_in_bytes_is_refused() -> None:
    depth = 100_000
    for kind, opening, closing in (
        (b"j", b"[" * depth, b"]" * depth),
        (b"t", b'{"#":"t","v":[' * depth, b"]}" * depth),
        (b"t", b'{"a":' * depth + b"1", b"}" * depth),
    ):
        message = _refused(b"dj1:" + kind + opening + closing)
        assert "deep" in message


def test_deep_nesting_in_values_is_refused() -> None:
    value: Any = 1
    for _ in range(100_000):
        value = [value]
    with pytest.raises(SerializationError) as info:
        serialize(value)
    message = str(info.value)
    assert f"nesting deeper than {MAX_DEPTH} levels" in message
    assert message.startswith("value[0][0][0]")
    nested: Any = 1
    for _ in range(100_000):
        nested = (nested,)
    with pytest.raises(SerializationError):
        serialize(nested)


def test_nesting_up_to_the_limit_round_trips() -> None:
    value: Any = "leaf"
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    assert deserialize(serialize(value)) == value


def _peak_bytes(data: bytes) -> int:
    tracemalloc.start()
    try:
        with contextlib.suppress(SerializationError):
            deserialize(data)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


GIGA = 1_000_000_000


@pytest.mark.parametrize(
    "node",
    [
        {"#": "mv", "f": "B", "s": [GIGA], "w": True, "v": ""},
        {"#": "mv", "f": "q", "s": [GIGA, GIGA], "w": False, "v": "AAAAAAAAAAA="},
        {"#": "a", "t": "q", "n": GIGA, "v": "AAAAAAAAAAA="},
        {"#": "a", "t": "q", "n": 8, "v": "A" * 7},
        {"#": "R", "i": GIGA},
        {"#": "r", "v": [0, GIGA * GIGA, 1]},  # a lazy range: fine, and tiny
        {"#": "D", "v": f"1e{GIGA}"},
        {"#": "i", "v": "f" * 64},
        {"#": "td", "v": [GIGA, 0, 0]},
        {"#": "t+", "v": [{"#": ":", "k": 0, "i": 0, "a": 0, "b": GIGA}]},
    ],
)
def test_a_one_gigabyte_claim_allocates_little(node: dict[str, Any]) -> None:
    data = b"dj1:t" + json.dumps([node]).encode()
    assert _peak_bytes(data) < 2_000_000


def test_a_huge_json_integer_literal_is_refused() -> None:
    _refused(b"dj1:j" + b"9" * 100_000, "malformed payload")


def test_frozen_payload_hostile_headers() -> None:
    records = MemoryRecordStore()
    values = FrozenValues(records)
    records.put("a", b'dj1:f["b"]\n{"#":"@","k":0,"i":0}')
    records.put("b", b'dj1:f["a"]\n{"#":"@","k":0,"i":0}')
    with pytest.raises(SerializationError, match="refers to itself"):
        values.rebuild("a")
    with pytest.raises(SerializationError, match="not stored"):
        values.deserialize(b'dj1:f["missing"]\n1', record="x")
    with pytest.raises(SerializationError, match="malformed record list"):
        values.deserialize(b"dj1:f{}\n1", record="y")
    records.put("c", serialize([1]))
    with pytest.raises(SerializationError, match="holds no frozen value"):
        values.deserialize(b'dj1:f["c"]\n{"#":"@","k":0,"i":5}', record="z")
    with pytest.raises(SerializationError, match="malformed"):
        values.deserialize(b'dj1:f["c"]\n{"#":"@","k":9,"i":0}', record="w")


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_random_bodies_never_crash(body: bytes) -> None:
    for kind in (b"j", b"t", b"f"):
        with contextlib.suppress(SerializationError):
            deserialize(b"dj1:" + kind + body)


@settings(max_examples=300)
@given(st.integers(0, len(SAMPLE) - 1), st.integers(0, 255))
def test_flipped_bytes_never_crash(position: int, byte: int) -> None:
    data = bytearray(SAMPLE)
    data[position] = byte
    with contextlib.suppress(SerializationError):
        deserialize(bytes(data))


_json_nodes = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["#", "v", "i", "k", "c", "t", "a", "b", "n", "f", "s", "w"]),
            inner,
            max_size=4,
        )
        | st.builds(
            lambda tag, rest: {"#": tag, **rest},
            st.sampled_from(
                [
                    "R",
                    "i",
                    "F",
                    "t",
                    "s",
                    "f",
                    "d",
                    "o",
                    "e",
                    "x",
                    "b",
                    "ba",
                    "mv",
                    "a",
                    "dt",
                    "da",
                    "ti",
                    "td",
                    "tz",
                    "zi",
                    "D",
                    "Q",
                    "u",
                    "c",
                    "r",
                    "re",
                    "p",
                    "fn",
                ]
            ),
            st.dictionaries(
                st.sampled_from(
                    ["v", "i", "k", "c", "t", "a", "b", "n", "f", "s", "w", "m", "z", "o", "ca"]
                ),
                inner,
                max_size=4,
            ),
        )
    ),
    max_leaves=10,
)


@settings(max_examples=500)
@given(_json_nodes)
def test_structured_garbage_never_crashes(tree: Any) -> None:
    with contextlib.suppress(SerializationError):
        deserialize(b"dj1:t" + json.dumps(tree).encode())


def test_base64_payloads_are_strict() -> None:
    good = base64.b64encode(b"abc").decode()
    assert deserialize(b'dj1:t{"#":"b","v":"' + good.encode() + b'"}') == b"abc"
    _refused(b'dj1:t{"#":"b","v":"YW Jj"}', "malformed base64")
