"""Shared test support: registered example classes, strategies, exact comparison."""

from __future__ import annotations

import array
import dataclasses
import enum
import math
import re
import uuid
import warnings
from datetime import timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import attrs
from hypothesis import strategies as st

from durasim.runtime import serializable


@serializable
class Color(enum.Enum):
    RED = 1
    GREEN = "green"


@serializable
@attrs.frozen
class Message:
    role: str
    content: str


@serializable
@attrs.define(eq=False)
class Box:
    """Mutable, identity-bearing: may sit in a cycle."""

    label: str
    items: list[Any] = attrs.field(factory=list)


@serializable
@dataclasses.dataclass(frozen=True)
class Pair:
    left: Any
    right: Any


@serializable(class_id="tests.Point/v1")
class Point:
    def __init__(self, x: Any, y: Any) -> None:
        self.x = x
        self.y = y

    def __durasim_serialize__(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y}

    @classmethod
    def __durasim_deserialize__(cls, data: dict[str, Any]) -> Point:
        return cls(data["x"], data["y"])


@serializable
class RegisteredError(Exception):
    pass


# -- strategies --------------------------------------------------------------

ARRAY_CODES = array.typecodes  # 'w' too from Python 3.13


@st.composite
def arrays(draw: st.DrawFn) -> array.array[Any]:
    code = draw(st.sampled_from(ARRAY_CODES))
    if code in "uw":
        text = draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=5))
        with warnings.catch_warnings():  # 'u' is deprecated from Python 3.13
            warnings.simplefilter("ignore", DeprecationWarning)
            return array.array(code, text)
    if code in "fd":
        return array.array(
            code, draw(st.lists(st.floats(width=32 if code == "f" else 64), max_size=5))
        )
    probe = array.array(code)
    bits = probe.itemsize * 8
    lo, hi = (
        (0, 2**bits - 1)
        if code.isupper() or code == "B"
        else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    )
    if code == "b":
        lo, hi = -128, 127
    return array.array(code, draw(st.lists(st.integers(lo, hi), max_size=5)))


@st.composite
def memoryviews(draw: st.DrawFn) -> memoryview:
    raw = draw(st.binary(max_size=16))
    base: bytes | bytearray = bytearray(raw) if draw(st.booleans()) else raw
    view = memoryview(base)
    if len(raw) % 4 == 0 and draw(st.booleans()):
        view = view.cast("i")
    return view


fixed_zones = st.builds(
    lambda minutes, name: (
        timezone(timedelta(minutes=minutes), name) if name else timezone(timedelta(minutes=minutes))
    ),
    st.integers(-23 * 60, 23 * 60),
    st.none() | st.sampled_from(["CET", "X"]),
)
zones = st.none() | st.timezones() | fixed_zones

hashable_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.datetimes(timezones=zones),
    st.dates(),
    st.times(timezones=st.none() | fixed_zones),
    st.timedeltas(),
    st.decimals(allow_nan=True, allow_infinity=True).filter(lambda d: not d.is_snan()),
    st.fractions(),
    st.uuids(),
    st.complex_numbers(),
    st.builds(range, st.integers(-5, 5), st.integers(-5, 50), st.integers(1, 3)),
    st.sampled_from([re.compile("a+b"), re.compile(b"x.y", re.S), re.compile("(?i)q", re.M)]),
    st.builds(PurePosixPath, st.sampled_from(["/a/b", "rel", "."])),
    st.builds(PureWindowsPath, st.sampled_from(["C:\\x", "y"])),
    st.sampled_from(list(Color)),
)

leaves = st.one_of(
    hashable_leaves,
    st.decimals(allow_nan=True),  # signalling NaNs too (they cannot be hashed)
    st.binary(max_size=8).map(bytearray),
    memoryviews(),
    arrays(),
)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    hashables = st.recursive(
        hashable_leaves,
        lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
        max_leaves=4,
    )
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.dictionaries(hashables, children, max_size=3),
        st.sets(hashables, max_size=3),
        st.frozensets(hashables, max_size=3),
        st.builds(Message, st.text(max_size=4), st.text(max_size=4)),
        st.builds(Box, st.text(max_size=4), st.lists(children, max_size=3)),
        st.builds(Pair, children, children),
        st.builds(Point, children, children),
        st.builds(lambda x: [x, {"again": x}, (x,)], children),  # shared reference
        st.builds(_cycle, children),
        st.builds(_exception, st.text(max_size=5), children),
    )


def _cycle(x: Any) -> Any:
    outer: list[Any] = [x]
    box = Box("loop", [outer])
    outer.append(box)
    mapping: dict[str, Any] = {"self": None, "box": box}
    mapping["self"] = mapping
    outer.append(mapping)
    return outer


def _exception(message: str, detail: Any) -> BaseException:
    error = RegisteredError(message, detail)
    error.__cause__ = ValueError("cause")
    error.add_note("note")
    return error


values = st.recursive(leaves, containers, max_leaves=12)


# -- exact comparison --------------------------------------------------------


def assert_same(a: Any, b: Any) -> None:
    """``b`` equals ``a`` structurally, with exact types and the same sharing."""
    _same(a, b, {}, {})


def _same(a: Any, b: Any, seen: dict[int, Any], back: dict[int, Any]) -> None:
    assert type(a) is type(b), (type(a), type(b))
    t = type(a)
    if t is float:
        assert (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        ), (a, b)
        return
    if t in (type(None), bool, int, str):
        assert a == b
        return
    if id(a) in seen:
        assert seen[id(a)] is b, f"sharing lost for {t.__name__}"
        return
    assert id(b) not in back, f"extra sharing for {t.__name__}"
    seen[id(a)] = b
    back[id(b)] = a
    if t in (list, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y, seen, back)
    elif t is dict:
        assert len(a) == len(b)
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
            _same(ka, kb, seen, back)
            _same(va, vb, seen, back)
    elif t in (set, frozenset):
        assert len(a) == len(b)
        assert _canon(a) == _canon(b)
    elif t is complex:
        _same(a.real, b.real, seen, back)
        _same(a.imag, b.imag, seen, back)
    elif t is Decimal:
        assert str(a) == str(b)
    elif t is array.array:
        assert a.typecode == b.typecode
        assert a.tobytes() == b.tobytes()
    elif t is memoryview:
        assert (a.format, a.shape, a.readonly, a.tobytes()) == (
            b.format,
            b.shape,
            b.readonly,
            b.tobytes(),
        )
    elif hasattr(a, "tzinfo") and hasattr(a, "isoformat"):  # datetime, time
        assert a.isoformat() == b.isoformat()
        assert a.fold == b.fold
        assert type(a.tzinfo) is type(b.tzinfo)
        assert repr(a.tzinfo) == repr(b.tzinfo)
    elif isinstance(a, BaseException):
        if len(a.args) <= 1:  # str() of several args shows reprs with addresses
            assert str(a) == str(b)
        assert len(a.args) == len(b.args)
        for x, y in zip(a.args, b.args, strict=True):
            _same(x, y, seen, back)
        assert getattr(a, "__notes__", None) == getattr(b, "__notes__", None)
        if a.__cause__ is None:
            assert b.__cause__ is None
        else:
            _same(a.__cause__, b.__cause__, seen, back)
    elif t in (Box, Message, Pair):
        for field in (
            (f.name for f in attrs.fields(t))
            if attrs.has(t)
            else (f.name for f in dataclasses.fields(a))
        ):
            _same(getattr(a, field), getattr(b, field), seen, back)
    elif t is Point:
        _same(a.x, b.x, seen, back)
        _same(a.y, b.y, seen, back)
    else:
        assert a == b, (a, b)
        assert t in (
            bytes,
            bytearray,
            Fraction,
            uuid.UUID,
            range,
            re.Pattern,
            PurePosixPath,
            PureWindowsPath,
            Color,
            type(a),
        ), t


def _canon(items: Any) -> list[str]:
    # Set members are hashable leaves or tuples/frozensets of them: compare a
    # canonical text that treats NaNs as equal.
    return sorted(_text(x) for x in items)


def _text(x: Any) -> str:
    if type(x) is float and math.isnan(x):
        return "float:nan"
    if type(x) is tuple:
        return "(" + ",".join(_text(y) for y in x) + ")"
    if type(x) is frozenset:
        return "{" + ",".join(sorted(_text(y) for y in x)) + "}"
    if type(x) is Decimal:
        return "Decimal:" + str(x)
    if type(x) is complex:
        return f"complex:{_text(x.real)},{_text(x.imag)}"
    if hasattr(x, "tzinfo") and hasattr(x, "isoformat"):
        return f"{type(x).__name__}:{x.isoformat()}:{x.fold}:{x.tzinfo!r}"
    return f"{type(x).__name__}:{x!r}"
