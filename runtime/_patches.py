"""In-code versioning: ``patched("change-id")`` and ``deprecate_patch("change-id")``.

A workflow edited while runs are in flight keeps both branches behind a patch::

    if patched("charge-with-tax"):
        total = await charge(amount * 1.2)   # the new code
    else:
        total = await charge(amount)         # what runs recorded before the change did

The first time a run reaches ``patched(x)`` the runtime decides, and the log
remembers (``attr_set`` of ``durasim.patch.<x>``, correlation id ``patch/<x>``):

* the log already holds that marker: ``True`` (the run took the new branch);
* the log holds events past this point of the workflow (the run was recorded
  by code that went on without the patch): ``False``, and nothing is written;
* the run is at the end of its log (new code reaching this point for the first
  time): ``True``, and the marker is written before anything the new branch does.

Later calls with the same id in the run return the first answer.  On replay a
marker must meet a ``patched(x)`` (or ``deprecate_patch(x)``) the workflow made
before it: a marker the workflow never asked for by then is a divergence.

``deprecate_patch(x)`` replaces ``if patched(x): new else: old`` by the new
branch alone once no run in flight needs the old one: it writes the marker for
new runs (so a worker still running the ``patched`` code replays them), accepts
logs with or without it, and returns nothing.  See docs/versioning.md.
"""

from __future__ import annotations

import re

from durasim.worlds import DurasimError

from ._context import running

__all__ = [
    "PATCH_ATTR",
    "PATCH_PREFIX",
    "PatchError",
    "check_change_id",
    "deprecate_patch",
    "patched",
]

#: The correlation id of a patch marker is ``patch/<change id>``.
PATCH_PREFIX = "patch/"
#: The run attribute a patch marker sets: ``durasim.patch.<change id>``.
PATCH_ATTR = "durasim.patch."
_CHANGE_ID = re.compile(r"[A-Za-z0-9_.:@+=~-]{1,100}")


class PatchError(DurasimError, ValueError):
    """``patched()`` / ``deprecate_patch()`` misused: a bad change id, or outside workflow code."""


def check_change_id(change_id: object) -> str:
    """``change_id`` if it is a valid change id, else :class:`PatchError`."""
    if not isinstance(change_id, str) or not _CHANGE_ID.fullmatch(change_id):
        raise PatchError(
            f"change id {change_id!r} is not valid: use 1-100 characters from "
            "[A-Za-z0-9_.:@+=~-] (e.g. 'charge-with-tax' or 'checkout.v2')"
        )
    return change_id


def _caller(what: str) -> object:
    caller = running().replay("patched")
    if caller is None:
        raise PatchError(
            f"{what} is for workflow code: call it inside a @workflow function (it decides "
            "which branch a run takes, and the run's log remembers)"
        )
    return caller


def patched(change_id: str) -> bool:
    """Whether this run takes the new code of change ``change_id`` (workflow code only).

    ``True`` for a run that reaches this point on code that has the patch,
    ``False`` for a run whose log was recorded past this point without it.
    """
    check_change_id(change_id)
    return bool(_caller(f"patched({change_id!r})").patched(change_id))  # type: ignore[attr-defined]


def deprecate_patch(change_id: str) -> None:
    """Retire patch ``change_id``: only its new branch remains (workflow code only).

    Use it once no run in flight was recorded without the patch; see
    docs/versioning.md for the whole cycle.
    """
    check_change_id(change_id)
    _caller(f"deprecate_patch({change_id!r})").patched(change_id, deprecated=True)  # type: ignore[attr-defined]
