"""Placeholder: replaced by the SQLite World."""

__all__ = ["SQLiteWorld"]


class SQLiteWorld:
    """Not written yet."""
