"""Leaf types: values with a fixed shape and no user-visible children.

Each encoder takes the value and returns its tag node (a JSON object); each decoder
takes a node and returns the value, raising ``ValueError``/``TypeError``/``KeyError``
on malformed input (the decoder turns those into :class:`SerializationError`).
Exact types only: a subclass of ``datetime`` or ``Decimal`` is not the class it
extends, and rebuilding it as the base class would silently change the type.
"""

from __future__ import annotations

import array
import math
import re
import sys
import uuid
import warnings
import zoneinfo
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from fractions import Fraction
from pathlib import PosixPath, PurePath, PurePosixPath, PureWindowsPath, WindowsPath
from typing import Any

from ._format import INT_LIMIT, TAG, b64decode, b64encode, hex_to_int, int_to_hex

__all__ = ["ATOM_TYPES", "LEAF_DECODERS", "LEAF_ENCODERS", "decode_float", "decode_int"]

Node = dict[str, Any]

_LITTLE = sys.byteorder == "little"
_ARRAY_CODES = frozenset(array.typecodes) | {"u", "w"}
#: Typecodes of text arrays, written as text: 'u' (wchar_t, deprecated in 3.13) and
#: 'w' (Py_UCS4, new in 3.13).
_TEXT_CODES = frozenset("uw")
_MEMORYVIEW_FORMATS = frozenset("bBchHiIlLqQnNfd?")
_PATH_TYPES: dict[str, type[PurePath]] = {
    "PurePosixPath": PurePosixPath,
    "PureWindowsPath": PureWindowsPath,
    "PosixPath": PosixPath,
    "WindowsPath": WindowsPath,
}


# -- numbers ---------------------------------------------------------------


def encode_int(value: int) -> int | Node:
    """An int as a JSON number, or as hex text past the portable range."""
    if -INT_LIMIT <= value <= INT_LIMIT:
        return value
    return {TAG: "i", "v": int_to_hex(value)}


def encode_float(value: float) -> float | Node:
    """A float as a JSON number, or tagged when JSON has no spelling for it."""
    if value - value == 0.0:  # finite: inf - inf and nan - nan are nan
        return value
    if math.isnan(value):
        return {TAG: "F", "v": "nan"}
    return {TAG: "F", "v": "inf" if value > 0 else "-inf"}


def decode_int(node: object) -> int:
    """An int written by :func:`encode_int`."""
    if type(node) is int:
        return node
    if type(node) is dict and node.get(TAG) == "i":
        return hex_to_int(node["v"])
    raise ValueError(f"expected an integer, got {_show(node)}")


_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def decode_float(node: object) -> float:
    """A float written by :func:`encode_float`."""
    if type(node) is float:
        return node
    if type(node) is int:  # a language-neutral writer may drop the ".0"
        return float(node)
    if type(node) is dict and node.get(TAG) == "F":
        return _SPECIAL_FLOATS[node["v"]]
    raise ValueError(f"expected a float, got {_show(node)}")


def _show(node: object) -> str:
    return f"{type(node).__name__} {node!r:.60}"


def _enc_decimal(value: Decimal) -> Node:
    return {TAG: "D", "v": str(value)}  # str() is exact, NaN and -0 included


def _dec_decimal(node: Node) -> Decimal:
    return Decimal(_text(node["v"]))


def _enc_fraction(value: Fraction) -> Node:
    return {TAG: "Q", "v": [int_to_hex(value.numerator), int_to_hex(value.denominator)]}


def _dec_fraction(node: Node) -> Fraction:
    num, den = node["v"]
    return Fraction(hex_to_int(num), hex_to_int(den))


def _enc_complex(value: complex) -> Node:
    return {TAG: "c", "v": [encode_float(value.real), encode_float(value.imag)]}


def _dec_complex(node: Node) -> complex:
    real, imag = node["v"]
    return complex(decode_float(real), decode_float(imag))


def _enc_range(value: range) -> Node:
    bounds = [encode_int(value.start), encode_int(value.stop), encode_int(value.step)]
    return {TAG: "r", "v": bounds}


def _dec_range(node: Node) -> range:
    start, stop, step = node["v"]
    return range(decode_int(start), decode_int(stop), decode_int(step))


def _enc_uuid(value: uuid.UUID) -> Node:
    return {TAG: "u", "v": str(value)}


def _dec_uuid(node: Node) -> uuid.UUID:
    return uuid.UUID(_text(node["v"]))


# -- bytes and buffers -----------------------------------------------------


def _enc_bytes(value: bytes) -> Node:
    return {TAG: "b", "v": b64encode(value)}


def _dec_bytes(node: Node) -> bytes:
    return b64decode(node["v"])


def _enc_bytearray(value: bytearray) -> Node:
    return {TAG: "ba", "v": b64encode(value)}


def _dec_bytearray(node: Node) -> bytearray:
    return bytearray(b64decode(node["v"]))


def _enc_array(value: array.array[Any]) -> Node:
    code = value.typecode
    if code in _TEXT_CODES:
        return {TAG: "a", "t": code, "v": value.tounicode()}
    if not _LITTLE:  # the log is little-endian on every host
        value = array.array(code, value)
        value.byteswap()
    return {TAG: "a", "t": code, "n": value.itemsize, "v": b64encode(value.tobytes())}


def _text_array(code: str, text: str) -> array.array[Any]:
    """A text array of ``code``, or of the other text code where this Python lacks it.

    'u' warns from Python 3.13 (and goes in 3.16); 'w' exists only from 3.13: a
    log written on one Python reads on every other, as the same characters.
    """
    if code not in array.typecodes:
        code = "w" if code == "u" else "u"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 'u' on 3.13 to 3.15
        return array.array(code, text)


def _dec_array(node: Node) -> array.array[Any]:
    code = node["t"]
    if type(code) is not str or code not in _ARRAY_CODES:
        raise ValueError(f"unknown array typecode {code!r:.20}")
    if code in _TEXT_CODES:
        return _text_array(code, _text(node["v"]))
    raw = b64decode(node["v"])
    size = node["n"]
    if type(size) is not int or size not in (1, 2, 4, 8) or len(raw) % size:
        raise ValueError(f"array item size {size!r:.20} does not divide {len(raw)} bytes")
    result = array.array(code)
    if result.itemsize == size:
        result.frombytes(raw)
        if not _LITTLE:
            result.byteswap()
    else:
        # Written on a host where this typecode has another width ('l' is 4 bytes
        # on Windows, 8 on Linux): go through the fixed-width struct codes.
        wide = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
        fmt = wide.upper() if code.isupper() else wide
        result.extend(memoryview(raw).cast(fmt).tolist())  # type: ignore[call-overload]
    return result


def _enc_memoryview(value: memoryview) -> Node:
    if value.format not in _MEMORYVIEW_FORMATS:
        raise ValueError(f"memoryview format {value.format!r}")
    return {
        TAG: "mv",
        "f": value.format,
        "s": list(value.shape or ()),
        "w": not value.readonly,
        "v": b64encode(value.tobytes()),
    }


def _dec_memoryview(node: Node) -> memoryview:
    fmt, shape, writable = node["f"], node["s"], node["w"]
    if type(fmt) is not str or fmt not in _MEMORYVIEW_FORMATS or type(writable) is not bool:
        raise ValueError(f"malformed memoryview format {fmt!r:.20}")
    if type(shape) is not list or len(shape) > 64 or any(type(n) is not int for n in shape):
        raise ValueError("malformed memoryview shape")
    raw = b64decode(node["v"])
    view = memoryview(bytearray(raw) if writable else raw)
    if len(shape) == 1:
        # 1-D: no shape argument, which also allows an empty view.
        if fmt != "B":
            view = view.cast(fmt)  # type: ignore[call-overload]
    else:
        view = view.cast(fmt, shape)  # type: ignore[call-overload]
    return view


# -- dates and times -------------------------------------------------------


def _enc_tz(value: tzinfo | None) -> Node | None:
    if value is None:
        return None
    if type(value) is timezone:
        offset = value.utcoffset(None)
        node: Node = {TAG: "tz", "o": _td_list(offset)}
        name = value.tzname(None)
        if name != timezone(offset).tzname(None):
            node["n"] = name
        return node
    if type(value) is zoneinfo.ZoneInfo:
        if value.key is None:
            raise ValueError("a ZoneInfo built from a file has no key")
        return {TAG: "zi", "k": value.key}
    raise ValueError(f"time zone of type {type(value).__qualname__}")


def _dec_tz(node: object) -> tzinfo | None:
    if node is None:
        return None
    if type(node) is not dict:
        raise ValueError(f"expected a time zone, got {_show(node)}")
    tag = node.get(TAG)
    if tag == "tz":
        offset = _dec_td_list(node["o"])
        name = node.get("n")
        return timezone(offset) if name is None else timezone(offset, _text(name))
    if tag == "zi":
        return zoneinfo.ZoneInfo(_text(node["k"]))
    raise ValueError(f"expected a time zone tag, got {tag!r:.20}")


def _td_list(value: timedelta) -> list[int]:
    return [value.days, value.seconds, value.microseconds]


def _dec_td_list(node: object) -> timedelta:
    if type(node) is not list or len(node) != 3 or any(type(n) is not int for n in node):
        raise ValueError("malformed timedelta")
    return timedelta(days=node[0], seconds=node[1], microseconds=node[2])


def _enc_datetime(value: datetime) -> Node:
    node: Node = {TAG: "dt", "v": value.replace(tzinfo=None, fold=0).isoformat()}
    if value.fold:
        node["f"] = 1
    if value.tzinfo is not None:
        node["z"] = _enc_tz(value.tzinfo)
    return node


def _dec_datetime(node: Node) -> datetime:
    value = datetime.fromisoformat(_text(node["v"]))
    return value.replace(tzinfo=_dec_tz(node.get("z")), fold=_fold(node))


def _enc_time(value: time) -> Node:
    node: Node = {TAG: "ti", "v": value.replace(tzinfo=None, fold=0).isoformat()}
    if value.fold:
        node["f"] = 1
    if value.tzinfo is not None:
        node["z"] = _enc_tz(value.tzinfo)
    return node


def _dec_time(node: Node) -> time:
    value = time.fromisoformat(_text(node["v"]))
    return value.replace(tzinfo=_dec_tz(node.get("z")), fold=_fold(node))


def _fold(node: Node) -> int:
    fold = node.get("f", 0)
    if fold not in (0, 1) or type(fold) is not int:
        raise ValueError("fold must be 0 or 1")
    return int(fold)


def _enc_date(value: date) -> Node:
    return {TAG: "da", "v": value.isoformat()}


def _dec_date(node: Node) -> date:
    return date.fromisoformat(_text(node["v"]))


def _enc_timedelta(value: timedelta) -> Node:
    return {TAG: "td", "v": _td_list(value)}


def _dec_timedelta(node: Node) -> timedelta:
    return _dec_td_list(node["v"])


def _enc_timezone(value: tzinfo) -> Node:
    node = _enc_tz(value)
    assert node is not None
    return node


def _dec_timezone(node: Node) -> tzinfo:
    value = _dec_tz(node)
    assert value is not None
    return value


# -- text-like -------------------------------------------------------------


def _enc_pattern(value: re.Pattern[Any]) -> Node:
    pattern = value.pattern
    if isinstance(pattern, bytes):
        return {TAG: "re", "b": b64encode(pattern), "f": value.flags}
    return {TAG: "re", "v": pattern, "f": value.flags}


def _dec_pattern(node: Node) -> re.Pattern[Any]:
    flags = node["f"]
    if type(flags) is not int:
        raise ValueError("regex flags must be an int")
    if "b" in node:
        return re.compile(b64decode(node["b"]), flags)
    return re.compile(_text(node["v"]), flags)


def _enc_path(value: PurePath) -> Node:
    return {TAG: "p", "k": type(value).__name__, "v": str(value)}


def _dec_path(node: Node) -> PurePath:
    kind = node["k"]
    if kind not in _PATH_TYPES:
        raise ValueError(f"unknown path type {kind!r:.30}")
    return _PATH_TYPES[kind](_text(node["v"]))


def _text(value: object) -> str:
    if type(value) is not str:
        raise ValueError(f"expected text, got {_show(value)}")
    return value


LEAF_ENCODERS: dict[type, Callable[[Any], Node]] = {
    bytes: _enc_bytes,
    bytearray: _enc_bytearray,
    memoryview: _enc_memoryview,
    array.array: _enc_array,
    datetime: _enc_datetime,
    date: _enc_date,
    time: _enc_time,
    timedelta: _enc_timedelta,
    timezone: _enc_timezone,
    zoneinfo.ZoneInfo: _enc_timezone,
    Decimal: _enc_decimal,
    Fraction: _enc_fraction,
    uuid.UUID: _enc_uuid,
    complex: _enc_complex,
    range: _enc_range,
    re.Pattern: _enc_pattern,
    PurePosixPath: _enc_path,
    PureWindowsPath: _enc_path,
    PosixPath: _enc_path,
    WindowsPath: _enc_path,
}

LEAF_DECODERS: dict[str, Callable[[Node], Any]] = {
    "b": _dec_bytes,
    "ba": _dec_bytearray,
    "mv": _dec_memoryview,
    "a": _dec_array,
    "dt": _dec_datetime,
    "da": _dec_date,
    "ti": _dec_time,
    "td": _dec_timedelta,
    "tz": _dec_timezone,
    "zi": _dec_timezone,
    "D": _dec_decimal,
    "Q": _dec_fraction,
    "u": _dec_uuid,
    "c": _dec_complex,
    "r": _dec_range,
    "re": _dec_pattern,
    "p": _dec_path,
}

# Leaf values that cannot change after they are built: they may sit inside a
# frozen value (bytearray, memoryview and array.array can change, so they cannot).
ATOM_TYPES: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        str,
        bytes,
        datetime,
        date,
        time,
        timedelta,
        timezone,
        zoneinfo.ZoneInfo,
        Decimal,
        Fraction,
        uuid.UUID,
        complex,
        range,
        re.Pattern,
        PurePosixPath,
        PureWindowsPath,
        PosixPath,
        WindowsPath,
    }
)
