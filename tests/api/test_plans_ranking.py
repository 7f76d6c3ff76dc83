"""POST /v1/plans as a planner: memory headroom, context-parallel candidates, tie groups and
the workbench's filters (t within a node, recompute, precision)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.settings import Settings
from tests.api.conftest import assert_problem, make_client

SMALL: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "training": {"global_batch_size": 64},
    "cluster": {"profile": "dgx-a100-nominal"},
    "gpus": 16,
}
#: a 32k-token model: context parallelism is proposed
LONG: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b", "seq_length": 32768},
    "training": {"global_batch_size": 16},
    "cluster": {"profile": "dgx-h100-nominal"},
    "gpus": 64,
}


def _plan(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _estimate_of(plan: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """The estimate request of a planned layout: its training fields back under training."""
    lay = dict(entry["layout"])
    training = {**plan["training"], **{k: lay.pop(k) for k in TRAINING_FIELDS}}
    return {**plan, "layout": lay, "training": training}


TRAINING_FIELDS = ("micro_batch_size", "recompute", "precision")


def _key(entry: dict[str, Any]) -> tuple[Any, ...]:
    lay = entry["layout"]
    return tuple(sorted(lay.items()))


# --------------------------------------------------------------------------- memory headroom


def test_a_layout_using_83_5_of_85_9_gb_does_not_fit_with_the_default_headroom(
    client: TestClient,
) -> None:
    every = _plan(client, {**SMALL, "top_k": 10_000, "memory_headroom": 0})
    chosen = every["layouts"][0]
    used = chosen["memory_bytes"]
    cluster = {**SMALL["cluster"], "gpu_memory_gb": used * 85.9 / 83.5 / 1e9}
    sized = {**SMALL, "cluster": cluster, "top_k": 10_000}

    default = _plan(client, sized)
    assert default["memory_headroom"] == 0.10
    capacity = default["cluster"]["gpu_memory_bytes"]
    assert default["usable_memory_bytes"] == pytest.approx(0.9 * capacity)
    same = next(e for e in default["layouts"] if _key(e) == _key(chosen))
    assert same["memory_bytes"] / capacity == pytest.approx(83.5 / 85.9)
    assert same["fits"] is False
    assert all(e["fits"] == (e["memory_bytes"] <= 0.9 * capacity) for e in default["layouts"])

    none = _plan(client, {**sized, "memory_headroom": 0})
    assert next(e for e in none["layouts"] if _key(e) == _key(chosen))["fits"] is True
    assert none["feasible"] > default["feasible"]


def test_headroom_may_be_grouped_and_is_checked(client: TestClient) -> None:
    grouped = _plan(client, {**SMALL, "constraints": {"memory_headroom": 0.2}})
    assert grouped["memory_headroom"] == 0.2
    assert_problem(client.post("/v1/plans", json={**SMALL, "memory_headroom": 1}), 422)
    assert_problem(client.post("/v1/plans", json={**SMALL, "memory_headroom": -0.1}), 422)


# --------------------------------------------------------------------------- context parallel


def test_context_parallel_candidates_for_a_32k_sequence(client: TestClient) -> None:
    body = _plan(client, {**LONG, "top_k": 10_000})
    assert body["context_parallel"] == [1, 2, 4, 8]
    sizes = {e["layout"]["context_parallel"] for e in body["layouts"]}
    assert sizes == {1, 2, 4, 8}
    for entry in body["layouts"]:
        lay = entry["layout"]
        assert lay["pipeline"] * lay["tensor"] * lay["data"] * lay["context_parallel"] == 64
        if lay["sequence_parallel"]:
            assert 32768 % (lay["tensor"] * lay["context_parallel"]) == 0


def test_a_plan_layout_with_cp_estimates_the_same_as_the_estimate_endpoint(
    client: TestClient,
) -> None:
    body = _plan(client, {**LONG, "top_k": 10_000})
    entry = next(e for e in body["layouts"] if e["layout"]["context_parallel"] == 4)
    estimate = client.post("/v1/estimates", json=_estimate_of(LONG, entry))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["iteration_time_s"] == pytest.approx(entry["iteration_time_s"])
    assert estimate.json()["memory"]["total_bytes"] == pytest.approx(entry["memory_bytes"])


# --------------------------------------------------------------------------- expert parallel

#: a MoE model (Mixtral's shape on 8 layers): expert parallelism is proposed
MOE: dict[str, Any] = {
    "model": {"preset": "mixtral-8x7b", "num_layers": 8, "seq_length": 4096},
    "training": {"global_batch_size": 64},
    "cluster": {"profile": "dgx-h100-nominal"},
    "gpus": 16,
}


def test_expert_parallel_candidates_for_a_moe_model(client: TestClient) -> None:
    """8 experts on 16 GPUs: EP 1, 2, 4 and 8 swept, each layout taking the sizes that divide
    its d·cp; one of them estimates as the estimate endpoint does."""
    body = _plan(client, {**MOE, "top_k": 10_000})
    assert body["expert_parallel"] == [1, 2, 4, 8]
    assert {e["layout"]["expert_parallel"] for e in body["layouts"]} == {1, 2, 4, 8}
    assert body["experts_folded"] == [False, True]
    folded = [e for e in body["layouts"] if e["layout"]["expert_tensor_parallel"] == 1]
    assert folded and all(
        e["layout"]["expert_tensor_parallel"] is None for e in body["layouts"] if e not in folded
    )
    for entry in body["layouts"]:
        lay = entry["layout"]
        ranks = lay["data"] * lay["context_parallel"]
        if lay["expert_tensor_parallel"] == 1:  # folded over TP: t > 1 under SP, t·d·cp ranks
            assert lay["tensor"] > 1 and lay["sequence_parallel"]
            ranks *= lay["tensor"]
        assert ranks % lay["expert_parallel"] == 0
    # folding opens EP sizes that d·cp alone does not allow
    assert any(
        e["layout"]["data"] * e["layout"]["context_parallel"] % e["layout"]["expert_parallel"]
        for e in folded
    )
    assert any("expert_parallel swept: [1, 2, 4, 8]" in a for a in body["assumptions"])
    assert any("experts folded over TP swept: [False, True]" in a for a in body["assumptions"])
    entry = folded[0]
    estimate = client.post("/v1/estimates", json=_estimate_of(MOE, entry))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["iteration_time_s"] == pytest.approx(entry["iteration_time_s"])
    entry = next(e for e in body["layouts"] if e["layout"]["expert_parallel"] == 4)
    estimate = client.post("/v1/estimates", json=_estimate_of(MOE, entry))
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["iteration_time_s"] == pytest.approx(entry["iteration_time_s"])
    assert estimate.json()["memory"]["total_bytes"] == pytest.approx(entry["memory_bytes"])


def test_expert_parallel_sizes_may_be_given_and_are_checked(client: TestClient) -> None:
    body = _plan(client, {**MOE, "constraints": {"expert_parallel": [2]}, "top_k": 10_000})
    assert body["expert_parallel"] == [2]
    assert {e["layout"]["expert_parallel"] for e in body["layouts"]} == {2}
    for bad in ([3], [16]):  # 3 does not divide 8 experts; 16 does not either
        assert_problem(
            client.post("/v1/plans", json={**MOE, "expert_parallel": bad}),
            422,
            field="expert_parallel",
        )
    dense = _plan(client, SMALL)
    assert dense["expert_parallel"] == [1]
    assert_problem(
        client.post("/v1/plans", json={**SMALL, "expert_parallel": [2]}),
        422,
        field="expert_parallel",
    )
    paper = _plan(client, {**MOE, "fidelity": "paper"})
    assert paper["expert_parallel"] == [1]
    assert paper["experts_folded"] == [False] == dense["experts_folded"]
    unfolded = _plan(client, {**MOE, "experts_folded": [False], "top_k": 10_000})
    assert all(e["layout"]["expert_tensor_parallel"] is None for e in unfolded["layouts"])
    assert_problem(
        client.post("/v1/plans", json={**SMALL, "experts_folded": [True]}),
        422,
        field="experts_folded",
    )


def test_no_context_parallel_for_a_2k_sequence(client: TestClient) -> None:
    short = {**LONG, "model": {"preset": "gpt3-1.3b", "seq_length": 2048}, "top_k": 10_000}
    body = _plan(client, short)
    assert body["context_parallel"] == [1]
    assert {e["layout"]["context_parallel"] for e in body["layouts"]} == {1}


def test_no_context_parallel_at_paper_fidelity(client: TestClient) -> None:
    body = _plan(client, {**LONG, "fidelity": "paper"})
    assert body["context_parallel"] == [1]
    paper_cp = {**LONG, "fidelity": "paper", "context_parallel": [1, 2]}
    assert_problem(client.post("/v1/plans", json=paper_cp), 422, field="context_parallel")


def test_context_parallel_sizes_may_be_given(client: TestClient) -> None:
    body = _plan(client, {**SMALL, "constraints": {"context_parallel": [2]}, "top_k": 10_000})
    assert {e["layout"]["context_parallel"] for e in body["layouts"]} == {2}
    off = _plan(client, {**LONG, "context_parallel": [1], "top_k": 10_000})
    assert {e["layout"]["context_parallel"] for e in off["layouts"]} == {1}
    bad = {**SMALL, "context_parallel": [3]}  # divides neither 16 GPUs nor 2048 tokens
    assert_problem(client.post("/v1/plans", json=bad), 422, field="context_parallel")


def test_context_parallel_stays_under_the_layout_cap(
    client: TestClient, tmp_path: Path, db_url: str
) -> None:
    every = _plan(client, LONG)["evaluated"]
    without = _plan(client, {**LONG, "context_parallel": [1]})["evaluated"]
    assert without < every  # CP widens the space, and the one cap counts every CP size
    settings = Settings(
        database_url=db_url,
        data_dir=tmp_path / "capped",
        api_token=SecretStr("t"),
        max_plan_layouts=without,
    )
    with make_client(settings) as capped:
        assert_problem(capped.post("/v1/plans", json=LONG), 413)
        alone = capped.post("/v1/plans", json={**LONG, "context_parallel": [1]})
        assert alone.status_code == 200, alone.text
        two = {**LONG, "context_parallel": [1], "precision": ["bf16", "fp8"]}
        refused = assert_problem(capped.post("/v1/plans", json=two), 413)
        assert f"cap of {without:,}" in refused["detail"]  # one cap over both passes


# --------------------------------------------------------------------------- ties


def test_ties_are_grouped_and_ordered_by_t_within_a_node_then_communication(
    client: TestClient,
) -> None:
    body = _plan(client, {**SMALL, "top_k": 10_000, "tie_tolerance": 0.5})
    assert body["tie_tolerance"] == 0.5
    layouts = [e for e in body["layouts"] if e["fits"]]
    groups = [e["group"] for e in layouts]
    assert groups == sorted(groups)
    sizes = {g: groups.count(g) for g in set(groups)}
    assert max(sizes.values()) > 1  # some layouts tie at 50%
    node = body["cluster"]["gpus_per_node"]
    for g in sizes:
        members = [e for e in layouts if e["group"] == g]
        times = [e["iteration_time_s"] for e in members]
        assert max(times) <= min(times) * 1.5
        keys = [
            (node % e["layout"]["tensor"] != 0, e["communication_s"], e["iteration_time_s"])
            for e in members
        ]
        assert keys == sorted(keys)
        for e in members:
            assert e["tensor_within_node"] == (node % e["layout"]["tensor"] == 0)
            comm = sum(
                v
                for k, v in e["breakdown_s"].items()
                if k not in ("compute", "bubble", "optimizer", "host")
            )
            assert e["communication_s"] == pytest.approx(comm)


def test_no_tolerance_ranks_by_time_alone(client: TestClient) -> None:
    body = _plan(client, {**SMALL, "top_k": 200, "tie_tolerance": 0})
    feasible = [e["iteration_time_s"] for e in body["layouts"] if e["fits"]]
    assert feasible == sorted(feasible)


def test_the_ranking_is_deterministic(client: TestClient) -> None:
    first = _plan(client, {**SMALL, "top_k": 300})
    again = _plan(client, {**SMALL, "top_k": 300})
    assert [_key(e) for e in first["layouts"]] == [_key(e) for e in again["layouts"]]
    assert [e["rank"] for e in first["layouts"]] == list(range(1, 301))


def test_infeasible_layouts_are_never_grouped_with_feasible_ones(client: TestClient) -> None:
    body = _plan(client, {**SMALL, "top_k": 10_000, "tie_tolerance": 1})
    by_group: dict[int, set[bool]] = {}
    for e in body["layouts"]:
        by_group.setdefault(e["group"], set()).add(e["fits"])
    assert all(len(fits) == 1 for fits in by_group.values())


# --------------------------------------------------------------------------- filters


def test_tensor_within_node_keeps_t_dividing_the_node(client: TestClient) -> None:
    wide = {**SMALL, "gpus": 32, "training": {"global_batch_size": 64}, "top_k": 10_000}
    every = _plan(client, wide)
    assert any(e["layout"]["tensor"] > 8 for e in every["layouts"])
    within = _plan(client, {**wide, "constraints": {"tensor_within_node": True}})
    assert within["evaluated"] < every["evaluated"]
    assert all(8 % e["layout"]["tensor"] == 0 for e in within["layouts"])
    assert all(e["tensor_within_node"] for e in within["layouts"])


def test_recompute_and_precision_filters(client: TestClient) -> None:
    body = _plan(
        client,
        {
            **SMALL,
            "cluster": {"profile": "dgx-h100-nominal"},
            "constraints": {"recompute": ["selective"], "precision": ["bf16", "fp8"]},
            "top_k": 10_000,
        },
    )
    assert {e["layout"]["recompute"] for e in body["layouts"]} == {"selective"}
    assert {e["layout"]["precision"] for e in body["layouts"]} == {"bf16", "fp8"}
    one = _plan(client, {**SMALL, "precision": ["bf16"], "recompute": ["full"]})
    assert (
        body["evaluated"] == 2 * _plan(client, {**SMALL, "recompute": ["selective"]})["evaluated"]
    )
    assert {e["layout"]["precision"] for e in one["layouts"]} == {"bf16"}
    pinned = {**SMALL, "training": {"global_batch_size": 64, "precision": "fp16"}}
    conflict = {**pinned, "precision": ["bf16"]}
    assert_problem(client.post("/v1/plans", json=conflict), 422, field="precision")


def test_the_default_precision_is_the_trainings(client: TestClient) -> None:
    body = _plan(client, {**SMALL, "training": {"global_batch_size": 64, "precision": "bf16"}})
    assert {e["layout"]["precision"] for e in body["layouts"]} == {"bf16"}
