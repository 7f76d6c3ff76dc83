"""Bearer-token auth of writes; reads need none; the generated token file."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.deps import token_path
from api.settings import Settings
from tests.api.conftest import AUTH, ESTIMATE, assert_problem, make_client
from tests.conftest import TEST_TOKEN

PROFILE = {"name": "p1", "gpu_model": "A100", "gpus_per_node": 8}


def test_missing_token_is_401_with_bearer_challenge(client: TestClient) -> None:
    response = client.post("/v1/profiles", json=PROFILE)
    body = assert_problem(response, 401)
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization" in body["detail"]


@pytest.mark.parametrize("header", ["Basic dXNlcjpwdw==", "Bearer", "Bearer   ", TEST_TOKEN])
def test_malformed_header_is_401(client: TestClient, header: str) -> None:
    response = client.post("/v1/profiles", json=PROFILE, headers={"Authorization": header})
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_wrong_token_is_401_and_never_echoed(client: TestClient) -> None:
    wrong = "wrong-token-9f8e7d"
    response = client.post(
        "/v1/profiles", json=PROFILE, headers={"Authorization": f"Bearer {wrong}"}
    )
    assert_problem(response, 401)
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert wrong not in response.text and TEST_TOKEN not in response.text


def test_right_token_writes(client: TestClient) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201


def test_reads_need_no_token(client: TestClient) -> None:
    assert client.post("/v1/estimates", json=ESTIMATE).status_code == 200
    assert client.get("/v1/profiles").status_code == 200
    assert client.get("/v1/presets/models").status_code == 200


def test_without_a_configured_token_one_is_generated_in_a_0600_file(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="api"), make_client(settings) as client:
        path = token_path(settings)
        assert path.exists()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = path.read_text().strip()
        assert len(token) >= 32
        assert str(path) in caplog.text and token not in caplog.text
        ok = client.post("/v1/profiles", json=PROFILE, headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 201
    # a restart keeps the same token
    with make_client(settings) as client:
        assert token_path(settings).read_text().strip() == token
        again = client.get("/v1/profiles/p1", headers={"Authorization": f"Bearer {token}"})
        assert again.status_code == 200
