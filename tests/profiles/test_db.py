"""profiles.db units of work: readers never wait for a writer, writers queue, reads never write.

And ``SqliteCommits``: the cheap signal that anything was committed to a SQLite file by any
process, which the API's snapshot cache relies on.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Hashable
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from profiles import repository as repo
from profiles.db import (
    PostgresRevisions,
    SqliteCommits,
    change_signal,
    make_engine,
    read_only,
    read_session_factory,
    transaction,
    upgrade_database,
)
from profiles.models import Profile
from tests.api.servers import free_port
from tests.profiles.held import assert_sqlite_write_locked, held_write


def _describe(session: Session) -> None:
    repo.update_profile(session=session, name="lab", changes={"description": "new"})


def _make(db_sessions: sessionmaker[Session], name: str = "lab") -> None:
    with transaction(db_sessions) as session:
        repo.create_profile(session=session, name=name, gpu_model="H100", gpus_per_node=8)


def test_a_reader_reads_the_committed_data_while_a_writer_holds_its_transaction(
    db_engine: Engine, db_sessions: sessionmaker[Session], db_url: str
) -> None:
    _make(db_sessions)

    def write(session: Session) -> None:
        _describe(session)
        repo.create_profile(session=session, name="lab-2", gpu_model="H100", gpus_per_node=8)

    with held_write(lambda: transaction(db_sessions), write):
        if db_url.startswith("sqlite"):
            assert_sqlite_write_locked(db_engine.url.database or "")
        with read_session_factory(db_engine)() as session, session.begin():
            profile = repo.get_profile(session=session, name="lab")
            assert profile.description == ""  # the uncommitted change is not visible
            assert not repo.profile_exists(session=session, name="lab-2")
    with read_session_factory(db_engine)() as session, session.begin():
        assert repo.get_profile(session=session, name="lab").description == "new"


def test_a_read_session_refuses_to_flush_a_change(
    db_engine: Engine, db_sessions: sessionmaker[Session]
) -> None:
    _make(db_sessions)
    with read_session_factory(db_engine)() as session:
        repo.get_profile(session=session, name="lab").description = "sneaky"
        with pytest.raises(RuntimeError, match="read unit of work"):
            session.commit()
        session.rollback()
    with db_sessions() as session:
        assert repo.get_profile(session=session, name="lab").description == ""


def test_a_read_transaction_is_read_only_and_one_snapshot_on_postgresql(
    db_engine: Engine, db_url: str
) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite's deferred read transaction is a snapshot by nature (WAL)")
    with read_only(db_engine).connect() as connection:
        assert connection.execute(text("SHOW transaction_read_only")).scalar() == "on"
        isolation = connection.execute(text("SHOW transaction_isolation")).scalar()
        assert isolation == "repeatable read"
        with pytest.raises(DBAPIError, match="read-only"):
            connection.execute(text("DELETE FROM baselines"))
    with db_engine.connect() as connection:  # the pool gave the connection back as it was
        assert connection.execute(text("SHOW transaction_read_only")).scalar() == "off"


# --- SqliteCommits ----------------------------------------------------------------------------


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "commits.sqlite3"
    upgrade_database(f"sqlite:///{path}")
    return path


def test_commits_by_this_process_or_another_change_the_generation_reads_do_not(
    sqlite_file: Path,
) -> None:
    engine = make_engine(f"sqlite:///{sqlite_file}")
    commits = SqliteCommits(sqlite_file)
    try:
        first = commits.token()
        with read_only(engine).connect() as connection:
            connection.execute(select(Profile.id)).all()
        assert commits.token() == first
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM baselines"))  # a commit, even of nothing
        second = commits.token()
        assert second != first
        assert commits.token() == second
        script = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute(\"UPDATE profiles SET description = 'x'\"); c.execute('CREATE TABLE t(x)');"
            "c.commit()"
        )
        subprocess.run([sys.executable, "-c", script, str(sqlite_file)], check=True)
        assert commits.token() != second
    finally:
        commits.close()
        engine.dispose()


def test_a_missing_or_replaced_file_is_a_change_every_time_and_never_created(
    sqlite_file: Path, tmp_path: Path
) -> None:
    commits = SqliteCommits(sqlite_file)
    try:
        first = commits.token()
        moved = tmp_path / "moved.sqlite3"
        sqlite_file.rename(moved)
        gone = commits.token()
        assert gone != first and commits.token() != gone
        assert not sqlite_file.exists()
        upgrade_database(f"sqlite:///{sqlite_file}")  # another file at the same path
        replaced = commits.token()
        assert replaced != gone and commits.token() == replaced
    finally:
        commits.close()


def test_each_database_has_its_change_signal() -> None:
    assert change_signal("sqlite:///:memory:") is None  # one process, no cache needed
    assert isinstance(change_signal("postgresql://u@h/db"), PostgresRevisions)
    assert isinstance(change_signal("sqlite:////tmp/x.sqlite3"), SqliteCommits)


def _made_revision(db_sessions: sessionmaker[Session]) -> str | None:
    """The committed revision of the profile "lab", made first (``_make``)."""
    _make(db_sessions)
    with db_sessions() as session:
        return session.scalar(select(Profile.revision).where(Profile.name == "lab"))


def _postgres_signal(db_url: str, sqlite_why: str) -> PostgresRevisions:
    """The PostgreSQL change signal of the test database; skipped on SQLite (``sqlite_why``)."""
    if not db_url.startswith("postgresql"):
        pytest.skip(sqlite_why)
    signal = change_signal(db_url)
    assert isinstance(signal, PostgresRevisions)
    return signal


def test_postgres_revisions_are_the_committed_ones(
    db_url: str, db_sessions: sessionmaker[Session]
) -> None:
    signal = _postgres_signal(db_url, "SQLite's signal is PRAGMA data_version (tested above)")

    def both(name: str) -> Hashable:
        sync, in_loop = signal.token(name), asyncio.run(signal.token_async(name))
        assert sync == in_loop
        return sync

    try:
        assert both("lab") is None
        committed = _made_revision(db_sessions)
        assert both("lab") == committed
        with held_write(lambda: transaction(db_sessions), _describe):
            assert both("lab") == committed  # not committed yet
        assert both("lab") not in (committed, None)
    finally:
        signal.close()


def test_postgres_revisions_after_a_lost_connection_match_nothing_then_reconnect(
    db_url: str, db_sessions: sessionmaker[Session]
) -> None:
    signal = _postgres_signal(db_url, "SQLite's signal has no connection to lose")
    import psycopg

    committed = _made_revision(db_sessions)

    async def lose_it() -> list[Hashable]:
        tokens = [await signal.token_async("lab")]
        reader = signal._async_connection
        assert reader is not None
        with psycopg.connect(signal._conninfo, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (reader._pgconn.backend_pid,))
        await asyncio.sleep(0.05)  # the server's goodbye arrives while nothing is asked
        tokens.append(await signal.token_async("lab"))
        tokens.append(await signal.token_async("lab"))  # backing off: not asked again
        signal._retry_at = 0.0  # the back-off is over
        tokens.append(await signal.token_async("lab"))
        return tokens

    try:
        first, lost, backing_off, again = asyncio.run(lose_it())
    finally:
        signal.close()
    assert first == committed == again
    assert lost not in (committed, None) and backing_off not in (committed, None, lost)


def test_postgres_revisions_of_an_unreachable_server_match_nothing() -> None:
    url = f"postgresql://nobody@127.0.0.1:{free_port()}/nowhere"
    signal = change_signal(url)
    assert isinstance(signal, PostgresRevisions)
    try:
        tokens = [signal.token("lab"), signal.token("lab")]
        tokens += [asyncio.run(signal.token_async("lab")), asyncio.run(signal.token_async("lab"))]
        assert len(set(tokens)) == 4 and None not in tokens  # each one matches nothing
    finally:
        signal.close()
