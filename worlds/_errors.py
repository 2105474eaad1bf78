"""The durasim error tree.

Every error durasim raises derives from :class:`DurasimError`.  Where the meaning
matches a builtin, the error also subclasses it, so ``except ValueError`` keeps
working for code that does not know durasim::

    DurasimError
    ├── WorldError                       a World refused or failed a call
    │   ├── InvalidRequest (ValueError)  malformed request: nothing was written
    │   ├── RunNotFound (LookupError)
    │   ├── StepNotFound (LookupError)
    │   ├── WaitNotFound (LookupError)
    │   ├── HookNotFound (LookupError)   unknown, disposed or released hook / token
    │   ├── EventNotFound (LookupError)
    │   ├── EntityConflict               the write contradicts an entity's state
    │   ├── RunExpired                   the run is terminal; the write came too late
    │   ├── TooEarly                     step_started before the step's retry_after
    │   ├── InBandSuperseded             a stale orchestrator write: another owns the run
    │   ├── StaleView                    expected_seq given, and events landed since
    │   ├── LeaseLost                    ack/release/extend with an expired or foreign lease
    │   ├── StreamClosed                 write to a closed stream
    │   └── CorruptedLog                 a stored log breaks the contract (a hole, a bad row)
    └── (later layers add their own branches: serialization, runtime, simulation)

Every refusal is definite: the World wrote nothing.  Each error carries the
structured facts a caller needs (``run_id``, ``seq`` ...) as attributes, and
pickles cleanly so pytest-xdist can move it between processes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = [
    "CorruptedLog",
    "DurasimError",
    "EntityConflict",
    "EventNotFound",
    "HookNotFound",
    "InBandSuperseded",
    "InvalidRequest",
    "LeaseLost",
    "RunExpired",
    "RunNotFound",
    "StaleView",
    "StepNotFound",
    "StreamClosed",
    "TooEarly",
    "WaitNotFound",
    "WorldError",
]


class DurasimError(Exception):
    """Root of every error durasim raises."""

    def __init__(self, message: str, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.facts = facts
        for key, value in facts.items():
            setattr(self, key, value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword facts are not positional args: rebuild through a helper so
        # the error survives pickling (pytest-xdist, multiprocessing).
        return (_rebuild, (type(self), self.message, self.facts))

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[DurasimError], message: str, facts: dict[str, Any]) -> DurasimError:
    return cls(message, **facts)


class WorldError(DurasimError):
    """A World refused a call (definite: nothing written) or could not serve it."""


class InvalidRequest(WorldError, ValueError):
    """The request is malformed: unknown type, missing or ill-typed field, bad id."""


class RunNotFound(WorldError, LookupError):
    """No run with this id exists in the World."""


class StepNotFound(WorldError, LookupError):
    """The run has no step with this correlation id."""


class WaitNotFound(WorldError, LookupError):
    """The run has no wait with this correlation id."""


class HookNotFound(WorldError, LookupError):
    """No live hook answers to this id or token (never created, disposed or released)."""


class EventNotFound(WorldError, LookupError):
    """The run's log has no event at this position."""


class EntityConflict(WorldError):
    """The write contradicts the current state of the entity it names."""


class RunExpired(WorldError):
    """The run is already terminal; this write is no longer accepted."""


class TooEarly(WorldError):
    """``step_started`` arrived before the step's ``retry_after``.

    Attributes:
        retry_after: the earliest time a new attempt is accepted.
    """

    retry_after: datetime


class InBandSuperseded(WorldError):
    """An in-band write carried a stale ``expected_seq_in_band``.

    Another orchestrator invocation has written since this one loaded the log;
    the write allocated nothing.  The caller must stop writing for this run and
    let the queue redeliver.

    Attributes:
        seq: the run's current number of events.
        seq_in_band: the run's current number of in-band events.
    """

    seq: int
    seq_in_band: int


class StaleView(WorldError):
    """A write carried ``expected_seq`` and the run's log has moved past it.

    Nothing was written.  Used by writers that decided on a view of the log they
    must not be wrong about (an orchestrator running ahead of its own commits).

    Attributes:
        seq: the run's current number of events.
    """

    seq: int


class LeaseLost(WorldError):
    """A queue lease expired or was never held by this caller."""


class StreamClosed(WorldError):
    """The stream was closed; no chunk can be written after close."""


class CorruptedLog(WorldError):
    """A stored log breaks the contract (a hole in the positions, an unreadable row)."""


class StorageFull(WorldError):
    """The World's storage is full (SQLite ``SQLITE_FULL``, ``ENOSPC``).

    Nothing of the failed write was committed and nothing committed before is
    lost; the same call succeeds once space returns.  A serving worker waits
    and retries with a back-off instead of stopping.
    """


class WorldFileChanged(WorldError):
    """The World's file was deleted or replaced under this process.

    Writes would go into the old, unlinked file and be lost: every write is
    refused from then on.  Stop the process and check the file.
    """
