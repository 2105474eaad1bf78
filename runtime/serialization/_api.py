"""``serialize`` and ``deserialize``: the two calls everything else goes through."""

from __future__ import annotations

import json
from typing import Any

from ._decode import Decoder, Malformed
from ._encode import Encoder, Refusal, is_plain
from ._errors import SerializationError
from ._format import INT_LIMIT, KIND_FROZEN, KIND_PLAIN, KIND_TAGGED, MAX_DEPTH, PREFIX
from ._registry import ClassRegistry, default_registry

__all__ = [
    "HEAD_PLAIN",
    "NOT_PLAIN",
    "deserialize",
    "dumps_tree",
    "loads_body",
    "loads_plain",
    "plain_call",
    "plain_scalar",
    "serialize",
    "split_payload",
    "without_tracebacks",
    "wrap_errors",
]

_HEAD_PLAIN = PREFIX + bytes([KIND_PLAIN])
_HEAD_TAGGED = PREFIX + bytes([KIND_TAGGED])
_HEAD_LEN = len(PREFIX) + 1
# Every tree is built by the encoder from checked parts: no cycles (refs are
# indices), no NaN (tagged), so json's own checks are off for speed.
_json_encoder = json.JSONEncoder(separators=(",", ":"), check_circular=False, allow_nan=False)
_dumps = _json_encoder.encode


def _c_encoder() -> Any:
    """The C encoder ``_json_encoder.encode`` ends in, called without its two Python layers.

    Built with the very arguments ``JSONEncoder.iterencode`` passes it; ``None``
    (use ``_dumps``) without the C accelerator or if it does not write what
    ``_dumps`` writes.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        encode = make(
            None,
            _json_encoder.default,
            json.encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            False,
            False,
            False,
        )
        sample = {"a": [1, 2.5, "\u00e9", None, True], "b": {}}
        if "".join(encode(sample, 0)) != _dumps(sample):
            return None
    except Exception:  # another signature: the documented path is as good
        return None
    return encode


_c_encode = _c_encoder()
_ascii_string = json.encoder.encode_basestring_ascii
HEAD_PLAIN = _HEAD_PLAIN


def plain_scalar(value: object) -> bytes | None:
    """The plain payload of a JSON scalar (the bytes ``serialize`` writes); None otherwise.

    The fast path of the commonest step result and argument: the same bytes as
    ``dumps_tree`` (``json``'s own ``repr`` of ints and floats, its ASCII escaping
    of strings), without the plainness walk or the encoder's machinery.
    """
    t = type(value)
    if t is int:
        assert isinstance(value, int)
        if -INT_LIMIT <= value <= INT_LIMIT:
            return _HEAD_PLAIN + int.__repr__(value).encode("ascii")
        return None
    if t is str:
        assert isinstance(value, str)
        return _HEAD_PLAIN + _ascii_string(value).encode("ascii")
    if value is None:
        return _HEAD_PLAIN + b"null"
    if t is bool:
        return _HEAD_PLAIN + (b"true" if value else b"false")
    if t is float:
        assert isinstance(value, float)
        if value - value == 0.0:
            return _HEAD_PLAIN + float.__repr__(value).encode("ascii")
    return None


#: ``plain_call``'s fixed texts: the head and the call's opening, then its closing.
_CALL_OPEN = _HEAD_PLAIN.decode("ascii") + '{"args":['
_CALL_CLOSE = '],"kwargs":{},"closure":{}}'
_INT_LOW = -INT_LIMIT


def plain_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes | None:
    """The plain payload of a step input of JSON scalars with no closure; None otherwise.

    The bytes ``serialize`` writes for ``{"args": [*args], "kwargs": kwargs,
    "closure": {}}`` when every argument is a JSON scalar (the commonest step
    call): the encoder's own texts of each scalar (as :func:`plain_scalar`),
    without the plainness walk, the dict and list built for it or the encoder's
    machinery.  ``None`` leaves anything else (a container, a class, an int out
    of range, a non-finite float) to the full path.
    """
    if not kwargs:
        texts = _scalar_texts(args)
        if texts is None:
            return None
        return (_CALL_OPEN + ",".join(texts) + _CALL_CLOSE).encode("ascii")
    texts = _scalar_texts((*args, *kwargs.values()))
    if texts is None:
        return None
    count = len(args)
    named: list[str] = []
    for name, text in zip(kwargs, texts[count:], strict=True):
        if type(name) is not str:
            return None
        named.append(_ascii_string(name) + ":" + text)
    body = '{"args":[' + ",".join(texts[:count]) + '],"kwargs":{' + ",".join(named)
    return _HEAD_PLAIN + (body + '},"closure":{}}').encode("ascii")


def _scalar_texts(values: tuple[Any, ...]) -> list[str] | None:
    """The encoder's text of each value, if every one is a plain JSON scalar; else None."""
    texts: list[str] = []
    for value in values:
        t = type(value)
        # ``repr`` of an exact int or float is its type's own (json's text of it).
        if t is int:
            if _INT_LOW <= value <= INT_LIMIT:
                texts.append(repr(value))
                continue
            return None
        if t is str:
            texts.append(_ascii_string(value))
        elif value is None:
            texts.append("null")
        elif t is bool:
            texts.append("true" if value else "false")
        elif t is float and value - value == 0.0:
            texts.append(repr(value))
        else:
            return None
    return texts


NOT_PLAIN = object()


def loads_plain(data: object) -> Any:
    """A plain payload's value, or ``NOT_PLAIN`` (any other payload, or one that fails:
    the full path then decodes it, or raises its error)."""
    if type(data) is bytes and data[:_HEAD_LEN] == _HEAD_PLAIN:
        # The scanner ``_loads`` calls, called directly: the encoder writes no
        # whitespace; anything else (and any failure) goes to the full path.
        try:
            text = data[_HEAD_LEN:].decode("utf-8")
            value, end = _scan_once(text, 0)
        except Exception:
            return NOT_PLAIN
        if end == len(text):
            return value
    return NOT_PLAIN


def dumps_tree(tree: Any) -> bytes:
    """Compact ASCII JSON for an encoder tree.

    ASCII (``\\uXXXX`` escapes) keeps lone surrogates, which UTF-8 cannot carry,
    and makes the bytes identical on every host.
    """
    if _c_encode is None or type(tree) is str:
        return _dumps(tree).encode("ascii")
    return "".join(_c_encode(tree, 0)).encode("ascii")


def _reject_constant(name: str) -> Any:
    raise Malformed(f"JSON constant {name} is not part of the format")


_json_decoder = json.JSONDecoder(parse_constant=_reject_constant)
_loads = _json_decoder.decode
_scan_once = _json_decoder.scan_once  # type: ignore[attr-defined]  # set in __init__, untyped


def loads_body(body: bytes) -> Any:
    """Parse one JSON body, refusing the non-standard NaN/Infinity literals."""
    return _loads(body.decode("utf-8"))


def serialize(
    value: object, *, root: str = "value", registry: ClassRegistry | None = None
) -> bytes:
    """Encode ``value`` to bytes that :func:`deserialize` turns into an equal copy.

    Types, shared references and cycles are kept (see docs/serialization.md for
    the supported types).  For step inputs and outputs that should store deeply
    frozen values by reference, use :meth:`FrozenValues.serialize` instead.

    Args:
        value: the value to encode.
        root: how the value is named in error paths (``args`` gives ``args[1]``).
        registry: where to look up classes; default :func:`default_registry`.

    Returns:
        ``b"dj1:"``, a kind byte, then the JSON body.

    Raises:
        SerializationError: a part of the value cannot cross a step boundary; the
            message names its path, its type and what to pass instead.
    """
    scalar = plain_scalar(value)
    if scalar is not None:
        return scalar
    with wrap_errors(root):
        if is_plain(value):
            return _HEAD_PLAIN + dumps_tree(value)
        tree = Encoder(registry or default_registry()).encode(value)
    return _HEAD_TAGGED + dumps_tree(tree)


def deserialize(
    data: bytes | bytearray | memoryview, *, registry: ClassRegistry | None = None
) -> Any:
    """Decode bytes written by :func:`serialize` into a fresh copy of the value.

    Decoding never runs code it was not told to trust: classes come only from the
    registry, and no payload can make it import, eval or unpickle anything.

    Args:
        data: the payload.
        registry: where to look up classes; default :func:`default_registry`.

    Raises:
        SerializationError: the bytes are malformed, truncated, of another format
            version, name an unregistered class, or refer to stored frozen values
            (decode those with :meth:`FrozenValues.deserialize`).
    """
    value = loads_plain(data)
    if value is not NOT_PLAIN:
        return value
    kind, header, body = split_payload(data)
    if kind == KIND_FROZEN:
        raise SerializationError(
            "payload refers to frozen values stored in other records "
            f"({header!r:.80}); decode it with FrozenValues.deserialize",
            path="",
        )
    with wrap_errors(""):
        tree = loads_body(body)
        if kind == KIND_PLAIN:
            return tree
        return Decoder(registry or default_registry()).decode(tree)


def split_payload(data: bytes | bytearray | memoryview) -> tuple[int, bytes, bytes]:
    """Check the prefix and split a payload into (kind, frozen header, body)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SerializationError(
            f"expected bytes, got {type(data).__name__}; pass the payload bytes", path=""
        )
    raw = bytes(data)
    if not raw.startswith(PREFIX) or len(raw) < _HEAD_LEN:
        if raw[:2] == b"dj" and raw[2:3].isdigit() and raw[3:4] == b":" and raw[:4] != PREFIX:
            raise SerializationError(
                f"payload format {raw[:4]!r} is not {PREFIX!r}: it was written by another "
                "durasim version; read it with the version that wrote it",
                path="",
            )
        raise SerializationError(
            f"not a durasim payload: expected the prefix {PREFIX!r}, got {raw[:8]!r}",
            path="",
        )
    kind = raw[len(PREFIX)]
    body = raw[_HEAD_LEN:]
    if kind == KIND_FROZEN:
        header, newline, body = body.partition(b"\n")
        if not newline:
            raise SerializationError("frozen-value payload without its header line", path="")
        return kind, header, body
    if kind not in (KIND_PLAIN, KIND_TAGGED):
        raise SerializationError(
            f"unknown payload kind {bytes([kind])!r}; written by a newer durasim or corrupt",
            path="",
        )
    return kind, b"", body


class wrap_errors:
    """Turn every failure inside into a :class:`SerializationError`.

    Refusals get their path; malformed input, exhausted recursion and any other
    exception from hostile bytes become one clear error instead of a crash.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None or isinstance(exc, SerializationError):
            return
        if isinstance(exc, Refusal):
            raise exc.error(self.root) from None
        if isinstance(exc, RecursionError):
            raise SerializationError(
                f"{self.root or 'payload'}: nested too deeply for this interpreter "
                f"(durasim allows {MAX_DEPTH} levels); flatten the structure",
                path=self.root,
            ) from None
        if isinstance(exc, Exception):
            raise SerializationError(
                f"malformed payload: {type(exc).__name__}: {exc}"[:500], path=self.root
            ) from exc


def without_tracebacks(data: bytes) -> bytes:
    """``data`` with every exception's stored traceback (``tb``) left out.

    Two records of one failure differ in their tracebacks when the code moved or
    ran from another path (a golden history replayed on another machine); what the
    failure *is* (type, arguments, cause, notes) is the rest. A payload that cannot
    be parsed is returned as it is (compared byte for byte).
    """
    if b'"tb"' not in data:
        return data
    try:
        _kind, _header, body = split_payload(data)
        tree = loads_body(body)
    except (SerializationError, ValueError):
        return data
    stripped = dumps_tree(_drop_tb(tree))
    head = data[: len(data) - len(body)]
    return head + stripped


def _drop_tb(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_tb(v) for k, v in node.items() if not (k == "tb" and node.get("#") == "x")}
    if isinstance(node, list):
        return [_drop_tb(v) for v in node]
    return node
