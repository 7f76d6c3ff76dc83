"""PUT/GET/DELETE /v1/baselines/{name}."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH, ESTIMATE, assert_problem


def test_put_creates_then_replaces(client: TestClient) -> None:
    first = client.put("/v1/baselines/main", json=ESTIMATE, headers=AUTH)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["source"] == "predicted"
    assert body["iteration_time_s"] == pytest.approx(body["predicted_iteration_time_s"])
    assert body["request"]["model"] == {"preset": "gpt3-175b"}
    again = client.put(
        "/v1/baselines/main", json={"request": ESTIMATE, "iteration_time_s": 30.0}, headers=AUTH
    )
    assert again.status_code == 200
    assert again.json()["source"] == "given" and again.json()["iteration_time_s"] == 30.0
    got = client.get("/v1/baselines/main")
    assert got.status_code == 200 and got.json()["iteration_time_s"] == 30.0
    assert [b["name"] for b in client.get("/v1/baselines").json()] == ["main"]


def test_get_unknown_baseline_is_404(client: TestClient) -> None:
    assert_problem(client.get("/v1/baselines/none-here"), 404)


def test_put_without_token_is_401_and_stores_nothing(client: TestClient) -> None:
    response = client.put("/v1/baselines/main", json=ESTIMATE)
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert_problem(client.get("/v1/baselines/main"), 404)


def test_put_invalid_request_is_422(client: TestClient) -> None:
    bad = {**ESTIMATE, "layout": {"pipeline": 8, "tensor": 8}}
    assert_problem(client.put("/v1/baselines/main", json=bad, headers=AUTH), 422)


def test_invalid_name_is_422(client: TestClient) -> None:
    assert_problem(client.put("/v1/baselines/bad name!", json=ESTIMATE, headers=AUTH), 422)


def test_delete_baseline(client: TestClient) -> None:
    client.put("/v1/baselines/main", json=ESTIMATE, headers=AUTH)
    assert client.delete("/v1/baselines/main", headers=AUTH).status_code == 204
    assert_problem(client.get("/v1/baselines/main"), 404)
    assert_problem(client.delete("/v1/baselines/main", headers=AUTH), 404)
