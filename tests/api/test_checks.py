"""POST /v1/checks."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH, ESTIMATE, assert_problem


def _predicted(client: TestClient) -> float:
    return float(client.post("/v1/estimates", json=ESTIMATE).json()["iteration_time_s"])


def test_budget_check_passes_above_the_prediction(client: TestClient) -> None:
    predicted = _predicted(client)
    response = client.post("/v1/checks", json={**ESTIMATE, "max_iteration_time_s": predicted * 1.1})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["passed"] is True and body["criterion"] == "budget"
    assert body["predicted_iteration_time_s"] == pytest.approx(predicted)
    assert body["limit_s"] == pytest.approx(predicted * 1.1)
    assert body["margin_s"] == pytest.approx(predicted * 0.1)
    assert body["margin_pct"] == pytest.approx(100 * 0.1 / 1.1)
    assert body["baseline"] is None
    assert body["estimate"]["iteration_time_s"] == pytest.approx(predicted)


def test_budget_check_fails_below_the_prediction(client: TestClient) -> None:
    predicted = _predicted(client)
    body = client.post(
        "/v1/checks", json={**ESTIMATE, "max_iteration_time_s": predicted * 0.9}
    ).json()
    assert body["passed"] is False
    assert body["margin_s"] < 0 and body["margin_pct"] < 0


def test_baseline_check_passes_within_tolerance_and_fails_beyond(client: TestClient) -> None:
    put = client.put("/v1/baselines/gpt3-main", json=ESTIMATE, headers=AUTH)
    assert put.status_code == 201
    same = client.post("/v1/checks", json={**ESTIMATE, "baseline": "gpt3-main"}).json()
    assert same["passed"] is True and same["criterion"] == "baseline"
    assert same["baseline"]["name"] == "gpt3-main"
    assert same["baseline"]["tolerance"] == 0.05
    assert same["limit_s"] == pytest.approx(same["predicted_iteration_time_s"] * 1.05)
    slower = {**ESTIMATE, "cluster": {"profile": "dgx-a100-nominal", "utilization": 0.25}}
    worse = client.post("/v1/checks", json={**slower, "baseline": "gpt3-main"}).json()
    assert worse["passed"] is False
    loose = client.post(
        "/v1/checks", json={**slower, "baseline": "gpt3-main", "tolerance": 2.0}
    ).json()
    assert loose["passed"] is True


def test_check_needs_exactly_one_criterion(client: TestClient) -> None:
    assert_problem(client.post("/v1/checks", json=ESTIMATE), 422, field="max_iteration_time_s")
    both = {**ESTIMATE, "max_iteration_time_s": 10.0, "baseline": "x"}
    assert_problem(client.post("/v1/checks", json=both), 422)


def test_tolerance_without_baseline_is_422(client: TestClient) -> None:
    body = {**ESTIMATE, "max_iteration_time_s": 10.0, "tolerance": 0.1}
    assert_problem(client.post("/v1/checks", json=body), 422, field="tolerance")


def test_unknown_baseline_is_404(client: TestClient) -> None:
    assert_problem(client.post("/v1/checks", json={**ESTIMATE, "baseline": "nope"}), 404)


def test_checks_need_no_token(client: TestClient) -> None:
    response = client.post("/v1/checks", json={**ESTIMATE, "max_iteration_time_s": 1e6})
    assert response.status_code == 200
