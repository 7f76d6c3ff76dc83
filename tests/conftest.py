"""Shared fixtures: real databases built by the Alembic migrations.

Every database fixture is parametrised over SQLite (a temporary file) and PostgreSQL (only when
``COMMEST_TEST_DATABASE_URL`` names a server, e.g.
``postgresql+psycopg://postgres@127.0.0.1:5432/test``; skipped with that reason otherwise).
On PostgreSQL each test session works in its own scratch database (created next to the one
named, dropped at the end), so parallel test runs never see each other's rows.

- ``migrated_db_url`` (session): a database migrated to head, once per session per backend.
- ``db_url``: the same URL, emptied before the test (all tables truncated). Use it for code
  that opens its own connections (the API app, threads); repository commits are fine.
- ``db_engine`` (session), ``db_sessions`` (a sessionmaker), ``session`` (one open Session).
- ``fresh_db_url``: a new, empty, *unmigrated* database (for migration tests).
- ``settings``: ``Settings`` pointing at ``db_url`` with a temp data dir and token ``test-token``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings
from profiles.db import make_engine, session_factory, upgrade_database

TEST_DATABASE_ENV = "COMMEST_TEST_DATABASE_URL"
TEST_TOKEN = "test-token"
TABLES = (
    "points",
    "runs",
    "uploads",
    "placement_curves",
    "calibrations",
    "measured_runs",
    "baselines",
    "profiles",
)
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def _postgres_base_url() -> str:
    url = os.environ.get(TEST_DATABASE_ENV)
    if not url:
        pytest.skip(
            f"PostgreSQL not tested: set {TEST_DATABASE_ENV} "
            "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)"
        )
    return url


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def _scratch_postgres(base_url: str, *, required: bool) -> Iterator[str]:
    """A new database on the server of ``base_url``, dropped afterwards.

    Without the privilege to create databases: the base database itself when not
    ``required``, else a skip.
    """
    name = f"commest_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(_libpq(base_url), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.errors.InsufficientPrivilege:
        if required:
            pytest.skip("the PostgreSQL role may not create databases")
        yield base_url
        return
    try:
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_libpq(base_url), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session", params=BACKENDS)
def migrated_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database migrated to head (once per test session and backend)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'commest.sqlite3'}"
        upgrade_database(url)
        yield url
        return
    with _scratch_postgres(_postgres_base_url(), required=False) as url:
        upgrade_database(url)
        yield url


@pytest.fixture(scope="session")
def db_engine(migrated_db_url: str) -> Iterator[Engine]:
    """One engine per migrated database."""
    engine = make_engine(migrated_db_url)
    yield engine
    engine.dispose()


def truncate_all(engine: Engine) -> None:
    """Delete every row of every commest table (the schema and alembic_version stay)."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
        else:
            for table in TABLES:
                connection.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def db_url(migrated_db_url: str, db_engine: Engine) -> str:
    """A migrated database URL, emptied before the test."""
    truncate_all(db_engine)
    return migrated_db_url


@pytest.fixture
def db_sessions(db_url: str, db_engine: Engine) -> sessionmaker[Session]:
    """A sessionmaker on the emptied database."""
    return session_factory(db_engine)


@pytest.fixture
def session(db_sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One session on the emptied database; the test commits or rolls back as it likes."""
    with db_sessions() as session:
        yield session


@pytest.fixture(params=BACKENDS)
def fresh_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new, empty database with no schema at all."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh' / 'commest.sqlite3'}"
        return
    with _scratch_postgres(_postgres_base_url(), required=True) as url:
        yield url


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    """Settings for an app under test: the emptied database, a temp data dir, a token."""
    return Settings(
        database_url=db_url, data_dir=tmp_path / "data", api_token=SecretStr(TEST_TOKEN)
    )
