"""The head revision read from the revision files, and upgrades that skip Alembic at head."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import migrations
from profiles.db import (
    at_head,
    current_revision,
    downgrade_database,
    head_revision,
    upgrade_database,
)


def test_the_head_read_from_the_files_is_alembics() -> None:
    assert migrations.head_from_files() == head_revision()


def test_a_second_head_or_an_unreadable_file_means_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    versions = tmp_path / "versions"
    versions.mkdir()
    for path in migrations.VERSIONS_DIR.glob("*.py"):
        (versions / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(migrations, "VERSIONS_DIR", versions)
    migrations.head_from_files.cache_clear()
    try:
        assert migrations.head_from_files() == head_revision()
        (versions / "9999_99_99_0001_branch.py").write_text(
            'revision: str = "branch"\ndown_revision: str | None = None\n', encoding="utf-8"
        )
        migrations.head_from_files.cache_clear()
        assert migrations.head_from_files() is None  # two heads: Alembic decides
        (versions / "9999_99_99_0001_branch.py").write_text("x = 1\n", encoding="utf-8")
        migrations.head_from_files.cache_clear()
        assert migrations.head_from_files() is None
    finally:
        migrations.head_from_files.cache_clear()


def test_at_head_only_once_migrated(fresh_db_url: str) -> None:
    assert not at_head(fresh_db_url)
    upgrade_database(fresh_db_url)
    assert at_head(fresh_db_url)
    downgrade_database(fresh_db_url, revision="base")
    assert not at_head(fresh_db_url)
    upgrade_database(fresh_db_url)
    assert current_revision(fresh_db_url) == head_revision()


def test_an_upgrade_at_head_does_not_import_alembic(fresh_db_url: str) -> None:
    upgrade_database(fresh_db_url)
    code = (
        "import sys\n"
        "from profiles.db import upgrade_database\n"
        "upgrade_database(sys.argv[1])\n"
        "print('alembic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, fresh_db_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.strip() == "False", done.stderr
