"""The app's runtime: settings, database, units of work, caches and token (no web framework).

``Runtime`` is built by ``create_app`` and started by the lifespan (migrations, nominal
profiles, token); a request that needs the database starts it too if the lifespan did not run
(an app used without its lifespan, e.g. ``TestClient(app)`` outside a ``with`` block) or if
the database was down at start. Its units of work are of two kinds: ``transaction()`` for
writes (SQLite: ``BEGIN IMMEDIATE``, writers queue) and ``read_session()`` / ``read()`` for
reads (SQLite: a deferred snapshot that never waits for a writer; PostgreSQL: READ ONLY).
Reads invalidate nothing; what a committed write changes is seen by the next request of any
worker (see ``api/caches.py``). The command line answering in process uses it too, so it
imports no web library (``api/deps.py`` holds the routes' FastAPI dependencies).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from api.caches import ProfileSource, ProviderCache, SnapshotCache
from api.settings import Settings
from api.tokens import load_or_create_token
from estimator.errors import NotFoundError, UnavailableError
from profiles import repository
from profiles.db import (
    SQLITE_BUSY_TIMEOUT_S,
    change_signal,
    is_sqlite,
    make_engine,
    ping,
    read_only,
    read_session_factory,
    session_factory,
    upgrade_database,
)
from profiles.repository import ensure_nominal_profiles

log = logging.getLogger("api")


class Runtime:
    """Settings, database engine, units of work, caches and token of one app."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.url = settings.resolved_database_url
        self._engine: Engine | None = None
        self._reader: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        self._read_sessions: sessionmaker[Session] | None = None
        self.providers = ProviderCache()
        # snapshots kept until a commit changes their profile, seen by any worker (caches.py)
        self.changes = change_signal(self.url)
        self.snapshots = SnapshotCache(self.changes) if self.changes else None
        self._token: bytes | None = None
        self._started = False
        self.inserted: list[str] = []  # nominal profiles this runtime's start added
        self._lock = threading.Lock()
        # SQLite has one writer at a time: this process's writers queue here, handed over at
        # once, instead of polling the database lock (its busy handler sleeps up to 100 ms)
        self._writers = threading.Lock() if is_sqlite(self.url) else None

    # -- lifecycle ----------------------------------------------------------------------------

    def _use(self, engine: Engine) -> None:
        self._engine = engine
        self._reader = read_only(engine)
        self._sessions = session_factory(engine)
        self._read_sessions = read_session_factory(engine)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._use(make_engine(self.url))
        assert self._engine is not None
        return self._engine

    @property
    def sessions(self) -> sessionmaker[Session]:
        """Sessions for writes."""
        _ = self.engine
        assert self._sessions is not None
        return self._sessions

    def start(self) -> None:
        """Migrate the database and insert the nominal profiles (once; retried on failure)."""
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            try:
                upgrade_database(self.url)
                if self._engine is None:
                    self._use(make_engine(self.url))
                with self.sessions() as session, session.begin():
                    inserted = ensure_nominal_profiles(session=session)
                refreshed = self._refresh_stale_curves()
            except SQLAlchemyError as exc:
                raise UnavailableError(
                    f"the database is not reachable ({type(exc).__name__}); retry later"
                ) from exc
            if inserted:
                log.info("inserted nominal profiles: %s", ", ".join(inserted))
            if refreshed:
                log.info("rebuilt placement curves of: %s", ", ".join(refreshed))
            self.inserted = inserted
            self._started = True

    def _refresh_stale_curves(self) -> list[str]:
        """Rebuild placement curves left missing or stale by an upgrade, one profile per write.

        Without this, a profile stored before the curves existed answers from all its runs on
        every read until its next upload (docs/design.md §6).
        """
        with self.sessions() as session, session.begin():
            names = repository.stale_curve_profiles(session=session)
        refreshed: list[str] = []
        for name in names:
            try:
                with self.sessions() as session, session.begin():
                    if repository.refresh_curves(session=session, profile_name=name):
                        refreshed.append(name)
            except NotFoundError:  # deleted meanwhile by another process
                continue
        return refreshed

    def token(self) -> bytes:
        """The bearer token (loaded or generated on first use)."""
        if self._token is None:
            self._token = load_or_create_token(self.settings).encode("utf-8")
        return self._token

    def close(self) -> None:
        """Dispose of the engine's connections."""
        if self._engine is not None:
            self._engine.dispose()
        if self.changes is not None:
            self.changes.close()

    # -- units of work ------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A write unit of work: a session committed on success and rolled back on error.

        On SQLite it holds the database's write lock from its first statement to its commit
        (readers do not wait for it), and this process's other writers wait for it: keep
        parsing and other slow work out of it.
        """
        self.start()
        with self._one_writer(), self.sessions() as session, session.begin():
            yield session

    @contextmanager
    def _one_writer(self) -> Iterator[None]:
        if self._writers is None:
            yield
            return
        if not self._writers.acquire(timeout=SQLITE_BUSY_TIMEOUT_S):
            raise UnavailableError(
                f"the database is busy: another write has held it for {SQLITE_BUSY_TIMEOUT_S:g} s"
            )
        try:
            yield
        finally:
            self._writers.release()

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A read unit of work: one snapshot of the committed data; flushing raises."""
        self.start()
        _ = self.engine
        assert self._read_sessions is not None
        with self._read_sessions() as session, session.begin():
            yield session

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A Core connection in a read transaction (no ORM session: reads on the hot path)."""
        self.start()
        _ = self.engine
        assert self._reader is not None
        with self._reader.connect() as connection:
            yield connection

    def profiles(self) -> ProfileSource:
        """Profiles read in their own short read transactions, providers and snapshots cached."""
        return ProfileSource(scope=self.read, cache=self.providers, snapshots=self.snapshots)

    def profiles_in(self, session: Session) -> ProfileSource:
        """Profiles read inside an open session."""

        @contextmanager
        def scope() -> Iterator[Session]:
            yield session

        return ProfileSource(scope=scope, cache=self.providers)

    def ping(self) -> None:
        """Readiness: the database answers (UnavailableError otherwise)."""
        ping(self.engine)
        self.start()
