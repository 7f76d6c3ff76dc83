"""Engines, units of work (read and write), change detection and migrations for the database.

Transactions live at the edge: repository functions take a ``Session``, flush what they
write, and never commit; the caller (an API request, a CLI command, a test) owns the unit of
work, usually through :func:`transaction`, which commits on success and rolls back on any
error. Repository functions that must survive a constraint race (a taken name, a concurrent
identical upload) do their write inside a SAVEPOINT, so the caller's transaction stays usable.
Every committed write to a profile or its data renews the profile's revision
(``profiles/revisions.py``, registered on import of this module).

Reads and writes are different units of work. A read runs on :func:`read_only` (``engine``)
(sessions from :func:`read_session_factory`): on SQLite a deferred ``BEGIN``, which on a WAL
database never waits for a writer and reads one committed snapshot; on PostgreSQL a
``READ ONLY`` ``REPEATABLE READ`` transaction (one snapshot for all its statements, never a
serialisation failure); flushing anything in a read session raises. A write is a plain
session: on SQLite its transaction opens with ``BEGIN IMMEDIATE``, so writers queue on the
database lock instead of failing with SQLITE_BUSY_SNAPSHOT when a read-then-write transaction
races another writer (SQLAlchemy's documented pysqlite recipe); that is the default, for any
connection that did not ask to be a reader.

SQLite: foreign keys ON, WAL journal, a 30 s busy timeout. A pooled SQLite connection is
checked out only while its file is still the one it opened (same device and inode at the same
path): an open handle would go on serving a moved or deleted file, so the database going away
is a reconnect (and, while it is gone, an error) rather than writes that vanish.
:class:`ChangeSignal` tells cheaply what is committed about a profile now, for caches that
must see every acknowledged write of any process: on SQLite whether anyone committed since
the last look (``PRAGMA data_version``, microseconds, no transaction), on PostgreSQL the
profile's revision (one autocommit round trip on a connection of its own). PostgreSQL goes
through psycopg 3 (``postgresql+psycopg://``); a plain ``postgresql://`` or ``postgres://`` URL
is switched to that driver.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, SQLAlchemyError
from sqlalchemy.orm import Session, UOWTransaction, sessionmaker

import migrations
import profiles.revisions  # noqa: F401  (registers the revision listeners on Session)
from estimator.errors import UnavailableError, ValidationError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent  # the top-level Alembic package
SQLITE_BUSY_TIMEOUT_S = 30.0
# Alembic keeps its migration context in module globals: one command at a time per process.
# Across processes the database serialises them (env.py: advisory lock / BEGIN IMMEDIATE).
_ALEMBIC_LOCK = threading.Lock()
# Execution option of the connections of a read unit of work (see read_only).
READ_ONLY = "commest_read_only"


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
    # Readers: deferred (WAL: a snapshot, no lock, never waits for a writer). Writers and any
    # connection that did not say it only reads: the write lock up front.
    if connection.get_execution_options().get(READ_ONLY):
        connection.exec_driver_sql("BEGIN")
    else:
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


def read_only(engine: Engine) -> Engine:
    """``engine`` for reads: deferred BEGIN on SQLite, READ ONLY REPEATABLE READ on PostgreSQL.

    It shares the engine's pool; PostgreSQL's characteristics are reset when a connection goes
    back to it (psycopg sets them on the connection: no extra round trip).
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(
            **{READ_ONLY: True}, postgresql_readonly=True, isolation_level="REPEATABLE READ"
        )
    return engine.execution_options(**{READ_ONLY: True})


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``, for writes; objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)


def read_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions of read units of work over :func:`read_only` (``engine``); flushing raises."""
    return sessionmaker(
        bind=read_only(engine), expire_on_commit=False, autoflush=False, info={READ_ONLY: True}
    )


@event.listens_for(Session, "before_flush")
def _refuse_writes_in_reads(session: Session, _context: UOWTransaction, _objects: Any) -> None:
    if session.info.get(READ_ONLY) and (session.new or session.dirty or session.deleted):
        raise RuntimeError("a read unit of work tried to write; use a write transaction")


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session


class ChangeSignal(Protocol):
    """What is committed about a profile now, cheaply: equal tokens read before and after
    mean nothing was committed to that profile in between (by any process).

    ``token`` may block (call it from a worker thread); ``token_async`` never blocks an event
    loop and gives the same answer. ``round_trip`` says whether asking waits on another
    process (a database server): work that does not depend on the answer can go on meanwhile.
    """

    round_trip: bool

    def token(self, name: str) -> Hashable: ...

    async def token_async(self, name: str) -> Hashable: ...

    def close(self) -> None: ...


class SqliteCommits:
    """Whether anything was committed to a SQLite file since the last look, by any process.

    The token is a number that grows whenever ``PRAGMA data_version`` changes on a
    connection of this object's own, which never writes: SQLite changes that value when
    another connection (of this process or any other) commits to the file, and only then. It
    is the same for every profile (any commit counts). It costs a ``stat`` and one pragma, no
    pool checkout and never a wait (a busy file counts as a change). While the file is gone or
    was replaced (another inode) every call is a new token, and the connection is reopened on
    the file that is there.
    """

    round_trip = False  # a pragma on a local file: nothing to wait for

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._seen: int | None = None
        self._generation = 0

    def token(self, name: str = "") -> int:
        """The current generation (changes after every commit to the file by anyone)."""
        with self._lock:
            identity = _file_identity(self.path)
            if identity is None or identity != self._identity:
                self._reopen(identity)
            try:
                assert self._connection is not None
                version = int(self._connection.execute("PRAGMA data_version").fetchone()[0])
            except (AssertionError, sqlite3.Error):
                self._close()
                self._generation += 1
                return self._generation
            if version != self._seen:
                self._seen = version
                self._generation += 1
            return self._generation

    async def token_async(self, name: str = "") -> int:
        """:meth:`token`: microseconds and never a wait, fine on an event loop."""
        return self.token(name)

    def _reopen(self, identity: tuple[int, int] | None) -> None:
        self._close()
        if identity is None:
            return
        try:  # mode=rw: never create the file if it went away in between
            uri = self.path.resolve().as_uri() + "?mode=rw"
            self._connection = sqlite3.connect(  # timeout 0: busy is an error, never a wait
                uri, uri=True, timeout=0.0, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error:
            return
        self._identity = identity

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection, self._identity, self._seen = None, None, None

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        with self._lock:
            self._close()


class PostgresRevisions:
    """A profile's committed revision (``profiles/revisions.py``), read in autocommit on a
    connection of this object's own: one round trip, no pool checkout, no transaction.

    PostgreSQL has no local signal of other sessions' commits, so this is a read; once a
    write is committed (and acknowledged), the next read here sees its revision. A profile
    that does not exist is ``None``. When the database does not answer within ``TIMEOUT_S``
    the answer is a token equal to nothing, and so it is, without asking, for ``BACKOFF_S``
    after (the caller then reads through its pool, which reports the outage). ``token`` uses a
    blocking connection (worker threads), ``token_async`` an asyncio one bound to the running
    loop (no thread hop on the hot path).
    """

    round_trip = True
    TIMEOUT_S = 2.0
    BACKOFF_S = 1.0
    _QUERY = "SELECT revision FROM profiles WHERE name = %s"

    def __init__(self, url: URL) -> None:
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._lock = threading.Lock()
        self._connection: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_lock: asyncio.Lock | None = None
        self._async_connection: _RevisionReader | None = None
        self._retry_at = 0.0

    def token(self, name: str) -> Hashable:
        """The profile's revision now, ``None`` if there is no such profile."""
        import psycopg

        if time.monotonic() < self._retry_at:
            return object()
        with self._lock:
            try:
                if self._connection is None or self._connection.closed:
                    self._connection = psycopg.connect(
                        self._conninfo, autocommit=True, connect_timeout=int(self.TIMEOUT_S)
                    )
                    timeout_ms = int(self.TIMEOUT_S * 1000)
                    self._connection.execute(f"SET statement_timeout = {timeout_ms}")
                row = self._connection.execute(self._QUERY, (name,)).fetchone()
            except psycopg.Error:
                self._close()
                self._retry_at = time.monotonic() + self.BACKOFF_S
                return object()  # equal to nothing: no cached snapshot is trusted
            return None if row is None else str(row[0])

    async def token_async(self, name: str) -> Hashable:
        """:meth:`token` without blocking the running event loop."""
        import psycopg

        if time.monotonic() < self._retry_at:
            return object()
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._async_lock is None:  # a connection serves one loop
            self._drop_async()
            self._loop, self._async_lock = loop, asyncio.Lock()
        lock = self._async_lock
        try:
            async with asyncio.timeout(self.TIMEOUT_S), lock:  # the wait for the lock counts
                if self._async_connection is None:
                    self._async_connection = await _RevisionReader.open(self._conninfo, loop)
                value = await self._async_connection.ask(name)
        except (psycopg.Error, TimeoutError):
            self._drop_async()
            self._retry_at = time.monotonic() + self.BACKOFF_S
            return object()
        return None if value is None else value.decode()

    def _drop_async(self) -> None:
        if self._async_connection is not None:
            self._async_connection.close()
        self._async_connection = None

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None

    def close(self) -> None:
        """Close the connections (a later call reopens them)."""
        with self._lock:
            self._close()
        self._drop_async()


class _RevisionReader:
    """One prepared question (a profile's revision) on a connection of its own, asked from an
    event loop through libpq itself (``psycopg.pq``), its socket watched for the connection's
    life.

    psycopg's AsyncConnection spent about 100 µs of CPU on each such read here (its wait
    generators, a future and two epoll registrations per wait); asked this way it is under
    half that, on the hot path of every estimate against a stored profile.
    """

    _STATEMENT = b"commest_revision"

    def __init__(self, connection: Any, loop: asyncio.AbstractEventLoop) -> None:
        import psycopg
        from psycopg import pq

        self._tuples_ok = pq.ExecStatus.TUPLES_OK
        self._failure = psycopg.OperationalError  # looked up once, not on every question
        self._connection = connection  # keeps psycopg's object (and so the socket) alive
        self._pgconn = connection.pgconn
        self._pgconn.nonblocking = 1
        self._loop = loop
        self._waiting: asyncio.Future[None] | None = None
        self._lost: Exception | None = None
        self._socket = self._pgconn.socket
        loop.add_reader(self._socket, self._readable)

    @classmethod
    async def open(cls, conninfo: str, loop: asyncio.AbstractEventLoop) -> _RevisionReader:
        import psycopg

        connection = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        try:
            await connection.execute(
                "PREPARE commest_revision (text) AS SELECT revision FROM profiles WHERE name = $1"
            )
        except BaseException:
            await connection.close()
            raise
        return cls(connection, loop)

    def _readable(self) -> None:
        """The socket has data: take it in, and wake the question whose answer is complete."""
        waiting = self._waiting
        try:
            self._pgconn.consume_input()
        except Exception as exc:  # a lost connection: stop watching it (it would stay readable)
            self._lost = exc
            self._loop.remove_reader(self._socket)
            if waiting is not None and not waiting.done():
                waiting.set_exception(exc)  # and the question in flight fails with it
            return
        if waiting is not None and not waiting.done() and not self._pgconn.is_busy():
            waiting.set_result(None)

    async def ask(self, name: str) -> bytes | None:
        """The revision of the profile ``name``, None if there is no such profile."""
        pgconn = self._pgconn
        if self._lost is not None:
            raise self._failure(f"the revision connection was lost: {self._lost}")
        pgconn.send_query_prepared(self._STATEMENT, [name.encode()])
        while pgconn.flush():  # 1: part of the question is still to be sent
            await asyncio.sleep(0)
        self._waiting = self._loop.create_future()
        try:
            await self._waiting
        finally:
            self._waiting = None
        value: bytes | None = None
        failed = ""
        while (result := pgconn.get_result()) is not None:
            if result.status != self._tuples_ok:
                failed = (result.error_message or b"").decode(errors="replace")
            elif result.ntuples:
                value = result.get_value(0, 0)
        if failed:
            raise self._failure(f"reading a profile's revision failed: {failed}")
        return value

    def close(self) -> None:
        """Stop watching the socket and close it (no event loop needed)."""
        if not self._loop.is_closed():
            self._loop.remove_reader(self._socket)
        self._pgconn.finish()


def change_signal(url: str | URL) -> ChangeSignal | None:
    """The cheap commit signal of a database: SQLite file or PostgreSQL; None for memory."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "postgresql":
        return PostgresRevisions(parsed)
    if parsed.database in (None, "", ":memory:"):
        return None
    return SqliteCommits(Path(parsed.database).expanduser())


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
        with read_only(engine).connect() as connection:  # never waits for a writer
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
        folder = Path(parsed.database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a configuration the service cannot run with: say which
            raise UnavailableError(
                f"the SQLite database's directory {folder} cannot be created "
                f"({exc.strerror or exc}): set COMMEST_DATA_DIR (or COMMEST_DATABASE_URL) "
                "to a writable place"
            ) from None
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
