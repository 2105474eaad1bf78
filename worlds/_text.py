"""The one check of every string a writer sends a World (docs/protocol.md §9).

Every World calls these before it reads or writes anything, so a malformed string
gets the same :class:`InvalidRequest` from memory, SQLite and PostgreSQL, and
nothing is stored.  A string is refused when it is not a ``str``, is longer than
its field's bound (checked first: a 1 MB id is refused without being scanned),
is empty where the field needs text, holds a NUL character (PostgreSQL cannot
store one), or is not valid Unicode text (a lone surrogate cannot be encoded as
UTF-8: ``'\\ud800'``, or undecodable bytes smuggled in by ``surrogateescape``).

The refusal names the field (``exc.field``) and the rule broken (``exc.rule``:
``type``, ``length``, ``empty``, ``nul``, ``utf-8``, ``printable``, ``format``),
and shows at most the first characters of the value.
"""

from __future__ import annotations

from typing import Final

from ._errors import InvalidRequest

__all__ = ["MAX_TEXT", "STRING_LIMITS", "check_text", "check_token", "shown"]

#: Bound of a text field not listed in :data:`STRING_LIMITS` (characters).
MAX_TEXT: Final = 256

#: ``field: (min, max)`` characters of every text field a writer sends.
STRING_LIMITS: Final[dict[str, tuple[int, int]]] = {
    "run_id": (1, 128),
    "correlation_id": (1, 256),
    "token": (1, 256),
    "resume_id": (1, 256),
    "reason": (0, 512),
    "workflow_name": (1, 512),
    "step_name": (1, 512),
    "deployment_id": (1, 256),
    "creator_message_id": (1, 256),
    "owner_message_id": (1, 256),
    "start_reason": (1, 256),
    "error_code": (1, 256),
    "writer": (1, 256),
    "conflicting_run_id": (1, 128),
    "conflicting_hook_id": (1, 256),
    "attribute key": (1, 128),
    "attribute value": (0, 4096),
    "idempotency_key": (1, 512),
    "queue_prefix": (0, 200),
    "queue name": (1, 200),
    "stream name": (1, 128),
}

_SHOWN_CHARS: Final = 40


def shown(value: object) -> str:
    """``repr(value)``, cut to its first characters: an error never echoes a 1 MB id."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 2 * _SHOWN_CHARS else f"{text[: 2 * _SHOWN_CHARS]}..."


def _refuse(field: str, value: object, rule: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{field} {shown(value)} is refused: {what}", field=field, rule=rule)


def check_text(
    value: object, *, field: str, min_chars: int | None = None, max_chars: int | None = None
) -> str:
    """``value`` if it is acceptable text for ``field``, else :class:`InvalidRequest`.

    The bounds default to the field's entry in :data:`STRING_LIMITS` (``1..256``
    for a field not listed there).  The fast path (short ASCII without NUL) costs
    three C-level scans.
    """
    low, high = STRING_LIMITS.get(field, (1, MAX_TEXT))
    low = low if min_chars is None else min_chars
    high = high if max_chars is None else max_chars
    if not isinstance(value, str):
        raise InvalidRequest(
            f"{field} must be a str, got {type(value).__name__}", field=field, rule="type"
        )
    if len(value) > high:
        raise _refuse(field, value, "length", f"{len(value)} characters; the limit is {high}")
    if len(value) < low:
        raise _refuse(field, value, "empty", f"it needs at least {low} character(s)")
    if "\x00" in value:
        raise _refuse(field, value, "nul", f"NUL character at index {value.index(chr(0))}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _refuse(
                field,
                value,
                "utf-8",
                f"not valid Unicode text (lone surrogate {value[exc.start]!r} at index "
                f"{exc.start}): send UTF-8 text",
            ) from None
    return value


def check_token(token: object, *, field: str = "token") -> str:
    """A hook token: 1-256 printable characters without whitespace, valid UTF-8, no NUL."""
    text = check_text(token, field=field, min_chars=1, max_chars=STRING_LIMITS["token"][1])
    if not text.isprintable() or any(ch.isspace() for ch in text):
        raise _refuse(
            field,
            text,
            "printable",
            f"use 1-{STRING_LIMITS['token'][1]} printable characters without whitespace",
        )
    return text
