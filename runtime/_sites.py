"""Where workflow code armed a timer or created a hook: the stem of its correlation id.

Steps are numbered per step (``<step id>#<n>``), so a call of another step
shifts nothing.  Hooks and timers get the same property from their *site*:
the function of the workflow's own code that made them (the first frame
outside asyncio and the runtime; for a task running asyncio's own coroutine,
such as ``ensure_future(asyncio.sleep(5))``, the function that made the task)
and, for a timer, what armed it:

* ``sleep/<site>#<n>``: ``asyncio.sleep`` or ``durasim.runtime.sleep``;
* ``timeout/<site>#<n>``: the deadline of ``asyncio.wait_for`` / ``asyncio.timeout``;
* ``timer/<site>#<n>``: any other ``call_later`` / ``call_at``;
* ``hook/<site>#<n>``: a hook whose token the runtime generates;
* ``hook=<digest>#<n>``: a hook created with ``token=...`` (the digest of the
  token: the token itself is the hook's identity);

where ``<site>`` is ``<function>:<6 hex of the call's source line>``.

Adding a timeout, a hook or a sleep shifts no other id: not in another
function, not of another kind, not on another line of the same function.
"""

from __future__ import annotations

import asyncio
import hashlib
import linecache
import os
import re
import sys
from types import CodeType, FrameType

from ._guards import unguarded

__all__ = ["hook_stem", "mark_boundary", "task_site", "timer_stem"]

_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep
_RUNTIME_DIR = os.path.dirname(__file__) + os.sep
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.:/@+=~-]")
#: Long enough to be unique in one run, short enough to leave room in a 256-character id.
_MAX_SITE = 120

# What armed a timer, by the asyncio (or runtime) function on the way to call_at.
_TIMER_KINDS = {
    "sleep": "sleep",
    "wait_for": "timeout",
    "wait": "timeout",  # asyncio.wait(..., timeout=...)
    "reschedule": "timeout",  # asyncio.timeout() (3.11+) and wait_for on 3.12+
}


#: Where the frames of a workflow task end: the callback that stepped the task
#: (asyncio's ``Handle._run``, or the workflow loop's ``run_ready``, which does its
#: work inline: :func:`mark_boundary`).  A task whose coroutine is asyncio's own
#: (``ensure_future(asyncio.sleep(5))``) has no user frame below this; its site is
#: ``task``.
_BOUNDARY: set[CodeType] = {asyncio.events.Handle._run.__code__}


def mark_boundary(code: CodeType) -> None:
    """Note a function that steps workflow tasks itself: the frames of a task end there."""
    _BOUNDARY.add(code)


def _site(frame: FrameType | None) -> tuple[str, str]:
    """The first frame of user code above ``frame`` and the timer kind seen on the way."""
    kind = "timer"
    while frame is not None:
        code = frame.f_code
        if code in _BOUNDARY:
            # A task running asyncio's own coroutine: where that task was made.
            task = asyncio.current_task()
            return getattr(task, "_durasim_site", None) or "task", kind
        filename = code.co_filename
        if filename.startswith(_ASYNCIO_DIR) or filename.startswith(_RUNTIME_DIR):
            kind = _TIMER_KINDS.get(code.co_name, kind)
            frame = frame.f_back
            continue
        return _label(code, frame.f_lineno), kind
    return "workflow", kind


def _label(code: CodeType, line: int | None) -> str:
    qualname = getattr(code, "co_qualname", code.co_name)
    label = _NOT_IN_ID.sub("", qualname.replace(".<locals>.", "/")) or "workflow"
    return label[:_MAX_SITE] + _line_digest(code.co_filename, line or 0)


_digests: dict[tuple[str, int], str] = {}


def _line_digest(filename: str, line: int) -> str:
    """``:<6 hex>`` of the call's source line, whitespace removed; ``""`` without source.

    Two different calls in one function (``approval = create_hook()`` and
    ``receipt = create_hook()``) get different ids, so inserting one before the
    other shifts nothing; editing anything but that line changes nothing.
    """
    key = (filename, line)
    digest = _digests.get(key)
    if digest is None:
        with unguarded():  # linecache reads the file: the runtime's doing, not the workflow's
            text = "".join(linecache.getline(filename, line).split())
        digest = ":" + hashlib.sha256(text.encode()).hexdigest()[:6] if text else ""
        _digests[key] = digest
    return digest


def task_site(coro: object) -> str | None:
    """For a task made around asyncio's own coroutine (``wait_for`` on Python 3.11
    wraps its awaitable in one), the site that made it; ``None`` for user code,
    whose own frames name the site."""
    code = getattr(coro, "cr_code", None)
    if code is None or not code.co_filename.startswith((_ASYNCIO_DIR, _RUNTIME_DIR)):
        return None
    return _site(sys._getframe(1))[0]


def timer_stem() -> str:
    """``<kind>/<site>`` for a timer being armed now (call from the engine's timer hook)."""
    label, kind = _site(sys._getframe(1))
    return f"{kind}/{label}"


def hook_stem(token: str | None) -> str:
    """``hook/<site>`` for a generated token, ``hook=<digest>`` for a given one."""
    if token is not None:
        return "hook=" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    label, _ = _site(sys._getframe(1))
    return f"hook/{label}"
