"""GET /v1/validation: the published runs commest was scored on, as results.json keeps them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from estimator.calibrated import VALIDATED_BY_MODEL
from profiles.validation.results import published_results
from tests.api.conftest import assert_problem


def test_every_scored_run_with_its_citation_and_the_reports_figures(client: TestClient) -> None:
    response = client.get("/v1/validation")
    assert response.status_code == 200, response.text
    body = response.json()
    stored = published_results()
    assert len(body["rows"]) == body["summary"]["rows"] == len(stored["rows"]) > 100
    assert body["selection"] == body["summary"] == stored["summary"]
    assert body["by_kind"] == stored["by_kind"] and body["by_source"] == stored["by_source"]
    row = body["rows"][0]
    assert row["source_ref"] and row["model"] and row["layout"]["pipeline"] >= 1
    expected = 100.0 * (row["predicted_s"] - row["measured_s"]) / row["measured_s"]
    assert abs(row["error_pct"] - expected) < 0.01  # rounded seconds, rounded percentage
    assert "qwen3-30b-a3b" in body["models"] and "fine-grained moe" in body["kinds"]


def test_one_models_runs_worst_first_with_their_own_accuracy(client: TestClient) -> None:
    body = client.get("/v1/validation", params={"model": "qwen3-30b-a3b", "sort": "error"}).json()
    same = VALIDATED_BY_MODEL[("megatron-style", (48, 2048, 32, 128, 768))]
    assert {r["model"] for r in body["rows"]} == {"qwen3-30b-a3b"}
    assert body["selection"]["rows"] == same.runs == len(body["rows"])
    assert abs(body["selection"]["mean_abs_error_pct"] - same.mean_abs_error_pct) < 0.05
    errors = [abs(r["error_pct"]) for r in body["rows"]]
    assert errors == sorted(errors, reverse=True)
    assert body["summary"]["rows"] > body["selection"]["rows"]  # the whole report's beside it


def test_kinds_narrow_together_and_sources_and_models_widen(client: TestClient) -> None:
    moe = client.get("/v1/validation", params={"kind": "moe"}).json()["rows"]
    both = client.get("/v1/validation", params=[("kind", "moe"), ("kind", "fp8")]).json()["rows"]
    assert both and len(both) < len(moe)
    assert all({"moe", "fp8"} <= set(r["kinds"]) for r in both)
    two = [("model", "gpt3-175b"), ("model", "llama3-70b")]
    rows = client.get("/v1/validation", params=two).json()["rows"]
    assert {r["model"] for r in rows} == {"gpt3-175b", "llama3-70b"}


def test_an_unknown_name_is_a_problem_naming_the_known_ones(client: TestClient) -> None:
    body = assert_problem(
        client.get("/v1/validation", params={"model": "gpt-5"}), 422, field="model"
    )
    assert "qwen3-30b-a3b" in body["detail"]
    body = assert_problem(client.get("/v1/validation", params={"kind": "MoE"}), 422, field="kind")
    assert "fine-grained moe" in body["detail"]
    assert_problem(client.get("/v1/validation", params={"sort": "worst"}), 422)
