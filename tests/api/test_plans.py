"""POST /v1/plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.settings import Settings
from tests.api.conftest import assert_problem, make_client

GPT3_PLAN = {
    "model": {"preset": "gpt3-175b"},
    "training": {"global_batch_size": 1536, "precision": "fp16"},
    "cluster": {"profile": "dgx-a100-nominal"},
    "gpus": 1536,
}


def assert_ranked_in_groups(layouts: list[dict[str, Any]], *, tolerance: float) -> None:
    """Groups 1, 2, ... in order; each within ``tolerance`` of its fastest member; the
    groups' fastest times ascending (the order inside a group is the tie-break's)."""
    groups = [entry["group"] for entry in layouts]
    assert groups == sorted(groups) and groups[0] == 1
    assert set(groups) == set(range(1, groups[-1] + 1))
    fastest = []
    for g in sorted(set(groups)):
        times = [e["iteration_time_s"] for e in layouts if e["group"] == g]
        assert max(times) <= min(times) * (1 + tolerance)
        fastest.append(min(times))
    assert fastest == sorted(fastest)


def test_gpt3_175b_on_1536_gpus_ranks_over_a_thousand_layouts(client: TestClient) -> None:
    # How fast: bench/bench_api.py (tests assert no wall-clock time).
    response = client.post("/v1/plans", json=GPT3_PLAN)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["evaluated"] > 1000
    assert 0 < body["feasible"] <= body["evaluated"]
    layouts = body["layouts"]
    assert len(layouts) == 10
    assert_ranked_in_groups(layouts, tolerance=0.03)
    assert [entry["rank"] for entry in layouts] == list(range(1, 11))
    for entry in layouts:
        lay = entry["layout"]
        assert lay["pipeline"] * lay["tensor"] * lay["data"] == 1536
        assert entry["fits"] is True
        assert sum(entry["breakdown_s"].values()) == pytest.approx(entry["iteration_time_s"])


def test_constraints_narrow_the_space(client: TestClient) -> None:
    full = client.post("/v1/plans", json=GPT3_PLAN).json()
    narrow = client.post(
        "/v1/plans",
        json={**GPT3_PLAN, "max_tensor": 4, "zero_stages": [0], "top_k": 50},
    ).json()
    assert narrow["evaluated"] < full["evaluated"]
    assert all(e["layout"]["tensor"] <= 4 for e in narrow["layouts"])
    assert all(e["layout"]["zero_stage"] == 0 for e in narrow["layouts"])
    assert len(narrow["layouts"]) == 50


def test_constraints_may_be_grouped(client: TestClient) -> None:
    flat = client.post("/v1/plans", json={**GPT3_PLAN, "max_tensor": 4}).json()
    grouped = client.post("/v1/plans", json={**GPT3_PLAN, "constraints": {"max_tensor": 4}}).json()
    assert grouped["evaluated"] == flat["evaluated"]


def test_training_micro_batch_size_pins_the_sweep(client: TestClient) -> None:
    plan = {**GPT3_PLAN, "training": {"global_batch_size": 1536, "micro_batch_size": 2}}
    body = client.post("/v1/plans", json={**plan, "top_k": 30}).json()
    assert {e["layout"]["micro_batch_size"] for e in body["layouts"]} == {2}


def test_conflicting_micro_batch_constraints_are_422(client: TestClient) -> None:
    plan = {
        **GPT3_PLAN,
        "training": {"global_batch_size": 1536, "micro_batch_size": 2},
        "micro_batch_sizes": [1, 4],
    }
    assert_problem(client.post("/v1/plans", json=plan), 422, field="micro_batch_sizes")


def test_drop_infeasible_keeps_only_layouts_that_fit(client: TestClient) -> None:
    body = client.post(
        "/v1/plans", json={**GPT3_PLAN, "drop_infeasible": True, "top_k": 10_000}
    ).json()
    assert len(body["layouts"]) == body["feasible"]
    assert all(e["fits"] for e in body["layouts"])


def test_plan_space_over_the_cap_is_413(tmp_path: Path, db_url: str) -> None:
    settings = Settings(
        database_url=db_url, data_dir=tmp_path, api_token=SecretStr("t"), max_plan_layouts=100
    )
    with make_client(settings) as client:
        assert_problem(client.post("/v1/plans", json=GPT3_PLAN), 413)


def test_plan_without_gpus_is_422(client: TestClient) -> None:
    plan = {k: v for k, v in GPT3_PLAN.items() if k != "gpus"}
    assert_problem(client.post("/v1/plans", json=plan), 422, field="gpus")


def test_block_recompute_is_swept_beside_full_and_each_layout_estimates_alike(
    client: TestClient,
) -> None:
    """recompute_num_layers [N, ...] adds, per N, the full-recompute layouts again with the
    first N layers of each chunk replayed, where a chunk holds more than N; each planned
    layout is the estimate of that layout (the same engine, one layout at a time)."""
    plan = {
        **GPT3_PLAN,
        "gpus": 256,
        "recompute": ["full"],
        "recompute_num_layers": [2, 12],
        "top_k": 400,
    }
    response = client.post("/v1/plans", json=plan)
    assert response.status_code == 200, response.text
    body = response.json()
    layouts = body["layouts"]
    assert {e["layout"].get("recompute_num_layers") for e in layouts} == {None, 2, 12}
    for entry in layouts:
        layout = entry["layout"]
        replayed = layout.get("recompute_num_layers")
        chunk = 96 / (layout["pipeline"] * layout["virtual_stages"])
        assert layout["recompute"] == "full"
        assert replayed is None or replayed < chunk  # else it would be full recompute again
    for entry in layouts[:: max(1, len(layouts) // 12)]:
        layout = dict(entry["layout"])
        training = {
            "global_batch_size": 1536,
            "precision": layout.pop("precision"),
            "micro_batch_size": layout.pop("micro_batch_size"),
            "recompute": layout.pop("recompute"),
        }
        if layout.get("recompute_num_layers") is not None:
            training["recompute_num_layers"] = layout["recompute_num_layers"]
        layout.pop("recompute_num_layers", None)
        single = client.post(
            "/v1/estimates",
            json={
                "model": GPT3_PLAN["model"],
                "layout": layout,
                "training": training,
                "cluster": GPT3_PLAN["cluster"],
            },
        )
        assert single.status_code == 200, single.text
        assert single.json()["iteration_time_s"] == pytest.approx(
            entry["iteration_time_s"], rel=1e-12
        )
    alone = client.post("/v1/plans", json={**plan, "recompute_num_layers": None})
    assert body["evaluated"] > alone.json()["evaluated"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"recompute": ["none", "selective"]}, "include full in recompute"),
        ({"recompute_num_layers": [0]}, "whole number > 0"),
        (
            {
                "training": {
                    "global_batch_size": 1536,
                    "precision": "fp16",
                    "recompute_num_layers": 2,
                }
            },
            "give one",
        ),
    ],
)
def test_a_block_recompute_sweep_that_cannot_apply_is_422(
    client: TestClient, change: dict[str, Any], says: str
) -> None:
    plan = {**GPT3_PLAN, "recompute_num_layers": [2], **change}
    problem = assert_problem(client.post("/v1/plans", json=plan), 422, field="recompute_num_layers")
    assert says in problem["rule"]
