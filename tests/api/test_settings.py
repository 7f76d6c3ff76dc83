"""Settings read from COMMEST_* environment variables (a plain pydantic model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from api.settings import Settings


def test_each_field_is_one_commest_variable_and_the_rest_keep_defaults() -> None:
    settings = Settings.from_environment(
        {
            "COMMEST_DATABASE_URL": "sqlite:////tmp/x.sqlite3",
            "COMMEST_PORT": "8123",
            "COMMEST_API_TOKEN": "s3cret",
            "COMMEST_DATA_DIR": "/tmp/commest-data",
            "commest_max_upload_files": "7",  # a shell user's spelling
            "COMMEST_NOT_A_SETTING": "ignored",
            "PORT": "1",
        }
    )
    assert settings.database_url == "sqlite:////tmp/x.sqlite3"
    assert settings.port == 8123
    assert settings.api_token is not None and settings.api_token.get_secret_value() == "s3cret"
    assert settings.data_dir == Path("/tmp/commest-data")
    assert settings.max_upload_files == 7
    assert settings.host == "127.0.0.1"
    assert settings.max_plan_layouts == 2_000_000


def test_a_value_that_does_not_fit_names_its_field() -> None:
    with pytest.raises(ValidationError) as info:
        Settings.from_environment({"COMMEST_PORT": "70000"})
    assert info.value.errors()[0]["loc"] == ("port",)


def test_no_variable_means_the_default_sqlite_file_in_the_data_dir() -> None:
    settings = Settings.from_environment({"COMMEST_DATA_DIR": "/tmp/d"})
    assert settings.database_url is None
    assert settings.resolved_database_url == f"sqlite:///{Path('/tmp/d').resolve()}/commest.sqlite3"
