"""Runtime settings, read from ``COMMEST_*`` environment variables.

Only ``api`` (and the migration environment) reads settings; the estimator never does.
``get_settings()`` caches one instance per process, read from the environment by
:meth:`Settings.from_environment`; tests build ``Settings(...)`` directly (nothing is read
from the environment then) or clear the cache with ``get_settings.cache_clear()``.

Each field is one ``COMMEST_<FIELD>`` variable holding a scalar, so a plain pydantic model
reads them: ``pydantic-settings`` would cost a local command about 0.15 s of imports for
nothing more.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from platformdirs import user_data_dir
from pydantic import BaseModel, ConfigDict, Field, SecretStr

MIB = 1024 * 1024


def _default_data_dir() -> Path:
    return Path(user_data_dir("commest"))


ENV_PREFIX = "COMMEST_"


class Settings(BaseModel):
    """Every knob of the service; each field maps to ``COMMEST_<FIELD>``."""

    model_config = ConfigDict(extra="ignore", frozen=True, validate_default=True)

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; None means the SQLite file <data_dir>/commest.sqlite3",
    )
    api_token: SecretStr | None = Field(
        default=None, description="Bearer token required for writes (None: writes refused)"
    )
    data_dir: Path = Field(default_factory=_default_data_dir)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    max_upload_bytes: int = Field(default=20 * MIB, gt=0)
    max_upload_files: int = Field(default=32, gt=0)
    max_dense_gpus: int = Field(default=4096, gt=0)
    max_plan_layouts: int = Field(default=2_000_000, gt=0)
    max_matrix_gpus: int = Field(default=65536, gt=0)
    max_matrix_entries: int = Field(default=1_000_000, gt=0)

    @property
    def sqlite_path(self) -> Path:
        """Where the default SQLite database lives."""
        return self.data_dir.expanduser() / "commest.sqlite3"

    @property
    def resolved_database_url(self) -> str:
        """The database URL to use: ``database_url`` or the default SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.sqlite_path.resolve()}"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings the ``COMMEST_<FIELD>`` variables give (names in any case, as a shell
        user may write them); the unset ones keep their defaults. A value that does not fit
        fails validation with the field's name as its location."""
        env = os.environ if environ is None else environ
        given = {key.upper(): value for key, value in env.items()}
        return cls.model_validate(
            {
                name: given[ENV_PREFIX + name.upper()]
                for name in cls.model_fields
                if ENV_PREFIX + name.upper() in given
            }
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read from the environment once)."""
    return Settings.from_environment()
