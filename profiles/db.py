"""Engines, sessions, transactions and migrations for the profiles database.

Transactions live at the edge: repository functions take a ``Session``, flush what they
write, and never commit; the caller (an API request, a CLI command, a test) owns the unit of
work, usually through :func:`transaction`, which commits on success and rolls back on any
error. Repository functions that must survive a constraint race (a taken name, a concurrent
identical upload) do their write inside a SAVEPOINT, so the caller's transaction stays usable.

SQLite: foreign keys ON, WAL journal, a 30 s busy timeout, and every transaction opened with
``BEGIN IMMEDIATE``: writers queue on the database lock instead of failing with
SQLITE_BUSY_SNAPSHOT when a read-then-write transaction races another writer (SQLAlchemy's
documented pysqlite recipe). A pooled SQLite connection is checked out only while its file is
still the one it opened (same device and inode at the same path): an open handle would go on
serving a moved or deleted file, so the database going away is a reconnect (and, while it is
gone, an error) rather than writes that vanish. PostgreSQL goes through psycopg 3 (``postgresql+psycopg://``);
a plain ``postgresql://`` or ``postgres://`` URL is switched to that driver.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

import migrations
from estimator.errors import UnavailableError, ValidationError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent  # the top-level Alembic package
SQLITE_BUSY_TIMEOUT_S = 30.0
# Alembic keeps its migration context in module globals: one command at a time per process.
# Across processes the database serialises them (env.py: advisory lock / BEGIN IMMEDIATE).
_ALEMBIC_LOCK = threading.Lock()


def normalise_url(url: str | URL) -> URL:
    """The URL with PostgreSQL pinned to psycopg 3; ValidationError for other backends."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        raise ValidationError("database_url", str(url), "must be a SQLAlchemy URL") from None
    backend = parsed.get_backend_name()
    if backend == "postgres" or parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend not in ("sqlite", "postgresql"):
        raise ValidationError(
            "database_url", parsed.render_as_string(), "must be a sqlite:// or postgresql:// URL"
        )
    return parsed


def is_sqlite(url: str | URL) -> bool:
    """Whether the URL names a SQLite database."""
    return normalise_url(url).get_backend_name() == "sqlite"


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN out of pysqlite's hands; the "begin" listener emits BEGIN IMMEDIATE.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        _set_wal(cursor)
    finally:
        cursor.close()


def _set_wal(cursor: Any) -> None:
    # Switching a fresh file to WAL needs an exclusive lock, and SQLite answers "database is
    # locked" at once (no busy handler) while another process, e.g. a second server
    # migrating the same file, holds one: retry within the busy timeout.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_on_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _watch_sqlite_file(engine: Engine, path: Path) -> None:
    """Pooled connections of ``engine`` are used only while ``path`` is the file they opened."""

    def on_connect(_dbapi_connection: Any, record: Any) -> None:
        record.info["sqlite_file"] = _file_identity(path)

    def on_checkout(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if _file_identity(path) != record.info.get("sqlite_file"):
            raise DisconnectionError(f"the SQLite file {path} moved or went away")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "checkout", on_checkout)


def make_engine(url: str | URL, *, echo: bool = False) -> Engine:
    """An Engine for a SQLite or PostgreSQL URL, configured as the module docstring says."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed,
            echo=echo,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        if parsed.database not in (None, "", ":memory:"):
            _watch_sqlite_file(engine, Path(parsed.database).expanduser())
        return engine
    return create_engine(parsed, echo=echo, pool_pre_ping=True)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``; objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session


def ping(engine: Engine) -> None:
    """Readiness: run ``SELECT 1``; UnavailableError if the database does not answer."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise UnavailableError(f"database not reachable: {type(exc).__name__}") from exc


def alembic_config(url: str | URL) -> Config:
    """An Alembic Config for the packaged migrations, pointed at ``url``."""
    from alembic.config import Config

    parsed = normalise_url(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation: a literal % in a password must be doubled.
    config.set_main_option(
        "sqlalchemy.url", parsed.render_as_string(hide_password=False).replace("%", "%%")
    )
    return config


def database_revisions(url: str | URL) -> set[str] | None:
    """The revisions in the database's ``alembic_version`` (None: no such table, or no answer).

    One connection and one query, without Alembic.
    """
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version"))
            return {str(row[0]) for row in rows}
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()


def at_head(url: str | URL) -> bool:
    """Whether the database is at the newest revision shipped (Alembic not imported)."""
    head = migrations.head_from_files()
    return head is not None and database_revisions(url) == {head}


def upgrade_database(url: str | URL, *, revision: str = "head") -> None:
    """Run the Alembic migrations up to ``revision``; a no-op when already there.

    A database already at head is recognised without Alembic (see :func:`at_head`).
    """
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    if revision == "head" and at_head(parsed):
        return
    from alembic import command

    with _ALEMBIC_LOCK:
        command.upgrade(alembic_config(parsed), revision)


def downgrade_database(url: str | URL, *, revision: str = "base") -> None:
    """Run the Alembic migrations down to ``revision`` (``base`` drops every table)."""
    from alembic import command

    with _ALEMBIC_LOCK:
        command.downgrade(alembic_config(url), revision)


def current_revision(url: str | URL) -> str | None:
    """The revision the database is at (None before the first migration)."""
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision shipped with this package."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head
