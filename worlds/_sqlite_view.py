"""The guards' view for the SQLite World: the fold's questions, answered inside the write."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from . import _sqlite_codec as codec
from ._entities import HookRecord, RunRecord, StepRecord, WaitRecord
from ._events import Event

__all__: list[str] = []


class _AssumedWrong(Exception):
    """A step a write took as absent without reading it exists (or went unchecked): decide again."""


class _View:
    """The fold's StateView, answered by queries inside the write transaction."""

    def __init__(
        self,
        db: sqlite3.Connection,
        run_id: str,
        run: RunRecord | None,
        seq: int,
        seq_in_band: int,
        *,
        known_steps: Mapping[str, StepRecord] | None = None,
    ) -> None:
        self._db = db
        self._run_id = run_id
        self._head = (run, seq, seq_in_band)
        # Steps as this connection last wrote them (valid: see SQLiteWorld._known).
        self._steps: dict[str, StepRecord | None] = dict(known_steps) if known_steps else {}
        #: Steps taken as absent without a read (:meth:`assume_new`).
        self.assumed: set[str] = set()

    def assume_new(self, step_ids: Sequence[str | None]) -> None:
        """Take the named steps not known here as absent, without reading them.

        The write then INSERTs their rows (:data:`._sqlite_schema.CHECKED_STEPS`):
        one that existed after all is found there, and the caller decides the
        write again with :meth:`prefetch_steps` (see ``assumed``).
        """
        for step_id in step_ids:
            if step_id is not None and step_id not in self._steps:
                self._steps[step_id] = None
                self.assumed.add(step_id)

    def prefetch_steps(self, step_ids: Sequence[str | None]) -> None:
        """Read every named step not known yet, in few queries (a batch would ask one by one).

        Most are new steps (``step_created``): a first query over the primary
        key finds which exist; only those are read in full.
        """
        known = self._steps
        wanted = [s for s in step_ids if s not in known and s is not None]
        if not wanted:
            return
        wanted = list(dict.fromkeys(wanted))
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            found = self._db.execute(
                f"SELECT step_id FROM steps WHERE run_id = ? AND step_id IN ({marks})",
                (self._run_id, *chunk),
            ).fetchall()
            self._steps.update(dict.fromkeys(chunk))
            if not found:
                continue
            rows = self._db.execute(
                f"{codec.STEP_SELECT} WHERE s.run_id = ? AND s.step_id IN "
                f"({', '.join('?' for _ in found)})",
                (self._run_id, *(row[0] for row in found)),
            ).fetchall()
            self._steps.update({row[1]: codec.step_from_row(row) for row in rows})

    def head(self) -> tuple[RunRecord | None, int, int]:
        return self._head

    def has_step(self, step_id: str) -> bool:
        if step_id in self._steps:
            return self._steps[step_id] is not None
        row = self._db.execute(
            "SELECT 1 FROM steps WHERE run_id = ? AND step_id = ?", (self._run_id, step_id)
        ).fetchone()
        return row is not None

    def step(self, step_id: str) -> StepRecord | None:
        if step_id in self._steps:
            return self._steps[step_id]
        row = self._db.execute(
            f"{codec.STEP_SELECT} WHERE s.run_id = ? AND s.step_id = ?",
            (self._run_id, step_id),
        ).fetchone()
        return None if row is None else codec.step_from_row(row)

    def hook(self, hook_id: str) -> HookRecord | None:
        row = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? AND hook_id = ?",
            (self._run_id, hook_id),
        ).fetchone()
        return None if row is None else codec.hook_from_row(row)

    def live_hook_by_token(self, token: str) -> HookRecord | None:
        row = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE token = ? AND status = 'active'",
            (token,),
        ).fetchone()
        return None if row is None else codec.hook_from_row(row)

    def wait(self, wait_id: str) -> WaitRecord | None:
        row = self._db.execute(
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ? AND wait_id = ?",
            (self._run_id, wait_id),
        ).fetchone()
        return None if row is None else codec.wait_from_row(row)

    def received_by_resume_id(self, resume_id: str) -> Event | None:
        row = self._db.execute(
            "SELECT run_id, seq, type, created_at, correlation_id, in_band, data, blob "
            "FROM events WHERE run_id = ? AND resume_id = ?",
            (self._run_id, resume_id),
        ).fetchone()
        return None if row is None else codec.decode_event(*row)

    def active_hooks(self) -> list[HookRecord]:
        rows = self._db.execute(
            f"SELECT {codec.HOOK_COLUMNS} FROM hooks WHERE run_id = ? AND status = 'active' "
            "ORDER BY rowid",
            (self._run_id,),
        ).fetchall()
        return [codec.hook_from_row(r) for r in rows]

    def waiting_waits(self) -> list[WaitRecord]:
        rows = self._db.execute(
            f"SELECT {codec.WAIT_COLUMNS} FROM waits WHERE run_id = ? AND status = 'waiting' "
            "ORDER BY rowid",
            (self._run_id,),
        ).fetchall()
        return [codec.wait_from_row(r) for r in rows]
