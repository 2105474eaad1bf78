"""The step results a resumed or forked run reuses (``run_created``'s ``execution_context``).

See ``_fork``: ``execute_step`` asks :func:`seeded_result` before running a body.
"""

from __future__ import annotations

import functools
from typing import Any

from .serialization import SerializationError, deserialize

__all__ = ["SEED_KIND", "seed_source", "seeded_result"]

#: ``execution_context["kind"]`` of a run made by resume or fork.
SEED_KIND = "durasim.seed/1"


@functools.lru_cache(maxsize=256)
def _seed(context: bytes) -> dict[str, bytes]:
    try:
        value = deserialize(context)
    except SerializationError:
        return {}
    if not isinstance(value, dict) or value.get("kind") != SEED_KIND:
        return {}
    results = value.get("results")
    return results if isinstance(results, dict) else {}


def seeded_result(context: bytes | None, correlation_id: str) -> bytes | None:
    """The result a resumed or forked run reuses for this step, if any."""
    if context is None:
        return None
    return _seed(context).get(correlation_id)


def seed_source(context: bytes | None) -> dict[str, Any] | None:
    """``{"resume" | "fork": source run id, "from_step": n}`` of a seeded run, else None."""
    if context is None:
        return None
    try:
        value = deserialize(context)
    except SerializationError:
        return None
    if not isinstance(value, dict) or value.get("kind") != SEED_KIND:
        return None
    return {k: v for k, v in value.items() if k in ("resume", "fork", "from_step")}
