"""Fixtures of the API tests: an app per test over the database fixtures of tests/conftest.py.

Every test that takes ``client`` runs once on SQLite and once on PostgreSQL (the latter
skipped, with its reason, when ``COMMEST_TEST_DATABASE_URL`` is unset).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from api.app import create_app
from api.schemas import EXAMPLE_ESTIMATE, EXAMPLE_SCALAR_C
from api.settings import Settings
from tests.conftest import TEST_TOKEN

# This Starlette warns once, at import, that its TestClient would rather use httpx2.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FIXTURES = Path(__file__).resolve().parents[1] / "profiles" / "fixtures"
AUTH = {"Authorization": f"Bearer {TEST_TOKEN}"}

# The OpenAPI examples themselves: the tests prove the published examples work.
ESTIMATE: dict[str, Any] = copy.deepcopy(EXAMPLE_ESTIMATE)
SCALAR_C: dict[str, Any] = copy.deepcopy(EXAMPLE_SCALAR_C)


def request(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with top-level parts merged (dicts) or replaced."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def row_counts(engine: Engine) -> dict[str, int]:
    """Rows per table of the profiles schema."""
    tables = ("profiles", "uploads", "runs", "points", "calibrations", "baselines")
    with engine.connect() as connection:
        return {
            t: int(connection.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in tables
        }


def assert_problem(response: Any, status: int, *, field: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem of ``status`` (naming ``field`` when given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail", "instance"} <= set(body)
    if field is not None:
        assert body["field"] == field, body
    return body


@pytest.fixture
def app_settings(settings: Settings) -> Settings:
    """The shared test settings (emptied database, temp data dir, token ``test-token``)."""
    return settings


@pytest.fixture
def client(app_settings: Settings) -> Iterator[TestClient]:
    """A client of a started app (lifespan run: migrated, nominal profiles in)."""
    with TestClient(create_app(app_settings)) as test_client:
        yield test_client


def make_client(settings: Settings) -> TestClient:
    """A client for an app over other settings (use it in a ``with`` block)."""
    return TestClient(create_app(settings))
