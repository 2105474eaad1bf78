"""``--world``: which World a command opens.

A value that starts with ``postgresql://`` or ``postgres://`` is a PostgreSQL
URL and opens a :class:`~durasim.worlds.PostgresWorld`; the World's schema is
the URL's ``schema`` query parameter (default ``durasim``), taken out of the URL
before it reaches libpq, so one string names the whole World and can be copied
between ``run``, ``worker``, ``inspect`` and ``cancel``.  Anything else is the
path of a SQLite World file; no value means the embedded World in ``.durasim/``.

PostgreSQL is connected (and migrated) before the command does anything else,
so an unreachable server is reported at start as a :class:`WorldError` naming
the server, without its password.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durasim.runtime import DEFAULT_HOME, default_world
from durasim.worlds import DurasimError, InvalidRequest, SQLiteWorld, World

__all__ = ["is_postgres_url", "open_world", "split_schema"]

_SCHEMES = ("postgresql://", "postgres://")
#: The schema a PostgreSQL URL without ``?schema=`` names.
DEFAULT_SCHEMA = "durasim"


def is_postgres_url(value: str | None) -> bool:
    """Whether a ``--world`` value names a PostgreSQL server (not a SQLite file)."""
    return value is not None and value.lower().startswith(_SCHEMES)


def split_schema(url: str) -> tuple[str, str]:
    """``postgresql://...?schema=s&sslmode=x`` -> (``postgresql://...?sslmode=x``, ``s``)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise InvalidRequest(f"--world {url!r} names the schema twice: keep one ?schema=")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[0] if schemas else DEFAULT_SCHEMA


async def open_world(value: str | None, *, must_exist: bool = False) -> World:
    """The World ``--world`` names, opened; ``must_exist`` refuses a missing SQLite file.

    Raises:
        WorldError: PostgreSQL is unreachable.
        DurasimError: (``must_exist``) there is no SQLite World file.
    """
    if is_postgres_url(value):
        assert value is not None
        from durasim.worlds import PostgresWorld  # noqa: PLC0415 -- psycopg is optional

        dsn, schema = split_schema(value)
        world = PostgresWorld(dsn, schema=schema)
        try:
            return await world.open()
        except BaseException:
            await world.close()
            raise
    path = Path(value) if value is not None else None
    if must_exist:
        where = path or DEFAULT_HOME / "world.db"
        if not where.exists():
            raise DurasimError(
                f"no World at {where}: run a workflow first, or pass --world "
                "(a SQLite file or a postgresql:// URL)"
            )
    return default_world() if path is None else SQLiteWorld(path)
