"""The Alembic migrations: the only way the schema is made, idempotent, matching the models."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, event, inspect, text

from api.settings import get_settings
from profiles import repository as repo
from profiles.db import (
    current_revision,
    downgrade_database,
    head_revision,
    make_engine,
    session_factory,
    transaction,
    upgrade_database,
)
from profiles.models import Base

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "profiles",
    "uploads",
    "runs",
    "points",
    "calibrations",
    "baselines",
    "measured_runs",
    "placement_curves",
}


def _schema(engine: Engine) -> dict[str, object]:
    inspector = inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted(i["name"] or "" for i in inspector.get_indexes(table)),
        )
        for table in sorted(inspector.get_table_names())
    }


def test_upgrade_twice_is_a_no_op_and_keeps_data(fresh_db_url: str) -> None:
    upgrade_database(fresh_db_url)
    engine = make_engine(fresh_db_url)
    try:
        schema = _schema(engine)
        with transaction(session_factory(engine)) as session:
            repo.create_profile(session=session, name="kept", gpu_model="A100", gpus_per_node=8)
        upgrade_database(fresh_db_url)
        assert _schema(engine) == schema
        assert set(schema) >= TABLES
        assert current_revision(fresh_db_url) == head_revision()
        with session_factory(engine)() as session:
            assert [p.name for p in repo.list_profiles(session=session)] == ["kept"]
    finally:
        engine.dispose()


def test_models_match_the_migrations(migrated_db_url: str, db_engine: Engine) -> None:
    with db_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_downgrade_to_base_drops_every_table_and_upgrade_restores_them(
    fresh_db_url: str,
) -> None:
    upgrade_database(fresh_db_url)
    downgrade_database(fresh_db_url)
    engine = make_engine(fresh_db_url)
    try:
        assert not TABLES & set(inspect(engine).get_table_names())
        assert current_revision(fresh_db_url) is None
        upgrade_database(fresh_db_url)
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_concurrent_upgrades_in_threads_both_succeed(fresh_db_url: str) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda _: upgrade_database(fresh_db_url), range(2)))
    assert current_revision(fresh_db_url) == head_revision()


def test_every_revision_lands_in_one_transaction(fresh_db_url: str) -> None:
    # A commit between revisions lets a second process migrate with a stale head list
    # (CI saw it add uploads' columns twice on SQLite); one transaction holds the lock.
    commits: list[str] = []

    def on_commit(connection: Connection) -> None:
        commits.append(connection.dialect.name)

    event.listen(Engine, "commit", on_commit)
    try:
        upgrade_database(fresh_db_url)
    finally:
        event.remove(Engine, "commit", on_commit)
    assert len(commits) == 1, commits
    assert current_revision(fresh_db_url) == head_revision()


def test_concurrent_upgrades_in_processes_both_succeed(fresh_db_url: str) -> None:
    code = "import sys; from profiles.db import upgrade_database as u; u(sys.argv[1])"
    workers = [
        subprocess.Popen([sys.executable, "-c", code, fresh_db_url], stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    errors = [w.communicate(timeout=120)[1].decode() for w in workers]
    assert [w.returncode for w in workers] == [0, 0], errors
    assert current_revision(fresh_db_url) == head_revision()


def test_alembic_ini_migrates_the_database_named_in_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    monkeypatch.setenv("COMMEST_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        command.upgrade(Config(str(ROOT / "alembic.ini")), "head")
    finally:
        get_settings.cache_clear()
    assert current_revision(url) == head_revision()


def test_revisions_are_named_by_date() -> None:
    versions = ROOT / "migrations" / "versions"
    names = sorted(p.name for p in versions.glob("*.py"))
    assert names and all(n[:4].isdigit() and n[4] == "_" and n[7] == "_" for n in names)


FIRST_REVISION = "2026_11_21_0001"
TABLES_AT_FIRST_REVISION = TABLES - {"measured_runs", "placement_curves"}  # 0003, 0002
ROWS_AT_FIRST_REVISION = [
    "INSERT INTO profiles (id, name, gpu_model, gpus_per_node, description, nominal, created_at,"
    " updated_at) VALUES (1, 'lab', 'H100', 8, '', false, :t, :t), (2, 'b', 'H100', 8, '', false,"
    " :t, :t)",
    "INSERT INTO uploads (id, profile_id, sha256, raw_text, size_bytes, created_at)"
    " VALUES (1, 1, 'x', 'text', 4, :t)",
    "INSERT INTO runs (id, upload_id, profile_id, table_index, collective, tool, ranks, nodes,"
    " warnings, created_at) VALUES (1, 1, 1, 0, 'all_reduce', 'nccl-tests', 8, 1, '[]', :t)",
    "INSERT INTO points (id, run_id, size_bytes, time_us, algbw_gbps, busbw_gbps, in_place)"
    " VALUES (1, 1, 1024, 12.0, 0.1, 0.15, false)",
    "INSERT INTO calibrations (id, profile_id, inputs, utilization, mape_pct, residuals,"
    " created_at) VALUES (1, 1, '{}', 0.5, 1.0, '[]', :t)",
]


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in sorted(TABLES_AT_FIRST_REVISION)
        }


def test_migrating_up_and_down_keeps_every_row_that_refers_to_a_rebuilt_table(
    fresh_db_url: str,
) -> None:
    """SQLite batch migrations rebuild tables; with foreign keys on, that used to cascade."""
    upgrade_database(fresh_db_url, revision=FIRST_REVISION)
    engine = make_engine(fresh_db_url)
    try:
        with engine.begin() as connection:
            for statement in ROWS_AT_FIRST_REVISION:
                connection.execute(text(statement), {"t": datetime(2026, 1, 1, tzinfo=UTC)})
        before = _counts(engine)
        assert all(before[t] for t in ("profiles", "uploads", "runs", "points", "calibrations"))
        upgrade_database(fresh_db_url)
        assert _counts(engine) == before
        with engine.connect() as connection:
            revisions = connection.execute(text("SELECT revision FROM profiles")).scalars().all()
        assert len(set(revisions)) == 2 and all(len(r) == 32 for r in revisions)
        downgrade_database(fresh_db_url, revision=FIRST_REVISION)
        assert _counts(engine) == before
    finally:
        engine.dispose()
