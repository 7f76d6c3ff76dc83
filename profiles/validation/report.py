"""`commest validate`: predictions against published training runs, honestly fitted.

Protocol. The detailed model has five fitted constants (estimator.compute): the large-GEMM
efficiency u, the GEMM operand-traffic factor c, the element-wise traffic factor γ, the FP8
GEMM efficiency u8 and x0 of the size-dependent GEMM efficiency u·x/(x + x0). They are fitted
on a declared training subset only (``TRAINING``): u, c and γ on Megatron-LM SC21 Table 1 (A100,
BF16/FP16), u (H100) and u8 on the dense rows of NVIDIA's DGX Cloud benchmarking recipes (H100),
then x0 jointly on both with u, γ and u8 refitted (``JOINT_PARAMETERS``). Every training row
is scored by a fit that left its group out (SC21 Table 1: leave-one-out; DGX Cloud:
leave-one-model-out); every other row is predicted from the fit on the whole training subset,
which never contains it. After them, each constant of one source's hardware or one kind of
software is fitted on its own family with every other constant fixed (the torchtitan hosts'
peak, the DeepSpeed presets' host time per layer, the host time of an eager Megatron-Core MoE layer)
and its rows are scored leave-one-out (the MoE host time's one row, left out, without it).
The fit is a small
least-squares on relative errors (Gauss-Newton over the engine itself, so every mechanism of the
model is inside the fit). Bandwidths come from the nominal DGX profile of the row's GPU, never
from per-row tuning; the row's framework, version and published overlap flags select the
framework preset (``framework_for``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from estimator import (
    ClusterSpec,
    LayoutSpec,
    ModelSpec,
    Precision,
    Scenario,
    TrainingSpec,
    estimate,
    megatron_iteration_flops,
    validate_layout,
)
from estimator.bandwidth import BandwidthProvider
from estimator.errors import CalibrationError, LayoutError, ValidationError
from estimator.frameworks import Framework, framework_preset, trainer_kind
from estimator.presets import gpu_preset
from profiles.validation.results import (
    PCT_DIGITS,
    RESULTS_FILE,
    SECONDS_DIGITS,
    check_names,
    error_stats,
    rounded_stats,
    row_matches,
)

NOMINAL_PROFILE = {"a100": "dgx-a100-nominal", "h100": "dgx-h100-nominal"}
# torchtitan's benchmark hosts: the preset's peak is the midpoint of the H100 NVL and SXM
# datasheets, and the source says only that the true one lies between them.
GRAND_TETON_GPU = "h100-hbm2e-96gb-500w"
GRAND_TETON_PEAK_RANGE_BF16 = (835.5e12, 989.5e12)  # H100 NVL, H100 SXM dense BF16 (datasheets)
_GRAND_TETON_MIDPOINT = gpu_preset(GRAND_TETON_GPU).peak_flops[Precision.BF16]


@dataclass(frozen=True, slots=True)
class TrainingFamily:
    """A declared part of the training subset: which rows, which constants, why, how scored."""

    name: str
    parameters: tuple[str, ...]  # constants this family's rows inform
    reason: str
    # Rows of one group are left out together when scoring this family out of sample.
    group_of: Callable[[PublishedRun], str]
    # False: fitted after the joint step with every other constant fixed (a property of one
    # source's hardware that says nothing about GEMM sizes).
    joint: bool = True

    def contains(self, run: PublishedRun) -> bool:
        return _FAMILY_RULES[self.name](run)


# The declared training subset (issue 11's honesty rule). Everything else is out of sample.
_FAMILY_RULES: dict[str, Callable[[PublishedRun], bool]] = {
    "sc21_table1": lambda r: (
        r.source == "narayanan2021_sc21" and r.source_ref.startswith("Table 1")
    ),
    "dgxc_dense": lambda r: (
        r.source == "nvidia_dgxc_benchmarking" and not r.scenario_inputs[0].is_moe
    ),
    "torchtitan_hosts": lambda r: (
        r.source == "pytorch_torchtitan"
        and r.gpu == GRAND_TETON_GPU
        and (r.scenario_inputs[2].tensor, r.scenario_inputs[2].pipeline) == (1, 1)
        and r.scenario_inputs[2].context_parallel == 1
    ),
    "bloom_sweep": lambda r: r.source == "bigscience_bloom" and r.id.startswith("bloomprequel_"),
    "dgxc_moe_fp8": lambda r: (
        r.source == "nvidia_dgxc_benchmarking"
        and r.scenario_inputs[0].is_moe
        and r.scenario_inputs[1].precision is Precision.FP8
    ),
    "moe_eager_host": lambda r: (
        r.scenario_inputs[0].is_moe
        and r.scenario_inputs[1].software.moe_layer_host_s > 0.0
        and not r.scenario_inputs[1].software.cuda_graphs
    ),
}


def _source_and_model(run: PublishedRun) -> str:
    """A row's source and model: the group the MoE families leave out together."""
    return f"{run.source}:{run.meta.get('model') or run.id}"


TRAINING: tuple[TrainingFamily, ...] = (
    TrainingFamily(
        "sc21_table1",
        ("utilization_a100", "gemm_traffic_factor", "memory_traffic_factor"),
        "Megatron-LM SC21 Table 1: ten A100 runs of one software version sweeping the model "
        "from 1.7B to 1T parameters (h 2304-25600, t 1-8, b 1-16), the widest span of GEMM "
        "sizes at fixed software published with full layouts",
        group_of=lambda r: r.id,
    ),
    TrainingFamily(
        "dgxc_dense",
        ("utilization_h100", "fp8_utilization"),
        "NVIDIA DGX Cloud benchmarking, dense models (H100, NeMo, BF16 and FP8): the H100 "
        "GEMM efficiency (16-bit and FP8) is a property of the GPU that no A100 run shows; "
        "these are the H100 runs published with step times and full recipes by the vendor. "
        "Scored leave-one-model-out",
        group_of=lambda r: r.meta.get("model") or r.id,
    ),
    TrainingFamily(
        "torchtitan_hosts",
        ("peak_scale_grand_teton",),
        "torchtitan's benchmark hosts (Meta Grand Teton: H100 96GB HBM2e at 500 W), whose peak "
        "the source itself does not know ('between SXM and NVL'): one scale on the preset's "
        "midpoint peak, bounded by the two datasheets, fitted on the FSDP-only runs (t = p = "
        "cp = 1) after every other constant; TP, CP and async-TP runs are predicted. Scored "
        "leave-one-out",
        group_of=lambda r: r.id,
        joint=False,
    ),
    TrainingFamily(
        "bloom_sweep",
        ("deepspeed_layer_host_s",),
        "BigScience's February 2022 benchmark sweep for BLOOM (chronicles-prequel.md: 21 "
        "Megatron-DeepSpeed runs on Jean Zay, t 4-8, p 6-12, micro-batch 1-4, four model "
        "shapes): the DeepSpeed presets' host time per layer and micro-batch, which the GPU "
        "waits out (the sweep's micro-batch pairs cost the same per micro-batch at twice the "
        "tokens, and the log book found CUDA_LAUNCH_BLOCKING=1 cost this framework nothing), "
        "fitted after every other constant; BLOOM's production runs, MT-NLG and the SC21 ZeRO-3 "
        "runs are predicted. Scored leave-one-out",
        group_of=lambda r: r.id,
        joint=False,
    ),
    TrainingFamily(
        "dgxc_moe_fp8",
        ("fp8_expert_utilization",),
        "NVIDIA DGX Cloud benchmarking, Grok-1 in FP8 (H100, NeMo 24.12; 8 to 2,048 GPUs, "
        "proxies of 2-16 layers and the full model): the FP8 efficiency of MoE expert GEMMs, "
        "which these runs show below the dense layers' (their FP8/BF16 step-time ratio is "
        "0.80-0.82 at every scale, the dense recipes' 0.64-0.74) for a reason no source gives; "
        "fitted after every other constant but the MoE host time; Megatron-Bridge's FP8 Qwen3 "
        "runs are predicted. Scored leave-one-source-and-model-out (the same model's BF16 runs "
        "leave the host-time fit with it)",
        group_of=_source_and_model,
        joint=False,
    ),
    TrainingFamily(
        "moe_eager_host",
        ("moe_layer_host_s",),
        "Every eager Megatron-Core MoE run (no CUDA graphs), whose layers the GPU cannot run "
        "faster than the host issues them: the host time of an eager MoE layer, fitted after "
        "every other constant. It binds only where a layer's own work is shorter, which among "
        "these runs is Qwen3-30B-A3B's: Megatron-LM's BF16 recipe (32 H100s, layers of 8.2 ms "
        "a micro-batch where the GPU's work is 5.5 ms) and Megatron-Bridge's FP8 runs on 16 "
        "H100s; Grok-1's and Qwen3-235B-A22B's layers are longer and do not inform it. Scored "
        "leave-one-source-and-model-out, so each source's Qwen3-30B-A3B runs are predicted "
        "from the other source's",
        group_of=_source_and_model,
        joint=False,
    ),
)
# Fitted after the families, jointly on every training row with every family's constants free
# again: x0 of the size-dependent GEMM efficiency (estimator.compute.size_factor), one value for
# both GPUs (it is a GEMM size in elements, set by the tensor-core kernels' tiling, not by the
# peak), identified by the span of per-GPU GEMM sizes of both families together.
JOINT_PARAMETERS = ("gemm_half_size_elements",)
JOINT_REASON = (
    "x0 of the size-dependent GEMM efficiency u·x/(x + x0), shared by A100 and H100, fitted "
    "jointly on both training families (per-GPU weight sizes 768-25600) with their constants "
    "refitted alongside"
)
PARAMETERS = (
    "utilization_a100",
    "utilization_h100",
    "gemm_traffic_factor",
    "memory_traffic_factor",
    "fp8_utilization",
    "gemm_half_size_elements",
    "peak_scale_grand_teton",
    "deepspeed_layer_host_s",
    "moe_layer_host_s",
    "fp8_expert_utilization",
)
# Starting point of the fit and the value of a constant no family informs.
_START = {
    "utilization_a100": 0.75,
    "utilization_h100": 0.75,
    "gemm_traffic_factor": 0.5,
    "memory_traffic_factor": 1.0,
    "fp8_utilization": 0.6,
    "gemm_half_size_elements": 0.0,
    "peak_scale_grand_teton": 1.0,
    "deepspeed_layer_host_s": 0.0,
    "moe_layer_host_s": 0.0,
    "fp8_expert_utilization": 0.6,
}
# Where the fit of a constant starts when it is not _START (the fit's slope is 0 there).
_FIT_START = {"moe_layer_host_s": 0.01, "deepspeed_layer_host_s": 0.005}
_BOUNDS = {
    "utilization_a100": (0.05, 1.0),
    "utilization_h100": (0.05, 1.0),
    "gemm_traffic_factor": (0.0, 20.0),
    "memory_traffic_factor": (0.0, 20.0),
    "fp8_utilization": (0.05, 1.0),
    "gemm_half_size_elements": (0.0, 20000.0),
    # The H100 NVL and H100 SXM datasheet peaks over the preset's midpoint: the source's range.
    "peak_scale_grand_teton": (
        GRAND_TETON_PEAK_RANGE_BF16[0] / _GRAND_TETON_MIDPOINT,
        GRAND_TETON_PEAK_RANGE_BF16[1] / _GRAND_TETON_MIDPOINT,
    ),
    # Framework.layer_host_s's own range.
    "deepspeed_layer_host_s": (0.0, 1.0),
    # Framework.moe_layer_host_s's own range.
    "moe_layer_host_s": (0.0, 1.0),
    "fp8_expert_utilization": (0.05, 1.0),
}

# Korthikanti et al. 2022 Table 5: the eight end-to-end runs (full recompute / SP + selective).
KORTHIKANTI_TABLE5 = tuple(
    f"korthikanti_{size}_{mode}"
    for size in ("22b", "175b", "530b", "1t")
    for mode in ("full_recompute", "sp_selective")
)


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One row of published_runs.csv, ready for the engine."""

    id: str
    source: str
    source_ref: str
    scenario_inputs: tuple[ModelSpec, TrainingSpec, LayoutSpec]
    gpu: str
    measured_s: float
    in_fit_set: bool = False
    # Provenance and software columns, as published (framework, framework_version, year,
    # overlap_flags, inferred, precision ...): read by the framework presets, not by the loader.
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """The GPU family of the row (a100 or h100)."""
        return "h100" if self.gpu.startswith(("h100", "h200")) else "a100"


@dataclass(frozen=True, slots=True)
class Excluded:
    id: str
    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class RowResult:
    id: str
    source: str
    predicted_s: float
    measured_s: float
    error_pct: float
    fitted_on: str
    utilization: float
    memory_traffic_factor: float
    gemm_traffic_factor: float = 0.0
    fp8_utilization: float = 0.0
    framework: str = ""
    kinds: tuple[str, ...] = ()
    fit_rows: tuple[str, ...] = ()  # every row the fit that scored this row saw
    gemm_half_size_elements: float = 0.0
    model: str = ""  # the name the published run gives its model (e.g. "qwen3-30b-a3b")


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """Peak memory per GPU where the source prints it, against the engine's (not fitted)."""

    id: str
    source: str
    predicted_gib: float
    measured_gib: float
    error_pct: float  # (predicted - measured) / measured
    recompute: str


@dataclass(frozen=True, slots=True)
class Summary:
    rows: int
    mean_abs_error_pct: float
    max_abs_error_pct: float
    mean_error_pct: float  # signed: below 0, the rows are predicted too fast on average


@dataclass(frozen=True, slots=True)
class Selection:
    """The rows a reader asked for (``ValidationReport.select``) and their accuracy."""

    sources: tuple[str, ...]  # rows of any of these sources (all sources when empty)
    kinds: tuple[str, ...]  # rows of every one of these kinds (all kinds when empty)
    summary: Summary
    models: tuple[str, ...] = ()  # rows of any of these models (all models when empty)


@dataclass(slots=True)
class ValidationReport:
    rows: list[RowResult]
    summary: Summary
    by_source: dict[str, Summary]
    fit: dict[str, float]  # the constants fitted on the whole training subset
    excluded: list[Excluded] = field(default_factory=list)
    by_kind: dict[str, Summary] = field(default_factory=dict)
    training: dict[str, str] = field(default_factory=dict)  # family -> reason
    # Peak memory per GPU of the scored rows whose source prints it (no constant is fitted on
    # memory and no target is set: the published figure is the allocator's peak reservation).
    memory: list[MemoryRow] = field(default_factory=list)
    protocol: str = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""
    # Set by ``select``: the rows listed are these, and this is their accuracy; the summaries
    # above stay the whole report's.
    selection: Selection | None = None

    def select(
        self,
        *,
        sources: Sequence[str] = (),
        kinds: Sequence[str] = (),
        models: Sequence[str] = (),
    ) -> ValidationReport:
        """The report listing only the rows of any of ``sources`` and of any of ``models`` that
        have every one of ``kinds`` (their memory rows and, by source, the excluded runs alike),
        with the selection's own accuracy in ``selection``. Unknown names raise
        ValidationError."""
        check_names(
            "source", sources, [*(r.source for r in self.rows), *(e.source for e in self.excluded)]
        )
        check_names("kind", kinds, self.by_kind)
        check_names("model", models, [r.model for r in self.rows])
        rows = [
            r
            for r in self.rows
            if row_matches(
                r.source, r.model, r.kinds, sources=sources, models=models, wanted_kinds=kinds
            )
        ]
        ids = {r.id for r in rows}
        return dataclasses.replace(
            self,
            rows=rows,
            memory=[m for m in self.memory if m.id in ids],
            excluded=[e for e in self.excluded if not sources or e.source in sources],
            selection=Selection(tuple(sources), tuple(kinds), _summary(rows), tuple(models)),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_table(self, *, summary_only: bool = False) -> str:
        """The report for people; ``summary_only`` leaves out the per-row and excluded lists."""
        lines: list[str] = []
        if not summary_only:
            lines.append(
                f"{'run':<44} {'source':<26} {'framework':<17} "
                f"{'pred s':>9} {'meas s':>9} {'err %':>7}"
            )
            for r in self.rows:
                mark = " *" if r.fit_rows and "leave" in r.fitted_on else ""
                lines.append(
                    f"{r.id[:44]:<44} {r.source[:26]:<26} {r.framework[:17]:<17} "
                    f"{r.predicted_s:9.3f} {r.measured_s:9.3f} {r.error_pct:+7.2f}{mark}"
                )
            lines.append("(* training row, scored by a fit that left its group out)")
            lines.append("")

        def block(title: str, items: Iterable[tuple[str, Summary]]) -> None:
            lines.append(title)
            for name, s in items:
                lines.append(
                    f"  {name:<42} rows {s.rows:3d}  mean |err| {s.mean_abs_error_pct:6.2f} %"
                    f"  max |err| {s.max_abs_error_pct:6.2f} %  mean err {s.mean_error_pct:+6.2f} %"
                )

        block("overall (out of sample)", [("all", self.summary)])
        if self.selection is not None:
            picked = [f"source {s}" for s in self.selection.sources]
            picked += [f"model {m}" for m in self.selection.models]
            picked += [f"kind {k}" for k in self.selection.kinds]
            block("selected rows (out of sample)", [("; ".join(picked), self.selection.summary)])
        block("by source", self.by_source.items())
        block("by kind", self.by_kind.items())
        if self.memory:
            lines.append(
                "peak memory per GPU where the source prints it (GiB; not fitted, no target: "
                "the source's figure is the allocator's peak reservation)"
            )
            for m in self.memory:
                lines.append(
                    f"  {m.id[:44]:<44} {m.recompute:<9} pred {m.predicted_gib:6.1f}  "
                    f"meas {m.measured_gib:6.1f}  err {m.error_pct:+7.1f} %"
                )
        fit = ", ".join(f"{k} = {v:.4f}" for k, v in self.fit.items())
        lines.append(f"fit on the training subset: {fit}")
        for name, reason in self.training.items():
            lines.append(f"training family {name}: {reason}")
        if not summary_only:
            for e in self.excluded:
                lines.append(f"excluded {e.id}: {e.reason}")
        return "\n".join(lines)


def _int(value: str | None, default: int | None = None) -> int | None:
    return int(value) if value and value.strip() else default


def _bool(value: str | None, default: bool) -> bool:
    return value.strip().lower() == "true" if value and value.strip() else default


# Columns carried on PublishedRun.meta as strings (the framework presets interpret them).
META_COLUMNS = (
    "model",
    "framework",
    "framework_version",
    "year",
    "overlap_flags",
    "inferred",
    "precision",
    "flops_formula",
    "measured_tokens_per_s_per_gpu",
    "measured_memory_gib",
)


def measured_time_s(row: dict[str, str], model: ModelSpec) -> float | None:
    """The published time, or the published TFLOP/s per GPU turned back into a time with the
    formula the authors used (SC21 eq. 3 for Megatron-LM, MT-NLG)."""
    if row["measured_iteration_time_s"].strip():
        return float(row["measured_iteration_time_s"])
    if row["flops_formula"] == "megatron_sc21_eq3" and row["measured_tflops_per_gpu"].strip():
        flops = megatron_iteration_flops(model, float(row["global_batch_size"]))
        return flops / (float(row["measured_tflops_per_gpu"]) * 1e12 * int(row["gpus"]))
    return None


def model_spec(row: dict[str, str]) -> ModelSpec:
    """The row's model shape; MoE columns blank for dense models."""
    return ModelSpec(
        num_layers=int(row["num_layers"]),
        hidden_size=int(row["hidden_size"]),
        num_attention_heads=int(row["num_attention_heads"]),
        seq_length=int(row["seq_length"]),
        vocab_size=int(row["vocab_size"]),
        ffn_hidden_size=_int(row["ffn_hidden_size"]),
        num_query_groups=_int(row["num_query_groups"]),
        swiglu=_bool(row["swiglu"], False),
        tied_embeddings=_bool(row.get("tied_embeddings"), True),
        moe_num_experts=_int(row.get("moe_num_experts"), 1) or 1,
        moe_top_k=_int(row.get("moe_top_k"), 1) or 1,
        moe_every_k_layers=_int(row.get("moe_every_k_layers"), 1) or 1,
        moe_ffn_hidden_size=_int(row.get("moe_ffn_hidden_size")),
        kv_channels=_int(row.get("kv_channels")),
    )


# Published overlap/software flags (column overlap_flags) and the framework flags they set.
_FLAG_MAP: dict[str, tuple[str, ...]] = {
    "tp_comm_overlap": ("tp_comm_overlap",),
    "async_tp": ("tp_comm_overlap",),
    "overlap_grad_reduce": ("overlap_grad_reduce",),
    "overlap_param_gather": ("overlap_param_gather",),
    "overlap_param_gather_with_optimizer_step": ("overlap_param_gather",),
    "overlap_p2p_comm": ("overlap_p2p",),
    # Megatron-LM's ``--DDP-impl torch``: PyTorch DDP's bucket hooks all-reduce the gradients
    # during the last micro-batch's backward pass (the others run under ``no_sync``), where
    # ``local`` all-reduces them after the schedule (Megatron-LM de7dc40, the SC21 scripts'
    # commit: training.py train_step, schedules.py forward_backward_no_pipelining).
    "ddp_impl_torch": ("overlap_grad_reduce",),
    "pp_scatter_gather": ("pp_scatter_gather",),
    "fsdp2_prefetch": ("fsdp_prefetch",),
    "torch_compile": ("fused_elementwise",),
    # Composer's FSDP mixed precision DEFAULT reduces gradients in fp32
    # (composer/trainer/mosaic_fsdp_utils.py, get_mixed_precision: param_dtype = the autocast
    # precision, reduce_dtype = torch.float32; PURE reduces in it).
    "grad_reduce_fp32": ("grad_reduce_fp32",),
    # Megatron-Core cuda_graph_impl with a scope covering the MoE router and preprocessing (or
    # more): the eager host time of a MoE layer does not apply.
    "cuda_graphs": ("cuda_graphs",),
    # Transformer Engine's FP8 current scaling (Megatron-Bridge's fp8_cs recipes): each local
    # expert's tensors are quantized by kernels of their own.
    "fp8_current_scaling": ("fp8_current_scaling",),
    # Megatron-Core's EP all-to-all overlap (Megatron-Bridge's moe_a2a_overlap).
    "overlap_moe_expert_parallel_comm": ("ep_comm_overlap",),
    # FP8 parameters gathered as FP8 (NeMo's fp8_params, Megatron's --fp8-param-gather).
    "fp8_param_gather": ("fp8_param_gather",),
}
# Published software choices (same column) that set a framework flag to a value.
_VALUE_FLAG_MAP: dict[str, dict[str, str | bool]] = {
    # llm-foundry's attn_impl: triton (FlashAttention in Triton), its benchmark script's default
    # until 2024-03 (scripts/train/benchmarking/submit_benchmarks.py).
    "attn_impl_triton": {"attention_kernel": "triton"},
    # The run disabled cuDNN fused attention (``NVTE_FUSED_ATTN=0``), so Transformer Engine's
    # DotProductAttention falls back to the flash-attn 2 package (TransformerEngine v1.13
    # ``pytorch/attention.py``: FlashAttention 3 only with the separately installed
    # ``flashattn-hopper``).
    "flash_attn2": {"attention_kernel": "flash2"},
    # FSDP BackwardPrefetch.BACKWARD_PRE where a run set it (Composer's default is BACKWARD_POST).
    "fsdp_backward_prefetch_pre": {"fsdp_backward_prefetch": "pre"},
    # Full recompute replays the whole forward: a PyTorch before 2.1, whose non-reentrant
    # checkpoint has no early stop (llm-foundry's A100 40GB table of 2023: SOURCES.md §6).
    "checkpoint_full_replay": {"recompute_early_stop": False},
    # torchtitan before 25413d224 (2025-08-29) left torch's early stop on (SOURCES.md §7).
    "checkpoint_early_stop": {"recompute_early_stop": True},
}
# Flags a non-blank overlap_flags cell turns off when it does not list them (the cell is the
# run's complete list of communication overlaps).
_LISTED_OVERLAPS = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p")


def framework_for(meta: dict[str, str]) -> Framework:
    """The framework preset of a row: its framework and year, then its published flags."""
    name = (meta.get("framework") or "").strip().lower()
    year = _int(meta.get("year")) or 0
    if name in ("", "megatron-lm", "other"):
        preset = (
            "megatron-lm-2021"
            if year and year <= 2021
            else "megatron-lm-2022"
            if year and year <= 2023
            else "megatron-lm"
        )
    elif name == "deepspeed" and year and year <= 2021:
        preset = "deepspeed-2021"
    else:
        preset = name
    fw = framework_preset(preset)
    flags = [f.strip() for f in (meta.get("overlap_flags") or "").split(";") if f.strip()]
    if not flags:
        return fw
    overrides: dict[str, bool | str] = {}
    if any(f in _FLAG_MAP and _FLAG_MAP[f][0] in _LISTED_OVERLAPS for f in flags):
        overrides = {k: False for k in _LISTED_OVERLAPS}
    for flag in flags:
        for target in _FLAG_MAP.get(flag, ()):
            overrides[target] = True
        overrides.update(_VALUE_FLAG_MAP.get(flag, {}))
    if "torch_compile" in flags and fw.cp_torch_ring:
        # Compiled, PyTorch's ring attention does not overlap its exchanges: traced, a
        # functional collective is waited on at once (torch/distributed/_functional_collectives.py
        # ``_maybe_wrap_tensor``: ``if _are_we_tracing(): return wait_tensor(self)``; the ring's
        # own ``_maybe_wait`` notes it), and Inductor moves no wait later unless
        # ``reorder_for_compute_comm_overlap`` (default False, torch/_inductor/config.py) is set.
        # torchtitan 9dec370 compiles each block with ``fullgraph=True``, ring included.
        overrides["cp_overlap"] = False
    return fw.replace(**overrides)


def load_runs(text: str | None = None) -> tuple[list[PublishedRun], list[Excluded]]:
    """Rows the engine can model, and the others with the reason (the row's own
    ``exclude_reason`` first, then what the loader or the layout check finds)."""
    if text is None:
        text = resources.files("profiles.validation").joinpath("published_runs.csv").read_text()
    runs: list[PublishedRun] = []
    excluded: list[Excluded] = []
    for row in csv.DictReader(text.splitlines()):
        if (row.get("exclude_reason") or "").strip():
            excluded.append(Excluded(row["id"], row["source"], row["exclude_reason"].strip()))
            continue
        model = model_spec(row)
        measured = measured_time_s(row, model)
        if measured is None:
            excluded.append(
                Excluded(
                    row["id"], row["source"], f"no convertible measurement ({row['flops_formula']})"
                )
            )
            continue
        if not row["recompute"].strip():
            excluded.append(
                Excluded(row["id"], row["source"], "activation recompute not published")
            )
            continue
        meta = {c: row.get(c, "") for c in META_COLUMNS}
        try:
            training = TrainingSpec(
                global_batch_size=int(row["global_batch_size"]),
                micro_batch_size=_int(row["micro_batch_size"], 1) or 1,
                recompute=row["recompute"],  # type: ignore[arg-type]
                recompute_num_layers=_int(row.get("recompute_num_layers")),
                precision=(row["precision"] or "fp16"),  # type: ignore[arg-type]
                flash_attention=_bool(row["flash_attention"], False),
                framework=framework_for(meta),
                moe_token_dispatcher=row.get("moe_token_dispatcher") or "alltoall",  # type: ignore[arg-type]
            )
            layout = LayoutSpec(
                pipeline=int(row["pipeline"]),
                tensor=int(row["tensor"]),
                data=int(row["data"]),
                virtual_stages=_int(row["virtual_stages"], 1) or 1,
                context_parallel=_int(row.get("context_parallel"), 1) or 1,
                expert_parallel=_int(row.get("expert_parallel"), 1) or 1,
                expert_tensor_parallel=_int(row.get("expert_tensor_parallel")),
                zero_stage=_int(row.get("zero_stage"), 0) or 0,
                sequence_parallel=_bool(row["sequence_parallel"], False),
                first_stage_layers=_int(row["first_stage_layers"]),
                last_stage_layers=_int(row["last_stage_layers"]),
            )
            validate_layout(model, training, layout, 8, int(row["gpus"]))
        except (LayoutError, ValidationError) as exc:
            excluded.append(Excluded(row["id"], row["source"], f"not modelled: {exc}"))
            continue
        run = PublishedRun(
            id=row["id"],
            source=row["source"],
            source_ref=row["source_ref"],
            scenario_inputs=(model, training, layout),
            gpu=row["gpu"],
            measured_s=measured,
            meta=meta,
        )
        in_fit = any(f.contains(run) for f in TRAINING)
        runs.append(
            PublishedRun(
                run.id,
                run.source,
                run.source_ref,
                run.scenario_inputs,
                run.gpu,
                run.measured_s,
                in_fit,
                meta,
            )
        )
    return runs, excluded


# Sources whose cluster network differs from the DGX nominal profile of their GPU, and the
# curves built from what the source states instead (profiles.nominal.PUBLISHED_CLUSTERS).
SOURCE_CLUSTER = {"bigscience_bloom": "jean-zay-a100-nominal"}


def _bandwidth(gpu: str, source: str = "") -> BandwidthProvider:
    if source in SOURCE_CLUSTER:
        return _nominal(SOURCE_CLUSTER[source])
    family = "h100" if gpu.startswith(("h100", "h200")) else "a100"
    return _nominal(NOMINAL_PROFILE[family])


@functools.lru_cache(maxsize=4)
def _nominal(name: str) -> BandwidthProvider:
    from profiles.nominal import nominal_bandwidth

    return nominal_bandwidth(name)


def scenario_for(
    run: PublishedRun,
    *,
    utilization: float,
    memory_traffic_factor: float,
    gemm_traffic_factor: float = 0.0,
    fp8_utilization: float | None = None,
    bandwidth: BandwidthProvider | None = None,
    gemm_half_size_elements: float = 0.0,
    peak_scale: float = 1.0,
    deepspeed_layer_host_s: float | None = None,
    moe_layer_host_s: float | None = None,
    fp8_expert_utilization: float | None = None,
) -> Scenario:
    """The row as an engine scenario on its GPU's nominal DGX profile (``peak_scale``: the
    fitted scale of a GPU whose peak its source does not know; ``deepspeed_layer_host_s``:
    the host time per layer of a DeepSpeed row's framework, the preset's own when None)."""
    model, training, layout = run.scenario_inputs
    if deepspeed_layer_host_s is not None and is_deepspeed(run):
        software = training.software.replace(layer_host_s=deepspeed_layer_host_s)
        training = dataclasses.replace(training, framework=software)
    if moe_layer_host_s is not None and training.software.moe_layer_host_s:
        software = training.software.replace(moe_layer_host_s=moe_layer_host_s)
        training = dataclasses.replace(training, framework=software)
    gpu = gpu_preset(run.gpu)
    precision = training.precision if training.precision in gpu.peak_flops else Precision.FP16
    cluster = ClusterSpec(
        gpus_per_node=8,
        peak_flops=gpu.peak_flops[precision] * peak_scale,
        utilization=utilization,
        bandwidth=bandwidth or _bandwidth(run.gpu, run.source),
        gpu_memory_bytes=gpu.memory_bytes,
        memory_bandwidth_gbps=gpu.memory_bandwidth_gbps,
        memory_traffic_factor=memory_traffic_factor,
        gemm_traffic_factor=gemm_traffic_factor,
        fp8_utilization=fp8_utilization,
        flash2_efficiency=gpu.flash2_efficiency,
        gemm_half_size_elements=gemm_half_size_elements,
        cuda_core_peak_flops=(
            None if gpu.cuda_core_peak_flops is None else gpu.cuda_core_peak_flops * peak_scale
        ),
        fp8_expert_utilization=fp8_expert_utilization,
    )
    return Scenario(model, training, layout, cluster)


def fitted_scenario(run: PublishedRun, constants: dict[str, float]) -> Scenario:
    """The row as an engine scenario with the given compute constants (``scenario_for``)."""
    return scenario_for(
        run,
        utilization=constants[f"utilization_{run.family}"],
        memory_traffic_factor=constants["memory_traffic_factor"],
        gemm_traffic_factor=constants["gemm_traffic_factor"],
        fp8_utilization=constants["fp8_utilization"],
        gemm_half_size_elements=constants["gemm_half_size_elements"],
        peak_scale=peak_scale_of(run, constants),
        deepspeed_layer_host_s=constants["deepspeed_layer_host_s"],
        moe_layer_host_s=constants["moe_layer_host_s"],
        fp8_expert_utilization=constants["fp8_expert_utilization"],
    )


def predict(run: PublishedRun, constants: dict[str, float]) -> float:
    """The engine's iteration time for a row with the given compute constants."""
    return estimate(fitted_scenario(run, constants)).iteration_time_s


def is_deepspeed(run: PublishedRun) -> bool:
    """Whether the row ran under a DeepSpeed preset (their host time per layer is fitted)."""
    return trainer_kind(run.scenario_inputs[1].software.name) == "deepspeed"


def peak_scale_of(run: PublishedRun, constants: dict[str, float]) -> float:
    """The fitted peak scale of the row's GPU (1 where the datasheet peak is known)."""
    return constants["peak_scale_grand_teton"] if run.gpu == GRAND_TETON_GPU else 1.0


def fit_constants(
    runs: Sequence[PublishedRun],
    free: Sequence[str],
    start: dict[str, float] | None = None,
    *,
    iterations: int = 30,
) -> dict[str, float]:
    """Constants minimising the squared relative errors of ``runs`` (Gauss-Newton with a
    finite-difference Jacobian over the engine; the others stay at ``start``)."""
    theta = dict(_START if start is None else start)
    free = [p for p in free if p in PARAMETERS]
    if not free or not runs:
        return theta
    for name in free:
        # A floor fitted from 0 has no slope there: start where it binds.
        theta[name] = _FIT_START.get(name, theta[name])
    measured = np.array([r.measured_s for r in runs])

    def residuals(values: dict[str, float]) -> npt.NDArray[np.float64]:
        predicted = np.array([predict(r, values) for r in runs], dtype=np.float64)
        out: npt.NDArray[np.float64] = predicted / measured - 1.0
        return out

    res = residuals(theta)
    for _ in range(iterations):
        jac = np.empty((len(runs), len(free)))
        for j, name in enumerate(free):
            step = 1e-4 * max(abs(theta[name]), 1e-2)
            if theta[name] + step > _BOUNDS[name][1]:
                step = -step  # a one-sided difference from inside the bounds
            bumped = dict(theta)
            bumped[name] = theta[name] + step
            jac[:, j] = (residuals(bumped) - res) / step
        # Active set: a constant at its bound whose step points outward stays there, and the
        # step is solved again for the others.
        active = list(range(len(free)))
        delta = np.zeros(len(free))
        for _pass in range(len(free)):
            sub, *_ = np.linalg.lstsq(jac[:, active], -res, rcond=None)
            delta = np.zeros(len(free))
            delta[active] = sub
            pinned = [
                j
                for j in active
                if (theta[free[j]] <= _BOUNDS[free[j]][0] and delta[j] < 0)
                or (theta[free[j]] >= _BOUNDS[free[j]][1] and delta[j] > 0)
            ]
            if not pinned:
                break
            active = [j for j in active if j not in pinned]
            if not active:
                break
        cost = float(res @ res)
        scale = 1.0
        while scale > 1e-4:
            trial = dict(theta)
            for j, name in enumerate(free):
                low, high = _BOUNDS[name]
                trial[name] = min(max(theta[name] + scale * float(delta[j]), low), high)
            trial_res = residuals(trial)
            if float(trial_res @ trial_res) < cost:
                break
            scale /= 2.0
        else:
            break
        converged = all(abs(trial[n] - theta[n]) <= 1e-7 * max(abs(theta[n]), 1e-3) for n in free)
        theta, res = trial, trial_res
        if converged:
            break
    for name in free:
        low, high = _BOUNDS[name]
        if not (math.isfinite(theta[name]) and low <= theta[name] <= high):
            raise CalibrationError(name, theta[name], f"the fit leaves [{low}, {high}]")
    return theta


def fit_training(
    runs: Sequence[PublishedRun],
    leave_out: Callable[[PublishedRun], bool] = lambda r: False,
    memo: dict[tuple[str, frozenset[str]], tuple[dict[str, float], list[str]]] | None = None,
) -> tuple[dict[str, float], list[str]]:
    """The constants fitted family by family on the training rows not left out.

    Families are fitted in declaration order, each freeing its own constants with the earlier
    families' values fixed (x0 = 0); then ``JOINT_PARAMETERS`` are fitted on all those rows
    together, each family's u, γ and u8 free again from there (c stays at its family's value);
    last, the families outside the joint step (``joint=False``), each with everything else
    fixed. Returns the constants and the ids of every row the fit saw. ``memo`` shares the
    steps between calls: a step's result depends only on which rows of it and of the steps
    before it were left out.
    """
    memo = {} if memo is None else memo
    joint_families = [f for f in TRAINING if f.joint]
    # The ids left out of each step and the steps before it: the key of a step's result.
    left: frozenset[str] = frozenset(
        r.id for r in runs if leave_out(r) and any(f.contains(r) for f in joint_families)
    )
    if ("joint", left) not in memo:
        theta = dict(_START)
        seen: list[str] = []
        for family in joint_families:
            rows = [r for r in runs if family.contains(r) and not leave_out(r)]
            theta = fit_constants(rows, family.parameters, theta)
            seen.extend(r.id for r in rows)
        joint = [r for r in runs if r.id in set(seen)]
        free = [p for f in joint_families for p in f.parameters if p != "gemm_traffic_factor"]
        theta = fit_constants(joint, (*free, *JOINT_PARAMETERS), theta)
        memo[("joint", left)] = (theta, seen)
    theta, seen = memo[("joint", left)]
    for family in TRAINING:
        if family.joint:
            continue
        left = left | {r.id for r in runs if family.contains(r) and leave_out(r)}
        if (family.name, left) not in memo:
            rows = [r for r in runs if family.contains(r) and not leave_out(r)]
            memo[(family.name, left)] = (
                fit_constants(rows, family.parameters, theta),
                [*seen, *(r.id for r in rows)],
            )
        theta, seen = memo[(family.name, left)]
    return dict(theta), list(seen)


def _group_filter(family: TrainingFamily, group: str) -> Callable[[PublishedRun], bool]:
    """Rows of one group of a training family (left out together)."""

    def left_out(run: PublishedRun) -> bool:
        return any(
            f.contains(run) and f.group_of(run) == group
            for f in TRAINING
            if f.group_of is family.group_of
        )

    return left_out


def kinds_of(run: PublishedRun) -> tuple[str, ...]:
    """The row's kinds for the per-kind summary."""
    model, training, _layout = run.scenario_inputs
    trainer = trainer_kind(training.software.name)
    if trainer is None:  # framework_for gives presets only
        raise ValidationError("framework", training.software.name, "must be a preset")
    precision = "fp8" if training.precision is Precision.FP8 else "16-bit"
    grain = ("fine-grained moe",) if model.fine_grained_moe else ()
    return (
        "moe" if model.is_moe else "dense",
        *grain,
        precision,
        trainer,
        run.family,
    )


def _summary(rows: Sequence[RowResult]) -> Summary:
    return Summary(*error_stats([r.error_pct for r in rows]))


def run_validation(text: str | None = None) -> ValidationReport:
    """Every modelable published run, predicted out of sample (see the module docstring)."""
    runs, excluded = load_runs(text)
    memo: dict[tuple[str, frozenset[str]], tuple[dict[str, float], list[str]]] = {}
    fit_all, seen_all = fit_training(runs, memo=memo)
    results: list[RowResult] = []
    held_out_fits: dict[str, tuple[dict[str, float], list[str]]] = {}
    for run in runs:
        family = next((f for f in TRAINING if f.contains(run)), None)
        if family is not None:
            group = family.group_of(run)
            key = f"{family.name}:{group}"
            if key not in held_out_fits:
                held_out_fits[key] = fit_training(runs, _group_filter(family, group), memo)
            constants, seen = held_out_fits[key]
            how = "row" if group == run.id else f"group {group!r}"
            fitted_on = f"training subset without {family.name} {how} (leave-{how}-out)"
        else:
            constants, seen = fit_all, seen_all
            fitted_on = "training subset (all of it)"
        predicted = predict(run, constants)
        results.append(
            RowResult(
                id=run.id,
                source=run.source,
                predicted_s=predicted,
                measured_s=run.measured_s,
                error_pct=100.0 * (predicted - run.measured_s) / run.measured_s,
                fitted_on=fitted_on,
                utilization=constants[f"utilization_{run.family}"],
                memory_traffic_factor=constants["memory_traffic_factor"],
                gemm_traffic_factor=constants["gemm_traffic_factor"],
                fp8_utilization=constants["fp8_utilization"],
                gemm_half_size_elements=constants["gemm_half_size_elements"],
                framework=run.scenario_inputs[1].software.name,
                kinds=kinds_of(run),
                fit_rows=tuple(seen),
                model=run.meta.get("model", ""),
            )
        )
    sources = sorted({r.source for r in results})
    by_source = {s: _summary([r for r in results if r.source == s]) for s in sources}
    table5 = [r for r in results if r.id in KORTHIKANTI_TABLE5]
    by_source["korthikanti2022_table5"] = _summary(table5)
    for family in TRAINING:
        rows = [r for r, run in zip(results, runs, strict=True) if family.contains(run)]
        by_source[f"{family.name} (training, held out)"] = _summary(rows)
    kinds = sorted({k for r in results for k in r.kinds})
    by_kind = {k: _summary([r for r in results if k in r.kinds]) for k in kinds}
    return ValidationReport(
        results,
        _summary(results),
        by_source,
        fit_all,
        excluded,
        by_kind,
        {**{f.name: f.reason for f in TRAINING}, "joint": JOINT_REASON},
        memory_rows(runs, fit_all),
    )


def memory_rows(runs: Sequence[PublishedRun], constants: dict[str, float]) -> list[MemoryRow]:
    """The engine's peak memory per GPU against the source's, for rows that print one."""
    out: list[MemoryRow] = []
    for run in runs:
        published = (run.meta.get("measured_memory_gib") or "").strip()
        if not published:
            continue
        measured = float(published)
        predicted = estimate(fitted_scenario(run, constants)).memory.total_bytes / 2.0**30
        out.append(
            MemoryRow(
                run.id,
                run.source,
                predicted,
                measured,
                100.0 * (predicted - measured) / measured,
                run.scenario_inputs[1].recompute.value,
            )
        )
    return out


def published_results_of(report: ValidationReport, runs: Sequence[PublishedRun]) -> dict[str, Any]:
    """What ``results.json`` holds (profiles.validation.results): every scored row with its
    citation, model, trainer, GPU and layout, and the report's summaries, rounded."""
    by_id = {run.id: run for run in runs}
    rows = []
    for r in report.rows:
        run = by_id[r.id]
        _model, training, layout = run.scenario_inputs
        rows.append(
            {
                "id": r.id,
                "source": r.source,
                "source_ref": run.source_ref,
                "model": r.model,
                "framework": r.framework,
                "kinds": list(r.kinds),
                "gpu": run.gpu,
                "gpus": layout.gpus,
                "layout": {
                    "pipeline": layout.pipeline,
                    "tensor": layout.tensor,
                    "data": layout.data,
                    "context_parallel": layout.context_parallel,
                    "expert_parallel": layout.expert_parallel,
                    "virtual_stages": layout.virtual_stages,
                },
                "precision": training.precision.value,
                "global_batch_size": training.global_batch_size,
                "predicted_s": round(r.predicted_s, SECONDS_DIGITS),
                "measured_s": round(r.measured_s, SECONDS_DIGITS),
                "error_pct": round(r.error_pct, PCT_DIGITS),
                "fitted_on": r.fitted_on,
            }
        )

    def rounded(summary: Summary) -> dict[str, float | int]:
        return rounded_stats(*dataclasses.astuple(summary))

    return {
        "summary": rounded(report.summary),
        "by_source": {k: rounded(v) for k, v in report.by_source.items()},
        "by_kind": {k: rounded(v) for k, v in report.by_kind.items()},
        "rows": rows,
    }


def write_results() -> str:
    """Runs the report and writes ``results.json`` beside this module; returns its path."""
    runs, _excluded = load_runs()
    results = published_results_of(run_validation(), runs)
    path = str(resources.files("profiles.validation").joinpath(RESULTS_FILE))
    with open(path, "w", encoding="utf-8") as out:
        json.dump(results, out, indent=1, ensure_ascii=False)
        out.write("\n")
    return path


if __name__ == "__main__":
    print(f"wrote {write_results()}")
