"""Checked command-line options: every bad value is one line on stderr and exit status 2.

Each function here is an ``argparse`` ``type=``: it returns the parsed value or
raises ``argparse.ArgumentTypeError`` with the rule, which :class:`Parser` prints
as ``durasim worker: error: argument --concurrency: ...`` (no usage block, no
traceback).  Text arrives from ``argv`` decoded with ``surrogateescape``: a byte
that is not UTF-8 (``$'\\xff'``) becomes a lone surrogate, refused here as "not
UTF-8" before any World or file sees it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from durasim.worlds import InvalidRequest, check_run_id, check_text

__all__ = [
    "MAX_CONCURRENCY",
    "Parser",
    "count",
    "file_name",
    "path",
    "reason",
    "run_id",
    "seconds",
    "text",
    "world",
]

#: The most deliveries one worker runs at once.
MAX_CONCURRENCY = 1024
#: The longest duration an option takes (366 days, as the queue's delays).
MAX_SECONDS = 31_622_400.0


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``prog: error: what``), exit 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` on one line and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def _printable(value: str) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else f"{shown[:60]}..."


def _utf8(value: str, what: str) -> str:
    try:
        check_text(value, field=what, min_chars=0, max_chars=1_000_000)
    except InvalidRequest as exc:
        rule = getattr(exc, "rule", "")
        if rule == "utf-8":
            raise argparse.ArgumentTypeError(
                f"{_printable(value)} is not UTF-8 text (an undecodable byte in the "
                "command line): pass UTF-8"
            ) from None
        if rule == "nul":
            raise argparse.ArgumentTypeError(f"{_printable(value)} holds a NUL byte") from None
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def count(low: int, high: int, what: str = "a count") -> Callable[[str], int]:
    """An integer in ``low..high``."""

    def parse(value: str) -> int:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{_printable(value)} is not an integer: pass {what} in {low}..{high}"
            ) from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(
                f"{number} is out of range: pass {what} in {low}..{high}"
            )
        return number

    parse.__name__ = "integer"
    return parse


def seconds(value: str) -> float:
    """A finite number of seconds, more than 0 and at most 366 days."""
    try:
        number = float(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{_printable(value)} is not a number of seconds"
        ) from None
    if not math.isfinite(number) or not 0 < number <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{value.strip()} seconds is refused: pass a finite number of seconds, more than 0 "
            f"and at most {MAX_SECONDS:.0f} (366 days)"
        )
    return number


def text(value: str) -> str:
    """Any UTF-8 text without NUL."""
    return _utf8(value, "argument")


def run_id(value: str) -> str:
    """A run id (docs/protocol.md §9)."""
    _utf8(value, "run id")
    try:
        return check_run_id(value)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reason(value: str) -> str:
    """A cancel reason: UTF-8 text without NUL, at most 512 characters."""
    _utf8(value, "reason")
    try:
        return check_text(value, field="reason")
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def path(value: str) -> Path:
    """A file system path (any bytes but NUL; undecodable names are legal on POSIX)."""
    if "\x00" in value:
        raise argparse.ArgumentTypeError(f"{_printable(value)} holds a NUL byte")
    if not value:
        raise argparse.ArgumentTypeError("an empty path")
    return Path(value)


def file_name(value: str) -> str:
    """A file system path, as text (any bytes but NUL)."""
    return str(path(value))


def world(value: str) -> str:
    """A World: a SQLite file path, or a ``postgresql://`` URL (which must be UTF-8 text)."""
    if "://" in value:
        return _utf8(value, "World URL")
    return str(path(value))
