"""Where two decoded values differ, said the way a divergence message needs it.

A replay compares what the workflow computes now with what the log recorded
(a step's input, a hook's metadata).  Bytes are compared first; only when they
differ are both sides decoded and walked here, so the message can name the
first differing path (``args[0]["amount"]``) and show both sides, shortened.

The walk is stricter than ``==`` where order is something a step can observe:
a dict whose keys come in another order (a dict built from a set) differs, and
so does a list.  Sets and frozensets compare as sets: their stored order is
the process's hash order, which is no part of the value.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

__all__ = ["first_difference", "short"]

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 60
_short.maxlist = _short.maxtuple = _short.maxdict = _short.maxset = 6
_short.maxlevel = 3

#: How deep the walk goes before it settles for ``==`` (cycles, huge nesting).
_MAX_DEPTH = 40


def short(value: Any) -> str:
    """A one-line, bounded rendering of ``value`` for a message."""
    try:
        return _short.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def first_difference(recorded: Any, now: Any, *, path: str = "") -> str | None:
    """The first place ``now`` differs from ``recorded``, described; ``None`` if equal.

    Args:
        recorded: the value the log holds.
        now: the value the workflow computed on replay.
        path: the path of both values inside the compared payload.
    """
    return _walk(recorded, now, path, 0)


def _walk(a: Any, b: Any, path: str, depth: int) -> str | None:
    where = path or "the value"
    if type(a) is not type(b):
        return f"{where}: recorded {type(a).__name__} {short(a)}, now {type(b).__name__} {short(b)}"
    if depth > _MAX_DEPTH:
        return None if _equal(a, b) else f"{where}: recorded {short(a)}, now {short(b)}"
    if isinstance(a, dict):
        keys_a, keys_b = list(a), list(b)
        if keys_a != keys_b:
            if set(keys_a) == set(keys_b):
                return (
                    f"{where}: the same keys in another order (recorded {short(keys_a)}, "
                    f"now {short(keys_b)}), e.g. a dict built by iterating a set"
                )
            missing = [k for k in keys_a if k not in b]
            extra = [k for k in keys_b if k not in a]
            if missing:
                return f"{where}: key {short(missing[0])} is recorded but missing now"
            return f"{where}: key {short(extra[0])} is new (not recorded)"
        for key in keys_a:
            found = _walk(a[key], b[key], f"{path}[{key!r}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(a, list | tuple):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            found = _walk(x, y, f"{path}[{index}]", depth + 1)
            if found is not None:
                return found
        if len(a) != len(b):
            return f"{where}: recorded {len(a)} items, now {len(b)}"
        return None
    if isinstance(a, set | frozenset):
        if a == b:
            return None
        only_a, only_b = a - b, b - a
        if only_a:
            return f"{where}: recorded element {short(next(iter(only_a)))} is missing now"
        return f"{where}: element {short(next(iter(only_b)))} is new (not recorded)"
    if hasattr(a, "__dict__") and not isinstance(a, type) and not _equal(a, b):
        for key in vars(a):
            found = _walk(vars(a)[key], vars(b).get(key), f"{path}.{key}", depth + 1)
            if found is not None:
                return found
    return None if _equal(a, b) else f"{where}: recorded {short(a)}, now {short(b)}"


def _equal(a: Any, b: Any) -> bool:
    try:
        if a == b:
            return True
    except Exception:
        return False
    return isinstance(a, float) and math.isnan(a) and math.isnan(b)
