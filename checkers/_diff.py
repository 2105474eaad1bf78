"""Where two answers differ: the paths of the fields that differ, not two whole reprs.

A World model failure used to print both answers whole (700 characters each for
one differing field).  :func:`render_difference` walks both values side by side
(attrs instances by field, sequences by index, mappings by key, the machine's
``("ok", value)`` / ``("error", type, facts)`` outcomes by their parts) and prints
one line per differing leaf, with a short repr of each side.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["differences", "render_difference"]

#: Printed for a field or item one side has and the other does not.
ABSENT = "(absent)"


class _Absent:
    def __repr__(self) -> str:
        return ABSENT


_MISSING = _Absent()


def _outcome(value: Any) -> bool:
    """Whether ``value`` is the World model's ``("ok", x)`` or ``("error", type, facts)``."""
    return (
        isinstance(value, tuple)
        and len(value) in (2, 3)
        and value[0] in ("ok", "error")
        and (value[0] == "ok") == (len(value) == 2)
    )


def differences(expected: Any, actual: Any, *, limit: int = 8) -> list[tuple[str, Any, Any]]:
    """``(path, expected leaf, actual leaf)`` for each differing leaf, at most ``limit + 1``.

    The path is relative to the values given (``.event.type``, ``.events[3]``,
    ``['token']``; ``""`` when the values themselves differ as a whole).
    """
    found: list[tuple[str, Any, Any]] = []
    _walk(expected, actual, "", found, limit + 1)
    return found


def _walk(a: Any, b: Any, path: str, found: list[tuple[str, Any, Any]], cap: int) -> None:
    if len(found) >= cap or a is b:
        return
    try:
        if a == b:
            return
    except Exception:
        found.append((path, a, b))
        return
    if _outcome(a) and _outcome(b):
        if a[0] != b[0]:
            found.append((path, _as_answer(a), _as_answer(b)))
        elif a[0] == "ok":
            _walk(a[1], b[1], path, found, cap)
        elif a[1] is not b[1]:
            found.append((path, _as_answer(a), _as_answer(b)))
        else:
            _walk(a[2], b[2], f"{path} facts", found, cap)
        return
    if type(a) is not type(b):
        found.append((path, a, b))
        return
    if attrs.has(type(a)):
        for field in attrs.fields(type(a)):
            _walk(
                getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}", found, cap
            )
        return
    if isinstance(a, list | tuple):
        for index in range(max(len(a), len(b))):
            left = a[index] if index < len(a) else _MISSING
            right = b[index] if index < len(b) else _MISSING
            if left is _MISSING or right is _MISSING:
                found.append((f"{path}[{index}]", left, right))
                if len(found) >= cap:
                    return
            else:
                _walk(left, right, f"{path}[{index}]", found, cap)
        return
    if isinstance(a, Mapping):
        keys = list(a) + [k for k in b if k not in a]
        for key in keys:
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), f"{path}[{key!r}]", found, cap)
        return
    found.append((path, a, b))


def _as_answer(outcome: tuple[Any, ...]) -> Any:
    if outcome[0] == "ok":
        return _Answer(f"returned {_short(outcome[1], 120)}")
    facts = ", ".join(f"{k}={_brief(v)}" for k, v in outcome[2].items())
    return _Answer(f"raised {outcome[1].__name__}({facts})")


@attrs.frozen
class _Answer:
    text: str

    def __repr__(self) -> str:
        return self.text


def _brief(value: Any) -> str:
    """``repr`` with enums by name, classes by name, and answers as answers."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, type):
        return value.__name__
    if _outcome(value):
        return repr(_as_answer(value))
    if isinstance(value, list):
        return f"[{', '.join(_brief(v) for v in value)}]"
    return repr(value)


def _short(value: Any, width: int) -> str:
    text = _brief(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def render_difference(
    expected: Any,
    actual: Any,
    *,
    left: str = "reference",
    right: str = "subject",
    limit: int = 8,
    width: int = 160,
) -> str:
    """One line per differing field: ``  .event.type: reference 'a' | subject 'b'``."""
    found = differences(expected, actual, limit=limit)
    if not found:
        return f"  {left}: {_short(expected, width)}\n  {right}: {_short(actual, width)}"
    lines = []
    for path, a, b in found[:limit]:
        where = path or "answer"
        lines.append(f"  {where}: {left} {_short(a, width)} | {right} {_short(b, width)}")
    if len(found) > limit:
        lines.append("  ... and more differences")
    return "\n".join(lines)
