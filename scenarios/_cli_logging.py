"""Log records of ``durasim run`` and ``durasim worker``: text or JSON lines on stderr.

The runtime logs on ``durasim.runtime`` with the run, the step and the attempt as
record fields (``extra=``): ``run_id``, ``step``, ``step_id``, ``attempt``,
``outcome`` (``retrying``, ``failed``, ``completed``), ``retry_in`` (seconds),
``error_code``.  ``--log-format json`` writes one JSON object per record with
those fields, the time, the level, the logger and the message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

__all__ = ["FIELDS", "JsonFormatter", "cli_logging"]

#: Record attributes copied into a JSON line when a record has them.
FIELDS = ("run_id", "step", "step_id", "attempt", "outcome", "retry_in", "error_code")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the runtime's fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            if hasattr(record, name):
                body[name] = getattr(record, name)
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class _FirstLine(logging.Formatter):
    """The summary line of each record (``durasim run`` prints the traceback once, at the end)."""

    def format(self, record: logging.LogRecord) -> str:
        return "durasim: " + record.getMessage().split("\n", 1)[0]


class _NotTheRunsEnd(logging.Filter):
    """Drops the run's own failure record: ``durasim run`` reports it itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(record, "outcome", None) == "failed" and not hasattr(record, "step"))


@contextlib.contextmanager
def cli_logging(log_format: str = "text", *, summary: bool = False) -> Iterator[logging.Handler]:
    """Send ``durasim.*`` records to stderr, as text or JSON lines, while the command runs.

    ``summary``: one line per record, the run's own failure left out (``durasim run``).
    The ``durasim`` logger's handlers, level and propagation are restored on exit.
    """
    if log_format not in {"text", "json"}:
        raise ValueError(f"log format {log_format!r}: use text or json")
    logger = logging.getLogger("durasim")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    elif summary:
        handler.setFormatter(_FirstLine())
        handler.addFilter(_NotTheRunsEnd())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING if summary else logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
