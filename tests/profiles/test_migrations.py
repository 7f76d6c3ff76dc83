"""The Alembic migrations: the only way the schema is made, idempotent, matching the models."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect

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
TABLES = {"profiles", "uploads", "runs", "points", "calibrations", "baselines", "placement_curves"}


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
