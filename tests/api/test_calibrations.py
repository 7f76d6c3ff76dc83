"""POST /v1/profiles/{name}/calibrations."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH, ESTIMATE, assert_problem

REQUEST = {k: v for k, v in ESTIMATE.items() if k != "cluster"}
OTHER_LAYOUT = {**REQUEST, "layout": {"pipeline": 16, "tensor": 8, "data": 12}}


def _measured(client: TestClient, request: dict[str, Any], u: float) -> float:
    body = {**request, "cluster": {"profile": "dgx-a100-nominal", "utilization": u}}
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 200, response.text
    return float(response.json()["iteration_time_s"])


def test_calibration_recovers_u_from_times_the_engine_predicts(client: TestClient) -> None:
    runs = [
        {"request": REQUEST, "measured_iteration_time_s": _measured(client, REQUEST, 0.4)},
        {
            "request": OTHER_LAYOUT,
            "measured_iteration_time_s": _measured(client, OTHER_LAYOUT, 0.4),
            "label": "p16",
        },
    ]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": runs}, headers=AUTH
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["utilization"] == pytest.approx(0.4, rel=1e-9)
    assert body["mape_pct"] == pytest.approx(0.0, abs=1e-6)
    assert [r["label"] for r in body["residuals"]] == ["runs[0]", "p16"]
    assert all(r["scaled_s"] > 0 and r["fixed_s"] >= 0 for r in body["residuals"])
    assert body["applied"] is False
    profile = client.get("/v1/profiles/dgx-a100-nominal").json()
    assert profile["utilization"] != pytest.approx(0.4)  # not applied
    listed = client.get("/v1/profiles/dgx-a100-nominal/calibrations").json()
    assert [c["id"] for c in listed] == [body["id"]]


def test_apply_sets_the_profiles_fitted_u(client: TestClient) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": _measured(client, REQUEST, 0.35)}]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations",
        json={"runs": runs, "apply": True},
        headers=AUTH,
    )
    assert response.status_code == 201 and response.json()["applied"] is True
    profile = client.get("/v1/profiles/dgx-a100-nominal").json()
    assert profile["utilization"] == pytest.approx(0.35, rel=1e-9)
    assert profile["utilization_source"] == "fitted"


def test_measured_faster_than_peak_is_422(client: TestClient) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": 0.001}]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": runs}, headers=AUTH
    )
    assert_problem(response, 422)
    assert client.get("/v1/profiles/dgx-a100-nominal/calibrations").json() == []


def test_utilization_in_a_calibration_request_is_422(client: TestClient) -> None:
    request = {**REQUEST, "cluster": {"utilization": 0.5}}
    runs = [{"request": request, "measured_iteration_time_s": 20.0}]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": runs}, headers=AUTH
    )
    assert_problem(response, 422, field="runs[0].request.cluster.utilization")


def test_another_profile_in_a_calibration_request_is_422(client: TestClient) -> None:
    request = {**REQUEST, "cluster": {"profile": "dgx-h100-nominal"}}
    runs = [{"request": request, "measured_iteration_time_s": 20.0}]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": runs}, headers=AUTH
    )
    assert_problem(response, 422, field="runs[0].request.cluster.profile")


def test_calibrating_an_unknown_profile_is_404(client: TestClient) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": 20.0}]
    response = client.post("/v1/profiles/nope/calibrations", json={"runs": runs}, headers=AUTH)
    assert_problem(response, 404)


def test_calibration_needs_a_token(client: TestClient) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": 20.0}]
    response = client.post("/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": runs})
    assert_problem(response, 401)


def test_empty_runs_is_422(client: TestClient) -> None:
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations", json={"runs": []}, headers=AUTH
    )
    assert_problem(response, 422, field="runs")


@pytest.mark.parametrize("u", [0.05, 0.97])
def test_an_implausible_fit_is_reported_and_applied_only_when_forced(
    client: TestClient, u: float
) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": _measured(client, REQUEST, u)}]
    url = "/v1/profiles/dgx-a100-nominal/calibrations"
    before = client.get("/v1/profiles/dgx-a100-nominal").json()["utilization"]
    stored = client.post(url, json={"runs": runs}, headers=AUTH)  # no apply: stored, warned
    assert stored.status_code == 201, stored.text
    assert stored.json()["applied"] is False
    assert "plausible range [0.15, 0.95]" in stored.json()["warnings"][0]
    assert client.get(url).json()[0]["warnings"] == stored.json()["warnings"]
    refused = client.post(url, json={"runs": runs, "apply": True}, headers=AUTH)
    problem = assert_problem(refused, 422, field="utilization")
    assert problem["value"] == pytest.approx(u, rel=1e-9)
    assert problem["plausible_utilization"] == [0.15, 0.95]
    assert '"force": true' in problem["detail"]
    assert len(client.get(url).json()) == 1  # the refused fit was not stored
    assert client.get("/v1/profiles/dgx-a100-nominal").json()["utilization"] == before
    forced = client.post(url, json={"runs": runs, "apply": True, "force": True}, headers=AUTH)
    assert forced.status_code == 201 and forced.json()["applied"] is True
    assert forced.json()["warnings"] == stored.json()["warnings"]
    profile = client.get("/v1/profiles/dgx-a100-nominal").json()
    assert profile["utilization"] == pytest.approx(u, rel=1e-9)


def test_a_plausible_fit_carries_no_warning(client: TestClient) -> None:
    runs = [{"request": REQUEST, "measured_iteration_time_s": _measured(client, REQUEST, 0.45)}]
    response = client.post(
        "/v1/profiles/dgx-a100-nominal/calibrations",
        json={"runs": runs, "apply": True},
        headers=AUTH,
    )
    assert response.status_code == 201 and response.json()["warnings"] == []
