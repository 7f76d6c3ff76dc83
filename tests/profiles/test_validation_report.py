"""The validation report: the honest protocol (declared training subset, out-of-sample scoring)
and the accuracy it reaches, pinned as golden figures with named tolerances."""

from __future__ import annotations

import csv
import io
import json
from importlib import resources

import numpy as np
import pytest

from estimator.calibrated import (
    FINE_GRAINED_MOE_ACCURACY,
    FITTED_COMPUTE,
    VALIDATED_ACCURACY,
    VALIDATED_BY_MODEL,
)
from estimator.engine import estimate
from estimator.errors import ValidationError
from estimator.frameworks import (
    DEEPSPEED_LAYER_HOST_S,
    FRAMEWORK_NAMES,
    MEGATRON_MOE_LAYER_HOST_S,
    TRAINER_KINDS,
    framework_preset,
    trainer_kind,
)
from profiles.validation.report import (
    GRAND_TETON_GPU,
    GRAND_TETON_PEAK_RANGE_BF16,
    KORTHIKANTI_TABLE5,
    PARAMETERS,
    TRAINING,
    PublishedRun,
    RowResult,
    ValidationReport,
    fit_training,
    fitted_scenario,
    framework_for,
    is_deepspeed,
    load_runs,
    peak_scale_of,
    predict,
    published_results_of,
    run_validation,
)
from profiles.validation.results import published_results


@pytest.fixture(scope="module")
def report() -> ValidationReport:
    return run_validation()


@pytest.fixture(scope="module")
def runs() -> list[PublishedRun]:
    return load_runs()[0]


def test_no_row_is_scored_by_a_fit_that_saw_it(report: ValidationReport) -> None:
    assert report.rows
    for row in report.rows:
        assert row.fit_rows, row.id
        assert row.id not in row.fit_rows, row.id


def test_training_rows_are_scored_with_their_group_left_out(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    by_id = {r.id: r for r in runs}
    training_ids = {r.id for r in runs if r.in_fit_set}
    assert training_ids, "the training subset is declared and non-empty"
    for row in report.rows:
        run = by_id[row.id]
        family = next((f for f in TRAINING if f.contains(run)), None)
        if family is None:
            # Out of sample: the fit on the whole training subset, which never holds this row.
            assert set(row.fit_rows) == training_ids
            assert row.utilization == report.fit[f"utilization_{run.family}"]
        else:
            group = family.group_of(run)
            # Families that group rows the same way (the MoE ones, by source and model) leave
            # a group out together: Grok-1's BF16 runs leave with its FP8 runs.
            alike = [f for f in TRAINING if f.group_of is family.group_of]
            left_out = {
                r.id for r in runs for f in alike if f.contains(r) and f.group_of(r) == group
            }
            assert left_out.isdisjoint(row.fit_rows)
            assert set(row.fit_rows) == training_ids - left_out
            assert "out" in row.fitted_on


def test_a_held_out_fit_reproduces_the_scored_prediction(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    run = next(r for r in runs if r.id == "sc21_t1_145.6b")
    constants, seen = fit_training(runs, lambda r: r.id == run.id)
    row = next(r for r in report.rows if r.id == run.id)
    assert run.id not in seen
    assert row.predicted_s == pytest.approx(predict(run, constants), rel=1e-12)


def test_the_nominal_profiles_carry_todays_fit(report: ValidationReport) -> None:
    from profiles.nominal import NOMINAL_SPECS

    for family in ("a100", "h100"):
        fitted = FITTED_COMPUTE[family]
        assert fitted.utilization == pytest.approx(report.fit[f"utilization_{family}"], abs=5e-5)
        assert fitted.memory_traffic_factor == pytest.approx(
            report.fit["memory_traffic_factor"], abs=5e-5
        )
        assert fitted.gemm_traffic_factor == pytest.approx(
            report.fit["gemm_traffic_factor"], abs=5e-5
        )
        assert fitted.gemm_half_size_elements == pytest.approx(
            report.fit["gemm_half_size_elements"], abs=5e-3
        )
    assert FITTED_COMPUTE["h100"].fp8_utilization == pytest.approx(
        report.fit["fp8_utilization"], abs=5e-5
    )
    assert FITTED_COMPUTE["h100"].fp8_expert_utilization == pytest.approx(
        report.fit["fp8_expert_utilization"], abs=5e-5
    )
    assert FITTED_COMPUTE["a100"].fp8_expert_utilization is None
    assert abs(report.fit["deepspeed_layer_host_s"] - DEEPSPEED_LAYER_HOST_S) <= 5e-7
    for name in ("deepspeed", "deepspeed-2021"):
        assert framework_preset(name).layer_host_s == DEEPSPEED_LAYER_HOST_S
    for name in FRAMEWORK_NAMES:  # no preset carries an unexplained compute speed any more
        assert framework_preset(name).compute_efficiency == 1.0
    assert abs(report.fit["moe_layer_host_s"] - MEGATRON_MOE_LAYER_HOST_S) <= 5e-7
    for name in ("megatron-lm", "nemo"):
        assert framework_preset(name).moe_layer_host_s == MEGATRON_MOE_LAYER_HOST_S
    assert NOMINAL_SPECS["dgx-a100-nominal"].utilization == FITTED_COMPUTE["a100"].utilization
    assert NOMINAL_SPECS["dgx-h100-nominal"].utilization == FITTED_COMPUTE["h100"].utilization
    assert set(report.fit) == set(PARAMETERS)


# Golden figures (out of sample, nominal DGX profiles). Targets of issue 11 in comments; the
# asserted bounds are what the model reaches today with a small margin, so a regression fails.
# Korthikanti et al. 2022 Table 5 (A100): issue target mean <= 3.5 %, max <= 8 % (met since
# the size-dependent GEMM efficiency: 2.2 % / 5.0 %). Bounded by the targets themselves since the
# Nemotron4 340B training rows carry the overlaps and attention kernel their launch script sets:
# the joint fit's x0 moved (879 -> 620) and these rows went to 3.2 % / 7.5 % (3.0 % / 6.9 % since
# FP8 casts are charged in the pass that runs them: x0 577).
KORTHIKANTI_T5_MEAN_PCT = 3.5
KORTHIKANTI_T5_MAX_PCT = 8.0
# Megatron-LM SC21 Table 1, leave-one-out (issue 5: mean <= 5 %, max <= 10 %). The joint fit of
# x0 trades some of it (2.2 % -> 3.3 % mean) for the held-out rows (docs/design.md §4.4).
SC21_T1_MEAN_PCT = 3.5
SC21_T1_MAX_PCT = 7.0
# SC21 Table 2, PTD-P rows (175B/530B at 384-2240 GPUs).
SC21_T2_PTDP_MAX_PCT = 6.0
# DGX Cloud dense runs (H100, BF16 and FP8), leave-one-model-out.
DGXC_DENSE_MEAN_PCT = 3.5
# Issue 11, second round (out of sample, today's figure + a small margin):
# SC21 Table 2, DeepSpeed ZeRO-3 175B on 384/768/1536 GPUs (latency-bound gathers): max. 15 %
# until the gathers followed DeepSpeed's persistence threshold (tensors under 1e5 elements stay
# gathered: 4 gathers per layer and pass, not 12); 35.8 % since; 32.2 % since the DeepSpeed
# presets' compute speed is fitted (bloom_sweep); 26.2 % since DeepSpeed 2021's Python loop over
# the ranks before each gather is priced (zero3_rank_loop); 14.6 % since PyTorch's per-rank
# copies of a list collective cost at least a kernel launch each; 15.7 % since misaligned
# attention heads run on CUDA cores (the refitted DeepSpeed compute speed is faster); 19.7 %
# since the DeepSpeed presets' fitted compute speed gave way to their fitted host time per layer
# (layer_host_s: these runs have one micro-batch, so it adds about 1 s, where the compute speed
# slowed all of their compute by 11 %). A guard, not a target.
SC21_T2_ZERO3_175B_MAX_PCT = 20.0
# SC21, all 22 rows: issue 11's per-family target 8 %; 6.77 % (10.3 % before the DeepSpeed
# presets' compute speed and the ZeRO-3 rank loop, 7.69 % before the per-rank copy launches,
# 6.44 % before misaligned attention heads were priced on CUDA cores); 8.14 % since that compute
# speed gave way to a host time per layer and micro-batch (the six ZeRO-3 rows, see above);
# 7.89 % since the four p = 1 rows of Table 1 run PyTorch DDP as the authors' script sets it
# (--DDP-impl torch: the gradient all-reduce overlaps the last backward pass): the target is met.
SC21_ALL_MEAN_PCT = 8.0
# torchtitan H100 benchmarks (Grand Teton H100s, op-level SAC, forward-only async TP, float8
# TP, the hosts' peak fitted on the FSDP-only runs): mean. 6.40 % -> 6.75 % since full recompute
# stops before FC2 and its output's TP collective (recompute_early_stop, what torchtitan ran).
TORCHTITAN_MEAN_PCT = 6.9
# llm-foundry MPT benchmarks (Composer FSDP, BACKWARD_POST; FlashAttention in Triton where the
# benchmark script ran it): mean. 5.1 % -> 4.6 % since full recompute stops before FC2 on
# PyTorch 2.1 (recompute_early_stop); 4.64 % -> 4.94 % since the FFN-width activations are
# counted at each model's width (MPT's 4h GeLU is unchanged, but the refit γ fell 2.09 -> 1.94
# with the SwiGLU rows of the H100 fit, so these rows, most too fast, run faster still);
# 5.53 % since SC21 Table 1's p = 1 rows overlap their gradient all-reduce (--DDP-impl torch):
# the refit x0 rose 670 -> 842 elements and u (A100) 0.770 -> 0.780, so MPT's narrow models
# (125M-760M, h 768-1536) run slower and their rows, already too slow, more so.
LLMFOUNDRY_MEAN_PCT = 5.6
# DGX Cloud Grok-1 314B MoE rows (dispatcher TP gather/scatter, FlashAttention 2, attention-only
# userbuffers budget, activations per routed copy): mean. 8.17 % -> 8.91 % since expert groups
# follow Megatron-Core's expert grid (tp-ep-dp-pp, from 0.10, the rows' NeMo 24.12): under CP 2
# an EP 8 group spans 4 nodes, not 8, so the all-to-all is priced cheaper (every row ~1 % faster);
# 7.33 % since the FFN-width activations are counted at the model's widths (Grok-1's GeGLU
# experts: two routed copies of three 32768-wide tensors, 2·3·2·32768/6144 = 64 sbh, not 32).
DGXC_MOE_MEAN_PCT = 7.5
# Every scored row (issue 11 target: 5 %). 5.66 % on 145 rows; 6.63 % on 166 since 21 rows of
# BigScience's prequel benchmarks are scored (SOURCES.md §8a: a rule declared before scoring;
# all 21 predicted too fast). The bound follows the data set, not the other way round. 7.04 %
# since DeepSpeed's ZeRO-3 persistence threshold (the SC21 ZeRO-3 rows: see above); 6.97 %
# since PyTorch's checkpoint early stop (llm-foundry and torchtitan full recompute); 6.05 %
# since the DeepSpeed presets' compute speed is fitted on BigScience's prequel sweep; 5.95 %
# since DeepSpeed 2021's ZeRO-3 rank loop is priced; 5.79 % since each per-rank copy of its list
# collectives costs at least a kernel launch; 5.33 % since attention's batched GEMMs run on CUDA
# cores when the heads' rows are not 16-byte aligned (BigScience's head dim 150); 6.14 % on 179
# since 13 more Megatron-Bridge H100 rows are scored (SOURCES.md §5c, a rule declared before
# scoring), six of them Qwen3-30B-A3B, the fine-grained MoE commest predicts worst; 6.33 % on
# 184 since the engine expresses experts folded over TP and the rule scores five Qwen3-235B-A22B
# rows it had excluded for that alone; 7.21 % on 187 since three BF16 Qwen3-30B-A3B runs from
# Megatron-Bridge's model verification card and performance skills are scored (SOURCES.md §5d,
# a rule declared before scoring; +42 to +74 %, no constant or mechanism changed); 6.80 % since
# the flex dispatcher (DeepEP / HybridEP) sends a token once per remote node and once per rank
# (those three rows -13 to +7 %; the FP8 rows of the same layout +10 % -> -36 %, their FP8
# expert path's cost unpriced); 6.88 % on 188 since Megatron-LM's MoE recipe index adds one
# BF16 Qwen3-30B-A3B run (SOURCES.md §5e, -21 %); 6.93 % since expert groups follow
# Megatron-Core's expert grid (the eight CP 2 Grok-1 rows ~1 % faster, see DGXC_MOE_MEAN_PCT);
# 6.88 % since the FFN-width activations are counted at each model's widths (2·w/h sbh per
# tensor, three when gated, a MoE layer's routed copies at the expert width) instead of
# Korthikanti's 4h GeLU 16 sbh, the experts' scaled by the unused dense width; 6.84 % on 190
# since Trainy's two H200 runs are scored (SOURCES.md §9, a rule declared before scoring);
# 6.26 % since an eager Megatron-Core MoE layer takes at least the host's time to issue it
# (moe_layer_host_s, fitted on Megatron-LM's eager BF16 Qwen3-30B-A3B recipe: the five eager
# FP8 rows of that model in Megatron-Bridge's tables -36 % -> -7 to -14 %, 26.02 -64 % -> -47 %);
# 6.28 % on 191 since block recompute is priced and Megatron-Bridge 25.11's Llama 3 8B row (FP8,
# Megatron-FSDP, 5 of 32 layers replayed), excluded for it, is scored (+10.4 %); 6.16 % since FP8
# current scaling's per-expert quantize launches are added to an eager MoE layer's host time
# (Transformer Engine GroupedLinear; Megatron-Bridge's FP8 Qwen3-30B-A3B rows -14 to -7 % ->
# -10 to +1 %, 26.02 -47 % -> -43 %); 5.85 % since the DeepSpeed presets' fitted compute speed
# (a shortfall with no mechanism named) gave way to a fitted host time per layer and micro-batch
# (layer_host_s; BigScience's sweep 5.88 % -> 2.38 % held out, MT-NLG 6.26 % -> 2.39 %, BLOOM's
# production rows +3.1 % -> +0.4 % and -24.1 % -> -25.8 %, the SC21 ZeRO-3 rows 3.7-38.0 % ->
# 11.1-40.2 % too fast); 5.37 % on 189 since Megatron-Bridge 25.11's and 26.02's Qwen3-30B-A3B
# rows (-61 %, -43 %) are excluded: the source's tracker records both figures as a 2x
# performance regression, fixed in 26.02.01 (Megatron-Bridge issue #1998; SOURCES.md §5c); 5.24 %
# since Megatron-Core's EP all-to-all overlap hides NVIDIA's measured share of the all-to-alls
# (Framework.ep_comm_overlap: the five Qwen3-235B-A22B rows +9.5 to +17.8 % -> -12.7 to -6.1 %);
# 5.27 % on 202 with MLPerf Training's 13 GPT-3 rows (SOURCES.md §10, 5.82 % as first scored),
# 5.19 % once the FP8 parameter gather their configs state is priced (fp8_param_gather); 5.12 %
# since the eager MoE host time is fitted on every eager MoE run, each source's Qwen3-30B-A3B
# runs predicted from the other's (Megatron-LM's recipe row -20.6 % -> +7.6 %).
ALL_ROWS_MEAN_PCT = 5.15
# Megatron-Bridge's H100 tables (Llama 3 70B, Llama 3.1 405B, Qwen3-30B-A3B, Qwen3-235B-A22B):
# issue 11's per-family target 8 % is missed, 18.50 % today (14.25 % before the flex dispatcher
# moved the FP8 PP 1 Qwen3-30B rows from +10 % to -36 %): the Llama rows are within 9.3 %
# (mean 3.95 %), the five 235B rows +9.5 to +17.8 %, 30B's six -64 to -35 %; 12.98 % since
# the eager MoE layers' host time is a floor (30B's six -61 to -7 %); 12.85 % on 21 since
# block recompute is priced and 25.11's Llama 3 8B row (5 of 32 layers replayed) is scored
# (+10.4 %); 11.78 % since FP8 current scaling quantizes each local expert's tensors by kernels
# of their own (the FP8 Qwen3-30B-A3B rows' host time); 7.58 % on 19, within the target, since
# the 25.11 and 26.02 Qwen3-30B-A3B figures, which the source's tracker records as a 2x
# regression (issue #1998), are excluded; 6.60 % since the EP overlap hides its measured share;
# 6.70 % since the FP8 rows' stated fp8_param_gather gathers their weights as FP8.
MBRIDGE_MEAN_PCT = 6.8
# The Llama rows: 3.95 % -> 4.11 % since SwiGLU's three FFN-width tensors are counted; 4.73 %
# on 10 since the Llama 3 8B row is scored; 4.92 % since the FP8 parameter gather is priced.
MBRIDGE_LLAMA_MEAN_PCT = 5.0
# Megatron-Bridge's model verification card and performance skills (SOURCES.md §5d): three BF16
# Qwen3-30B-A3B runs on 16 H100s (TP 1, EP 16, HybridEP): within issue 11's 8 %, 7.55 % (-12.6,
# +2.9, +7.2 %) since the flex dispatcher's all-to-all crosses to the other node once per token
# (60.9 % before, when each of a token's eight routed copies was priced on the wire); 7.89 %
# (-11.9, +3.7, +8.1 %) since the experts' SwiGLU activations are counted at their width; 5.70 %
# (-11.9, -4.6, -0.6 %) since the two runs with the EP overlap on hide its measured share.
MBCARDS_MEAN_PCT = 5.8
# Trainy's torchtitan runs on H200s (SOURCES.md §9; no constant is fitted on an H200, the
# H100 family's are used): 3.73 % today (+4.65 %, +2.81 %).
TRAINY_H200_MEAN_PCT = 5.0
# MLPerf Training GPT-3 175B on H100 (SOURCES.md §10; nothing fitted on it, inclusion rule and
# measurement fixed before scoring): 13 scored rows, 5.82 % as first scored (v3.1 +1.4 to
# +2.5 %, Azure -0.7 %; v4.0/v4.1 -4.0 to +15.7 %), 4.33 % once fp8_params' FP8 parameter
# gather is priced (v4.0's 10,752/11,616-GPU runs +15.7 % -> +6.5 %).
MLPERF_GPT3_MEAN_PCT = 4.5
# Peak memory per GPU against the 14 published figures (torchtitan's 2024 tables, Trainy's
# H200 runs; the allocator's peak reservation): mean |error| 49 % while the logits were not
# counted, op-level SAC was priced as Table 2's selective recompute and full recompute left out
# the layer it replays; 18.4 % since.
MEMORY_MEAN_PCT = 20.0
# MT-NLG 530B (Megatron-DeepSpeed on Selene, 2021): predicted by the compute speed fitted on
# BigScience's 2022 sweep on Jean Zay (another team, cluster and year; since this round its
# host time per layer and micro-batch): issue 11's per-family
# target 8 %; 6.32 % today (15.6 % before that constant; 4.27 % before misaligned attention heads
# were priced on CUDA cores: the sweep's four head-dim-150 rows no longer pull the fitted speed
# down, so these runs, predicted too fast, are predicted faster still); 2.39 % since the sweep
# fits a host time per layer and micro-batch instead of a compute speed (-0.6 to -4.7 %); 2.54 %
# since SC21 Table 1's p = 1 rows run PyTorch DDP (the refit host time 7.33 -> 7.20 ms).
MTNLG_MEAN_PCT = 2.6
# BigScience BLOOM (production rows and the scored prequel sweep): issue 11's per-family target
# 8 %; 6.59 % today (10.49 % before attention's batched GEMMs ran on CUDA cores for the sweep's
# head dim 150: 300-byte rows, not 16-byte aligned); 3.32 % since the DeepSpeed presets carry a
# host time per layer and micro-batch instead of a compute speed.
BLOOM_MEAN_PCT = 3.5


def test_megatron_bridge_rows_dense_within_target_fine_grained_moe_named(
    report: ValidationReport,
) -> None:
    assert report.by_source["megatron_bridge_perf"].mean_abs_error_pct <= MBRIDGE_MEAN_PCT
    cards = report.by_source["megatron_bridge_cards"]
    assert cards.rows == 3 and cards.mean_abs_error_pct <= MBCARDS_MEAN_PCT
    llama = [r for r in report.rows if r.id.startswith("mbridge") and "llama" in r.id]
    assert len(llama) == 10
    assert sum(abs(r.error_pct) for r in llama) / len(llama) <= MBRIDGE_LLAMA_MEAN_PCT
    # The warning an estimate of such a model carries says what validate says today.
    fine = report.by_kind["fine-grained moe"]
    errors = [r.error_pct for r in report.rows if "fine-grained moe" in r.kinds]
    acc = FINE_GRAINED_MOE_ACCURACY
    assert acc.runs == fine.rows == 13
    assert acc.mean_abs_error_pct == pytest.approx(fine.mean_abs_error_pct, abs=0.05)
    assert acc.mean_error_pct == pytest.approx(fine.mean_error_pct, abs=0.05)
    assert acc.min_error_pct == pytest.approx(min(errors), abs=0.05)
    assert acc.max_error_pct == pytest.approx(max(errors), abs=0.05)


def test_figures_the_source_records_as_a_regression_are_excluded(
    report: ValidationReport,
) -> None:
    # Megatron-Bridge issue #1998 (labels performance/release): Qwen3-30B-A3B on H100 and B200
    # ran 2x slower in 25.11 than in 25.09; 26.02 still carries it, 26.02.01 has the fix.
    reasons = {e.id: e.reason for e in report.excluded}
    for regressed in ("mbridge2511_qwen3_30b_a3b_h100", "mbridge2602_qwen3_30b_a3b_h100"):
        assert "regression" in reasons[regressed] and "#1998" in reasons[regressed]
    # The same layout once the fix landed is scored like every other row.
    assert "mbridge260201_qwen3_30b_a3b_h100" in {r.id for r in report.rows}


def test_korthikanti_table5_out_of_sample(report: ValidationReport) -> None:
    rows = [r for r in report.rows if r.id in KORTHIKANTI_TABLE5]
    assert len(rows) == 8
    assert all(r.fitted_on == "training subset (all of it)" for r in rows)
    summary = report.by_source["korthikanti2022_table5"]
    assert summary.mean_abs_error_pct <= KORTHIKANTI_T5_MEAN_PCT
    assert summary.max_abs_error_pct <= KORTHIKANTI_T5_MAX_PCT


def test_sc21_table1_leave_one_out(report: ValidationReport) -> None:
    summary = report.by_source["sc21_table1 (training, held out)"]
    assert summary.rows == 10
    assert summary.mean_abs_error_pct <= SC21_T1_MEAN_PCT
    assert summary.max_abs_error_pct <= SC21_T1_MAX_PCT


def test_sc21_table2_ptdp_rows(report: ValidationReport) -> None:
    rows = [r for r in report.rows if r.id.startswith("sc21_t2_ptdp")]
    assert len(rows) == 6
    assert max(abs(r.error_pct) for r in rows) <= SC21_T2_PTDP_MAX_PCT


def test_dgxc_dense_leave_one_model_out(report: ValidationReport) -> None:
    summary = report.by_source["dgxc_dense (training, held out)"]
    assert summary.rows >= 30
    assert summary.mean_abs_error_pct <= DGXC_DENSE_MEAN_PCT


def test_issue11_round2_mechanisms_hold_their_gains(report: ValidationReport) -> None:
    zero3 = [r for r in report.rows if r.id.startswith("sc21_t2_zero3_175b")]
    assert len(zero3) == 3
    assert max(abs(r.error_pct) for r in zero3) <= SC21_T2_ZERO3_175B_MAX_PCT
    assert report.by_source["narayanan2021_sc21"].mean_abs_error_pct <= SC21_ALL_MEAN_PCT
    assert report.by_source["pytorch_torchtitan"].mean_abs_error_pct <= TORCHTITAN_MEAN_PCT
    assert report.by_source["mosaicml_llm_foundry"].mean_abs_error_pct <= LLMFOUNDRY_MEAN_PCT
    grok = [r for r in report.rows if r.id.startswith("dgxc_grok1")]
    assert len(grok) == 14
    assert sum(abs(r.error_pct) for r in grok) / len(grok) <= DGXC_MOE_MEAN_PCT
    assert report.summary.mean_abs_error_pct <= ALL_ROWS_MEAN_PCT


def test_h200_runs_are_predicted_with_the_h100_familys_constants(report: ValidationReport) -> None:
    """Trainy's torchtitan runs on H200s (SOURCES.md §9): out of sample, on the H100 family's
    fitted constants and the H200 preset's HBM bandwidth, with no peak scale (not Grand Teton)."""
    rows = [r for r in report.rows if r.source == "trainy_h200_torchtitan"]
    assert len(rows) == 2 and all(r.id not in r.fit_rows for r in rows)
    assert report.by_source["trainy_h200_torchtitan"].mean_abs_error_pct <= TRAINY_H200_MEAN_PCT


def test_mlperf_gpt3_rows_are_scored_out_of_sample_within_the_family_target(
    report: ValidationReport,
) -> None:
    """MLPerf Training GPT-3 175B on H100 (SOURCES.md §10): v3.1's seven and v4.0/v4.1's six
    DGX-class results scored with the fit on the training subset only; v3.0 (flash-attn 1), v3.1's
    eos_n64 (config not published) and Oracle's RoCE clusters are excluded with their reason."""
    rows = [r for r in report.rows if r.source == "mlperf_training_gpt3"]
    assert len(rows) == 13 and all(r.fitted_on == "training subset (all of it)" for r in rows)
    assert report.by_source["mlperf_training_gpt3"].mean_abs_error_pct <= MLPERF_GPT3_MEAN_PCT
    excluded = {e.id: e.reason for e in report.excluded if e.source == "mlperf_training_gpt3"}
    assert len(excluded) == 8
    assert all("flash-attn 1" in excluded[f"mlperf_v30_{s}"] for s in ("nvidia_n64", "nvidia_n96"))
    assert "RoCE" in excluded["mlperf_v41_oracle_n192"]
    assert "not in the repository" in excluded["mlperf_v31_nvidia_n64"]


def test_published_peak_memory_is_listed_against_the_engines(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    """Every scored row that prints its peak memory (torchtitan's 2024 tables, Trainy's H200
    runs: SOURCES.md, ``measured_memory_gib``) is listed with the engine's memory; nothing is
    fitted on memory. Today's spread, a guard, not a target: the allocator's reserve and FSDP's
    buffers are not counted, so most rows are predicted low."""
    published = {r.id for r in runs if r.meta.get("measured_memory_gib")}
    assert len(published) == 14
    assert {m.id for m in report.memory} == published
    for m in report.memory:
        assert m.error_pct == pytest.approx(
            100 * (m.predicted_gib - m.measured_gib) / m.measured_gib
        )
    mean = sum(abs(m.error_pct) for m in report.memory) / len(report.memory)
    assert mean <= MEMORY_MEAN_PCT
    assert "peak memory per GPU" in report.to_table()
    assert '"memory"' in report.to_json()


def test_deepspeed_layer_host_time_is_fitted_on_the_bloom_sweep_and_predicts_the_other_teams(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    # Fitted on BigScience's February 2022 sweep only; BLOOM's production runs, MT-NLG and the
    # SC21 ZeRO-3 runs are DeepSpeed rows the fit never saw. A few milliseconds per layer and
    # micro-batch: the host's share of a layer, not a second compute speed.
    assert 0.001 < report.fit["deepspeed_layer_host_s"] < 0.05
    assert "deepspeed_compute_efficiency" not in report.fit
    family = next(f for f in TRAINING if f.name == "bloom_sweep")
    sweep = {r.id for r in runs if family.contains(r)}
    assert len(sweep) == 21
    assert all(r.id.startswith("bloomprequel_") for r in runs if r.id in sweep)
    others = [
        row
        for row, run in zip(report.rows, runs, strict=True)
        if is_deepspeed(run) and run.id not in sweep
    ]
    assert {r.source for r in others} == {
        "bigscience_bloom",
        "smith2022_mtnlg",
        "narayanan2021_sc21",
    }
    assert all(r.fitted_on == "training subset (all of it)" for r in others)
    assert all(sweep <= set(r.fit_rows) for r in others)
    mtnlg = report.by_source["smith2022_mtnlg"]
    assert mtnlg.rows == 3
    assert mtnlg.mean_abs_error_pct <= MTNLG_MEAN_PCT
    bloom = report.by_source["bigscience_bloom"]
    assert bloom.rows == 23
    assert bloom.mean_abs_error_pct <= BLOOM_MEAN_PCT


def test_every_source_family_meets_issue_11s_target(report: ValidationReport) -> None:
    # Issue 11: every source family <= 8 % out of sample. SC21 meets it since its Table 1 rows run
    # the DDP its authors' script sets (SC21_ALL_MEAN_PCT; its six DeepSpeed ZeRO-3 rows still
    # hold most of its error), Megatron-LM's MoE recipe index since its run is predicted by a host
    # time fitted on another source's runs.
    sources = {r.source for r in report.rows}
    assert len(sources) == 12  # of the 14 in published_runs.csv, two have no scored row
    misses = {s for s in sources if report.by_source[s].mean_abs_error_pct > 8.0}
    assert misses == set()


def test_moe_host_time_is_fitted_on_the_eager_runs_each_source_predicted_from_the_others(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    # The family: every eager Megatron-Core MoE run (no CUDA graphs). Only Qwen3-30B-A3B's layers
    # are short enough to meet the floor: Megatron-LM's BF16 recipe and Megatron-Bridge's FP8
    # runs. Each (source, model) is left out together, so each source's runs are predicted from
    # the other's (until the twenty-fourth session the recipe was the family's one row, scored
    # without the host time at all: -20.6 %).
    family = next(f for f in TRAINING if f.name == "moe_eager_host")
    members = [r for r in runs if family.contains(r)]
    assert all(r.scenario_inputs[0].is_moe for r in members)
    assert not any(r.scenario_inputs[1].software.cuda_graphs for r in members)
    assert {r.source for r in members} == {
        "megatron_lm_moe_recipes",
        "megatron_bridge_perf",
        "nvidia_dgxc_benchmarking",
    }
    assert 0.005 < report.fit["moe_layer_host_s"] < 0.012
    by_id = {r.id: r for r in report.rows}
    recipe = by_id["mlmrecipe_qwen3_30b_a3b_h100_bf16_32g"]
    eager_fp8 = [
        by_id[i]
        for i in (
            "mbridge2604_qwen3_30b_a3b_h100",
            "mbridge260401_qwen3_30b_a3b_h100",
            "mbridge2606_qwen3_30b_a3b_h100",
            "mbridge260201_qwen3_30b_a3b_h100",
        )
    ]
    assert recipe.id not in recipe.fit_rows
    assert all(r.id in recipe.fit_rows for r in eager_fp8)
    assert all(recipe.id in r.fit_rows for r in eager_fp8)
    assert not any(s.id in r.fit_rows for r in eager_fp8 for s in eager_fp8)
    # The recipe from Megatron-Bridge's FP8 runs: +7.6 %, within the 8 % family target.
    assert recipe.error_pct == pytest.approx(7.6, abs=0.05)
    assert report.by_source["megatron_lm_moe_recipes"].mean_abs_error_pct <= 8.0
    # Those runs from the recipe: -36 % each without the floor, -14 to -7 % with it, -10 to +1 %
    # with FP8 current scaling's per-expert quantize launches on top (counted, not fitted).
    assert all(-11.0 < r.error_pct < 2.0 for r in eager_fp8)
    run_of = {r.id: r for r in runs}
    for row in report.rows:
        run = run_of[row.id]
        scenario = fitted_scenario(run, report.fit)
        graphed = scenario.training.software.cuda_graphs
        host_s = estimate(scenario).breakdown.host_s
        if is_deepspeed(run):
            assert host_s > 0.0, row.id  # every layer's host time (layer_host_s), MoE or not
        elif not run.scenario_inputs[0].is_moe or graphed:
            assert host_s == 0.0, row.id
    # The card's runs captured router and preprocessing in CUDA graphs: not floored.
    cards = [r for r in runs if r.source == "megatron_bridge_cards"]
    assert len(cards) == 3
    assert all(fitted_scenario(r, report.fit).training.software.cuda_graphs for r in cards)


def test_torchtitan_host_peak_is_fitted_within_its_datasheets_on_fsdp_only_runs(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    # The source says only that its H100s' peak lies between the NVL and SXM datasheets: the
    # scale is fitted on the FSDP-only runs and stays inside that range; every TP, CP and
    # async-TP run of the source is predicted by the fit that never saw it.
    low, high = (p / 912.5e12 for p in GRAND_TETON_PEAK_RANGE_BF16)
    assert low - 1e-12 <= report.fit["peak_scale_grand_teton"] <= high + 1e-12
    family = next(f for f in TRAINING if f.name == "torchtitan_hosts")
    hosts = [r for r in runs if family.contains(r)]
    assert len(hosts) >= 6
    assert all(r.scenario_inputs[2].tensor == 1 for r in hosts)
    predicted = [
        r
        for r in report.rows
        if r.source == "pytorch_torchtitan" and r.id not in {h.id for h in hosts}
    ]
    assert len(predicted) >= 12
    assert all(r.fitted_on == "training subset (all of it)" for r in predicted)
    # Rows on datasheet GPUs never see the scale.
    other = next(r for r in runs if r.gpu != GRAND_TETON_GPU)
    assert peak_scale_of(other, report.fit) == 1.0


def test_every_kind_is_summarised(report: ValidationReport) -> None:
    for kind in ("dense", "moe", "16-bit", "fp8", "megatron-style", "fsdp-style", "a100", "h100"):
        assert report.by_kind[kind].rows > 0, kind


@pytest.mark.parametrize(
    ("meta", "preset"),
    [
        ({"framework": "megatron-lm", "year": "2021"}, "megatron-lm-2021"),
        ({"framework": "megatron-lm", "year": "2022"}, "megatron-lm-2022"),
        ({"framework": "megatron-lm", "year": "2024"}, "megatron-lm"),
        ({"framework": "nemo", "year": "2025"}, "nemo"),
        ({"framework": "megatron-bridge", "year": "2025"}, "nemo"),
        ({"framework": "deepspeed", "year": "2021"}, "deepspeed-2021"),
        ({"framework": "deepspeed", "year": "2022"}, "deepspeed"),
        ({"framework": "llm-foundry", "year": "2023"}, "llm-foundry"),
        ({"framework": "torchtitan", "year": "2024"}, "torchtitan"),
    ],
)
def test_framework_and_year_select_the_preset(meta: dict[str, str], preset: str) -> None:
    assert framework_for(meta).name == preset


def test_published_overlap_flags_are_the_complete_list() -> None:
    fw = framework_for({"framework": "nemo", "overlap_flags": "overlap_grad_reduce"})
    assert fw.overlap_grad_reduce and not fw.tp_comm_overlap and not fw.overlap_param_gather
    assert fw.name == "nemo"
    default = framework_preset("nemo")
    assert framework_for({"framework": "nemo"}) == default  # blank: the preset's defaults
    titan = framework_for({"framework": "torchtitan", "overlap_flags": "async_tp;torch_compile"})
    assert titan.tp_comm_overlap and titan.fused_elementwise
    # Compiled, PyTorch's ring attention waits on each exchange at once: nothing overlaps.
    assert titan.cp_torch_ring and not titan.cp_overlap
    eager = framework_for({"framework": "torchtitan", "overlap_flags": "async_tp"})
    assert eager.cp_overlap
    # A kernel choice rides along without switching any overlap off.
    fa2 = framework_for({"framework": "nemo", "overlap_flags": "tp_comm_overlap;flash_attn2"})
    assert fa2.attention_kernel == "flash2" and default.attention_kernel == "fused"
    assert fa2.tp_comm_overlap and not fa2.overlap_grad_reduce


def test_full_recompute_stops_early_only_where_the_software_did(
    runs: list[PublishedRun],
) -> None:
    # PyTorch's non-reentrant checkpoint stops early from 2.1: torchtitan before 25413d224
    # (2025-08-29: early_stop False) and llm-foundry's tables on PyTorch 2.1.0 (the Large Scale
    # table: 5e85bd62d pins torch>=2.1,<2.1.1; the H100 and A100 80GB tables of October 2023:
    # sweep.sh at b2a43a147 runs the pytorch:2.1.0 image). Its A100 40GB table predates
    # PyTorch 2.1 and replays the whole forward (SOURCES.md §6), as Megatron and DeepSpeed do.
    # Trainy's H200 runs (SOURCES.md §9) ran torchtitan e7c0cae (2025-06), before 25413d224.
    stops = {r.id for r in runs if framework_for(r.meta).recompute_early_stop}
    titan = {r.id for r in runs if r.source in ("pytorch_torchtitan", "trainy_h200_torchtitan")}
    foundry = {r.id for r in runs if r.source == "mosaicml_llm_foundry"}
    a100_40gb = {i for i in foundry if i.startswith("llmfoundry_a100_40g_")}
    assert len(a100_40gb) == 9
    assert stops == titan | (foundry - a100_40gb)


def test_grok_and_nemotron_340b_rows_run_flash_attention_2() -> None:
    # grok1/configure.sh and nemotron/configure.sh for 340b export NVTE_FUSED_ATTN=0
    # (llama3.1/, nemo_megatron/ and nemotron's 15b branch: NVTE_FUSED_ATTN=1).
    runs, _ = load_runs()
    kernels = {
        r.id: framework_for(r.meta).attention_kernel for r in runs if r.id.startswith("dgxc_")
    }
    fa2 = ("dgxc_grok1_", "dgxc_nemotron4_340b_")
    assert {k for i, k in kernels.items() if i.startswith(fa2)} == {"flash2"}
    assert {k for i, k in kernels.items() if not i.startswith(fa2)} == {"fused"}
    assert sum(i.startswith("dgxc_nemotron4_340b_") for i in kernels) == 4


def test_llm_foundry_rows_run_the_attention_kernel_of_their_benchmark_script(
    runs: list[PublishedRun],
) -> None:
    # submit_benchmarks.py defaulted to attn_impl triton until 7f0fdae66 (2024-03); the Large
    # Scale table's sweep.py @ 5e85bd62d picks flash (FA2) for 1b/3b/7b/70b, triton for 13b/30b.
    assert framework_for(
        {"framework": "llm-foundry", "overlap_flags": "fsdp_limit_all_gathers;attn_impl_triton"}
    ) == framework_preset("llm-foundry").replace(attention_kernel="triton")
    foundry = [r for r in runs if r.source == "mosaicml_llm_foundry"]
    kernels = {r.id: r.scenario_inputs[1].software.attention_kernel for r in foundry}
    fa2 = {i for i, k in kernels.items() if k == "flash2"}
    assert fa2 == {
        "llmfoundry_h100_bf16_70b_s2048_128g",
        "llmfoundry_h100_bf16_70b_s2048_512g",
        "llmfoundry_h100_bf16_7b_s2048_128g",
        "llmfoundry_h100_bf16_7b_s2048_512g",
        "llmfoundry_h100_bf16_3b_s2048_512g",
        "llmfoundry_h100_bf16_1b_s2048_128g",
    }
    assert len(foundry) == 41
    assert all(k == "triton" for i, k in kernels.items() if i not in fa2)


def test_sc21_table1_rows_run_the_ddp_their_script_sets(runs: list[PublishedRun]) -> None:
    # examples/sc21/run_table_1.sh: DDP=torch for the four rows without a pipeline (PyTorch DDP
    # all-reduces during the last backward pass), local for the pipelined six (after it).
    assert framework_for(
        {"framework": "megatron-lm", "year": "2021", "overlap_flags": "ddp_impl_torch"}
    ) == framework_preset("megatron-lm-2021").replace(overlap_grad_reduce=True)
    table1 = [r for r in runs if r.id.startswith("sc21_t1_")]
    assert len(table1) == 10
    overlapped = {r.id for r in table1 if r.scenario_inputs[1].software.overlap_grad_reduce}
    assert overlapped == {"sc21_t1_1.7b", "sc21_t1_3.6b", "sc21_t1_7.5b", "sc21_t1_18.4b"}
    assert all(r.scenario_inputs[2].pipeline == 1 for r in table1 if r.id in overlapped)
    assert all(r.scenario_inputs[2].pipeline > 1 for r in table1 if r.id not in overlapped)


def test_llm_foundry_rows_carry_their_fsdp_settings(runs: list[PublishedRun]) -> None:
    # Composer's MP mode DEFAULT reduces gradients in fp32 (mosaic_fsdp_utils.get_mixed_precision),
    # PURE in bf16; the Large Scale table's sweep.py @ 5e85bd62d sets BACKWARD_PRE, the other
    # tables keep Composer's default BACKWARD_POST.
    foundry = [r for r in runs if r.source == "mosaicml_llm_foundry"]
    reduce_bytes = [r.scenario_inputs[1].grad_bytes for r in foundry]
    assert reduce_bytes.count(4) == 31 and reduce_bytes.count(2) == 10
    pre = {r.id for r in foundry if r.scenario_inputs[1].software.fsdp_backward_prefetch == "pre"}
    assert len(pre) == 8
    assert all(i.endswith(("_128g", "_512g")) and "_h100_bf16_" in i for i in pre)


def test_rows_the_engine_cannot_model_are_listed_with_a_reason(report: ValidationReport) -> None:
    assert all(e.reason for e in report.excluded)
    assert not {e.id for e in report.excluded} & {r.id for r in report.rows}


def test_json_and_table_outputs_carry_the_summaries(report: ValidationReport) -> None:
    data = json.loads(report.to_json())
    assert data["summary"]["rows"] == len(report.rows)
    assert set(data["by_kind"]) == set(report.by_kind)
    assert data["training"] == report.training
    table = report.to_table()
    assert "mean |err|" in table and "by kind" in table and "korthikanti2022_table5" in table


def test_estimates_carry_todays_accuracy_per_trainer_kind(report: ValidationReport) -> None:
    # estimator.calibrated keeps the report's "by kind" figures for the estimate's assumptions
    # and warnings; they must say what commest validate says today.
    assert set(VALIDATED_ACCURACY) == set(TRAINER_KINDS)
    for kind, acc in VALIDATED_ACCURACY.items():
        summary = report.by_kind[kind]
        assert acc.runs == summary.rows, kind
        assert acc.mean_abs_error_pct == pytest.approx(summary.mean_abs_error_pct, abs=0.05)
        assert acc.mean_error_pct == pytest.approx(summary.mean_error_pct, abs=0.05)
        errors = [r.error_pct for r in report.rows if kind in r.kinds]
        p10, p90 = np.percentile(errors, [10, 90])
        assert acc.error_p10_pct == pytest.approx(p10, abs=0.05)
        assert acc.error_p90_pct == pytest.approx(p90, abs=0.05)
        # 80 % of those runs (to the rounding of the percentiles) fall inside the band
        inside = sum(acc.error_p10_pct - 0.05 <= e <= acc.error_p90_pct + 0.05 for e in errors)
        assert inside / len(errors) == pytest.approx(0.8, abs=0.05)
    assert sum(a.runs for a in VALIDATED_ACCURACY.values()) == report.summary.rows


def test_estimates_carry_todays_accuracy_per_model(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    # estimator.calibrated keeps, per kind of trainer and model architecture, the out-of-sample
    # errors of those rows; an estimate of that model under that kind shows them.
    by_id = {r.id: r for r in runs}
    groups: dict[tuple[str, tuple[int, int, int, int, int]], list[RowResult]] = {}
    for row in report.rows:
        run = by_id[row.id]
        kind = trainer_kind(run.scenario_inputs[1].software.name)
        assert kind is not None
        groups.setdefault((kind, run.scenario_inputs[0].architecture), []).append(row)
    assert set(VALIDATED_BY_MODEL) == set(groups)
    for key, rows in groups.items():
        acc, errors = VALIDATED_BY_MODEL[key], [r.error_pct for r in rows]
        assert acc.runs == len(rows), key
        assert acc.model == " / ".join(sorted({r.model for r in rows}))
        assert acc.mean_abs_error_pct == pytest.approx(np.mean(np.abs(errors)), abs=0.05)
        assert acc.mean_error_pct == pytest.approx(np.mean(errors), abs=0.05)
        assert acc.min_error_pct == pytest.approx(min(errors), abs=0.05)
        assert acc.max_error_pct == pytest.approx(max(errors), abs=0.05)
    assert sum(a.runs for a in VALIDATED_BY_MODEL.values()) == report.summary.rows
    # The model names `commest validate --model` takes
    picked = report.select(models=["qwen3-30b-a3b"])
    assert picked.selection is not None
    qwen = VALIDATED_BY_MODEL[("megatron-style", (48, 2048, 32, 128, 768))]
    assert picked.selection.summary.rows == qwen.runs
    assert picked.selection.summary.mean_abs_error_pct == pytest.approx(
        qwen.mean_abs_error_pct, abs=0.05
    )


# BigScience's paired runs of one model and layout that differ only in the head count
# (chronicles-prequel.md @ 053adafe, "NHEADs comparison" 02-23 and "Another round of NHEADS"
# 02-26; NHIDDEN 13824, NLAYERS 78): 96 heads (head dim 144, 288-byte rows) against 128 heads
# (head dim 108, 216-byte rows, not 16-byte aligned). Excluded from scoring (recompute and
# precision unstated), so never fitted on; the ratio of a pair cancels most of what is unstated.
# Each pair: (96-head row, 128-head row).
HEAD_COUNT_PAIRS = (
    ("bloomprequel_0223_78x13824_a96_d8t8p6_m4", "bloomprequel_0223_78x13824_a128_d8t8p6_m4"),
    ("bloomprequel_0226_78x13824_a96_d8t4p12_m2", "bloomprequel_0226_78x13824_a128_d8t4p12_m2"),
    ("bloomprequel_0226_78x13824_a96_d8t4p12_m4", "bloomprequel_0226_78x13824_a128_d8t4p12_m4"),
    ("bloomprequel_0226_78x13824_a96_d8t8p6_m4", "bloomprequel_0226_78x13824_a128_d8t8p6_m4"),
)
# Measured slowdowns 1.30-1.40x; the engine, pricing the misaligned batched GEMMs at u x the
# A100's FP32 CUDA-core rate, predicted 1.26-1.30x, within 8 % of each measured ratio; 1.23-1.28x
# (5.5-8.3 % under) since the DeepSpeed presets carry a host time per layer and micro-batch,
# which both rows of a pair pay alike.
HEAD_PAIR_RATIO_TOLERANCE = 0.09


def _unexcluded(ids: set[str]) -> list[PublishedRun]:
    """The rows ``ids`` as scored rows: full recompute (as the scored rows of the same document
    infer it) and fp16 (the 02-28 remark that the BF16 optimizer 'is compared to fp16')."""
    text = resources.files("profiles.validation").joinpath("published_runs.csv").read_text()
    rows = [r for r in csv.DictReader(text.splitlines()) if r["id"] in ids]
    for row in rows:
        row.update(exclude_reason="", recompute="full", precision="fp16")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    runs, excluded = load_runs(out.getvalue())
    assert not excluded
    return runs


def test_misaligned_heads_explain_bigscience_head_count_pairs(report: ValidationReport) -> None:
    runs = {r.id: r for r in _unexcluded({i for pair in HEAD_COUNT_PAIRS for i in pair})}
    for aligned_id, misaligned_id in HEAD_COUNT_PAIRS:
        aligned, misaligned = runs[aligned_id], runs[misaligned_id]
        measured = misaligned.measured_s / aligned.measured_s
        predicted = predict(misaligned, report.fit) / predict(aligned, report.fit)
        assert measured > 1.25
        assert predicted == pytest.approx(measured, rel=HEAD_PAIR_RATIO_TOLERANCE), aligned_id


# --------------------------------------------------------------------------- selecting rows


def test_select_lists_a_sources_rows_with_their_own_accuracy(report: ValidationReport) -> None:
    picked = report.select(sources=["megatron_bridge_perf"])
    assert picked.rows and {r.source for r in picked.rows} == {"megatron_bridge_perf"}
    assert len(picked.rows) == report.by_source["megatron_bridge_perf"].rows
    assert picked.selection is not None
    assert picked.selection.summary == report.by_source["megatron_bridge_perf"]
    # the whole report's figures stay as they are; only the lists narrow
    assert picked.summary == report.summary and picked.by_kind == report.by_kind
    assert {e.source for e in picked.excluded} == {"megatron_bridge_perf"}
    assert len(report.rows) > len(picked.rows)  # the report it came from is untouched


def test_select_by_kinds_keeps_rows_of_every_kind_given(report: ValidationReport) -> None:
    moe = report.select(kinds=["moe"])
    assert moe.selection is not None and moe.selection.summary == report.by_kind["moe"]
    both = report.select(kinds=["moe", "fp8"])
    assert both.rows and all({"moe", "fp8"} <= set(r.kinds) for r in both.rows)
    assert len(both.rows) < min(report.by_kind["moe"].rows, report.by_kind["fp8"].rows)
    ids = {r.id for r in both.rows}
    assert all(m.id in ids for m in both.memory)


def test_select_names_the_known_values_for_an_unknown_one(report: ValidationReport) -> None:
    with pytest.raises(ValidationError) as caught:
        report.select(sources=["megatron_bridge"])
    assert caught.value.field == "source" and "megatron_bridge_perf" in caught.value.rule
    with pytest.raises(ValidationError) as caught:
        report.select(kinds=["MoE"])
    assert caught.value.field == "kind" and "fine-grained moe" in caught.value.rule


def test_summary_table_leaves_out_the_row_lists(report: ValidationReport) -> None:
    full, short = report.to_table(), report.to_table(summary_only=True)
    first = report.rows[0].id
    assert first in full and first not in short
    assert "excluded " in full and "excluded " not in short
    assert "overall (out of sample)" in short and "by kind" in short
    assert "selected rows" not in short  # nothing was selected
    picked = report.select(kinds=["fine-grained moe"]).to_table(summary_only=True)
    assert "selected rows (out of sample)" in picked and "kind fine-grained moe" in picked


def test_results_file_says_what_the_report_says_today(
    report: ValidationReport, runs: list[PublishedRun]
) -> None:
    # GET /v1/validation serves results.json; after a change that moves a prediction, rewrite it
    # with `python -m profiles.validation.report`.
    assert published_results_of(report, runs) == published_results()
