"""The mechanisms of the detailed model (issue 11): per-operation compute, the optimizer step,
SP priced as its collectives, framework presets and their overlaps, FP8, ZeRO-3/FSDP, MoE, and
pipelines with uneven stages or a single micro-batch. Formula tests and golden tests (cited)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import pytest

from estimator import (
    TERMS,
    ClusterSpec,
    Estimate,
    Fidelity,
    FixedBandwidth,
    LayoutArrays,
    LayoutSpec,
    ModelSpec,
    MoeDispatcher,
    Precision,
    Recompute,
    Scenario,
    TrainingSpec,
    enumerate_layouts,
    estimate,
    evaluate_layouts,
    validate_layout,
)
from estimator.bandwidth import Collective, TrafficKind, bus_factor
from estimator.calibrated import FINE_GRAINED_MOE_ACCURACY, FITTED_COMPUTE, VALIDATED_ACCURACY
from estimator.compute import (
    FLASH_BACKWARD_EFFICIENCY,
    FLASH_BACKWARD_RATIO,
    HBM_EFFICIENCY,
    LOGITS_PEAK_BYTES,
    TRITON_FLASH_BACKWARD_SLOWDOWN,
    TRITON_FLASH_FORWARD_SLOWDOWN,
    LayerTimes,
    Roofline,
    attention_efficiencies,
    flash_head_dim,
    layer_times,
    tensor_core_aligned,
)
from estimator.engine import CollectiveUse, estimate_traffic, traffic_loads
from estimator.errors import LayoutError, ValidationError
from estimator.flops import layer_forward_flops, layer_parameters, megatron_parameters
from estimator.frameworks import (
    ADAM_BYTES_PER_PARAMETER,
    DEEPSPEED_LAYER_HOST_S,
    EAGER_OP_HOST_S,
    EP_OVERLAP_HIDDEN_SHARE,
    FP8_CURRENT_SCALING_QUANTIZE_KERNELS,
    FP8_EXPERT_TENSORS_BACKWARD,
    FP8_EXPERT_TENSORS_FORWARD,
    FRAMEWORK_PRESETS,
    HOST_FORWARD_SHARE,
    KERNEL_LAUNCH_S,
    MEGATRON_MOE_LAYER_HOST_S,
    Framework,
    framework_preset,
)
from estimator.presets import model_preset
from estimator.specs import RECOMPUTE_CODE
from estimator.traffic import (
    Placement,
    node_traffic_matrix,
    per_gpu_volume_bytes,
    traffic_entry_count,
)
from tests.estimator.conftest import PlacementBandwidth

A100_HBM_GBPS = 2039.0
# DGX A100 NVLink all-reduce bus bandwidth (NVIDIA: ~230 GB/s), HDR IB 25 GB/s per GPU.
A100_LINKS = FixedBandwidth(tp_gbps=231.0, pp_gbps=23.0, dp_gbps=23.0)


def a100(
    bandwidth: FixedBandwidth = A100_LINKS, **overrides: float | FixedBandwidth | None
) -> ClusterSpec:
    fitted = FITTED_COMPUTE["a100"]
    fields: dict[str, object] = {
        "gpus_per_node": 8,
        "peak_flops": 312e12,
        "utilization": fitted.utilization,
        "bandwidth": bandwidth,
        "gpu_memory_bytes": 80e9,
        "memory_bandwidth_gbps": A100_HBM_GBPS,
        "memory_traffic_factor": fitted.memory_traffic_factor,
        "gemm_traffic_factor": fitted.gemm_traffic_factor,
        "gemm_half_size_elements": fitted.gemm_half_size_elements,
    }
    fields.update(overrides)
    return ClusterSpec(**fields)  # type: ignore[arg-type]


# --- Korthikanti et al. 2022, Table 4: one transformer layer of the 22B model --------------
# 22B: 48 layers, h 6144, 64 heads, s 2048, t 8, micro-batch 4 (Table 3); A100, Selene.
# Table 4 (forward + backward, ms): baseline no recompute 19.6, sequence parallelism 19.0,
# full recompute 27.2, selective recompute 20.9, selective + sequence parallelism 20.3.
TABLE4_MS = {
    (Recompute.NONE, False): 19.6,
    (Recompute.NONE, True): 19.0,
    (Recompute.FULL, False): 27.2,
    (Recompute.SELECTIVE, False): 20.9,
    (Recompute.SELECTIVE, True): 20.3,
}
# relative, per experiment; 3 % until the size-dependent GEMM efficiency (docs/design.md §4.4),
# whose x0 is fitted jointly with the H100 runs and prices the 22B layer (h/t = 768) 2-4 % slow;
# 4.5 % until SC21 Table 1's p = 1 rows ran PyTorch DDP as their script sets (--DDP-impl torch),
# which raised the refit x0 670 -> 842 elements: the five experiments are +2.3 to +5.2 % slow.
TABLE4_TOLERANCE = 0.055


def _layer_ms(recompute: Recompute, sp: bool) -> float:
    """One layer's time: the difference of 48- and 24-layer models (logits, optimizer cancel)."""
    fw = framework_preset("megatron-lm-2022").replace(optimizer_bytes_per_parameter=0.0)
    times = []
    for layers in (48, 24):
        model = ModelSpec(
            num_layers=layers,
            hidden_size=6144,
            num_attention_heads=64,
            seq_length=2048,
            vocab_size=51200,
        )
        training = TrainingSpec(
            global_batch_size=4,
            micro_batch_size=4,
            recompute=recompute,
            precision=Precision.FP16,
            flash_attention=False,
            framework=fw,
        )
        layout = LayoutSpec(pipeline=1, tensor=8, data=1, sequence_parallel=sp)
        times.append(estimate(Scenario(model, training, layout, a100())).iteration_time_s)
    return (times[0] - times[1]) / 24 * 1e3


@pytest.mark.parametrize(("recompute", "sp"), list(TABLE4_MS))
def test_korthikanti_table4_layer_times(recompute: Recompute, sp: bool) -> None:
    assert _layer_ms(recompute, sp) == pytest.approx(
        TABLE4_MS[(recompute, sp)], rel=TABLE4_TOLERANCE
    )


def test_korthikanti_table4_orders_the_experiments_as_measured() -> None:
    base = _layer_ms(Recompute.NONE, False)
    sp = _layer_ms(Recompute.NONE, True)
    sel_sp = _layer_ms(Recompute.SELECTIVE, True)
    sel = _layer_ms(Recompute.SELECTIVE, False)
    full = _layer_ms(Recompute.FULL, False)
    # SP alone is faster (norms and dropout on 1/t of the tokens); selective + SP is slower
    # than no recompute; full recompute costs more than a third (its replayed all-reduces are
    # not hidden under weight-gradient GEMMs).
    assert sp < base < sel_sp < sel < full
    assert full / base - 1 > 1 / 3


# --- the optimizer step ---------------------------------------------------------------------
def test_optimizer_step_streams_the_owned_parameters_through_hbm(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)
    sharded = LayoutSpec(pipeline=8, tensor=8, data=24, zero_stage=1)
    tr = TrainingSpec(global_batch_size=1536, precision=Precision.BF16)
    plain = estimate(Scenario(gpt3, tr, layout, a100()))
    zero1 = estimate(Scenario(gpt3, tr, sharded, a100()))
    expected = (
        plain.gpu_parameters * ADAM_BYTES_PER_PARAMETER / (HBM_EFFICIENCY * A100_HBM_GBPS * 1e9)
    )
    assert plain.breakdown.optimizer_s == pytest.approx(expected, rel=1e-12)
    # The distributed optimizer (ZeRO-1) shards it over the 24 data-parallel ranks.
    assert zero1.breakdown.optimizer_s == pytest.approx(expected / 24, rel=1e-12)
    assert "optimizer" in TERMS


def test_no_hbm_bandwidth_no_memory_side_terms(gpt3: ModelSpec, cluster: ClusterSpec) -> None:
    e = estimate(
        Scenario(gpt3, TrainingSpec(global_batch_size=1536), LayoutSpec(8, 8, 24), cluster)
    )
    assert e.breakdown.optimizer_s == 0.0


# --- pipelines ----------------------------------------------------------------------------------
def _deep(m_gb: int) -> Scenario:
    # 12 layers on 12 stages, one micro-batch of 1 when gb = 1.
    # A small vocabulary, so the last stage (one layer and the logits) is nearly a middle one.
    model = ModelSpec(
        num_layers=12, hidden_size=4096, num_attention_heads=32, seq_length=2048, vocab_size=1024
    )
    tr = TrainingSpec(global_batch_size=m_gb, micro_batch_size=1)
    return Scenario(model, tr, LayoutSpec(pipeline=12, tensor=1, data=1), a100())


def test_a_single_micro_batch_on_a_deep_pipeline_is_all_fill_and_drain() -> None:
    one, two = estimate(_deep(1)), estimate(_deep(2))
    b1, b2 = one.breakdown, two.breakdown
    # The fill and drain (W − T) does not depend on m; each micro-batch adds one period T.
    assert b1.bubble_s == pytest.approx(b2.bubble_s, rel=1e-12)
    period = b1.compute_s + b1.tp_s + b1.pp_s
    assert b2.compute_s + b2.tp_s + b2.pp_s == pytest.approx(2 * period, rel=1e-12)
    # With m = 1 the iteration is the chain of every stage once: the 11 stages before the
    # last (thinner: no logit layer) take less than 11 periods.
    assert 0.9 * 11 * period < b1.bubble_s <= 11 * period
    # 11 of 12 stage-times idle in fill and drain; the optimizer step and the embedding sync
    # are the rest.
    assert one.bubble_ratio > 0.85


def test_thinner_first_and_last_interleaved_stages_are_accepted_and_do_not_pace() -> None:
    # Llama 3.1 405B-like: 126 layers on 8 stages of 8 chunks; the embedding and the loss count
    # as a layer, so the first and last stage hold 15 (chunks of 1 and 2 layers).
    model = model_preset("llama3-405b")
    tr = TrainingSpec(global_batch_size=64, recompute=Recompute.NONE)
    uneven = LayoutSpec(
        pipeline=8,
        tensor=8,
        data=1,
        virtual_stages=8,
        first_stage_layers=15,
        last_stage_layers=15,
        sequence_parallel=True,
    )
    validate_layout(model, tr, uneven, 8, 64)
    e = estimate(Scenario(model, tr, uneven, a100()))
    mid_layers = 16
    # The middle stages (16 layers) pace the pipeline: its period is 16 layers' work.
    assert e.micro_batches == 64
    period = (e.breakdown.compute_s + e.breakdown.tp_s + e.breakdown.pp_s) / 64
    assert e.breakdown.bubble_s < (8 - 1) / 8 * period
    assert mid_layers * 15 > 0  # the layer split 15 + 6·16 + 15 = 126 validated above


def test_middle_stages_must_split_evenly_over_their_chunks() -> None:
    model = ModelSpec(
        num_layers=126, hidden_size=4096, num_attention_heads=32, seq_length=2048, vocab_size=512
    )
    bad = LayoutSpec(
        pipeline=8, tensor=1, data=1, virtual_stages=8, first_stage_layers=14, last_stage_layers=15
    )
    with pytest.raises(LayoutError):
        validate_layout(model, TrainingSpec(global_batch_size=64), bad, 8)


# --- frameworks -------------------------------------------------------------------------------
def test_megatron_2022_is_faster_than_2021_on_the_same_pipeline(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)

    def run(name: str) -> float:
        tr = TrainingSpec(global_batch_size=1536, framework=name)
        return estimate(Scenario(gpt3, tr, layout, a100())).iteration_time_s

    old, new = run("megatron-lm-2021"), run("megatron-lm-2022")
    # Backward TP all-reduces under the weight-gradient GEMMs and fused gradient accumulation
    # (the 530B/1T pipelines ran 7-10 % faster on 2022 Megatron, Korthikanti et al. Table 5 vs
    # Narayanan et al. Table 1).
    assert 0.02 < 1 - new / old < 0.12


def test_tp_comm_overlap_hides_tp_time_but_not_link_time(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=8, data=24, sequence_parallel=True)
    plain_fw = framework_preset("megatron-lm")
    overlap_fw = plain_fw.replace(tp_comm_overlap=True)
    plain = estimate(
        Scenario(gpt3, TrainingSpec(global_batch_size=1536, framework=plain_fw), layout, a100())
    )
    hidden = estimate(
        Scenario(gpt3, TrainingSpec(global_batch_size=1536, framework=overlap_fw), layout, a100())
    )
    assert hidden.breakdown.tp_s < plain.breakdown.tp_s
    assert hidden.link_s["tp"] == pytest.approx(plain.link_s["tp"], rel=1e-12)
    assert any("tp_comm_overlap" in a and "framework=" in a for a in hidden.assumptions)


def test_async_tp_overlaps_the_forward_pass_only(gpt3: ModelSpec) -> None:
    """torchtitan's async TP hides the forward pass's TP collectives, not the backward's
    (docs/design.md, "torchtitan"): between no overlap and Transformer Engine's overlap."""
    layout = LayoutSpec(pipeline=8, tensor=8, data=24, sequence_parallel=True)
    titan = framework_preset("torchtitan")

    def run(fw: Framework) -> tuple[float, float]:
        e = estimate(
            Scenario(gpt3, TrainingSpec(global_batch_size=1536, framework=fw), layout, a100())
        )
        return e.breakdown.tp_s, e.link_s["tp"]

    plain, link = run(titan)
    forward_only, link_fwd = run(titan.replace(tp_comm_overlap=True))
    both, link_both = run(titan.replace(tp_comm_overlap=True, tp_comm_overlap_backward=True))
    assert both < forward_only < plain
    assert link == pytest.approx(link_fwd, rel=1e-12) == pytest.approx(link_both, rel=1e-12)


# Llama 3 8B (Meta, "The Llama 3 Herd of Models", Table 3): the engine's preset.
LLAMA3_8B = model_preset("llama3-8b")


# One dense layer of one unsharded sequence unless a test says otherwise (layer_times' inputs).
_LAYER_DEFAULTS: dict[str, Any] = {
    "b": 1.0,
    "t": 1.0,
    "cp": 1.0,
    "sp": 0.0,
    "beta": 2.0,
    "flash": True,
    "moe": False,
    "imbalance": 1.0,
    "ep": 1.0,
}


def _layer(model: ModelSpec, roof: Roofline, **changes: Any) -> LayerTimes:
    """``layer_times`` with ``_LAYER_DEFAULTS`` for every input ``changes`` does not give."""
    return layer_times(model, roof, **{**_LAYER_DEFAULTS, **changes})


def _roofline(fp8: bool) -> Roofline:
    """An H100-like roofline with round constants and c = 0 (GEMM time proportional to FLOPs)."""
    return Roofline(
        peak_flops=989.5e12,
        utilization=0.6,
        fp8_utilization=0.6,
        fp8=fp8,
        hbm_bytes_per_s=3.35e12,
        gemm_traffic_factor=0.0,
        elementwise_factor=2.0,
    )


def test_fp8_casts_are_charged_in_the_pass_that_runs_them() -> None:
    """Transformer Engine 1.13 Linear: the forward casts each input (read 2 B, write 1 B); the
    backward cast-transposes each output gradient (2 + 1 + 1 B) and transposes each saved FP8
    input (1 + 1 B). Each charge once, in its own pass, and the forward's again in a replay."""

    roof = _roofline(fp8=True)
    hbm = roof.hbm_bytes_per_s
    b, s = 2.0, float(LLAMA3_8B.seq_length)
    lt = _layer(LLAMA3_8B, roof, b=b)
    h, kv, f = 4096.0, 1024.0, 14336.0
    inputs = h + h + h + f  # QKV, output projection, FC1 (gated: w1 and w3 share it), FC2
    grads = (h + 2.0 * kv) + h + 2.0 * f + h  # their output gradients
    tokens = b * s
    assert lt.cast_fwd == pytest.approx(tokens * 3.0 * inputs / (HBM_EFFICIENCY * hbm), rel=1e-12)
    assert lt.cast_bwd == pytest.approx(
        tokens * (2.0 * inputs + 4.0 * grads) / (HBM_EFFICIENCY * hbm), rel=1e-12
    )
    bf16 = _layer(LLAMA3_8B, dataclasses.replace(roof, fp8=False), b=b)
    assert bf16.cast_fwd == 0.0 and bf16.cast_bwd == 0.0
    rest_fwd = lt.linear_fwd + lt.attention_fwd + lt.elementwise_fwd + lt.extra_fwd
    assert lt.forward() == pytest.approx(rest_fwd + lt.cast_fwd, rel=1e-12)
    assert lt.backward() - lt.cast_bwd == pytest.approx(
        2.0 * lt.linear_fwd + lt.attention_bwd + 2.0 * lt.elementwise_fwd + 2.0 * lt.extra_fwd,
        rel=1e-12,
    )
    assert lt.replay(1.0, 0.0) == pytest.approx(lt.forward(), rel=1e-12)


@pytest.mark.parametrize("fp8", [False, True])
def test_op_sac_replays_every_other_gemm_and_no_attention(fp8: bool) -> None:
    """torchtitan's op-level SAC saves every other aten.mm (wq, wv, w1, w2 of wq wk wv wo w1
    w3 w2) and SDPA; in FP8 no linear output is saved (torch._scaled_mm is not on its list)."""

    roof = _roofline(fp8=fp8)
    lt = _layer(LLAMA3_8B, roof, b=2.0)
    h, kv, f = 4096.0, 1024.0, 14336.0
    # With c = 0 a GEMM's time is proportional to its FLOPs: wk + wo + w3 of the block's.
    fraction = 1.0 if fp8 else (kv + h + f) / (2.0 * h + 2.0 * kv + 3.0 * f)
    assert lt.sac_linear_fwd == pytest.approx(fraction * lt.linear_fwd, rel=1e-12)
    replay = lt.replay(0.0, 1.0, op_sac=True)
    sac = lt.sac_linear_fwd + lt.elementwise_fwd + lt.extra_fwd + lt.cast_fwd
    assert replay == pytest.approx(sac, rel=1e-12)
    assert lt.replay(0.0, 1.0) == pytest.approx(
        lt.attention_fwd + lt.elementwise_attention_fwd, rel=1e-12
    )


def _llama3_8b_fsdp8(framework: str | Framework, recompute: Recompute) -> Estimate:
    """Llama 3 8B, BF16, FSDP (ZeRO-3) over 8 A100s, 8 micro-batches of 2."""
    tr = TrainingSpec(
        global_batch_size=16,
        micro_batch_size=2,
        recompute=recompute,
        precision=Precision.BF16,
        flash_attention=True,
        framework=framework,
    )
    layout = LayoutSpec(pipeline=1, tensor=1, data=8, zero_stage=3)
    return estimate(Scenario(LLAMA3_8B, tr, layout, a100()))


def test_torchtitan_selective_recompute_costs_more_than_the_attention_core() -> None:
    def run(fw: str) -> float:
        return _llama3_8b_fsdp8(fw, Recompute.SELECTIVE).breakdown.compute_s

    assert run("torchtitan") > run("fsdp")


def test_op_sac_hardware_flops_count_the_replayed_gemms() -> None:
    """HFU's FLOPs under op-level SAC: wk + wo + w3 of every layer, once more (BF16)."""
    e = _llama3_8b_fsdp8("torchtitan", Recompute.SELECTIVE)
    tokens = 16 * 8192.0
    replayed = 32 * 2.0 * tokens * 4096.0 * (1024.0 + 4096.0 + 14336.0)
    assert e.hardware_flops - e.model_flops == pytest.approx(replayed, rel=1e-12)


def test_op_sac_keeps_what_it_saves_not_table_2s_selective_bytes() -> None:
    """torchtitan's op-level SAC keeps per layer and token the input, wq's, wv's, the SDPA's,
    w1's and w2's outputs, 2 bytes each (Llama 3 8B: 2·(4096 + 4096 + 1024 + 4096 + 14336 +
    4096) B); Megatron's selective recompute keeps Table 2's 34 sbh and the wider tensors."""
    titan = _llama3_8b_fsdp8("torchtitan", Recompute.SELECTIVE).memory
    megatron = _llama3_8b_fsdp8("fsdp", Recompute.SELECTIVE).memory
    tokens = 2 * 8192.0
    kept = 32 * tokens * 2.0 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096)
    logits = LOGITS_PEAK_BYTES * tokens * 128256
    assert titan.activations_bytes == pytest.approx(kept + logits, rel=1e-12)
    assert megatron.activations_bytes > 2 * kept + logits
    assert titan.weights_bytes == megatron.weights_bytes


def test_early_stopping_replay_leaves_out_the_last_gemm() -> None:
    """PyTorch's non-reentrant checkpoint (>= 2.1) stops replaying once every saved tensor is
    rebuilt: FC2 saves its input before its GEMM runs, so that GEMM is never replayed."""
    roof = _roofline(fp8=False)
    lt = _layer(LLAMA3_8B, roof, b=2.0)
    h, f = 4096.0, 14336.0
    # With c = 0 a GEMM's time is proportional to its FLOPs: w2 of wq wk wv wo w1 w3 w2.
    assert lt.fc2_fwd == pytest.approx(f / (2.0 * h + 2.0 * 1024.0 + 3.0 * f) * lt.linear_fwd)
    assert lt.replay(1.0, 0.0, early_stop=True) == pytest.approx(
        lt.forward() - lt.fc2_fwd, rel=1e-12
    )
    assert lt.gemm(1.0, early_stop=True) == pytest.approx(4.0 * lt.linear_fwd - lt.fc2_fwd)
    # Selective recompute replays no FC2, so early stopping changes nothing there.
    assert lt.replay(0.0, 1.0, early_stop=True) == lt.replay(0.0, 1.0)


def test_fsdp_trainers_stop_the_full_replay_early_and_count_it_in_hfu() -> None:
    assert framework_preset("fsdp").recompute_early_stop
    assert framework_preset("llm-foundry").recompute_early_stop
    # torchtitan passes early_stop=False to its checkpoint wrappers since 2025-08-29.
    assert not framework_preset("torchtitan").recompute_early_stop
    assert not framework_preset("megatron-lm").recompute_early_stop
    assert not framework_preset("deepspeed").recompute_early_stop
    fw = framework_preset("fsdp")
    stops = _llama3_8b_fsdp8(fw, Recompute.FULL)
    replays = _llama3_8b_fsdp8(fw.replace(recompute_early_stop=False), Recompute.FULL)
    assert stops.breakdown.compute_s < replays.breakdown.compute_s
    # HFU's FLOPs: w2 of every layer, forward, over the 16 x 8192 tokens of the batch.
    w2 = 32 * 2.0 * 16 * 8192.0 * 4096.0 * 14336.0
    assert replays.hardware_flops - stops.hardware_flops == pytest.approx(w2, rel=1e-12)
    assert stops.model_flops == replays.model_flops
    assert any("up to its last GEMM" in a for a in stops.assumptions)
    assert not any("up to its last GEMM" in a for a in replays.assumptions)


def test_an_early_stopping_replay_skips_fc2s_tp_collective_in_dense_layers_only() -> None:
    # Under SP the replay stops before FC2 and so before the reduce-scatter of its output:
    # one fewer per dense layer and micro-batch. A MoE layer replays its experts whole (their
    # outputs are saved after FC2 runs), in time, collectives and HFU's FLOPs.
    fw = framework_preset("fsdp")
    layout = LayoutSpec(pipeline=1, tensor=4, data=2, sequence_parallel=True)

    def run(model: ModelSpec, f: Framework) -> Estimate:
        tr = TrainingSpec(
            global_batch_size=8, recompute=Recompute.FULL, precision=Precision.BF16, framework=f
        )
        return estimate(Scenario(model, tr, layout, a100()))

    def scatters(e: Estimate) -> float:
        return sum(
            c.calls_per_iteration
            for c in e.collectives
            if c.kind is TrafficKind.TP and c.op is Collective.REDUCE_SCATTER
        )

    off = fw.replace(recompute_early_stop=False)
    dense_stop, dense_all = run(LLAMA3_8B, fw), run(LLAMA3_8B, off)
    assert scatters(dense_all) - scatters(dense_stop) == 4 * LLAMA3_8B.num_layers
    assert dense_stop.breakdown.tp_s < dense_all.breakdown.tp_s
    moe_stop, moe_all = run(MOE, fw), run(MOE, off)
    assert scatters(moe_stop) == scatters(moe_all)
    assert moe_stop.hardware_flops == moe_all.hardware_flops
    assert moe_stop.iteration_time_s == moe_all.iteration_time_s


def test_every_preset_flag_can_be_overridden_and_unknown_flags_are_refused() -> None:
    for preset in FRAMEWORK_PRESETS.values():
        assert isinstance(preset, Framework)
        flipped = preset.replace(overlap_grad_reduce=not preset.overlap_grad_reduce)
        assert flipped.overlap_grad_reduce != preset.overlap_grad_reduce
    with pytest.raises(ValidationError):
        framework_preset("nemo").replace(overlap_everything=True)
    with pytest.raises(ValidationError):
        framework_preset("nemo").replace(tp_comm_overlap="yes")
    with pytest.raises(ValidationError):
        TrainingSpec(global_batch_size=8, framework="megatron-9000")


def test_dp_overlap_of_the_framework_hides_the_reduction(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=8, data=24, zero_stage=1)
    fw = framework_preset("megatron-lm")

    def run(f: Framework) -> float:
        tr = TrainingSpec(global_batch_size=1536, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100())).breakdown.dp_s

    exposed = run(fw)
    hidden = run(fw.replace(overlap_grad_reduce=True, overlap_param_gather=True))
    assert hidden < exposed


def test_deepspeed_pipeline_sends_block_four_times_per_micro_batch(gpt3: ModelSpec) -> None:
    # DeepSpeed's TrainSchedule: RecvActivation, SendActivation, RecvGrad, SendGrad, each its own
    # blocking instruction; Megatron's 1F1B pairs a send with a receive: two transfers. (Whole
    # sends here, so that pp_s holds the transfers only, no TP all-gathers.)
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)
    fw = framework_preset("deepspeed").replace(pp_scatter_gather=False)

    def pp(f: Framework) -> tuple[float, float]:
        e = estimate(
            Scenario(gpt3, TrainingSpec(global_batch_size=1536, framework=f), layout, a100())
        )
        sends = [c for c in e.collectives if c.op is Collective.SENDRECV]
        return e.breakdown.pp_s, sum(c.calls_per_iteration for c in sends)

    (blocking_s, blocking_calls), (paired_s, paired_calls) = (
        pp(fw),
        pp(fw.replace(pp_blocking_p2p=False)),
    )
    assert blocking_calls == 2 * paired_calls
    assert blocking_s == pytest.approx(2 * paired_s, rel=1e-12)


def test_deepspeed_pipeline_reduces_gradients_after_the_schedule(gpt3: ModelSpec) -> None:
    # ReduceGrads follows the last micro-batch in DeepSpeed's pipeline engine: with p > 1 the
    # overlap_grad_reduce flag hides nothing; without a pipeline it still does.
    fw = framework_preset("deepspeed")

    def dp(f: Framework, p: int) -> float:
        layout = LayoutSpec(pipeline=p, tensor=8, data=192 // p)
        tr = TrainingSpec(global_batch_size=1536, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100())).breakdown.dp_s

    later = fw.replace(overlap_grad_reduce=True, pp_grad_reduce_after_schedule=True)
    during = fw.replace(overlap_grad_reduce=True, pp_grad_reduce_after_schedule=False)
    assert dp(later, 8) > dp(during, 8)
    assert dp(later, 1) == dp(during, 1)


def test_deepspeed_pipeline_sends_are_partitioned_over_tp(gpt3: ModelSpec) -> None:
    # DeepSpeed's pipeline engine with TP > 1 (pipe/engine.py, is_pipe_partitioned): each send
    # carries 1/t of the activation, all-gathered over TP on receipt, and the sent output is
    # all-gathered again before its backward pass. Gradients: partitioned from v0.5.4
    # (is_grad_partitioned, PR #1407), whole before (the deepspeed-2021 preset).
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)
    m = 1536 // 24
    s_act = 2.0 * 2048 * 12288  # bytes of one micro-batch's activation (b = 1, bf16)

    def pp_ops(name: str) -> tuple[dict[float, float], float]:
        tr = TrainingSpec(global_batch_size=1536, framework=framework_preset(name))
        e = estimate(Scenario(gpt3, tr, layout, a100()))
        sends = {
            c.size_bytes: c.calls_per_iteration for c in e.collectives if c.kind is TrafficKind.PP
        }
        gathers = [c for c in e.collectives if c.term == "pp" and c.op is Collective.ALL_GATHER]
        assert all(c.size_bytes == s_act for c in gathers)
        return sends, sum(c.calls_per_iteration for c in gathers)

    assert pp_ops("deepspeed") == ({s_act / 8: 4.0 * m}, 3.0 * m)
    assert pp_ops("deepspeed-2021") == ({s_act / 8: 2.0 * m, s_act: 2.0 * m}, 2.0 * m)
    # Megatron's scatter/gather: one gather per received transfer, two per micro-batch.
    assert pp_ops("megatron-lm") == ({s_act / 8: 2.0 * m}, 2.0 * m)


def test_deepspeed_bf16_optimizer_all_reduces_then_gathers(gpt3: ModelSpec) -> None:
    # DeepSpeed's BF16_Optimizer (bf16_optimizer.py, pipe/engine.py at 56c522386): the whole
    # stage's gradient all-reduced over DP in bf16, the bf16 weights all-gathered after the
    # step; the tied embedding's fp32 gradient all-reduced between first and last stage; the
    # norm, zeroing and bucket copies stream the whole stage's gradient (40 B/parameter); the
    # fp32 gradient accumulates through an fp32 temporary.
    layout = LayoutSpec(pipeline=8, tensor=8, data=24, zero_stage=1)
    fw = framework_preset("deepspeed")

    def run(f: Framework, precision: Precision = Precision.BF16) -> Estimate:
        tr = TrainingSpec(global_batch_size=1536, precision=precision, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100()))

    on, off = run(fw), run(fw.replace(bf16_optimizer=False))

    def dp_ops(e: Estimate) -> dict[Collective, float]:
        return {c.op: c.size_bytes for c in e.collectives if c.kind is TrafficKind.DP}

    assert set(dp_ops(on)) == {Collective.ALL_REDUCE, Collective.ALL_GATHER}
    assert set(dp_ops(off)) == {Collective.REDUCE_SCATTER, Collective.ALL_GATHER}
    assert dp_ops(on)[Collective.ALL_REDUCE] == dp_ops(off)[Collective.REDUCE_SCATTER]
    (emb_on,) = [c for c in on.collectives if c.kind is TrafficKind.EMBEDDING_SYNC]
    (emb_off,) = [c for c in off.collectives if c.kind is TrafficKind.EMBEDDING_SYNC]
    assert emb_on.size_bytes == pytest.approx(2.0 * emb_off.size_bytes, rel=1e-12)
    stage = dp_ops(on)[Collective.ALL_GATHER] / 2.0  # parameters of the stage (bf16 weights)
    # the preset's fitted compute speed scales every pass through HBM (Framework docstring)
    hbm = HBM_EFFICIENCY * A100_HBM_GBPS * 1e9 * fw.compute_efficiency
    extra = (stage * 40.0 - stage / 24 * 8.0) / hbm
    assert on.breakdown.optimizer_s - off.breakdown.optimizer_s == pytest.approx(extra, rel=1e-9)
    # Every micro-batch: hp_grad.add_(lp.grad.to(fp32)), 18 B per parameter instead of 10 (the
    # last stage paces: the first's parameters less its position embedding s·h/t).
    accumulate = 64 * (stage - 2048 * 12288 / 8) * (18.0 - 10.0) / hbm
    assert on.breakdown.compute_s - off.breakdown.compute_s == pytest.approx(accumulate, rel=1e-9)
    # Only with bf16: an fp16 run keeps DeepSpeed's ZeRO-1 reduce-scatter.
    assert Collective.ALL_REDUCE not in dp_ops(run(fw, Precision.FP16))


# --- sequence parallelism ----------------------------------------------------------------------
def test_sp_backward_regather_is_exposed_without_overlap(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=8, data=24, sequence_parallel=True)
    fw = framework_preset("megatron-lm-2022")

    def tp(f: Framework) -> float:
        tr = TrainingSpec(global_batch_size=1536, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100())).breakdown.tp_s

    assert tp(fw.replace(sp_gather_overlap=False)) > tp(fw)


# --- FP8 -------------------------------------------------------------------------------------------
def _h100(fp8_utilization: float | None) -> ClusterSpec:
    fitted = FITTED_COMPUTE["h100"]
    return ClusterSpec(
        gpus_per_node=8,
        peak_flops=1979e12,
        utilization=fitted.utilization,
        fp8_utilization=fp8_utilization,
        bandwidth=FixedBandwidth(tp_gbps=346.0, pp_gbps=46.0, dp_gbps=46.0),
        memory_bandwidth_gbps=3350.0,
        memory_traffic_factor=fitted.memory_traffic_factor,
        gemm_half_size_elements=fitted.gemm_half_size_elements,
    )


def test_fp8_runs_gemms_at_the_fp8_peak_but_not_twice_as_fast(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=8, tensor=4, data=8, virtual_stages=2)
    bf16 = TrainingSpec(global_batch_size=256, precision=Precision.BF16)
    fp8 = TrainingSpec(global_batch_size=256, precision=Precision.FP8)
    fitted = FITTED_COMPUTE["h100"]
    bf16_cluster = ClusterSpec(
        gpus_per_node=8,
        peak_flops=989.5e12,
        utilization=fitted.utilization,
        bandwidth=FixedBandwidth(tp_gbps=346.0, pp_gbps=46.0, dp_gbps=46.0),
        memory_bandwidth_gbps=3350.0,
        memory_traffic_factor=fitted.memory_traffic_factor,
        gemm_half_size_elements=fitted.gemm_half_size_elements,
    )
    t16 = estimate(Scenario(gpt3, bf16, layout, bf16_cluster)).breakdown.compute_s
    t8 = estimate(Scenario(gpt3, fp8, layout, _h100(fitted.utilization))).breakdown.compute_s
    # Attention and logits stay 16-bit and the casts move bytes: far from a 2x speed-up.
    assert 1.0 < t16 / t8 < 2.0
    slower = estimate(Scenario(gpt3, fp8, layout, _h100(0.4))).breakdown.compute_s
    assert slower > t8


def _tp_gathers(e: Estimate) -> list[CollectiveUse]:
    """The TP all-gathers an estimate reports (layers, logits, embedding, pipeline)."""
    return [c for c in e.collectives if c.kind is TrafficKind.TP and c.op is Collective.ALL_GATHER]


def test_float8_tp_gathers_fp8_elements_cast_on_the_shard(gpt3: ModelSpec) -> None:
    # torchao's Float8ColwiseParallel / PrepareFloat8ModuleInput cast a block's input on the
    # sequence shard and all-gather 1-byte elements; Float8RowwiseParallel casts the output
    # gradient before its backward all-gather. Reduce-scatters stay 16-bit.
    fw = framework_preset("torchtitan")
    assert fw.tp_fp8_all_gather

    def run(f: Framework, precision: Precision, sp: bool) -> Estimate:
        layout = LayoutSpec(pipeline=1, tensor=8, data=8, sequence_parallel=sp)
        tr = TrainingSpec(global_batch_size=64, precision=precision, framework=f)
        return estimate(Scenario(gpt3, tr, layout, _h100(0.7)))

    off = fw.replace(tp_fp8_all_gather=False)
    on_, off_ = run(fw, Precision.FP8, True), run(off, Precision.FP8, True)

    def gathered(e: Estimate) -> dict[float, float]:
        return {c.size_bytes: c.calls_per_iteration for c in _tp_gathers(e)}

    s_act = 2.0 * 1 * gpt3.seq_length * gpt3.hidden_size  # one sequence, 16-bit
    layers = gathered(off_)[s_act] - gathered(on_)[s_act]  # the layers' gathers moved ...
    assert layers > 0
    assert gathered(on_)[s_act / 2.0] == layers  # ... to FP8: half the bytes
    assert on_.link_s["tp"] < off_.link_s["tp"]
    assert on_.breakdown.compute_s < off_.breakdown.compute_s  # casts on the shard
    assert any("FP8 on the sequence shard" in a for a in on_.assumptions)
    assert not any("FP8 on the sequence shard" in a for a in off_.assumptions)
    # Without SP nothing is gathered, and 16-bit training casts nothing: the flag is inert.
    assert (
        run(fw, Precision.FP8, False).iteration_time_s
        == run(off, Precision.FP8, False).iteration_time_s
    )
    assert (
        run(fw, Precision.BF16, True).iteration_time_s
        == run(off, Precision.BF16, True).iteration_time_s
    )


def test_dtensor_tp_saves_the_gathered_input_where_megatron_regathers_it(gpt3: ModelSpec) -> None:
    # Megatron keeps the input's sequence shard and all-gathers it again for the weight
    # gradient (Korthikanti et al. 2022 §4.2.2); DTensor TP saves the gathered input.
    assert framework_preset("megatron-lm").sp_regather_saved_shard
    fw = framework_preset("torchtitan")
    assert not fw.sp_regather_saved_shard
    layout = LayoutSpec(pipeline=1, tensor=8, data=8, sequence_parallel=True)

    def run(f: Framework) -> Estimate:
        tr = TrainingSpec(global_batch_size=64, precision=Precision.BF16, framework=f)
        return estimate(Scenario(gpt3, tr, layout, _h100(None)))

    def gathers(e: Estimate) -> float:
        return sum(c.calls_per_iteration for c in _tp_gathers(e))

    saved, regathered = run(fw), run(fw.replace(sp_regather_saved_shard=True))
    # QKV's and FC1's inputs in every layer, and the logit layer's, on each of 8 micro-batches.
    assert gathers(regathered) - gathers(saved) == 8 * (2 * gpt3.num_layers + 1)
    assert regathered.breakdown.tp_s > saved.breakdown.tp_s
    assert any("re-gathers the saved input shard" in a for a in regathered.assumptions)
    assert any("gathered input is saved" in a for a in saved.assumptions)


# --- ZeRO-3 / FSDP ---------------------------------------------------------------------------------
def test_zero3_gathers_every_layer_per_micro_batch_forward_and_backward(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)
    tr = TrainingSpec(global_batch_size=1536, micro_batch_size=2, framework="fsdp")
    e = estimate(Scenario(gpt3, tr, layout, a100()))
    gathers = [
        c
        for c in e.collectives
        if c.kind is TrafficKind.DP and c.op is Collective.ALL_GATHER and c.calls_per_iteration
    ]
    m, layers = 2, 96
    # FSDP: one flat parameter per layer, gathered for the forward and again for the backward
    # (the replay under full recompute reuses the backward's gather; Zhao et al. 2023 §3).
    assert sum(c.calls_per_iteration for c in gathers) == m * layers * 2
    deepspeed = TrainingSpec(global_batch_size=1536, micro_batch_size=2, framework="deepspeed")
    d = estimate(Scenario(gpt3, deepspeed, layout, a100()))
    per_module = framework_preset("deepspeed").zero3_gathers_per_layer
    assert (
        sum(
            c.calls_per_iteration
            for c in d.collectives
            if c.kind is TrafficKind.DP and c.op is Collective.ALL_GATHER
        )
        == m * layers * 3 * per_module
    )


@pytest.mark.parametrize("data", [384, 1536])
def test_zero3_list_collectives_copy_through_a_flat_buffer(gpt3: ModelSpec, data: int) -> None:
    # DeepSpeed ZeRO-3 of 2021 (partition_parameters.py at c83e49f): torch.zeros destination,
    # all_gather into a list of per-rank views, reduce_scatter from one; PyTorch's
    # ProcessGroupNCCL copies through a flat buffer with one copy_ per rank's view: the zero
    # fill, then d copies taking the longer of d kernel launches and 2 passes of the tensor
    # through HBM, all waited on (nothing overlaps in deepspeed-2021).
    layout = LayoutSpec(pipeline=1, tensor=1, data=data, zero_stage=3)
    fw = framework_preset("deepspeed-2021")

    def run(f: Framework) -> Estimate:
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=1536 // data, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100()))

    on, off = run(fw), run(fw.replace(zero3_list_collectives=False))
    hbm = HBM_EFFICIENCY * A100_HBM_GBPS * 1e9 * fw.compute_efficiency
    dp = [c for c in on.collectives if c.kind is TrafficKind.DP]
    launches_s = data * KERNEL_LAUNCH_S
    copies_s = sum(
        c.calls_per_iteration
        * (
            (c.size_bytes / hbm if c.op is Collective.ALL_GATHER else 0.0)
            + max(launches_s, 2.0 * c.size_bytes / hbm)
        )
        for c in dp
    )
    assert {c.op for c in dp} == {Collective.ALL_GATHER, Collective.REDUCE_SCATTER}
    assert on.breakdown.dp_s - off.breakdown.dp_s == pytest.approx(copies_s, rel=1e-9)
    assert on.link_s["dp"] == off.link_s["dp"]  # HBM copies, not link time
    if data == 1536:
        # 1,536 copies of 0.2-0.6 MB each: the launches, not the bytes, set the time.
        assert all(launches_s > 2.0 * c.size_bytes / hbm for c in dp)


def test_fsdp_shard_grad_op_gathers_and_reduces_layer_by_layer(gpt3: ModelSpec) -> None:
    # FSDP SHARD_GRAD_OP: each layer's flat parameter is gathered before its forward pass and
    # its gradient reduce-scattered after its backward pass (one collective per FSDP unit, no
    # backward re-gather); DeepSpeed's ZeRO-2 reduces and gathers the whole stage.
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=2)
    m, layers = 2, 96

    def dp(framework: str, op: Collective) -> list[CollectiveUse]:
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=2, framework=framework)
        e = estimate(Scenario(gpt3, tr, layout, a100()))
        return [
            c
            for c in e.collectives
            if c.kind is TrafficKind.DP and c.op is op and c.calls_per_iteration
        ]

    gathers, reduces = dp("fsdp", Collective.ALL_GATHER), dp("fsdp", Collective.REDUCE_SCATTER)
    assert sum(c.calls_per_iteration for c in gathers) == m * layers
    assert sum(c.calls_per_iteration for c in reduces) == m * layers
    layer_params = 12 * 12288**2 + 13 * 12288  # GPT-3 175B layer: 4 weights and their biases
    assert all(c.size_bytes == pytest.approx(2 * layer_params, rel=1e-3) for c in gathers)
    stage_gathers = dp("deepspeed", Collective.ALL_GATHER)
    assert sum(c.calls_per_iteration for c in stage_gathers) == 1
    assert stage_gathers[0].size_bytes > layers * gathers[0].size_bytes
    assert not framework_preset("deepspeed").zero2_per_layer
    assert framework_preset("llm-foundry").zero2_per_layer


def test_zero3_gradients_are_reduce_scattered_once_per_layer_not_again_per_stage(
    gpt3: ModelSpec,
) -> None:
    """ZeRO-3 reduce-scatters each layer's gradients after its backward (Rajbhandari et al.
    2020 §5.3); no second, whole-stage reduce-scatter per micro-batch (the ZeRO-2 one)."""
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)
    tr = TrainingSpec(global_batch_size=1536, micro_batch_size=2, framework="deepspeed-2021")
    e = estimate(Scenario(gpt3, tr, layout, a100()))
    scatters = [
        c
        for c in e.collectives
        if c.kind is TrafficKind.DP and c.op is Collective.REDUCE_SCATTER and c.calls_per_iteration
    ]
    m, layers = 2, 96
    per_module = framework_preset("deepspeed-2021").zero3_gathers_per_layer
    assert sum(c.calls_per_iteration for c in scatters) == m * layers * per_module
    # The gradient bytes reduce-scattered per iteration: the model's, once per micro-batch.
    grad_bytes = sum(c.calls_per_iteration * c.size_bytes for c in scatters)
    assert grad_bytes == pytest.approx(m * 2.0 * e.gpu_parameters, rel=0.02)


def test_fsdp_prefetch_hides_gathers_under_compute(gpt3: ModelSpec) -> None:
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)
    fw = framework_preset("fsdp")

    def dp(f: Framework) -> tuple[float, float]:
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=4, framework=f)
        e = estimate(Scenario(gpt3, tr, layout, a100()))
        return e.breakdown.dp_s, e.link_s["dp"]

    prefetched, link = dp(fw)
    serial, link_serial = dp(fw.replace(fsdp_prefetch=False))
    assert prefetched < serial
    assert link == pytest.approx(link_serial, rel=1e-12)


def test_fsdp_backward_post_prefetch_exposes_the_backward_gathers(gpt3: ModelSpec) -> None:
    """Composer's default BACKWARD_POST issues the next layer's gather after this layer's
    gradient computation (PyTorch FSDP BackwardPrefetch docs): each backward gather is
    exposed, the reduce-scatter still hides; the on-link time is the same."""
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)
    pre = framework_preset("fsdp")
    post = framework_preset("llm-foundry")
    assert post.fsdp_backward_prefetch == "post" and pre.fsdp_backward_prefetch == "pre"

    def run(fw: Framework) -> tuple[float, float, float]:
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=4, framework=fw)
        e = estimate(Scenario(gpt3, tr, layout, a100()))
        gather = next(
            c
            for c in e.collectives
            if c.kind is TrafficKind.DP and c.op is Collective.ALL_GATHER and c.calls_per_iteration
        )
        return e.breakdown.dp_s, e.link_s["dp"], gather.time_per_call_s

    dp_pre, link_pre, _ = run(pre)
    dp_post, link_post, gather_s = run(post)
    assert link_post == pytest.approx(link_pre, rel=1e-12)
    layers, m = 96, 1
    # The backward gathers alone (FSDP reuses them for the replay), all exposed, at least.
    assert dp_post >= m * layers * gather_s
    assert dp_post > dp_pre
    with pytest.raises(ValidationError):
        pre.replace(fsdp_backward_prefetch="sideways")


# --- MoE ------------------------------------------------------------------------------------------
MOE = ModelSpec(
    num_layers=8,
    hidden_size=4096,
    num_attention_heads=32,
    num_query_groups=8,
    seq_length=4096,
    vocab_size=32000,
    ffn_hidden_size=14336,
    swiglu=True,
    tied_embeddings=False,
    moe_num_experts=8,
    moe_top_k=2,
)


def test_moe_imbalance_slows_the_expert_gemms_and_all_to_alls_are_counted() -> None:
    layout = LayoutSpec(pipeline=1, tensor=1, data=8, expert_parallel=8)
    balanced = TrainingSpec(global_batch_size=64)
    skewed = TrainingSpec(global_batch_size=64, moe_capacity_factor=1.25)
    e = estimate(Scenario(MOE, balanced, layout, a100()))
    s = estimate(Scenario(MOE, skewed, layout, a100()))
    assert s.breakdown.compute_s > e.breakdown.compute_s
    a2a = [c for c in e.collectives if c.op is Collective.ALLTOALL]
    assert a2a and a2a[0].calls_per_iteration == 8 * 8 * (4 + 2)  # m · layers · (4 + 2 replay)
    assert e.breakdown.expert_s > 0
    with pytest.raises(ValidationError):
        TrainingSpec(global_batch_size=64, moe_capacity_factor=0.5)


def test_fp8_expert_gemms_run_at_their_own_efficiency_and_nothing_else_does() -> None:
    """u8e (``fp8_expert_utilization``) sets the FP8 expert GEMMs' efficiency only: the expert
    GEMM time scales as u8/u8e, the attention linears, BF16 runs and dense models keep u8."""
    u8 = 0.6
    roof = _roofline(fp8=True)
    moe = {"moe": True, "ep": 2.0}
    at_u8 = _layer(MOE, roof, **moe)
    same = _layer(MOE, dataclasses.replace(roof, fp8_expert_utilization=u8), **moe)
    assert same.linear_fwd == at_u8.linear_fwd  # u8e = u8 is u8
    half = _layer(MOE, dataclasses.replace(roof, fp8_expert_utilization=u8 / 2), **moe)
    # The attention block's linears keep u8, so the expert GEMMs are what doubled.
    experts = at_u8.linear_fwd - at_u8.attention_linear_fwd
    assert experts > 0
    assert half.attention_linear_fwd == at_u8.attention_linear_fwd
    assert half.linear_fwd - half.attention_linear_fwd == pytest.approx(2 * experts, rel=1e-12)
    # No effect in BF16 or on a dense layer.
    bf16 = _roofline(fp8=False)
    assert (
        _layer(MOE, dataclasses.replace(bf16, fp8_expert_utilization=0.1), **moe).linear_fwd
        == _layer(MOE, bf16, **moe).linear_fwd
    )
    dense = dataclasses.replace(roof, fp8_expert_utilization=0.1)
    assert _layer(MOE, dense).linear_fwd == _layer(MOE, roof).linear_fwd


def test_an_fp8_moe_estimate_says_which_expert_efficiency_it_used() -> None:
    layout = LayoutSpec(pipeline=1, tensor=1, data=8, expert_parallel=8)
    fp8 = TrainingSpec(global_batch_size=64, precision=Precision.FP8)
    base = _h100(0.6)
    plain = estimate(Scenario(MOE, fp8, layout, base))
    slow = estimate(
        Scenario(MOE, fp8, layout, dataclasses.replace(base, fp8_expert_utilization=0.45))
    )
    assert slow.breakdown.compute_s > plain.breakdown.compute_s
    assert any("u8e=0.45" in a for a in slow.assumptions)
    assert not any("u8e=" in a for a in plain.assumptions)
    with pytest.raises(ValidationError, match="fp8_expert_utilization"):
        dataclasses.replace(base, fp8_expert_utilization=1.5)
    with pytest.raises(ValidationError, match="fp8_expert_utilization"):
        dataclasses.replace(base, fp8_expert_utilization=float("nan"))


def test_moe_dispatcher_gathers_the_routed_tokens_over_tp_and_does_not_overlap_them() -> None:
    """Megatron-Core's all-to-all dispatcher (core_v0.10.0 token_dispatcher.py): with TP the
    routed tokens (top-k copies) are all-gathered over the TP group after the all-to-all and
    reduce-scattered before the way back, forward, backward and in a full replay; the MLP
    block's own SP gather/scatter is gone. Plain collectives: not hidden by TP overlap."""
    layout = LayoutSpec(pipeline=1, tensor=2, data=4, expert_parallel=4, sequence_parallel=True)
    tr = TrainingSpec(global_batch_size=64, framework="nemo")
    e = estimate(Scenario(MOE, tr, layout, a100()))
    m, layers, full = 64 // 4, 8, 1
    s_act = 2.0 * 1 * 4096 * 4096  # bf16 · b · s · h
    routed = [
        c
        for c in e.collectives
        if c.kind is TrafficKind.TP and c.size_bytes == pytest.approx(2 * s_act)
    ]
    assert {c.op for c in routed} == {Collective.ALL_GATHER, Collective.REDUCE_SCATTER}
    for c in routed:
        assert c.calls_per_iteration == m * layers * (2 + full)
    # nemo overlaps the attention block's TP collectives; the dispatcher's stay exposed.
    assert e.breakdown.tp_s >= sum(c.link_time_s for c in routed) * (1 - 1e-12)


def test_moe_attention_tp_collectives_hide_under_the_attention_gemms_only() -> None:
    """Userbuffers pair each TP collective with the GEMM that consumes or produces it, and
    Megatron-Core switches them off for the experts (core_r0.10.0 TELinear: "Disable ub overlap
    for experts"): in a MoE layer the attention block's collectives hide under the QKV and
    projection GEMMs, whatever the experts' size."""
    layout = LayoutSpec(pipeline=1, tensor=8, data=8, expert_parallel=8, sequence_parallel=True)
    tr = TrainingSpec(global_batch_size=64, framework="nemo")

    def run(expert_ffn: int) -> tuple[float, float]:
        model = dataclasses.replace(MOE, moe_ffn_hidden_size=expert_ffn)
        # A slow TP link (20 GB/s busbw): the attention collectives outlast the attention
        # GEMMs, though not the whole layer's.
        slow_tp = FixedBandwidth(tp_gbps=20.0, pp_gbps=23.0, dp_gbps=23.0)
        e = estimate(Scenario(model, tr, layout, a100(slow_tp)))
        routed = sum(
            c.link_time_s
            for c in e.collectives
            if c.kind is TrafficKind.TP and c.size_bytes == pytest.approx(2 * 2.0 * 4096 * 4096)
        )
        return e.breakdown.tp_s, routed

    tp_small, routed_small = run(14336)
    tp_big, routed_big = run(4 * 14336)
    assert routed_big == pytest.approx(routed_small, rel=1e-12)
    # Bigger experts hide nothing more ...
    assert tp_big == pytest.approx(tp_small, rel=1e-12)
    # ... and more than the dispatcher's gathers and scatters is exposed (the attention
    # collectives beyond the attention GEMMs: 0.63 s of them here).
    assert tp_small > routed_small + 0.5


def test_moe_activation_traffic_counts_every_routed_copy_at_the_expert_width() -> None:
    """The FFN-width activations (16sbh/t of Korthikanti et al. 2022 Table 2 for a 4h GeLU MLP:
    2·w/h per tensor of width w, three tensors when gated) exist once per routed copy at the
    expert width: 2·3·top_k·expert_ffn/h against the dense layer's 2·3·ffn/h."""
    roof = Roofline(
        peak_flops=989.5e12,
        utilization=0.6,
        fp8_utilization=None,
        fp8=False,
        hbm_bytes_per_s=3.35e12,
        gemm_traffic_factor=0.0,
        elementwise_factor=2.0,
    )
    model = dataclasses.replace(MOE, moe_ffn_hidden_size=2 * 14336)  # expert 2f: 4 x the FFN rows
    t, b = 4.0, 1.0

    def times(moe: bool) -> LayerTimes:
        return _layer(model, roof, b=b, t=t, sp=1.0, moe=moe, ep=8.0)

    sbh = b * 4096 * 4096
    # SwiGLU: 6·(top_k·2f − f)/h sbh/t = 6·3·14336/4096 = 63 sbh/t, 2-byte
    extra_bytes = 6.0 * (2 * 2 * 14336 - 14336) / 4096 / t * sbh
    extra_s = 2.0 * extra_bytes / 3.35e12
    assert times(True).elementwise_fwd - times(False).elementwise_fwd == pytest.approx(extra_s)


def test_an_all_moe_models_unused_dense_width_changes_nothing() -> None:
    """Every layer MoE: the dense ffn_hidden_size is never run, so it cannot move the estimate
    (Qwen3-30B-A3B described with its provider's unused 6144 took 19.0 s, with the preset's
    768 24.3 s: the experts' activations were counted against the dense width)."""
    layout = LayoutSpec(pipeline=1, tensor=1, data=16, expert_parallel=16)
    training = TrainingSpec(global_batch_size=64, precision=Precision.BF16)
    model = model_preset("qwen3-30b-a3b")
    assert model.num_moe_layers == model.num_layers
    times = {
        ffn: estimate(
            Scenario(dataclasses.replace(model, ffn_hidden_size=ffn), training, layout, a100())
        )
        for ffn in (768, 6144)
    }
    assert times[768].iteration_time_s == times[6144].iteration_time_s
    assert times[768].memory.total_bytes == times[6144].memory.total_bytes


# --- the vectorised path equals the single path, with every mechanism on --------------------------
@pytest.mark.parametrize(
    "framework",
    [
        "megatron-lm-2021",
        "megatron-lm",
        "nemo",
        "deepspeed",
        "fsdp",
        "llm-foundry",
        "torchtitan",
        "async-tp",
        "llm-foundry-triton",
        "nemo-moe-host-bound",
    ],
)
@pytest.mark.parametrize("precision", [Precision.BF16, Precision.FP8])
def test_sweep_equals_single_estimates_with_the_roofline_and_frameworks(
    framework: str, precision: Precision
) -> None:
    fw = (
        framework_preset("torchtitan").replace(tp_comm_overlap=True)
        if framework == "async-tp"
        else framework_preset("llm-foundry").replace(attention_kernel="triton")
        if framework == "llm-foundry-triton"
        # every MoE layer host-bound, full recompute raising its floor by the forward's share
        else framework_preset("nemo").replace(moe_layer_host_s=0.5)
        if framework == "nemo-moe-host-bound"
        else framework_preset(framework)
    )
    training = TrainingSpec(global_batch_size=64, precision=precision, framework=fw)
    cluster = a100(
        gemm_traffic_factor=0.3, fp8_utilization=0.55, peak_flops=624e12, flash2_efficiency=0.5
    )
    rows = []
    for p, t, cp, ep, b, rc, sp, zero in itertools.product(
        (1, 2), (1, 2, 4), (1, 2), (1, 2, 8), (1, 2), (0, 1, 2), (0, 1), (0, 1, 2, 3)
    ):
        d = 64 // (p * t * cp)
        layout = LayoutSpec(
            pipeline=p,
            tensor=t,
            data=d,
            context_parallel=cp,
            expert_parallel=ep,
            zero_stage=zero,
            sequence_parallel=bool(sp),
        )
        try:
            validate_layout(
                MOE, TrainingSpec(global_batch_size=64, micro_batch_size=b), layout, 8, 64
            )
        except LayoutError:
            continue
        rows.append(
            {"p": p, "t": t, "d": d, "cp": cp, "ep": ep, "b": b, "rc": rc, "sp": sp, "zero": zero}
        )
    assert len(rows) > 50
    cols = {
        "p": [r["p"] for r in rows],
        "t": [r["t"] for r in rows],
        "d": [r["d"] for r in rows],
        "cp": [r["cp"] for r in rows],
        "ep": [r["ep"] for r in rows],
        "b": [r["b"] for r in rows],
        "recompute": [r["rc"] for r in rows],
        "sp": [r["sp"] for r in rows],
        "zero": [r["zero"] for r in rows],
    }
    sweep = evaluate_layouts(
        MOE,
        training,
        cluster,
        LayoutArrays.from_columns(**cols),
    )
    code_to_recompute = {v: k for k, v in RECOMPUTE_CODE.items()}
    for i, r in enumerate(rows):
        tr = TrainingSpec(
            global_batch_size=64,
            micro_batch_size=r["b"],
            precision=precision,
            framework=fw,
            recompute=code_to_recompute[r["rc"]],
        )
        layout = LayoutSpec(
            pipeline=r["p"],
            tensor=r["t"],
            data=r["d"],
            context_parallel=r["cp"],
            expert_parallel=r["ep"],
            zero_stage=r["zero"],
            sequence_parallel=bool(r["sp"]),
        )
        single = estimate(Scenario(MOE, tr, layout, cluster))
        for name in TERMS:
            assert single.breakdown.as_dict()[name] == sweep.terms[name][i], (name, r)
        assert single.iteration_time_s == sweep.iteration_s[i]
    assert np.isfinite(sweep.iteration_s).all()


def test_sweep_equals_single_estimates_with_zero3_persistent_tensors() -> None:
    # deepspeed-2021 keeps tensors under 1e5 elements gathered (dense layers only): the
    # vectorised count of gathered tensors per layer equals the scalar one. At h = 256 the
    # per-GPU weights cross the threshold as t grows (QKV 196,608 / t; FC1 and FC2 262,144 / t;
    # the projection 65,536 / t never gathers): 3 gathered at t 1, 2 at t 2, none at t 4.
    model = ModelSpec(
        num_layers=4, hidden_size=256, num_attention_heads=4, seq_length=512, vocab_size=1024
    )
    fw = framework_preset("deepspeed-2021")
    assert fw.zero3_persistence_threshold > 0
    cluster = a100()
    rows = [(t, d, rc) for t in (1, 2, 4) for d in (64 // t,) for rc in (0, 2)]
    sweep = evaluate_layouts(
        model,
        TrainingSpec(global_batch_size=64, framework=fw),
        cluster,
        LayoutArrays.from_columns(
            p=[1] * len(rows),
            t=[r[0] for r in rows],
            d=[r[1] for r in rows],
            b=[1] * len(rows),
            zero=[3] * len(rows),
            recompute=[r[2] for r in rows],
        ),
    )
    code_to_recompute = {v: k for k, v in RECOMPUTE_CODE.items()}
    for i, (t, d, rc) in enumerate(rows):
        tr = TrainingSpec(global_batch_size=64, framework=fw, recompute=code_to_recompute[rc])
        layout = LayoutSpec(pipeline=1, tensor=t, data=d, zero_stage=3)
        single = estimate(Scenario(model, tr, layout, cluster))
        assert single.iteration_time_s == sweep.iteration_s[i], (t, rc)
        gathers = [c for c in single.collectives if c.op is Collective.ALL_GATHER]
        # per micro-batch (t of them: d = 64/t, mbs 1), layer and pass (forward, backward, and
        # the replay under full recompute)
        passes = single.micro_batches * 4 * (3 if rc == 2 else 2)
        expected = {1: 3, 2: 2, 4: 0}[t] * passes
        assert sum(c.calls_per_iteration for c in gathers) == expected, (t, rc)


# --- size-dependent GEMM efficiency (docs/design.md §4.4) -------------------------------------------
def _one_layer(
    model: ModelSpec, peak_flops: float, *, t: float, flash: bool, x0: float = 0.0
) -> LayerTimes:
    roof = Roofline(
        peak_flops=peak_flops,
        utilization=0.8,
        fp8_utilization=None,
        fp8=False,
        hbm_bytes_per_s=0.0,
        gemm_traffic_factor=0.0,
        elementwise_factor=0.0,
        gemm_half_size_elements=x0,
    )
    return _layer(model, roof, t=t, flash=flash)


def _linear_fwd_s(t: float, x0: float) -> float:
    model = ModelSpec(
        num_layers=48, hidden_size=6144, num_attention_heads=64, seq_length=2048, vocab_size=51200
    )
    return float(_one_layer(model, 312e12, t=t, flash=False, x0=x0).linear_fwd)


def test_linear_layers_run_at_u_x_over_x_plus_x0() -> None:
    # t = 1: the four weights are h x 3h, h x h, h x 4h, 4h x h (per GPU), each at
    # u·x/(x + x0) with x = 2nk/(n + k), weighted by its FLOPs (3 : 1 : 4 : 4).
    h, x0 = 6144.0, 844.72
    harmonic = [2 * n * k / (n + k) for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h))]
    expected = sum(w * (1 + x0 / x) for w, x in zip((3, 1, 4, 4), harmonic, strict=True)) / 12
    assert _linear_fwd_s(1.0, x0) / _linear_fwd_s(1.0, 0.0) == pytest.approx(expected, rel=1e-12)
    # Higher t shrinks the per-GPU weights: a larger share of the time is the size penalty.
    ratio = [_linear_fwd_s(t, x0) / _linear_fwd_s(t, 0.0) for t in (1.0, 2.0, 4.0, 8.0)]
    assert ratio == sorted(ratio) and ratio[0] > 1.0


def test_a_negative_gemm_half_size_is_rejected() -> None:
    with pytest.raises(ValidationError, match="gemm_half_size_elements"):
        a100(gemm_half_size_elements=-1.0)


def test_flash_attention_backward_runs_its_flops_slower_than_the_forward() -> None:
    # Shah et al. 2024 (FlashAttention-3), Fig. 5-6, H100, head dim 128, 16k tokens, no mask:
    # backward/forward TFLOP/s 322/370 (FA2), 561/648 (FA3), 516/595 (cuDNN): 0.87 each; the
    # backward pass does 2.5x the forward FLOPs (it recomputes the scores).
    model = ModelSpec(
        num_layers=1, hidden_size=4096, num_attention_heads=32, seq_length=32768, vocab_size=32000
    )
    times = _one_layer(model, 989e12, t=1.0, flash=True)
    assert times.attention_bwd / times.attention_fwd == pytest.approx(2.5 / 0.87, rel=1e-12)


def test_triton_flash_attention_runs_the_fa2_paper_ratios_slower_than_flash2() -> None:
    # Dao 2023 (FlashAttention-2) §4.1: FA2 is 1.3-1.5x faster than FlashAttention in Triton
    # forward and about 2x backward; llm-foundry's attn_impl: triton runs the Triton kernel.
    model = ModelSpec(
        num_layers=1, hidden_size=2560, num_attention_heads=20, seq_length=8192, vocab_size=50368
    )

    def attention(kernel: str) -> LayerTimes:
        fwd_eff, bwd_eff = attention_efficiencies(kernel, 0.5)
        roof = Roofline(
            peak_flops=989e12,
            utilization=0.7,
            fp8_utilization=None,
            fp8=False,
            hbm_bytes_per_s=0.0,
            gemm_traffic_factor=0.0,
            elementwise_factor=0.0,
            attention_efficiency=fwd_eff,
            attention_backward_efficiency=bwd_eff,
        )
        return _layer(model, roof)

    fa2, triton = attention("flash2"), attention("triton")
    assert TRITON_FLASH_FORWARD_SLOWDOWN == 1.4 and TRITON_FLASH_BACKWARD_SLOWDOWN == 2.0
    assert triton.attention_fwd / fa2.attention_fwd == pytest.approx(1.4, rel=1e-12)
    assert triton.attention_bwd / fa2.attention_bwd == pytest.approx(2.0, rel=1e-12)
    assert triton.linear_fwd == fa2.linear_fwd
    assert attention_efficiencies("fused", 0.5) == (1.0, 1.0)
    # Activation checkpointing replays the forward with the same kernel: the full and the
    # selective replay both carry the Triton forward slowdown (and nothing else differs).
    for full, selective in ((1.0, 0.0), (0.0, 1.0)):
        extra = triton.replay(full, selective) - fa2.replay(full, selective)
        assert extra == pytest.approx(0.4 * fa2.attention_fwd, rel=1e-12)


def test_triton_ratios_lie_within_the_fa2_papers_measured_fwd_bwd_speed_ratios() -> None:
    # Dao 2023 (FlashAttention-2) Fig. 4c/4d, A100 80GB, causal, forward + backward TFLOP/s
    # printed on the bars (FA2 / FlashAttention Triton) for sequence lengths 512 .. 16k, head
    # dims 64 and 128 (flash-attention repo assets/flash2_a100_fwd_bwd_benchmark.png @ 4f285b35).
    fa2 = (88, 119, 140, 156, 165, 171, 99, 133, 155, 173, 182, 189)
    triton = (59, 75, 79, 76, 79, 80, 50, 61, 68, 74, 78, 80)
    ratios = [f / t for f, t in zip(fa2, triton, strict=True)]
    # The engine's forward + backward time ratio: FA2's backward takes k x its forward time.
    k = FLASH_BACKWARD_RATIO / FLASH_BACKWARD_EFFICIENCY
    engine = (TRITON_FLASH_FORWARD_SLOWDOWN + k * TRITON_FLASH_BACKWARD_SLOWDOWN) / (1.0 + k)
    assert min(ratios) < engine < max(ratios)
    assert engine == pytest.approx(1.845, abs=1e-3)


def test_triton_attention_is_a_framework_choice_named_in_the_assumptions() -> None:
    model = ModelSpec(
        num_layers=4, hidden_size=2560, num_attention_heads=20, seq_length=4096, vocab_size=50368
    )
    cluster = a100(flash2_efficiency=0.5)
    layout = LayoutSpec(pipeline=1, tensor=1, data=8, zero_stage=3)

    def run(kernel: str) -> Estimate:
        fw = framework_preset("llm-foundry").replace(attention_kernel=kernel)
        training = TrainingSpec(global_batch_size=8, micro_batch_size=1, framework=fw)
        return estimate(Scenario(model, training, layout, cluster))

    fa2, triton = run("flash2"), run("triton")
    assert triton.breakdown.compute_s > fa2.breakdown.compute_s
    assert any("FlashAttention in Triton" in a for a in triton.assumptions)
    assert not any("FlashAttention in Triton" in a for a in fa2.assumptions)
    with pytest.raises(ValidationError):
        framework_preset("llm-foundry").replace(attention_kernel="xformers")


def test_torchtitan_reduces_gradients_in_fp32_unless_the_request_says(gpt3: ModelSpec) -> None:
    # torchtitan's FSDP2 MixedPrecisionPolicy takes reduce_dtype from
    # training.mixed_precision_reduce, whose only choice is float32 (config_manager.py at 9dec370
    # and 820504e): the ZeRO-3 reduce-scatters carry 4 B per gradient element, gathers 2 B.
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)

    def dp_bytes(training: TrainingSpec, op: Collective) -> set[float]:
        e = estimate(Scenario(gpt3, training, layout, a100()))
        return {
            c.size_bytes
            for c in e.collectives
            if c.kind is TrafficKind.DP and c.op is op and c.calls_per_iteration
        }

    def training(framework: str, reduce: Precision | None = None) -> TrainingSpec:
        return TrainingSpec(
            global_batch_size=1536,
            precision=Precision.BF16,
            framework=framework,
            grad_reduce_precision=reduce,
        )

    assert framework_preset("torchtitan").grad_reduce_fp32
    assert not framework_preset("fsdp").grad_reduce_fp32
    (titan,) = dp_bytes(training("torchtitan"), Collective.REDUCE_SCATTER)
    (plain,) = dp_bytes(training("fsdp"), Collective.REDUCE_SCATTER)
    assert titan == pytest.approx(2.0 * plain, rel=1e-12)
    assert dp_bytes(training("torchtitan"), Collective.ALL_GATHER) == dp_bytes(
        training("fsdp"), Collective.ALL_GATHER
    )
    (told,) = dp_bytes(training("torchtitan", Precision.BF16), Collective.REDUCE_SCATTER)
    assert told == pytest.approx(plain, rel=1e-12)
    assert training("torchtitan").grad_bytes == 4


def test_torch_ring_gathers_full_heads_and_passes_fp32_kv_grads_each_step() -> None:
    # PyTorch's experimental ring attention as torchtitan 9dec370 calls it: K/V repeated to the
    # query head count before SDPA, so the all-gather moves h-wide K and V (GQA: 4x kv_hidden
    # for Llama 3 8B); the backward passes the fp32 dK/dV shard to the next rank cp times.
    model = dataclasses.replace(model_preset("llama3-8b"), seq_length=131072)
    cp = 4
    titan = framework_preset("torchtitan")
    assert titan.cp_torch_ring

    def run(f: Framework) -> Estimate:
        layout = LayoutSpec(pipeline=1, tensor=1, data=2, context_parallel=cp)
        tr = TrainingSpec(global_batch_size=2, precision=Precision.BF16, framework=f)
        return estimate(Scenario(model, tr, layout, _h100(None)))

    on_, off_ = run(titan), run(titan.replace(cp_torch_ring=False))

    def cp_calls(e: Estimate) -> dict[Collective, tuple[float, float]]:
        return {
            c.op: (c.size_bytes, c.calls_per_iteration)
            for c in e.collectives
            if c.kind is TrafficKind.CP
        }

    s, h, kv = float(model.seq_length), float(model.hidden_size), float(model.kv_hidden)
    on_c, off_c = cp_calls(on_), cp_calls(off_)
    assert off_c[Collective.ALL_GATHER][0] == 2.0 * 2.0 * s * kv
    assert on_c[Collective.ALL_GATHER][0] == 2.0 * 2.0 * s * h
    assert on_c[Collective.ALL_GATHER][1] == off_c[Collective.ALL_GATHER][1]
    assert Collective.REDUCE_SCATTER in off_c and Collective.REDUCE_SCATTER not in on_c
    size, calls = on_c[Collective.SENDRECV]
    assert size == 2.0 * 4.0 * (s / cp) * h  # this rank's dK and dV in float32
    assert calls == cp * model.num_layers  # one pass per ring step per layer
    assert on_.link_s["cp"] > off_.link_s["cp"]
    # The traffic matrix lays the passes out to the next rank of each CP ring.
    cp_volume = per_gpu_volume_bytes(
        Placement.from_layout(on_.scenario.layout, 8), traffic_loads(on_)
    )[TrafficKind.CP]
    gathered = bus_factor(Collective.ALL_GATHER, float(cp)) * on_c[Collective.ALL_GATHER][0]
    passes = size * calls
    assert cp_volume[0] == pytest.approx(gathered * on_c[Collective.ALL_GATHER][1] + passes)
    assert estimate_traffic(on_).bytes.sum() > estimate_traffic(off_).bytes.sum()


def test_zero3_persistent_small_tensors_are_not_gathered_per_layer(gpt3: ModelSpec) -> None:
    """DeepSpeed v0.3.13 ZeRO-3 keeps parameters under stage3_param_persistence_threshold
    (1e5, constants.py) gathered (stage3.py persistent_parameters): a GPT-3 layer's biases
    and norms (<= 4h = 49152 elements) are never all-gathered per layer, its 4 weight
    matrices are; every tensor's gradient is still reduce-scattered on its own."""
    layout = LayoutSpec(pipeline=1, tensor=1, data=384, zero_stage=3)
    fw = framework_preset("deepspeed-2021")
    assert fw.zero3_persistence_threshold == 100_000

    def dp(f: Framework) -> tuple[float, float, float, float]:
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=4, framework=f)
        e = estimate(Scenario(gpt3, tr, layout, a100()))
        z3 = [c for c in e.collectives if c.kind is TrafficKind.DP and c.calls_per_iteration]
        ag = [c for c in z3 if c.op is Collective.ALL_GATHER]
        rs = [c for c in z3 if c.op is Collective.REDUCE_SCATTER]
        return (
            sum(c.calls_per_iteration for c in ag),
            sum(c.calls_per_iteration * c.size_bytes for c in ag),
            sum(c.calls_per_iteration for c in rs),
            e.breakdown.dp_s,
        )

    layers, h = 96, 12288.0
    calls, gathered, scatters, dp_s = dp(fw)
    # Forward, replay and backward: 3 passes, 4 weight matrices each (QKV, proj, fc1, fc2).
    assert calls == layers * 3 * 4
    assert gathered == pytest.approx(layers * 3 * 2.0 * 12.0 * h * h, rel=1e-9)
    assert scatters == layers * fw.zero3_gathers_per_layer
    calls_all, gathered_all, scatters_all, dp_all = dp(fw.replace(zero3_persistence_threshold=0))
    assert calls_all == layers * 3 * fw.zero3_gathers_per_layer
    assert gathered_all > gathered and scatters_all == scatters
    assert dp_s < dp_all


def test_compute_efficiency_scales_every_compute_operation_and_nothing_on_the_links(
    gpt3: ModelSpec,
) -> None:
    # Framework.compute_efficiency: GEMMs, attention, element-wise work, the optimizer step and
    # gradient accumulation take 1/compute_efficiency of the fitted roofline's time; the links
    # do not change. The DeepSpeed presets carry the speed fitted on BigScience's 2022 sweep.
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)
    fw = framework_preset("megatron-lm-2022")

    def run(f: Framework) -> Estimate:
        tr = TrainingSpec(global_batch_size=1536, precision=Precision.BF16, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100()))

    full, half = run(fw), run(fw.replace(compute_efficiency=0.5))
    assert half.breakdown.compute_s == pytest.approx(2.0 * full.breakdown.compute_s, rel=1e-12)
    assert half.breakdown.optimizer_s == pytest.approx(2.0 * full.breakdown.optimizer_s, rel=1e-12)
    assert half.link_s == full.link_s
    assert half.iteration_time_s > full.iteration_time_s
    assert "compute at 0.5 of the fitted roofline's speed" in half.assumptions[1]
    assert "fitted roofline" not in full.assumptions[1]
    assert all(preset.compute_efficiency == 1.0 for preset in FRAMEWORK_PRESETS.values())


@pytest.mark.parametrize("recompute", [Recompute.FULL, Recompute.NONE])
def test_layer_host_time_adds_to_every_layer_of_every_micro_batch_slot(
    gpt3: ModelSpec, recompute: Recompute
) -> None:
    # Framework.layer_host_s: each layer adds its host time to every micro-batch on its stage
    # (a full replay issues the forward again: a third more), so the step grows by the host
    # time of the pacing stage's layers in each of its m micro-batches (breakdown term host)
    # and in each of the p - 1 slots of the fill and drain (bubble); nothing on the links moves.
    layout = LayoutSpec(pipeline=8, tensor=8, data=24)
    fw = framework_preset("deepspeed").replace(layer_host_s=0.0)
    host_s = 0.004

    def run(f: Framework) -> Estimate:
        tr = TrainingSpec(
            global_batch_size=1536, precision=Precision.BF16, framework=f, recompute=recompute
        )
        return estimate(Scenario(gpt3, tr, layout, a100()))

    without, with_host = run(fw), run(fw.replace(layer_host_s=host_s))
    m, p, layers = 1536 // 24, 8, 96 // 8
    replay = 1.0 + (HOST_FORWARD_SHARE if recompute is Recompute.FULL else 0.0)
    slot_s = layers * host_s * replay
    assert without.breakdown.host_s == 0.0
    assert with_host.breakdown.host_s == pytest.approx(m * slot_s, rel=1e-9)
    grown = with_host.breakdown.bubble_s - without.breakdown.bubble_s
    assert grown == pytest.approx((p - 1) * slot_s, rel=1e-9)
    assert with_host.iteration_time_s - without.iteration_time_s == pytest.approx(
        (m + p - 1) * slot_s, rel=1e-9
    )
    assert with_host.breakdown.compute_s == without.breakdown.compute_s
    assert with_host.link_s == without.link_s
    assert "every layer adds 4 ms of host time per micro-batch" in with_host.assumptions[1]
    assert "ms of host time" not in without.assumptions[1]


def test_the_deepspeed_presets_carry_the_fitted_layer_host_time_and_say_when_it_weighs(
    gpt3: ModelSpec,
) -> None:
    """The value fitted by commest validate on BigScience's sweep (README "Accuracy") on both
    DeepSpeed presets, no other; an estimate warns when it is a twentieth of the step."""
    for name, preset in FRAMEWORK_PRESETS.items():
        expected = DEEPSPEED_LAYER_HOST_S if name.startswith("deepspeed") else 0.0
        assert preset.layer_host_s == expected, name
    fw = framework_preset("deepspeed")
    # BLOOM's shape of micro-batch (MBS 1 here): 12 layers a stage, ~9.8 ms each with the replay
    tr = TrainingSpec(global_batch_size=1536, precision=Precision.BF16, framework=fw)
    bloom = estimate(Scenario(gpt3, tr, LayoutSpec(pipeline=8, tensor=8, data=24), a100()))
    share = bloom.breakdown.host_s / bloom.breakdown.iteration_s
    [warning] = [w for w in bloom.warnings if w.startswith("host time:")]
    assert share > 0.05
    assert f"waits {bloom.breakdown.host_s:.3g} s" in warning and "layer_host_s" in warning
    assert not any(w.startswith("host-bound") for w in bloom.warnings)  # that one is MoE's


@pytest.mark.parametrize("bad", [-0.001, 1.5, math.nan, math.inf])
def test_a_layer_host_time_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValidationError, match="layer_host_s"):
        framework_preset("deepspeed").replace(layer_host_s=bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, 2.5, math.nan, math.inf])
def test_a_compute_efficiency_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValidationError, match="compute_efficiency"):
        framework_preset("megatron-lm-2022").replace(compute_efficiency=bad)


def test_zero3_rank_loop_waits_out_one_eager_op_per_rank_before_each_gather(
    gpt3: ModelSpec,
) -> None:
    # DeepSpeed 2021's _allgather_param (v0.3.13-v0.3.16): after torch.cuda.synchronize(), a
    # Python loop over the group's ranks builds the all-gather's output list (a narrow view per
    # rank); the GPU waits out d eager ops per gathered tensor, before the forward, the replay
    # and the backward pass. Nothing on the links changes.
    fw = framework_preset("deepspeed-2021")
    assert fw.zero3_rank_loop

    def run(f: Framework, data: int) -> Estimate:
        layout = LayoutSpec(pipeline=1, tensor=1, data=data, zero_stage=3)
        tr = TrainingSpec(global_batch_size=1536, micro_batch_size=1536 // data, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100()))

    for data in (384, 1536):
        on, off = run(fw, data), run(fw.replace(zero3_rank_loop=False), data)
        gathers = sum(
            c.calls_per_iteration
            for c in on.collectives
            if c.kind is TrafficKind.DP and c.op is Collective.ALL_GATHER
        )
        host_s = gathers * data * EAGER_OP_HOST_S
        assert on.breakdown.dp_s - off.breakdown.dp_s == pytest.approx(host_s, rel=1e-9)
        assert on.link_s == off.link_s
        assert "Python loop over the group's ranks" in " ".join(on.assumptions)
    # Later DeepSpeed, FSDP: no such loop.
    assert not framework_preset("deepspeed").zero3_rank_loop
    assert not framework_preset("fsdp").zero3_rank_loop


# BigScience's 200B candidate (chronicles-prequel.md, "Best TFLOPs", 02-17): h 14400, 96 heads,
# head dim 150: 300-byte rows in 16-bit, not a multiple of 16 bytes.
BLOOM_200B = ModelSpec(
    num_layers=80, hidden_size=14400, num_attention_heads=96, seq_length=2048, vocab_size=250880
)


def test_misaligned_attention_heads_run_their_batched_gemms_on_cuda_cores() -> None:
    # Tensor-core kernels need 16-byte aligned rows (NVIDIA/cutlass#75; cuBLAS "Tensor Core
    # Usage"): without FlashAttention, Q·Kᵀ and attention·V of head dim 150 run at u x the FP32
    # CUDA-core rate (A100 datasheet: 19.5 TFLOP/s, against 312 for 16-bit tensor cores).
    roof = dataclasses.replace(_roofline(fp8=False), peak_flops=312e12, gemm_traffic_factor=0.0)
    cuda = dataclasses.replace(roof, cuda_core_peak_flops=19.5e12)
    on_tensor_cores = _layer(BLOOM_200B, roof, flash=False, t=8.0)
    on_cuda_cores = _layer(BLOOM_200B, cuda, flash=False, t=8.0)
    assert on_cuda_cores.attention_fwd == pytest.approx(
        on_tensor_cores.attention_fwd * 312.0 / 19.5, rel=1e-12
    )
    assert on_cuda_cores.attention_bwd == pytest.approx(2.0 * on_cuda_cores.attention_fwd)
    assert on_cuda_cores.linear_fwd == on_tensor_cores.linear_fwd
    # 14336 / 112 = 128 (256-byte rows), and FlashAttention's kernel: no change.
    aligned = dataclasses.replace(BLOOM_200B, hidden_size=14336, num_attention_heads=112)
    assert (
        _layer(aligned, cuda, flash=False, t=8.0).attention_fwd
        == _layer(aligned, roof, flash=False, t=8.0).attention_fwd
    )
    assert (
        _layer(BLOOM_200B, cuda, flash=True).attention_fwd
        == _layer(BLOOM_200B, roof, flash=True).attention_fwd
    )
    # fp32 activations (4 B): head dim 150 is 600 bytes, still misaligned; 152 would not be.
    assert not tensor_core_aligned(150.0, 4.0) and tensor_core_aligned(152.0, 2.0)
    assert tensor_core_aligned(108.0, 4.0) and not tensor_core_aligned(108.0, 2.0)


# Its 02-17 runs: micro-batch 1, full recompute, fp16, no FlashAttention, Megatron-DeepSpeed.
BLOOM_200B_TRAINING = TrainingSpec(
    global_batch_size=2048,
    micro_batch_size=1,
    recompute=Recompute.FULL,
    precision=Precision.FP16,
    flash_attention=False,
    framework="deepspeed",
)


def _bloom_200b(cluster: ClusterSpec) -> Estimate:
    layout = LayoutSpec(pipeline=10, tensor=8, data=1)
    return estimate(Scenario(BLOOM_200B, BLOOM_200B_TRAINING, layout, cluster))


def test_misaligned_heads_are_named_in_the_assumptions_and_priced_only_with_a_cuda_core_rate() -> (
    None
):
    priced = _bloom_200b(a100(cuda_core_peak_flops=19.5e12))
    unknown = _bloom_200b(a100())
    assert priced.breakdown.compute_s > 1.1 * unknown.breakdown.compute_s
    (line,) = [a for a in priced.assumptions if "not 16-byte aligned" in a]
    assert "head dim 150" in line and "19.5 TFLOP/s" in line and "CUDA cores" in line
    (line,) = [a for a in unknown.assumptions if "not 16-byte aligned" in a]
    assert "not priced" in line and "cuda_core_peak_tflops" in line
    # An aligned model says nothing about it.
    gpt3 = model_preset("gpt3-175b")
    training = TrainingSpec(global_batch_size=512, flash_attention=False)
    aligned = estimate(
        Scenario(gpt3, training, LayoutSpec(pipeline=8, tensor=8, data=1), priced.scenario.cluster)
    )
    assert not [a for a in aligned.assumptions if "16-byte" in a]
    with pytest.raises(ValidationError):
        a100(cuda_core_peak_flops=0.0)
    with pytest.raises(ValidationError):
        a100(cuda_core_peak_flops=math.inf)


def test_sweep_equals_single_estimates_with_misaligned_attention_heads() -> None:
    cluster = a100(cuda_core_peak_flops=19.5e12)
    training = BLOOM_200B_TRAINING
    layouts = [(10, 8, 1), (10, 8, 2), (5, 8, 4), (20, 4, 1), (40, 2, 1)]
    sweep = evaluate_layouts(
        BLOOM_200B,
        training,
        cluster,
        LayoutArrays.from_columns(
            p=[p for p, _, _ in layouts],
            t=[t for _, t, _ in layouts],
            d=[d for _, _, d in layouts],
            b=[1.0] * len(layouts),
            recompute=[RECOMPUTE_CODE[Recompute.FULL]] * len(layouts),
        ),
    )
    for i, (p, t, d) in enumerate(layouts):
        single = estimate(
            Scenario(BLOOM_200B, training, LayoutSpec(pipeline=p, tensor=t, data=d), cluster)
        )
        assert single.iteration_time_s == sweep.iteration_s[i], (p, t, d)


def test_flash_attention_kernels_compute_their_own_head_width() -> None:
    # FlashAttention-2 pads to a multiple of 8, then runs the 32-multiple kernel up to 192, else
    # 256 (flash-attention csrc/flash_attn/flash_api.cpp, mha_fwd: head_size_rounded); the
    # Triton port tiles the next power of two, at least 16 (flash_attn_triton.py, BLOCK_HEADDIM).
    assert [flash_head_dim("flash2", d) for d in (64, 72, 80, 128, 150, 192, 200)] == [
        64,
        96,
        96,
        128,
        160,
        192,
        256,
    ]
    assert [flash_head_dim("triton", d) for d in (8, 64, 80, 96, 128)] == [16, 64, 128, 128, 128]
    assert flash_head_dim("fused", 80.0) == 80.0
    # 2560 / 32 heads = head dim 80: FA2 computes it as 96, the attention FLOPs 1.2x.
    model = ModelSpec(
        num_layers=4, hidden_size=2560, num_attention_heads=32, seq_length=4096, vocab_size=50368
    )
    fused = _roofline(fp8=False)
    fa2 = dataclasses.replace(fused, attention_kernel="flash2")
    assert _layer(model, fa2).attention_fwd == pytest.approx(
        1.2 * _layer(model, fused).attention_fwd, rel=1e-12
    )
    assert _layer(model, fa2).linear_fwd == _layer(model, fused).linear_fwd
    # Named in the estimate of a FlashAttention-2 trainer, silent where the width fits.
    training = TrainingSpec(global_batch_size=8, framework="fsdp")
    layout = LayoutSpec(pipeline=1, tensor=1, data=8, zero_stage=3)
    (line,) = [
        a
        for a in estimate(Scenario(model, training, layout, a100())).assumptions
        if "computes head dim" in a
    ]
    assert "head dim 80 as 96" in line and "1.2x" in line
    llama = estimate(Scenario(LLAMA3_8B, training, layout, a100()))
    assert not [a for a in llama.assumptions if "computes head dim" in a]


# --- heads wider than the model (kv_channels) -----------------------------------------------


def test_kv_channels_equal_to_h_over_heads_change_nothing_bit_for_bit() -> None:
    """kv_channels is Megatron's --kv-channels, which defaults to h / heads: giving that value
    is the same model, and every term, the memory and the traffic are identical."""
    layout = LayoutSpec(pipeline=2, tensor=2, data=2, expert_parallel=2, sequence_parallel=True)
    tr = TrainingSpec(global_batch_size=16, framework="nemo")
    plain = estimate(Scenario(MOE, tr, layout, a100()))
    same = estimate(Scenario(dataclasses.replace(MOE, kv_channels=128), tr, layout, a100()))
    assert same.breakdown == plain.breakdown
    assert same.memory == plain.memory
    assert same.traffic_bytes == plain.traffic_bytes
    assert same.parameters == plain.parameters


def test_wider_heads_widen_q_the_projection_and_the_attention_core() -> None:
    """Qwen3-style heads (32 heads of 128 on h = 2048): Q and the attention output are 4096
    wide, K and V groups·128. Parameters of a layer's attention: h·(hq + 2kv) + hq·h (+ biases
    hq + 2kv and h, 2 norms); forward FLOPs 2·tokens·(h·(hq + 2kv) + hq·h) + 4·tokens·s·hq."""
    wide = dataclasses.replace(
        model_preset("qwen3-30b-a3b"),
        num_layers=4,
        ffn_hidden_size=6144,
        moe_num_experts=1,
        moe_top_k=1,
        moe_ffn_hidden_size=None,
    )
    base = dataclasses.replace(wide, kv_channels=None)
    assert (base.head_dim, base.attention_width, base.kv_hidden) == (64, 2048, 256)
    assert (wide.head_dim, wide.attention_width, wide.kv_hidden) == (128, 4096, 512)
    h, hq, kv = 2048.0, 4096.0, 512.0
    attention = h * (hq + 2 * kv) + (hq + 2 * kv) + hq * h + h + 4 * h
    mlp = 3 * h * 6144
    assert layer_parameters(wide, moe=False) == attention + mlp
    tokens, s = 4096.0, 4096.0
    flops = (
        2 * tokens * (h * (hq + 2 * kv) + hq * h) + 4 * tokens * s * hq + 2 * tokens * h * 6144 * 3
    )
    assert layer_forward_flops(wide, tokens, s, moe=False) == flops
    layout = LayoutSpec(pipeline=1, tensor=2, data=4, sequence_parallel=True)
    tr = TrainingSpec(
        global_batch_size=32,
        precision=Precision.BF16,
        flash_attention=True,
        recompute=Recompute.NONE,
    )
    narrow_e = estimate(Scenario(base, tr, layout, a100()))
    wide_e = estimate(Scenario(wide, tr, layout, a100()))
    assert wide_e.breakdown.compute_s > narrow_e.breakdown.compute_s
    assert wide_e.memory.activations_bytes > narrow_e.memory.activations_bytes
    # TP collectives carry h-wide activations: the heads' width does not change them.
    assert wide_e.traffic_bytes["tp"] == narrow_e.traffic_bytes["tp"]


def test_a_model_whose_heads_do_not_divide_h_needs_kv_channels() -> None:
    def model(kv_channels: int | None) -> ModelSpec:
        return ModelSpec(
            num_layers=2,
            hidden_size=3000,
            num_attention_heads=64,
            seq_length=4096,
            vocab_size=201088,
            kv_channels=kv_channels,
        )

    with pytest.raises(ValidationError, match="kv_channels"):
        model(None)
    assert model(64).attention_width == 4096
    with pytest.raises(ValidationError) as err:
        model(0)
    assert err.value.field == "model.kv_channels"


def test_fine_grained_moe_estimates_say_how_far_such_runs_were_off() -> None:
    """Experts narrower than the model (Qwen3's 768 on h = 2048) are what commest predicts
    worst; such an estimate says so with validate's figures, a Mixtral-style one does not."""
    layout = LayoutSpec(pipeline=1, tensor=1, data=16, expert_parallel=16)
    tr = TrainingSpec(global_batch_size=64, recompute=Recompute.NONE, framework="nemo")
    qwen = estimate(Scenario(model_preset("qwen3-30b-a3b"), tr, layout, a100()))
    mixtral = dataclasses.replace(model_preset("mixtral-8x7b"), moe_num_experts=16)
    coarse = estimate(Scenario(mixtral, tr, layout, a100()))
    acc = FINE_GRAINED_MOE_ACCURACY
    [warning] = [w for w in qwen.warnings if w.startswith("experts narrower than the model")]
    assert f"the {acc.runs} such published runs" in warning
    assert f"{acc.min_error_pct:+.0f} %" in warning and f"{acc.max_error_pct:+.0f} %" in warning
    assert not any(w.startswith("experts narrower") for w in coarse.warnings)
    # The accuracy it claims is that of such runs, beside its kind of trainer's.
    assert qwen.validated is not None and qwen.validated.fine_grained_moe == acc
    # Such runs are the worst predicted of the kind (7.9 % against 4.4 %), from -13 % to +8 %.
    assert acc.mean_abs_error_pct > 1.5 * VALIDATED_ACCURACY["megatron-style"].mean_abs_error_pct
    assert acc.max_error_pct - acc.min_error_pct > 15.0
    assert coarse.validated is not None and coarse.validated.fine_grained_moe is None
    [line] = [a for a in qwen.assumptions if a.startswith("validated: ")]
    assert f"the {acc.runs} published runs whose experts are narrower than the model" in line
    assert f"{acc.mean_abs_error_pct:.1f} % off on average" in line
    assert not any("narrower" in a for a in coarse.assumptions if a.startswith("validated: "))
    # Its range spans those runs' errors (the kind's middle 80 % would claim far too much).
    t = qwen.iteration_time_s
    assert qwen.validated is not None and coarse.validated is not None
    kind_low, kind_high = qwen.validated.measured_range_s(t)
    low, high = qwen.iteration_time_range_s or (0.0, 0.0)
    assert low == min(kind_low, t / (1 + acc.max_error_pct / 100))
    assert high == t / (1 + acc.min_error_pct / 100) > kind_high
    assert coarse.iteration_time_range_s == coarse.validated.measured_range_s(
        coarse.iteration_time_s
    )


def _folding_case(
    etp: int | None, ep: int, sp: bool = True, tensor: int = 2
) -> tuple[Scenario, LayoutSpec]:
    qwen = dataclasses.replace(model_preset("qwen3-30b-a3b"), num_layers=4)
    layout = LayoutSpec(
        pipeline=1,
        tensor=tensor,
        data=16 // tensor,
        sequence_parallel=sp,
        expert_parallel=ep,
        expert_tensor_parallel=etp,
    )
    tr = TrainingSpec(global_batch_size=32, recompute=Recompute.NONE, framework="nemo")
    return Scenario(qwen, tr, layout, a100()), layout


def test_experts_folded_over_tp_run_whole_and_route_from_the_sequence_shard() -> None:
    """Megatron-Core's parallel folding (--expert-tensor-parallel-size 1 under TP 2): no TP
    gather of the routed tokens, the EP group spans the TP ranks (EP 16 on t 2 x d 8), each
    GPU holds E/ep whole experts, and the experts' FLOPs are those of TP 2."""
    at_tp, _ = _folding_case(None, 8)
    folded, _ = _folding_case(1, 16)
    folded_ep8, _ = _folding_case(1, 8)
    a, f, f8 = estimate(at_tp), estimate(folded), estimate(folded_ep8)
    qwen = at_tp.model
    s_act = 2.0 * 1 * qwen.seq_length * qwen.hidden_size  # bf16 activations of a micro-batch
    routed = float(qwen.moe_top_k) * s_act

    def tp_sizes(e: Any) -> set[float]:
        return {c.size_bytes for c in e.collectives if c.term == "tp"}

    assert routed in tp_sizes(a) and routed not in tp_sizes(f)
    [a2a] = [c for c in f.collectives if c.term == "expert"]
    [a2a_tp] = [c for c in a.collectives if c.term == "expert"]
    assert (a2a.ranks, a2a.nodes) == (16, 2)  # 16 consecutive ranks of 8-GPU nodes
    assert (a2a_tp.ranks, a2a_tp.nodes) == (8, 2)  # 8 DP coordinates, 2 apart
    assert a2a.size_bytes == a2a_tp.size_bytes == routed / 2  # this rank's sequence shard
    # Expert parameters per GPU: E/ep experts, whole; at TP, E/ep experts' 1/t slices.
    # E experts of a SwiGLU MLP (3 matrices h x expert_ffn), no biases
    experts = qwen.moe_num_experts * 3.0 * qwen.hidden_size * qwen.expert_ffn
    layers = qwen.num_moe_layers
    assert f.gpu_parameters == a.gpu_parameters  # E/16 whole = E/8 halves
    assert f8.gpu_parameters - a.gpu_parameters == layers * experts * (1 / 8 - 1 / 16)
    assert (f.model_flops, f.hardware_flops) == (a.model_flops, a.hardware_flops)  # same work
    assert any("experts folded over TP" in line for line in f.assumptions)
    assert not any("experts folded over TP" in line for line in a.assumptions)


def test_expert_tensor_parallelism_is_checked_with_the_field_named() -> None:
    for etp, ep, sp, tensor, words in (
        (2, 8, True, 4, "must be 1"),
        (1, 8, False, 2, "sequence_parallel"),
    ):
        with pytest.raises(LayoutError, match=words) as err:
            estimate(_folding_case(etp, ep, sp, tensor)[0])
        assert err.value.field == "layout.expert_tensor_parallel"
    # EP 16 on t 2 x d 8: only folded do the experts shard enough ranks.
    with pytest.raises(LayoutError, match="data·cp") as err:
        estimate(_folding_case(None, 16)[0])
    assert err.value.field == "layout.expert_parallel"
    with pytest.raises(LayoutError, match="MoE") as err:
        estimate(
            Scenario(
                model_preset("llama3-8b"),
                TrainingSpec(global_batch_size=16),
                LayoutSpec(
                    pipeline=1, tensor=2, data=8, sequence_parallel=True, expert_tensor_parallel=1
                ),
                a100(),
            )
        )
    assert err.value.field == "layout.expert_tensor_parallel"
    # ETP equal to the layer's TP, or 1 at TP 1, is today's model bit for bit.
    same, _ = _folding_case(2, 8)
    base, _ = _folding_case(None, 8)
    assert estimate(same).iteration_time_s == estimate(base).iteration_time_s
    tp1, _ = _folding_case(1, 16, tensor=1)
    tp1_base, _ = _folding_case(None, 16, tensor=1)
    assert estimate(tp1).breakdown == estimate(tp1_base).breakdown


# --- MoE token dispatch: alltoall against flex (DeepEP / HybridEP) ---------------------------
def _dispatch_case(dispatcher: str, ep: int = 16) -> Scenario:
    """Qwen3-30B-A3B's experts (128, top-8) on 16 H100s (two 8-GPU nodes), TP 1, EP ``ep``."""
    qwen = dataclasses.replace(model_preset("qwen3-30b-a3b"), num_layers=4)
    layout = LayoutSpec(pipeline=1, tensor=1, data=16, expert_parallel=ep)
    tr = TrainingSpec(
        global_batch_size=64,
        recompute=Recompute.NONE,
        precision=Precision.BF16,
        framework="nemo",
        moe_token_dispatcher=MoeDispatcher(dispatcher),
    )
    return Scenario(qwen, tr, layout, _h100_links())


def _h100_links() -> ClusterSpec:
    return dataclasses.replace(_h100(None), bandwidth=PlacementBandwidth())


def _missing(experts: int, held: int, top_k: int) -> float:
    """C(E - m, k) / C(E, k): none of a token's k experts among the m held."""
    return math.comb(experts - held, top_k) / math.comb(experts, top_k)


def test_flex_dispatch_sends_a_token_once_per_remote_node_and_once_per_rank() -> None:
    """DeepEP (README, normal kernels): RDMA to each remote node holding one of the token's k
    experts once, NVLink to each rank holding one once; the legs run at once. Qwen3-30B-A3B on
    EP 16 over two 8-GPU nodes: 8 experts a rank, 64 a node, top-8 of 128."""
    a2a, flex = estimate(_dispatch_case("alltoall")), estimate(_dispatch_case("flex"))
    [whole] = [c for c in a2a.collectives if c.kind is TrafficKind.EXPERT]
    legs = {c.scope: c for c in flex.collectives if c.kind is TrafficKind.EXPERT}
    assert (whole.scope, whole.ranks, whole.nodes) == ("group", 16, 2)
    rdma, nvlink = legs["across_nodes"], legs["within_node"]
    assert (rdma.ranks, rdma.nodes, nvlink.ranks, nvlink.nodes) == (16, 2, 8, 1)
    token = whole.size_bytes / 8  # one token's activations (the alltoall sends 8 copies)
    # Per rank and call: what crosses to the other node, and what moves over NVLink.
    crosses = token * 1 * (1 - _missing(128, 64, 8))
    forwards = token * (1 - _missing(128, 8, 8)) * (16 - 2)
    assert rdma.bytes_per_iteration == pytest.approx(crosses * rdma.calls_per_iteration, rel=1e-12)
    assert nvlink.bytes_per_iteration == pytest.approx(
        forwards * nvlink.calls_per_iteration, rel=1e-12
    )
    # The alltoall puts 4 of a token's 8 copies on the wire to the other node; flex ~1.
    off_node = whole.size_bytes / 2 * whole.calls_per_iteration  # 8 of its 16 ranks are remote
    assert off_node / rdma.bytes_per_iteration == pytest.approx(
        4 / (1 - _missing(128, 64, 8)), rel=1e-12
    )
    # The RDMA leg is priced as the group's all-to-all whose off-node half is what crosses.
    assert rdma.size_bytes == pytest.approx(2 * crosses, rel=1e-12)
    calls = rdma.calls_per_iteration
    assert flex.breakdown.expert_s == pytest.approx(
        calls * max(rdma.time_per_call_s, nvlink.time_per_call_s), rel=1e-12
    )
    assert flex.breakdown.expert_s < a2a.breakdown.expert_s / 3
    assert flex.breakdown.compute_s == a2a.breakdown.compute_s
    assert any("flex dispatcher" in line for line in flex.assumptions)
    assert not any("flex dispatcher" in line for line in a2a.assumptions)


def test_flex_dispatch_inside_one_node_is_its_nvlink_leg_alone() -> None:
    """EP 8 inside a node: nothing crosses; each rank holding one of a token's experts gets it
    once (16 experts a rank), where the alltoall sends all 8 copies."""
    a2a = estimate(_dispatch_case("alltoall", ep=8))
    flex = estimate(_dispatch_case("flex", ep=8))
    [whole] = [c for c in a2a.collectives if c.kind is TrafficKind.EXPERT]
    [leg] = [c for c in flex.collectives if c.kind is TrafficKind.EXPERT]
    assert (whole.ranks, whole.nodes, leg.ranks, leg.nodes) == (8, 1, 8, 1)
    assert leg.scope == "within_node"
    assert flex.breakdown.expert_s < a2a.breakdown.expert_s
    token = whole.size_bytes / 8
    assert leg.bytes_per_iteration == pytest.approx(
        token * (1 - _missing(128, 16, 8)) * 7 * leg.calls_per_iteration, rel=1e-12
    )


def test_flex_traffic_crosses_nodes_only_between_ranks_at_the_same_position() -> None:
    """The traffic matrix of a flex dispatch: off-node expert bytes only between the ranks
    at the same position of the two nodes, as much as the RDMA leg sends; on-node bytes among
    each node's ranks; every GPU's row sum is its analytic volume."""
    result = estimate(_dispatch_case("flex"))
    matrix = estimate_traffic(result).select(TrafficKind.EXPERT)
    src, dst = matrix.src, matrix.dst
    off = (src // 8) != (dst // 8)
    assert np.all((src[off] % 8) == (dst[off] % 8))  # the peer at the same position
    legs = {c.scope: c for c in result.collectives if c.kind is TrafficKind.EXPERT}
    per_gpu_rdma = legs["across_nodes"].bytes_per_iteration
    per_gpu_nvlink = legs["within_node"].bytes_per_iteration
    assert matrix.bytes[off].sum() == pytest.approx(16 * per_gpu_rdma, rel=1e-12)
    assert matrix.bytes[~off].sum() == pytest.approx(16 * per_gpu_nvlink, rel=1e-12)
    placement = Placement.from_layout(result.scenario.layout, 8)
    volume = per_gpu_volume_bytes(placement, traffic_loads(result))[TrafficKind.EXPERT]
    assert np.allclose(volume, per_gpu_rdma + per_gpu_nvlink, rtol=1e-12)
    assert np.allclose(matrix.row_sums(), volume, rtol=1e-12)
    assert len(matrix) == 16 * 1 + 16 * 7  # one peer across, seven on the node
    loads = traffic_loads(result)
    assert traffic_entry_count(placement, loads) == len(estimate_traffic(result))
    nodes = node_traffic_matrix(placement, loads).select(TrafficKind.EXPERT)
    across = nodes.src != nodes.dst
    assert nodes.bytes[across].sum() == pytest.approx(16 * per_gpu_rdma, rel=1e-12)


def test_flex_dispatch_of_experts_folded_over_tp_pairs_the_stage_ranks() -> None:
    """Folded experts (EP 16 over TP 2 x DP 8): the flex legs run over the 16 consecutive
    ranks of the stage, 8 a node; the matrix and the estimate agree on every GPU's bytes."""
    folded, _ = _folding_case(1, 16)
    flex = dataclasses.replace(
        folded,
        training=dataclasses.replace(folded.training, moe_token_dispatcher=MoeDispatcher.FLEX),
    )
    result = estimate(flex)
    legs = {c.scope: (c.ranks, c.nodes) for c in result.collectives if c.term == "expert"}
    assert legs == {"across_nodes": (16, 2), "within_node": (8, 1)}
    placement = Placement.from_layout(flex.layout, 8)
    loads = traffic_loads(result)
    volume = per_gpu_volume_bytes(placement, loads)[TrafficKind.EXPERT]
    matrix = estimate_traffic(result)
    assert np.allclose(matrix.select(TrafficKind.EXPERT).row_sums(), volume, rtol=1e-12)
    assert traffic_entry_count(placement, loads) == len(matrix)


def test_a_flex_dispatcher_needs_experts() -> None:
    """flex on a dense model is a request that means nothing: refused naming the field, in an
    estimate and in a sweep alike."""
    dense = model_preset("llama3-8b")
    training = TrainingSpec(global_batch_size=16, moe_token_dispatcher=MoeDispatcher.FLEX)
    layout = LayoutSpec(pipeline=1, tensor=1, data=8)
    with pytest.raises(ValidationError, match="MoE") as err:
        estimate(Scenario(dense, training, layout, a100()))
    assert err.value.field == "training.moe_token_dispatcher"
    with pytest.raises(ValidationError, match="MoE"):
        enumerate_layouts(dense, training, 8)


@pytest.mark.parametrize(
    ("t", "cp", "d", "ep", "order"),
    [
        (4, 2, 2, 4, "tp-dp-pp"),  # across cp then dp: ranks 0, 4, 8, 12 (2 nodes)
        (4, 2, 8, 8, "tp-dp-pp"),  # ranks 0, 4, ..., 28 (4 nodes; dp-strided would be 8)
        (1, 4, 4, 2, "tp-dp-pp"),  # inside one cp group: ranks 0, 1
        (2, 2, 4, 4, "tp-dp-cp-pp"),  # dp fastest: ranks 0, 2, 4, 6
        (2, 2, 4, 8, "tp-pp-dp"),  # cp, then dp across the other stage: 4 nodes of 8
        (8, 1, 8, 4, "tp-dp-pp"),  # no cp: consecutive dp coordinates, as before
    ],
)
def test_expert_group_nodes_follow_megatron_cores_expert_grid(
    t: int, cp: int, d: int, ep: int, order: str
) -> None:
    """The engine prices the expert all-to-all on the nodes the placement's expert group
    spans (Megatron-Core's expert grid tp-ep-dp-pp: cp and dp coordinates alike)."""
    layout = LayoutSpec(
        pipeline=2, tensor=t, data=d, context_parallel=cp, expert_parallel=ep, rank_order=order
    )
    scenario = Scenario(MOE, TrainingSpec(global_batch_size=64), layout, a100())
    uses = [u for u in estimate(scenario).collectives if u.kind is TrafficKind.EXPERT]
    assert uses
    spanned = Placement.from_layout(layout, 8).group_nodes_spanned("expert")
    assert {u.nodes for u in uses} == {spanned}


def test_paper_fidelity_prices_the_dp_all_reduce_on_the_dp_ranks_alone_under_cp() -> None:
    """The seed has no context parallelism: its DP all-reduce runs over the d ranks alone, on
    the nodes those span (a CP 2 layout used to ask the provider for 2 ranks on 4 nodes)."""
    layout = LayoutSpec(pipeline=1, tensor=8, data=2, context_parallel=2)
    model = ModelSpec(
        num_layers=2, hidden_size=1024, num_attention_heads=8, seq_length=2048, vocab_size=32000
    )
    scenario = Scenario(
        model, TrainingSpec(global_batch_size=4), layout, a100(), fidelity=Fidelity.PAPER
    )
    (dp,) = [u for u in estimate(scenario).collectives if u.kind is TrafficKind.DP]
    assert (dp.ranks, dp.nodes) == (2, 2)


def test_paper_fidelity_reports_flop_rates_from_its_own_count() -> None:
    """The seed prices a MoE model as dense: 6·N FLOPs per token (8·N with full recompute),
    N from Megatron-LM eq. 2. Its MFU and HFU divide that count, the one its time is made of, so
    they stay under u; the model's own FLOPs (eight 4h-wide experts a token here) gave 441 %."""
    model = dataclasses.replace(MOE, moe_num_experts=64, moe_top_k=8, ffn_hidden_size=None)
    layout = LayoutSpec(pipeline=1, tensor=2, data=4, expert_parallel=4)
    training = TrainingSpec(global_batch_size=32, recompute=Recompute.FULL)
    cluster = a100(utilization=0.9)
    e = estimate(Scenario(model, training, layout, cluster, fidelity=Fidelity.PAPER))
    tokens = 32 * model.seq_length
    n = megatron_parameters(model)
    assert e.model_flops == pytest.approx(6.0 * n * tokens)
    assert e.hardware_flops == pytest.approx(8.0 * n * tokens)
    assert e.throughput.mfu < e.throughput.hfu <= 0.9


# --- eager MoE layers: the host's time is a floor (Framework.moe_layer_host_s) -------------------
def _qwen_eager(
    fw: Framework,
    recompute: Recompute = Recompute.NONE,
    model: ModelSpec | None = None,
    precision: Precision = Precision.FP16,
) -> Estimate:
    """Qwen3-30B-A3B (or ``model``) on 16 H100-like GPUs, EP 8 inside a node (NVLink
    all-to-all), 8 micro-batches of one sequence."""
    model = model or model_preset("qwen3-30b-a3b")
    layout = LayoutSpec(pipeline=1, tensor=1, data=16, expert_parallel=8 if model.is_moe else 1)
    tr = TrainingSpec(global_batch_size=128, recompute=recompute, framework=fw, precision=precision)
    links = FixedBandwidth(tp_gbps=360.0, pp_gbps=45.0, dp_gbps=45.0, expert_gbps=300.0)
    cluster = a100(
        links,
        peak_flops=989e12,
        memory_bandwidth_gbps=3350.0,
        utilization=FITTED_COMPUTE["h100"].utilization,
    )
    return estimate(Scenario(model, tr, layout, cluster))


def test_an_eager_moe_layer_takes_at_least_the_hosts_time() -> None:
    """Megatron-Core MoE layers run eagerly unless captured in CUDA graphs; the host's time to
    issue one (router, permutation, grouped GEMMs, dispatcher: Megatron-Bridge measured
    Qwen3-30B-A3B 22 % faster with them captured) is a floor under the layer's own work, and
    the GPU's wait is the breakdown's ``host`` term."""
    nemo = framework_preset("nemo")
    layers, m = 48, 8
    bound = _qwen_eager(nemo.replace(moe_layer_host_s=0.05))
    bound_more = _qwen_eager(nemo.replace(moe_layer_host_s=0.06))
    graphs = _qwen_eager(nemo.replace(moe_layer_host_s=0.05, cuda_graphs=True))
    unpriced = _qwen_eager(nemo.replace(moe_layer_host_s=0.0))
    # While the floor binds, each MoE layer of each micro-batch takes exactly it: 10 ms more
    # host time per layer is 10 ms more per layer and micro-batch, all of it GPU waiting.
    extra = bound_more.iteration_time_s - bound.iteration_time_s
    assert extra == pytest.approx(m * layers * 0.01, rel=1e-9)
    assert bound_more.breakdown.host_s - bound.breakdown.host_s == pytest.approx(extra, rel=1e-9)
    assert bound.breakdown.host_s > 0.0
    assert bound.iteration_time_s == pytest.approx(sum(bound.breakdown.as_dict().values()))
    # The collectives are the same; the data-parallel stream keeps running while the GPU waits.
    assert bound.link_s == unpriced.link_s
    assert bound.breakdown.communication_s <= unpriced.breakdown.communication_s
    # Captured in CUDA graphs, or not priced: the GPU's own work only.
    assert graphs.breakdown.host_s == unpriced.breakdown.host_s == 0.0
    assert graphs.iteration_time_s == unpriced.iteration_time_s
    # What the host adds is what the layers' own work leaves of the floor.
    own = unpriced.iteration_time_s - unpriced.breakdown.optimizer_s - unpriced.breakdown.dp_s
    assert bound.breakdown.host_s < m * layers * 0.05 < bound.breakdown.host_s + own
    # A full replay issues the forward again: the floor grows by the forward's share.
    full = _qwen_eager(nemo.replace(moe_layer_host_s=0.05), Recompute.FULL)
    full_more = _qwen_eager(nemo.replace(moe_layer_host_s=0.06), Recompute.FULL)
    assert full_more.iteration_time_s - full.iteration_time_s == pytest.approx(
        m * layers * 0.01 * (1.0 + HOST_FORWARD_SHARE), rel=1e-9
    )
    # Dense layers are not floored.
    llama = _qwen_eager(
        nemo.replace(moe_layer_host_s=0.05),
        model=dataclasses.replace(model_preset("qwen3-30b-a3b"), moe_num_experts=1, moe_top_k=1),
    )
    assert llama.breakdown.host_s == 0.0
    # The estimate says which floor it applied, and warns when the host sets the pace.
    assert "an eager MoE layer takes at least 50 ms of host time" in bound.assumptions[1]
    assert "eager MoE layer" not in graphs.assumptions[1]
    [warning] = [w for w in bound.warnings if w.startswith("host-bound")]
    assert f"waits {bound.breakdown.host_s:.3g} s" in warning and "cuda_graphs" in warning
    assert not any(w.startswith("host-bound") for w in graphs.warnings)


def test_the_megatron_core_presets_carry_the_fitted_moe_host_time() -> None:
    """The value fitted by commest validate (README "Accuracy") on the Megatron-Core presets;
    a wide MoE layer (Mixtral's 14,336-wide experts) outlasts it, a fine-grained one does not."""
    for name, preset in FRAMEWORK_PRESETS.items():
        expected = MEGATRON_MOE_LAYER_HOST_S if name in ("megatron-lm", "nemo") else 0.0
        assert preset.moe_layer_host_s == expected, name
        assert not preset.cuda_graphs
    assert 0.005 < MEGATRON_MOE_LAYER_HOST_S < 0.012
    qwen = _qwen_eager(framework_preset("nemo"))
    assert qwen.breakdown.host_s > 0.0
    mixtral = _qwen_eager(framework_preset("nemo"), model=model_preset("mixtral-8x7b"))
    assert mixtral.breakdown.host_s == 0.0


def test_fp8_current_scaling_adds_each_local_experts_quantize_launches_to_the_host_time() -> None:
    """Transformer Engine's GroupedLinear quantizes each local expert's tensor with four kernels
    of its own under FP8 current scaling (v2.8 quantizer.cpp 497-536; delayed scaling uses one
    multi-tensor cast): 128 experts over EP 8 are 16 local experts, each with its FC1 and FC2
    inputs (forward, again in a full replay) and their output gradients (backward) quantized,
    at KERNEL_LAUNCH_S a launch, added to the eager layer's host time."""
    nemo = framework_preset("nemo").replace(moe_layer_host_s=0.05)  # every layer host-bound
    layers, m, local = 48, 8, 128 / 8
    fp8 = Precision.FP8
    delayed = _qwen_eager(nemo, precision=fp8)
    current = _qwen_eager(nemo.replace(fp8_current_scaling=True), precision=fp8)
    per_layer = local * FP8_CURRENT_SCALING_QUANTIZE_KERNELS * KERNEL_LAUNCH_S
    launches_s = per_layer * (FP8_EXPERT_TENSORS_FORWARD + FP8_EXPERT_TENSORS_BACKWARD)
    assert launches_s == pytest.approx(16 * 4 * 4 * 3e-6)  # 0.768 ms per layer and micro-batch
    assert current.breakdown.host_s - delayed.breakdown.host_s == pytest.approx(
        m * layers * launches_s, rel=1e-9
    )
    # A full replay quantizes the forward's inputs again.
    full_delayed = _qwen_eager(nemo, Recompute.FULL, precision=fp8)
    full_current = _qwen_eager(
        nemo.replace(fp8_current_scaling=True), Recompute.FULL, precision=fp8
    )
    replayed_s = per_layer * (2 * FP8_EXPERT_TENSORS_FORWARD + FP8_EXPERT_TENSORS_BACKWARD)
    assert full_current.iteration_time_s - full_delayed.iteration_time_s == pytest.approx(
        m * layers * replayed_s, rel=1e-9
    )
    # In 16-bit, or captured in CUDA graphs, the flag changes nothing.
    bf16 = _qwen_eager(nemo, precision=Precision.BF16)
    bf16_flag = _qwen_eager(nemo.replace(fp8_current_scaling=True), precision=Precision.BF16)
    assert bf16_flag.iteration_time_s == bf16.iteration_time_s
    graphed = nemo.replace(cuda_graphs=True)
    assert (
        _qwen_eager(graphed.replace(fp8_current_scaling=True), precision=fp8).iteration_time_s
        == _qwen_eager(graphed, precision=fp8).iteration_time_s
    )
    assert "more under FP8 current scaling" in current.assumptions[1]
    assert "FP8 current scaling" not in delayed.assumptions[1]


def test_the_ep_overlap_hides_its_measured_share_of_the_all_to_alls() -> None:
    """Megatron-Core's overlap_moe_expert_parallel_comm runs one micro-batch's dispatch and
    combine under another's compute: the exposed expert time is the measured share less
    (NVIDIA's Nsight, 36.55 %), the on-link time is unchanged, and one micro-batch hides
    nothing."""
    assert EP_OVERLAP_HIDDEN_SHARE == 0.3655
    nemo = framework_preset("nemo").replace(moe_layer_host_s=0.0)  # no host floor
    off = _qwen_eager(nemo)
    on = _qwen_eager(nemo.replace(ep_comm_overlap=True))
    assert off.breakdown.expert_s > 0.0
    assert on.breakdown.expert_s == pytest.approx(
        (1.0 - EP_OVERLAP_HIDDEN_SHARE) * off.breakdown.expert_s, rel=1e-12
    )
    assert on.link_s == off.link_s
    hidden = EP_OVERLAP_HIDDEN_SHARE * off.breakdown.expert_s
    saved = off.iteration_time_s - on.iteration_time_s
    assert 0.0 < saved <= hidden * (1.0 + 1e-12)
    assert on.breakdown.compute_s == off.breakdown.compute_s
    assert "36.55 % of them hidden" in on.assumptions[1]
    assert "hidden (NVIDIA" not in off.assumptions[1]
    [moe_on] = [a for a in on.assumptions if a.startswith("MoE: ")]
    [moe_off] = [a for a in off.assumptions if a.startswith("MoE: ")]
    assert "36.55 % of them hidden under another micro-batch's compute" in moe_on
    assert moe_off.endswith("per MoE layer, exposed") or "per MoE layer, exposed;" in moe_off

    # One micro-batch per iteration: nothing to hide the all-to-alls under.
    def single_micro_batch(fw: Framework) -> Estimate:
        model = model_preset("qwen3-30b-a3b")
        layout = LayoutSpec(pipeline=1, tensor=1, data=16, expert_parallel=8)
        tr = TrainingSpec(global_batch_size=16, recompute=Recompute.NONE, framework=fw)
        links = FixedBandwidth(tp_gbps=360.0, pp_gbps=45.0, dp_gbps=45.0, expert_gbps=300.0)
        return estimate(Scenario(model, tr, layout, a100(links)))

    alone_off = single_micro_batch(nemo)
    alone_on = single_micro_batch(nemo.replace(ep_comm_overlap=True))
    assert alone_on.micro_batches == 1
    assert alone_on.iteration_time_s == alone_off.iteration_time_s
    assert not any("of them hidden under" in a for a in alone_on.assumptions)
    # Dense models have no all-to-alls to hide.
    dense = dataclasses.replace(model_preset("qwen3-30b-a3b"), moe_num_experts=1, moe_top_k=1)
    assert (
        _qwen_eager(nemo.replace(ep_comm_overlap=True), model=dense).iteration_time_s
        == _qwen_eager(nemo, model=dense).iteration_time_s
    )


@pytest.mark.parametrize("bad", [-0.001, 1.5, math.nan, math.inf])
def test_a_moe_host_time_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValidationError, match="moe_layer_host_s"):
        framework_preset("nemo").replace(moe_layer_host_s=bad)


def test_fp8_param_gather_halves_the_parameter_all_gather_in_fp8_only(gpt3: ModelSpec) -> None:
    # Megatron's --fp8-param-gather / NeMo's fp8_params (MLPerf Training GPT-3 v4.0-v4.1,
    # Megatron-Bridge's FP8 presets): the distributed optimizer gathers 1-byte FP8 weights; the
    # gradient reduce-scatter stays 16-bit. In 16-bit training the flag changes nothing.
    layout = LayoutSpec(pipeline=8, tensor=4, data=48, zero_stage=1)
    nemo = framework_preset("nemo")

    def run(f: Framework, precision: Precision) -> Estimate:
        tr = TrainingSpec(global_batch_size=1536, precision=precision, framework=f)
        return estimate(Scenario(gpt3, tr, layout, a100(fp8_utilization=0.6)))

    def dp_ops(e: Estimate) -> dict[Collective, float]:
        return {c.op: c.size_bytes for c in e.collectives if c.kind is TrafficKind.DP}

    on = run(nemo.replace(fp8_param_gather=True), Precision.FP8)
    off = run(nemo, Precision.FP8)
    assert dp_ops(on)[Collective.ALL_GATHER] == pytest.approx(
        dp_ops(off)[Collective.ALL_GATHER] / 2.0, rel=1e-12
    )
    assert dp_ops(on)[Collective.REDUCE_SCATTER] == dp_ops(off)[Collective.REDUCE_SCATTER]
    assert on.link_s["dp"] < off.link_s["dp"]
    assert any("gathered as FP8" in a for a in on.assumptions)
    assert not any("gathered as FP8" in a for a in off.assumptions)
    bf16_on = run(nemo.replace(fp8_param_gather=True), Precision.BF16)
    bf16_off = run(nemo, Precision.BF16)
    assert bf16_on.iteration_time_s == bf16_off.iteration_time_s
    assert dp_ops(bf16_on) == dp_ops(bf16_off)
