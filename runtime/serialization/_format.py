"""Constants of the byte format, shared by the encoder and the decoder.

A payload is ``b"dj1:"`` (format name and version), one kind byte, then UTF-8 JSON:

* ``j`` -- the body is plain JSON and decodes with ``json.loads`` alone (the value
  held only str-keyed dicts, lists, str, finite floats, ints within +-(2**53 - 1),
  bool and None, and no list or dict was reached twice);
* ``t`` -- the body is a tagged tree (see docs/serialization.md for every tag);
* ``f`` -- a JSON list of record keys, a newline, then a tagged tree that refers to
  frozen values stored in those records.

In a tagged tree a JSON object with the key ``"#"`` is a tag; any other JSON object
is a dict with those string keys.  Every list, dict and object tag gets the next
index in pre-order (``"#": "R"`` refers back to it), so encoder and decoder number
the same objects without writing the numbers down.  Value tags (``i``, ``F``, ``R``,
the slice item ``:``) get no index.
"""

from __future__ import annotations

import base64
import binascii

__all__ = [
    "INT_LIMIT",
    "KIND_FROZEN",
    "KIND_PLAIN",
    "KIND_TAGGED",
    "MAX_DEPTH",
    "PREFIX",
    "TAG",
    "VALUE_TAGS",
    "b64decode",
    "b64encode",
    "hex_to_int",
    "int_to_hex",
]

PREFIX = b"dj1:"
KIND_PLAIN = ord("j")
KIND_TAGGED = ord("t")
KIND_FROZEN = ord("f")

TAG = "#"

# JSON numbers beyond 2**53 lose precision in most languages' parsers; such ints
# are written as hex strings so the log stays language-neutral.
INT_LIMIT = 2**53 - 1

# Containers nested deeper than this are refused on both sides.  The walkers are
# recursive (the fastest shape in CPython) and take up to three frames a level,
# so 200 levels stay inside the default recursion limit of 1,000 with room for
# the caller's own frames; real payloads are nowhere near it.
MAX_DEPTH = 200

VALUE_TAGS = frozenset({"i", "F", "R", ":"})


def int_to_hex(value: int) -> str:
    """Hex text of an int (power-of-two bases are exempt from the digit limit)."""
    return format(value, "x")


def hex_to_int(text: object) -> int:
    """Parse :func:`int_to_hex` output; refuses anything else."""
    if type(text) is not str or not text or text.startswith(("+", " ")) or "_" in text:
        raise ValueError(f"malformed hex integer {text!r:.40}")
    return int(text, 16)


def b64encode(data: bytes | bytearray | memoryview) -> str:
    """Standard base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: object) -> bytes:
    """Strict base64 decode; refuses non-str and non-alphabet input."""
    if type(text) is not str:
        raise ValueError(f"expected base64 text, got {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"malformed base64: {exc}") from None
