"""GET /healthz and GET /readyz."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.settings import Settings
from tests.api.conftest import assert_problem, make_client

DOWN_URL = "postgresql+psycopg://nobody@127.0.0.1:1/nothing?connect_timeout=2"


def test_healthz_answers_ok(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_readyz_pings_the_database(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"
    assert response.json()["database"] in ("sqlite", "postgresql")


def test_database_down_readyz_is_503_problem_but_healthz_answers(tmp_path: Path) -> None:
    settings = Settings(database_url=DOWN_URL, data_dir=tmp_path, api_token=SecretStr("t"))
    with make_client(settings) as client:
        assert client.get("/healthz").status_code == 200
        body = assert_problem(client.get("/readyz"), 503)
        assert "database" in body["detail"]
        # Database-backed reads are 503 too, never 500.
        assert_problem(client.get("/v1/profiles"), 503)
