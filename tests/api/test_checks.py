"""POST /v1/checks."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.schemas import EXAMPLE_SCALAR_C
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


# --- memory, headroom and thresholds ------------------------------------------------------------


def _near_full(client: TestClient, used_gb: float = 83.5, capacity_gb: float = 85.9) -> Any:
    """ESTIMATE on a GPU sized so that the layout uses ``used_gb`` of ``capacity_gb``."""
    total = float(client.post("/v1/estimates", json=ESTIMATE).json()["memory"]["total_bytes"])
    cluster = {**ESTIMATE["cluster"], "gpu_memory_gb": total * capacity_gb / used_gb / 1e9}
    return {**ESTIMATE, "cluster": cluster, "max_iteration_time_s": 1e6}


def test_a_layout_using_83_5_of_85_9_gb_fails_with_the_default_headroom(
    client: TestClient,
) -> None:
    body = client.post("/v1/checks", json=_near_full(client)).json()
    assert body["passed"] is False
    assert body["memory"]["memory_headroom"] == 0.10
    assert body["memory"]["fits"] is False
    capacity = body["memory"]["capacity_bytes"]
    assert body["memory"]["usable_bytes"] == pytest.approx(0.9 * capacity)
    memory = next(c for c in body["comparisons"] if c["name"] == "memory_bytes")
    assert memory["passed"] is False and memory["enforced"] is True
    assert memory["value"] / capacity == pytest.approx(83.5 / 85.9)
    assert len(body["reasons"]) == 1 and body["reasons"][0].startswith("memory ")
    assert "10% headroom" in body["reasons"][0]
    # the time criterion itself held: only memory failed it
    assert body["margin_s"] > 0


def test_the_same_layout_passes_with_no_headroom_or_with_overflow_allowed(
    client: TestClient,
) -> None:
    request = _near_full(client)
    none = client.post("/v1/checks", json={**request, "memory_headroom": 0}).json()
    assert none["passed"] is True and none["memory"]["fits"] is True and none["reasons"] == []
    allowed = client.post("/v1/checks", json={**request, "allow_memory_overflow": True}).json()
    assert allowed["passed"] is True
    memory = next(c for c in allowed["comparisons"] if c["name"] == "memory_bytes")
    assert memory["passed"] is False and memory["enforced"] is False


def test_a_layout_over_the_whole_gpu_fails_even_with_no_headroom(client: TestClient) -> None:
    request = _near_full(client, used_gb=90.0, capacity_gb=85.9)
    body = client.post("/v1/checks", json={**request, "memory_headroom": 0}).json()
    assert body["passed"] is False and body["memory"]["fits"] is False


@pytest.mark.parametrize("headroom", [-0.1, 1.0, 1.5])
def test_a_headroom_outside_0_to_1_is_422(client: TestClient, headroom: float) -> None:
    body = {**ESTIMATE, "max_iteration_time_s": 1e6, "memory_headroom": headroom}
    assert_problem(client.post("/v1/checks", json=body), 422, field="memory_headroom")


def test_unknown_capacity_reports_memory_without_failing(client: TestClient) -> None:
    cluster = {k: v for k, v in EXAMPLE_SCALAR_C["cluster"].items() if k != "gpu_memory_gb"}
    scalar = {**EXAMPLE_SCALAR_C, "cluster": cluster, "max_iteration_time_s": 1e6}
    body = client.post("/v1/checks", json=scalar).json()
    assert body["memory"]["capacity_bytes"] is None and body["memory"]["fits"] is None
    memory = next(c for c in body["comparisons"] if c["name"] == "memory_bytes")
    assert memory["limit"] is None and memory["passed"] is None and memory["enforced"] is False
    assert body["passed"] is True


def test_each_threshold_is_a_named_comparison(client: TestClient) -> None:
    estimate = client.post("/v1/estimates", json=ESTIMATE).json()
    comm, bubble = estimate["ratios"]["communication"], estimate["ratios"]["bubble"]
    mfu = estimate["throughput"]["mfu"]
    loose = {
        **ESTIMATE,
        "max_iteration_time_s": 1e6,
        "max_communication_ratio": comm * 1.1,
        "max_bubble_ratio": bubble * 1.1,
        "min_mfu": mfu * 0.9,
    }
    body = client.post("/v1/checks", json=loose).json()
    assert body["passed"] is True
    named = {c["name"]: c for c in body["comparisons"]}
    assert list(named) == [
        "iteration_time_s",
        "memory_bytes",
        "communication_ratio",
        "bubble_ratio",
        "mfu",
    ]
    assert named["communication_ratio"]["value"] == pytest.approx(comm)
    assert named["communication_ratio"]["limit"] == pytest.approx(comm * 1.1)
    assert named["mfu"]["relation"] == ">="
    for key, tight in (
        ("max_communication_ratio", comm * 0.9),
        ("max_bubble_ratio", bubble * 0.9),
        ("min_mfu", min(1.0, mfu * 1.1)),
    ):
        failed = client.post("/v1/checks", json={**loose, key: tight}).json()
        assert failed["passed"] is False, key
        assert len(failed["reasons"]) == 1, failed["reasons"]
        bad = [c["name"] for c in failed["comparisons"] if c["passed"] is False]
        assert len(bad) == 1 and bad[0] in key


def test_without_thresholds_only_time_and_memory_are_compared(client: TestClient) -> None:
    body = client.post("/v1/checks", json={**ESTIMATE, "max_iteration_time_s": 1e6}).json()
    assert [c["name"] for c in body["comparisons"]] == ["iteration_time_s", "memory_bytes"]


@pytest.mark.parametrize("field", ["max_communication_ratio", "max_bubble_ratio", "min_mfu"])
def test_a_threshold_outside_0_to_1_is_422(client: TestClient, field: str) -> None:
    body = {**ESTIMATE, "max_iteration_time_s": 1e6, field: 1.5}
    assert_problem(client.post("/v1/checks", json=body), 422, field=field)
