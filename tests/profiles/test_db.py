"""profiles.db units of work: readers never wait for a writer, writers queue, reads never write.

And ``SqliteCommits``: the cheap signal that anything was committed to a SQLite file by any
process, which the API's snapshot cache relies on.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from profiles import repository as repo
from profiles.db import (
    SqliteCommits,
    make_engine,
    read_only,
    read_session_factory,
    sqlite_commits,
    transaction,
    upgrade_database,
)
from profiles.models import Profile
from tests.profiles.held import assert_sqlite_write_locked, held_write


def _make(db_sessions: sessionmaker[Session], name: str = "lab") -> None:
    with transaction(db_sessions) as session:
        repo.create_profile(session=session, name=name, gpu_model="H100", gpus_per_node=8)


def test_a_reader_reads_the_committed_data_while_a_writer_holds_its_transaction(
    db_engine: Engine, db_sessions: sessionmaker[Session], db_url: str
) -> None:
    _make(db_sessions)

    def write(session: Session) -> None:
        repo.update_profile(session=session, name="lab", changes={"description": "new"})
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
        first = commits.generation()
        with read_only(engine).connect() as connection:
            connection.execute(select(Profile.id)).all()
        assert commits.generation() == first
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM baselines"))  # a commit, even of nothing
        second = commits.generation()
        assert second != first
        assert commits.generation() == second
        script = (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "c.execute(\"UPDATE profiles SET description = 'x'\"); c.execute('CREATE TABLE t(x)');"
            "c.commit()"
        )
        subprocess.run([sys.executable, "-c", script, str(sqlite_file)], check=True)
        assert commits.generation() != second
    finally:
        commits.close()
        engine.dispose()


def test_a_missing_or_replaced_file_is_a_change_every_time_and_never_created(
    sqlite_file: Path, tmp_path: Path
) -> None:
    commits = SqliteCommits(sqlite_file)
    try:
        first = commits.generation()
        moved = tmp_path / "moved.sqlite3"
        sqlite_file.rename(moved)
        gone = commits.generation()
        assert gone != first and commits.generation() != gone
        assert not sqlite_file.exists()
        upgrade_database(f"sqlite:///{sqlite_file}")  # another file at the same path
        replaced = commits.generation()
        assert replaced != gone and commits.generation() == replaced
    finally:
        commits.close()


def test_only_sqlite_files_have_a_commit_signal() -> None:
    assert sqlite_commits("sqlite:///:memory:") is None
    assert sqlite_commits("postgresql://u@h/db") is None
    assert isinstance(sqlite_commits("sqlite:////tmp/x.sqlite3"), SqliteCommits)
