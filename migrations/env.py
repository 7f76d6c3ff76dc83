"""Alembic environment: migrates the database named by ``sqlalchemy.url`` or the settings.

The URL comes from the Alembic config's ``sqlalchemy.url`` when set (``upgrade_database``
sets it), else from ``COMMEST_DATABASE_URL`` / the default SQLite file. On PostgreSQL a
transaction-scoped advisory lock serialises concurrent upgrades (two workers starting at
once); on SQLite ``BEGIN IMMEDIATE`` does the same.

SQLite runs the migrations with foreign keys off (then checks them): a batch migration
rebuilds a table by copying it and dropping the old one, and with foreign keys on, dropping
``profiles`` or ``uploads`` would cascade-delete every row that refers to it (SQLite's own
ALTER TABLE procedure says to turn them off first).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import text

from profiles.db import make_engine
from profiles.models import Base

MIGRATION_LOCK_ID = 0x636F6D6D657374  # "commest"

config = context.config
if config.config_file_name is not None and config.file_config.has_section("loggers"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    # Run from a checkout (`alembic upgrade head`): the service's settings name the database.
    from api.settings import get_settings

    return get_settings().resolved_database_url


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (``alembic upgrade head --sql``)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations against a live database, one transaction for all of them."""
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            sqlite = connection.dialect.name == "sqlite"
            if sqlite:  # outside any transaction, or SQLite ignores it
                driver = connection.connection.driver_connection
                assert driver is not None
                driver.execute("PRAGMA foreign_keys=OFF")
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=sqlite,
                compare_type=True,
                # Alembic treats SQLite as non-transactional DDL and commits after each
                # revision, which lets a second process in between with a stale head list.
                # SQLite's DDL is transactional: one BEGIN IMMEDIATE for the whole run.
                transactional_ddl=True,
            )
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_ID}
                    )
                context.run_migrations()
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
