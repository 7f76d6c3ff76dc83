"""POST /v1/estimates and /v1/plans with the training software named (issue 11): framework
presets, per-flag overrides, the new breakdown term and the roofline figures of the cluster."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.schemas import EXAMPLE_FRAMEWORK, FrameworkOverridesIn
from estimator import (
    TERMS,
    ClusterSpec,
    LayoutSpec,
    Precision,
    Recompute,
    Scenario,
    TrainingSpec,
    estimate,
)
from estimator.calibrated import FITTED_COMPUTE, VALIDATED_ACCURACY
from estimator.frameworks import FRAMEWORK_FLAGS, FRAMEWORK_PRESETS, framework_preset
from estimator.presets import model_preset
from profiles.nominal import NOMINAL_SPECS, nominal_bandwidth
from tests.api.conftest import ESTIMATE, SCALAR_C, assert_problem, request

EXACT = 1e-12


def _training(**changes: object) -> dict[str, object]:
    return {**ESTIMATE["training"], **changes}


def test_the_framework_example_is_estimated_and_named(client: TestClient) -> None:
    response = client.post("/v1/estimates", json=EXAMPLE_FRAMEWORK)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["framework"]["name"] == "nemo"
    assert body["framework"]["flags"]["tp_comm_overlap"] is True
    assert body["framework"]["flags"]["overlap_param_gather"] is False  # the override
    assert set(body["framework"]["flags"]) == set(FRAMEWORK_FLAGS)
    assert any(a.startswith("framework=nemo") for a in body["assumptions"])
    # H100 nominal profile: the fitted FP8 efficiency of the H100 family.
    assert body["cluster"]["fp8_utilization"] == pytest.approx(
        FITTED_COMPUTE["h100"].fp8_utilization
    )
    # ... and of its FP8 MoE expert GEMMs, said where it came from.
    u8e = FITTED_COMPUTE["h100"].fp8_expert_utilization
    assert u8e is not None and body["cluster"]["fp8_expert_utilization"] == pytest.approx(u8e)
    assert any(a.startswith(f"u8e={u8e:g}") for a in body["assumptions"])


def test_the_breakdown_adds_the_optimizer_step_and_keeps_every_term(client: TestClient) -> None:
    body = client.post("/v1/estimates", json=ESTIMATE).json()
    assert set(body["breakdown_s"]) == set(TERMS)
    assert body["breakdown_s"]["optimizer"] > 0
    assert sum(body["breakdown_s"].values()) == pytest.approx(body["iteration_time_s"])
    assert body["framework"]["name"] == "megatron-lm"  # the default


def test_a_deepspeed_answer_says_how_far_such_runs_were_off(
    client: TestClient,
) -> None:
    # the example's cluster overrides u; the profile's own (fitted) figures are what validate
    # scores
    fitted = {"profile": ESTIMATE["cluster"]["profile"]}
    deepspeed = client.post(
        "/v1/estimates",
        json={**ESTIMATE, "cluster": fitted, "training": _training(framework="deepspeed")},
    ).json()
    # DeepSpeed runs as a kind are within the 8 % target since its presets' host time per layer
    # (7.0 %): no warning for the kind, its figures in `validated` and `assumptions`.
    assert not [w for w in deepspeed["warnings"] if "commest is validated on" in w]
    assert any(a.startswith("validated: ") for a in deepspeed["assumptions"])
    acc = VALIDATED_ACCURACY["deepspeed"]
    assert deepspeed["validated"] == {
        "trainer_kind": "deepspeed",
        "runs": acc.runs,
        "mean_abs_error_pct": acc.mean_abs_error_pct,
        "mean_error_pct": acc.mean_error_pct,
        "error_p10_pct": acc.error_p10_pct,
        "error_p90_pct": acc.error_p90_pct,
        "misses_target": False,
        "fine_grained_moe": None,  # a dense model
        # GPT-3 175B: SC21's ZeRO-3 runs of it are DeepSpeed runs commest was validated on, and
        # those it predicts too fast: this model's own runs do warn
        "same_model": {
            "runs": 3,
            "mean_abs_error_pct": 15.4,
            "mean_error_pct": -15.4,
            "min_error_pct": -19.8,
            "max_error_pct": -11.3,
            "misses_target": True,
            "model": "gpt3-175b",
        },
    }
    assert any(w.startswith("this model (gpt3-175b)") for w in deepspeed["warnings"])
    low, high = deepspeed["iteration_time_range_s"]
    assert (low, high) == pytest.approx(acc.measured_range_s(deepspeed["iteration_time_s"]))
    megatron = client.post("/v1/estimates", json={**ESTIMATE, "cluster": fitted}).json()
    assert not any("validated on" in w for w in megatron["warnings"])
    assert any(a.startswith("validated: ") for a in megatron["assumptions"])
    assert megatron["validated"]["trainer_kind"] == "megatron-style"
    paper = client.post(
        "/v1/estimates", json={**ESTIMATE, "cluster": fitted, "fidelity": "paper"}
    ).json()
    assert paper["validated"] is None and paper["iteration_time_range_s"] is None
    # explicit figures (u = 0.5, no roofline constants): not the model validate scores
    explicit = client.post("/v1/estimates", json={**SCALAR_C, "fidelity": "detailed"}).json()
    assert explicit["validated"] is None and explicit["iteration_time_range_s"] is None
    assert any(a.startswith("not validated:") for a in explicit["assumptions"])


def test_a_framework_request_equals_the_engine(client: TestClient) -> None:
    training = _training(
        framework="megatron-lm-2021", framework_overrides={"tp_overlap_wgrad": True}
    )
    body = client.post("/v1/estimates", json=request(ESTIMATE, training=training)).json()
    a100 = NOMINAL_SPECS["dgx-a100-nominal"]
    engine = estimate(
        Scenario(
            model_preset("gpt3-175b"),
            TrainingSpec(
                global_batch_size=1536,
                recompute=Recompute.FULL,
                precision=Precision.FP16,
                framework=framework_preset("megatron-lm-2021").replace(tp_overlap_wgrad=True),
            ),
            LayoutSpec(pipeline=8, tensor=8, data=24),
            ClusterSpec(
                gpus_per_node=8,
                peak_flops=312e12,
                utilization=0.5,
                bandwidth=nominal_bandwidth("dgx-a100-nominal"),
                gpu_memory_bytes=80 * 1024**3,
                memory_bandwidth_gbps=a100.memory_bandwidth_gbps,
                memory_traffic_factor=a100.memory_traffic_factor,
                gemm_traffic_factor=FITTED_COMPUTE["a100"].gemm_traffic_factor,
                gemm_half_size_elements=FITTED_COMPUTE["a100"].gemm_half_size_elements,
            ),
        )
    )
    assert body["iteration_time_s"] == pytest.approx(engine.iteration_time_s, rel=EXACT)
    for name in TERMS:
        assert body["breakdown_s"][name] == pytest.approx(
            engine.breakdown.as_dict()[name], rel=EXACT, abs=1e-15
        )


def test_overlap_flags_change_the_exposed_time_not_the_link_time(client: TestClient) -> None:
    layout = {**ESTIMATE["layout"], "zero_stage": 1}
    plain = client.post("/v1/estimates", json=request(ESTIMATE, layout=layout)).json()
    overrides = {"overlap_grad_reduce": True, "overlap_param_gather": True, "tp_comm_overlap": True}
    hidden = client.post(
        "/v1/estimates",
        json=request(ESTIMATE, layout=layout, training=_training(framework_overrides=overrides)),
    ).json()
    assert hidden["breakdown_s"]["dp"] < plain["breakdown_s"]["dp"]
    assert hidden["breakdown_s"]["tp"] < plain["breakdown_s"]["tp"]
    assert hidden["link_time_s"]["dp"] == pytest.approx(plain["link_time_s"]["dp"], rel=EXACT)
    assert hidden["link_time_s"]["tp"] == pytest.approx(plain["link_time_s"]["tp"], rel=EXACT)


def test_an_unknown_framework_is_a_422_listing_the_presets(client: TestClient) -> None:
    response = client.post(
        "/v1/estimates", json=request(ESTIMATE, training=_training(framework="megatron-9000"))
    )
    body = assert_problem(response, 422)
    assert "nemo" in body["detail"] and "megatron-lm-2021" in body["detail"]


def test_every_framework_flag_can_be_overridden_in_a_request(client: TestClient) -> None:
    # The request schema names every flag of estimator.frameworks.Framework, so no behaviour
    # is reachable from Python only.
    assert set(FrameworkOverridesIn.model_fields) == set(FRAMEWORK_FLAGS)
    flipped = {
        "fsdp_backward_prefetch": "post",
        "selective_recompute": "op-sac",
        "tp_comm_overlap_backward": False,
        "recompute_early_stop": True,
        "compute_efficiency": 0.5,
        "layer_host_s": 0.004,
        "moe_layer_host_s": 0.02,
        "cuda_graphs": True,
        "ep_comm_overlap": True,
        "fp8_param_gather": True,
    }
    response = client.post(
        "/v1/estimates",
        json=request(ESTIMATE, training=_training(framework_overrides=flipped)),
    )
    assert response.status_code == 200, response.text
    flags = response.json()["framework"]["flags"]
    assert {k: flags[k] for k in flipped} == flipped


@pytest.mark.parametrize(
    "overrides",
    [
        {"overlap_everything": True},
        {"fsdp_backward_prefetch": "sideways"},
        {"selective_recompute": "everything"},
        {"recompute_early_stop": "maybe"},
        {"tp_comm_overlap": "maybe"},
        {"zero3_gathers_per_layer": 0},
        {"zero3_persistence_threshold": -1},
        {"zero3_persistence_threshold": 1.5},
        {"cp_torch_ring": "maybe"},
        {"compute_efficiency": 0},
        {"compute_efficiency": -0.5},
        {"compute_efficiency": 2.5},
        {"compute_efficiency": "fast"},
        {"layer_host_s": -0.001},
        {"layer_host_s": 2},
        {"layer_host_s": "slow"},
        {"moe_layer_host_s": -0.001},
        {"moe_layer_host_s": 2},
        {"moe_layer_host_s": "slow"},
        {"cuda_graphs": "some"},
        {"ep_comm_overlap": "partly"},
        {"fp8_param_gather": "half"},
    ],
)
def test_a_bad_override_is_a_422(client: TestClient, overrides: dict[str, object]) -> None:
    response = client.post(
        "/v1/estimates",
        json=request(ESTIMATE, training=_training(framework_overrides=overrides)),
    )
    assert_problem(response, 422)


def test_moe_capacity_factor_is_taken_and_checked(client: TestClient) -> None:
    moe = {"preset": "mixtral-8x7b", "seq_length": 4096}
    layout = {"pipeline": 1, "tensor": 2, "data": 8, "expert_parallel": 8}
    base = request(ESTIMATE, model=moe, layout=layout)
    base["training"] = {"global_batch_size": 64, "micro_batch_size": 1, "precision": "bf16"}
    balanced = client.post("/v1/estimates", json=base)
    assert balanced.status_code == 200, balanced.text
    skewed = request(base, training={**base["training"], "moe_capacity_factor": 1.5})
    slower = client.post("/v1/estimates", json=skewed).json()
    assert slower["breakdown_s"]["compute"] > balanced.json()["breakdown_s"]["compute"]
    bad = request(base, training={**base["training"], "moe_capacity_factor": 0.5})
    assert_problem(client.post("/v1/estimates", json=bad), 422)


def test_roofline_figures_can_be_given_with_explicit_clusters(client: TestClient) -> None:
    explicit = request(ESTIMATE, training=_training(precision="fp8", framework="fsdp"))
    explicit["cluster"] = {
        "gpus_per_node": 8,
        "gpu": "h100-sxm5-80gb",
        "utilization": 0.6,
        "bandwidth_gbps": {"tp": 346, "pp": 46, "dp": 46},
        "memory_traffic_factor": 2.0,
        "gemm_traffic_factor": 0.5,
        "fp8_utilization": 0.55,
        "fp8_expert_utilization": 0.4,
    }
    response = client.post("/v1/estimates", json=explicit)
    assert response.status_code == 200, response.text
    cluster = response.json()["cluster"]
    assert (cluster["gemm_traffic_factor"], cluster["fp8_utilization"]) == (0.5, 0.55)
    assert cluster["fp8_expert_utilization"] == 0.4
    assert cluster["flash2_efficiency"] == 0.5  # the H100 preset's (Hopper)
    for name in ("fp8_utilization", "fp8_expert_utilization"):
        bad = request(explicit)
        bad["cluster"][name] = 1.5
        problem = assert_problem(client.post("/v1/estimates", json=bad), 422)
        assert name in str(problem)


def test_the_gemm_size_constant_defaults_to_the_fit_and_can_be_given(client: TestClient) -> None:
    fitted = client.post("/v1/estimates", json=request(ESTIMATE)).json()
    x0 = FITTED_COMPUTE["a100"].gemm_half_size_elements
    assert fitted["cluster"]["gemm_half_size_elements"] == x0 > 0
    assert any("x + " in note for note in fitted["assumptions"])
    given = request(ESTIMATE)
    given["cluster"] = {**given["cluster"], "gemm_half_size_elements": 0.0}
    flat = client.post("/v1/estimates", json=given).json()
    assert flat["cluster"]["gemm_half_size_elements"] == 0.0
    # One u for every size: the small per-GPU GEMMs no longer pay the size penalty.
    assert flat["breakdown_s"]["compute"] < fitted["breakdown_s"]["compute"]
    given["cluster"]["gemm_half_size_elements"] = -1.0
    assert_problem(client.post("/v1/estimates", json=given), 422)


def test_framework_presets_are_listed_with_their_flags(client: TestClient) -> None:
    response = client.get("/v1/presets/frameworks")
    assert response.status_code == 200
    presets = {p["name"]: p for p in response.json()}
    assert set(presets) == set(FRAMEWORK_PRESETS)
    assert "megatron-bridge" in presets["nemo"]["aliases"]
    assert presets["megatron-lm-2021"]["flags"]["grad_accum_fusion"] is False


def test_a_plan_takes_the_framework(client: TestClient) -> None:
    plan: dict[str, Any] = {
        "model": {"preset": "gpt3-175b"},
        "training": {"global_batch_size": 1536, "framework": "megatron-lm-2021"},
        "cluster": {"profile": "dgx-a100-nominal", "utilization": 0.5},
        "gpus": 1536,
        "top_k": 3,
        "max_tensor": 8,
    }
    old = client.post("/v1/plans", json=plan)
    assert old.status_code == 200, old.text
    new = client.post(
        "/v1/plans", json={**plan, "training": {**plan["training"], "framework": "nemo"}}
    )
    assert new.status_code == 200, new.text
    best_old = old.json()["layouts"][0]["iteration_time_s"]
    best_new = new.json()["layouts"][0]["iteration_time_s"]
    assert best_new < best_old  # NeMo overlaps what 2021 Megatron-LM exposed


@pytest.mark.parametrize("path", ["/v1/estimates", "/v1/traffic-matrices", "/v1/timelines"])
def test_torchtitan_context_parallel_answers_every_view(client: TestClient, path: str) -> None:
    # PyTorch's ring attention (cp_torch_ring) records its dK/dV passes as CP sendrecv: the
    # traffic matrix lays them out as a ring pass, and no view turns them into an error.
    body = {
        **EXAMPLE_FRAMEWORK,
        "model": {"preset": "llama3-8b"},
        "layout": {"pipeline": 1, "tensor": 1, "data": 2, "context_parallel": 4},
        "training": {"global_batch_size": 2, "precision": "bf16", "framework": "torchtitan"},
    }
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    if path == "/v1/traffic-matrices":
        matrix = client.post(path, json={**body, "format": "json"}).json()
        estimate = client.post("/v1/estimates", json=body).json()
        sent = sum(r["bytes"] for r in matrix["rows"] if r["kind"] == "cp" and r["src"] == 0)
        assert sent == pytest.approx(estimate["traffic_bytes_per_gpu"]["cp"], rel=1e-9)


def test_misaligned_attention_heads_use_the_gpus_cuda_core_rate(client: TestClient) -> None:
    # BigScience's 200B candidate: h 14400, 96 heads (head dim 150: 300-byte rows). Without
    # FlashAttention its batched GEMMs run on the CUDA cores: the A100's FP32 datasheet rate
    # from the profile's GPU family, or as given.
    bloom = request(
        ESTIMATE,
        model={
            "num_layers": 80,
            "hidden_size": 14400,
            "num_attention_heads": 96,
            "seq_length": 2048,
            "vocab_size": 250880,
        },
        layout={"pipeline": 10, "tensor": 8, "data": 1},
        training=_training(global_batch_size=64, flash_attention=False),
    )
    response = client.post("/v1/estimates", json=bloom)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["cluster"]["cuda_core_peak_tflops"] == 19.5
    assert any("head dim 150" in a and "19.5 TFLOP/s" in a for a in body["assumptions"])
    given = request(bloom, cluster={"cuda_core_peak_tflops": 39.0})
    faster = client.post("/v1/estimates", json=given).json()
    assert faster["cluster"]["cuda_core_peak_tflops"] == 39.0
    assert faster["breakdown_s"]["compute"] < body["breakdown_s"]["compute"]
    for bad in (0, -1.0, "fast"):
        assert_problem(
            client.post(
                "/v1/estimates", json=request(bloom, cluster={"cuda_core_peak_tflops": bad})
            ),
            422,
        )
    # A rate so small that the answer is not a finite number: the 422 names it with the peak.
    absurd = request(bloom, cluster={"cuda_core_peak_tflops": 5e-324})
    problem = assert_problem(client.post("/v1/estimates", json=absurd), 422)
    assert "cluster.cuda_core_peak_tflops" in problem["field"]
    assert "non-finite" in problem["rule"]
    # Explicit figures without a GPU: the rate is unknown, the slowdown named and not priced.
    explicit = request(bloom)
    explicit["cluster"] = {
        "gpus_per_node": 8,
        "peak_tflops": 312,
        "utilization": 0.5,
        "bandwidth_gbps": {"tp": 230, "pp": 23, "dp": 23},
    }
    unknown = client.post("/v1/estimates", json=explicit).json()
    assert unknown["cluster"]["cuda_core_peak_tflops"] is None
    assert any("not priced" in a for a in unknown["assumptions"])
