"""The traceback an exception carries across the log (``tb`` of an ``x`` node).

An exception raised in this process has a live ``__traceback__``; it is written
as the text ``traceback.format_tb`` gives (frames only: the type and message are
in the node already), bounded to :data:`MAX_TRACEBACK_CHARS` (the innermost
frames are kept: they say where it went wrong).  A decoded exception carries
that text in ``__durasim_traceback__``; encoding it again (a step's error the
workflow let through) keeps the original text, not the frames of the re-raise.
"""

from __future__ import annotations

import os
import traceback

__all__ = [
    "MAX_TRACEBACK_CHARS",
    "TRACEBACK_ATTRIBUTE",
    "ErrorText",
    "format_error",
    "stored_traceback",
]

#: At most this many characters of frames are stored per exception.
MAX_TRACEBACK_CHARS = 8000

#: The attribute a decoded exception keeps its stored traceback text in.
TRACEBACK_ATTRIBUTE = "__durasim_traceback__"

# Frames of the runtime itself (the step runner, its threads, the replay loop) are
# left out: they are the same for every failure and hide the user's own frames.
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def stored_traceback(error: BaseException) -> str | None:
    """The frames to store for ``error``: its stored text, else its live traceback."""
    kept = getattr(error, TRACEBACK_ATTRIBUTE, None)
    if isinstance(kept, str):
        return kept
    tb = error.__traceback__
    if tb is None:
        return None
    try:
        frames = traceback.extract_tb(tb)
        own = [f for f in frames if not f.filename.startswith(_RUNTIME_DIR)]
        text = "".join(traceback.format_list(own or frames))
    except Exception:  # a frame whose source cannot be read must not lose the error
        return None
    return bound_traceback(text)


def bound_traceback(text: str) -> str:
    """``text`` cut to :data:`MAX_TRACEBACK_CHARS`, the innermost frames kept."""
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    tail = text[-MAX_TRACEBACK_CHARS:]
    cut = tail.find("  File ")
    tail = tail[cut:] if cut > 0 else tail
    return f"  ... {len(text) - len(tail)} characters of outer frames left out ...\n{tail}"


def format_error(error: BaseException) -> str:
    """The error as Python prints it: traceback (stored or live), type and message, causes.

    Used by ``durasim run``, ``durasim inspect run`` and the worker's log to show a
    step's or a run's failure as it happened in the process that recorded it.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(_one(current))
        current = current.__cause__
    return "\nThe above exception was the direct cause of the following exception:\n\n".join(
        reversed(parts)
    )


def _one(error: BaseException) -> str:
    type_name = getattr(error, "type_name", None)
    if not isinstance(type_name, str):
        cls = type(error)
        type_name = (
            cls.__qualname__
            if cls.__module__ == "builtins"
            else f"{cls.__module__}.{cls.__qualname__}"
        )
    message = str(error)
    head = f"{type_name}: {message}" if message else type_name
    notes = getattr(error, "__notes__", None)
    if isinstance(notes, list) and notes:
        head += "".join(f"\n{note}" for note in notes)
    frames = stored_traceback(error)
    if not frames:
        return head + "\n"
    return f"Traceback (most recent call last):\n{frames}{head}\n"


class ErrorText:
    """:func:`format_error` of an error, computed only if a log handler formats the record."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __str__(self) -> str:
        return format_error(self.error).rstrip()
