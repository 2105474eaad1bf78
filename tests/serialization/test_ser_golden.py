"""Golden bytes: a change to the format must be a visible, deliberate act.

The fixtures live in tests/golden/serialization/payloads.json (name -> payload
text).  To accept a deliberate format change, run this file with
``DURASIM_UPDATE_GOLDEN=1`` and commit the diff.
"""

from __future__ import annotations

import array
import json
import os
import re
import uuid
import warnings
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from _ser_support import Box, Color, Message, Pair, Point, RegisteredError, assert_same

from durasim.runtime import FatalError, RetryableError
from durasim.runtime.serialization import deserialize, serialize

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "serialization" / "payloads.json"


def _shared() -> Any:
    items = [1, 2]
    return {"a": items, "b": items, "t": (items,)}


def _cycle() -> Any:
    loop: list[Any] = ["head"]
    loop.append(loop)
    return loop


def _text_array(code: str, text: str) -> array.array[str]:
    with warnings.catch_warnings():  # 'u' is deprecated from Python 3.13
        warnings.simplefilter("ignore", DeprecationWarning)
        return array.array(code, text)


def _error() -> Any:
    error = RegisteredError("declined", 402)
    error.__cause__ = KeyError("card")
    error.add_note("retry tomorrow")
    return error


CASES: dict[str, Any] = {
    "plain_json": {
        "id": 7,
        "name": "Ada",
        "ok": True,
        "score": 9.5,
        "tags": ["a", "b"],
        "none": None,
    },
    "ints": [0, -1, 2**53 - 1, 2**53, -(2**64), 10**40],
    "floats": [0.1, -0.0, float("inf"), float("-inf"), 1e300],
    "bytes_like": [b"\x00\xff", bytearray(b"ab"), memoryview(b"xyz")],
    "arrays": [array.array("i", [1, -2]), array.array("d", [0.5]), _text_array("u", "hi")],
    "collections": [(1, "two"), {3, 1, 2}, frozenset({"b", "a"}), {(1, 2): "tuple key", None: 0}],
    "tag_key": {"#": "user data, not a tag"},
    "times": [
        datetime(2024, 3, 31, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),
        datetime(2024, 1, 2, 3, 4, 5, 6),
        datetime(2024, 1, 2, tzinfo=timezone(timedelta(hours=-5), "EST")),
        date(2024, 2, 29),
        time(23, 59, 59, 999999, tzinfo=UTC),
        timedelta(days=-1, seconds=5, microseconds=7),
    ],
    "numbers": [Decimal("-0"), Decimal("NaN"), Decimal("1.50"), Fraction(-3, 4), 1.5 - 2j],
    "misc": [
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        range(0, 10, 3),
        re.compile(r"^a+$", re.IGNORECASE),
        PurePosixPath("/var/log"),
    ],
    "registered": [Color.GREEN, Message("user", "hi"), Pair(1, (2,)), Point(3, [4]), Box("b", [5])],
    "shared": _shared(),
    "cycle": _cycle(),
    "errors": [
        _error(),
        ValueError("bad"),
        FatalError("stop"),
        RetryableError("later", retry_after=timedelta(seconds=30)),
    ],
}


def _load() -> dict[str, str]:
    if not GOLDEN.exists():
        return {}
    loaded: dict[str, str] = json.loads(GOLDEN.read_text())
    return loaded


def test_golden_file_is_current() -> None:
    current = {name: serialize(value).decode("ascii") for name, value in CASES.items()}
    if os.environ.get("DURASIM_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    assert _load() == current, "format changed: see this file's docstring to accept it"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_bytes_decode_to_the_value(name: str) -> None:
    stored = _load()[name].encode("ascii")
    decoded = deserialize(stored)
    if name == "errors":
        assert [type(e) for e in decoded] == [type(e) for e in CASES[name]]
        assert decoded[0].__notes__ == ["retry tomorrow"]
        assert decoded[3].retry_after == timedelta(seconds=30)
    else:
        assert_same(CASES[name], decoded)
    assert serialize(decoded) == stored


#: durasim's errors as encoded before their classes reported a public ``__module__``
#: (the ``t`` field named the private module): logs written then still decode alike.
_BEFORE_PUBLIC_MODULES = (
    'dj1:t[{"#":"x","t":"durasim.runtime.serialization._errors.FatalError",'
    '"c":"error//durasim//FatalError","a":["stop"],"k":{}},'
    '{"#":"x","t":"durasim.runtime.serialization._errors.RetryableError",'
    '"c":"error//durasim//RetryableError","a":["later"],'
    '"k":{"retry_after":{"#":"td","v":[0,30,0]}}}]'
)


def test_errors_encoded_with_their_private_module_still_decode() -> None:
    fatal, retryable = deserialize(_BEFORE_PUBLIC_MODULES.encode("ascii"))
    assert type(fatal) is FatalError
    assert str(fatal) == "stop"
    assert type(retryable) is RetryableError
    assert retryable.retry_after == timedelta(seconds=30)
    assert b"durasim.runtime.serialization.FatalError" in serialize(fatal)
