"""`commest validate`: predictions against published training runs, honestly fitted.

Protocol (issue 5's honesty rule): the compute model has two fitted constants, the GEMM
utilization u and the element-wise traffic factor γ (``ClusterSpec.memory_traffic_factor``).
Megatron-LM SC21 Table 1 rows are predicted leave-one-out (fit on the other nine); every other
row is predicted from the fit on all of SC21 Table 1, which never contains it. No row is ever
scored by a fit that saw it. Bandwidths come from the nominal DGX profile of the row's GPU, never
from per-row tuning.

T_iter is linear in x = 1/u and γ: T = A·x + G·γ + B, with A, G, B read off three engine
evaluations per row, so the fit is a closed-form least squares on relative errors.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources

import numpy as np

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
from estimator.errors import CalibrationError, LayoutError
from estimator.presets import gpu_preset

FIT_SOURCE = "narayanan2021_sc21"
FIT_TABLE = "Table 1"
NOMINAL_PROFILE = {"a100": "dgx-a100-nominal", "h100": "dgx-h100-nominal"}


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One row of published_runs.csv, ready for the engine."""

    id: str
    source: str
    source_ref: str
    scenario_inputs: tuple[ModelSpec, TrainingSpec, LayoutSpec]
    gpu: str
    measured_s: float
    in_fit_set: bool
    # Provenance and software columns, as published (framework, framework_version, year,
    # overlap_flags, inferred, precision ...): read by the framework presets, not by the loader.
    meta: dict[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True, slots=True)
class Summary:
    rows: int
    mean_abs_error_pct: float
    max_abs_error_pct: float


@dataclass(slots=True)
class ValidationReport:
    rows: list[RowResult]
    summary: Summary
    by_source: dict[str, Summary]
    fit: dict[str, float]  # u and γ fitted on all of SC21 Table 1 (used for the other rows)
    excluded: list[Excluded] = field(default_factory=list)
    protocol: str = __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def to_table(self) -> str:
        lines = [f"{'run':<36} {'source':<26} {'pred s':>9} {'meas s':>9} {'err %':>7}"]
        for r in self.rows:
            lines.append(
                f"{r.id:<36} {r.source:<26} {r.predicted_s:9.3f} {r.measured_s:9.3f} "
                f"{r.error_pct:+7.2f}"
            )
        lines.append("")
        for name, s in [("all", self.summary), *self.by_source.items()]:
            lines.append(
                f"{name:<36} rows {s.rows:3d}  mean |err| {s.mean_abs_error_pct:6.2f} %"
                f"  max |err| {s.max_abs_error_pct:6.2f} %"
            )
        lines.append(
            f"fit on SC21 Table 1: u = {self.fit['utilization']:.4f}, "
            f"γ = {self.fit['memory_traffic_factor']:.4f}"
        )
        for e in self.excluded:
            lines.append(f"excluded {e.id}: {e.reason}")
        return "\n".join(lines)


def _int(value: str, default: int | None = None) -> int | None:
    return int(value) if value.strip() else default


def _bool(value: str, default: bool) -> bool:
    return value.strip().lower() == "true" if value.strip() else default


# Columns carried on PublishedRun.meta as strings (the engine's presets interpret them).
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
        tied_embeddings=_bool(row["tied_embeddings"], True),
        moe_num_experts=_int(row["moe_num_experts"], 1) or 1,
        moe_top_k=_int(row["moe_top_k"], 1) or 1,
        moe_every_k_layers=_int(row["moe_every_k_layers"], 1) or 1,
        moe_ffn_hidden_size=_int(row["moe_ffn_hidden_size"]),
    )


def load_runs() -> tuple[list[PublishedRun], list[Excluded]]:
    """Rows the engine can model, and the others with the reason (the row's own
    ``exclude_reason`` first, then what the loader or the layout check finds)."""
    text = resources.files("profiles.validation").joinpath("published_runs.csv").read_text()
    runs: list[PublishedRun] = []
    excluded: list[Excluded] = []
    for row in csv.DictReader(text.splitlines()):
        if row["exclude_reason"].strip():
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
        training = TrainingSpec(
            global_batch_size=int(row["global_batch_size"]),
            micro_batch_size=_int(row["micro_batch_size"], 1) or 1,
            recompute=row["recompute"],  # type: ignore[arg-type]
            precision=(row["precision"] or "fp16"),  # type: ignore[arg-type]
            flash_attention=_bool(row["flash_attention"], False),
        )
        layout = LayoutSpec(
            pipeline=int(row["pipeline"]),
            tensor=int(row["tensor"]),
            data=int(row["data"]),
            virtual_stages=_int(row["virtual_stages"], 1) or 1,
            context_parallel=_int(row["context_parallel"], 1) or 1,
            expert_parallel=_int(row["expert_parallel"], 1) or 1,
            zero_stage=_int(row["zero_stage"], 0) or 0,
            sequence_parallel=_bool(row["sequence_parallel"], False),
            first_stage_layers=_int(row["first_stage_layers"]),
            last_stage_layers=_int(row["last_stage_layers"]),
        )
        try:
            validate_layout(model, training, layout, 8, int(row["gpus"]))
        except LayoutError as exc:
            excluded.append(Excluded(row["id"], row["source"], f"not modelled: {exc}"))
            continue
        runs.append(
            PublishedRun(
                id=row["id"],
                source=row["source"],
                source_ref=row["source_ref"],
                scenario_inputs=(model, training, layout),
                gpu=row["gpu"],
                measured_s=measured,
                in_fit_set=row["source"] == FIT_SOURCE and row["source_ref"].startswith(FIT_TABLE),
                meta={c: row[c] for c in META_COLUMNS},
            )
        )
    return runs, excluded


def _bandwidth(gpu: str) -> BandwidthProvider:
    from profiles.nominal import nominal_bandwidth

    family = "h100" if gpu.startswith(("h100", "h200")) else "a100"
    return nominal_bandwidth(NOMINAL_PROFILE[family])


def scenario_for(
    run: PublishedRun,
    *,
    utilization: float,
    memory_traffic_factor: float,
    bandwidth: BandwidthProvider | None = None,
) -> Scenario:
    """The row as an engine scenario on its GPU's nominal DGX profile."""
    model, training, layout = run.scenario_inputs
    gpu = gpu_preset(run.gpu)
    precision = training.precision if training.precision in gpu.peak_flops else Precision.FP16
    cluster = ClusterSpec(
        gpus_per_node=8,
        peak_flops=gpu.peak_flops[precision],
        utilization=utilization,
        bandwidth=bandwidth or _bandwidth(run.gpu),
        gpu_memory_bytes=gpu.memory_bytes,
        memory_bandwidth_gbps=gpu.memory_bandwidth_gbps,
        memory_traffic_factor=memory_traffic_factor,
    )
    return Scenario(model, training, layout, cluster)


def linear_terms(run: PublishedRun) -> tuple[float, float, float]:
    """(A, G, B) with T(u, γ) = A/u + G·γ + B, from three engine evaluations."""
    bw = _bandwidth(run.gpu)

    def t(u: float, gamma: float) -> float:
        sc = scenario_for(run, utilization=u, memory_traffic_factor=gamma, bandwidth=bw)
        return estimate(sc).iteration_time_s

    t10 = t(1.0, 0.0)
    a = t(0.5, 0.0) - t10
    g = t(1.0, 1.0) - t10
    return a, g, t10 - a


def fit_compute_model(
    terms: list[tuple[float, float, float]], measured: list[float]
) -> tuple[float, float]:
    """(u, γ) minimising the squared relative errors; γ ≥ 0, u in (0, 1]."""
    arr = np.asarray(terms, dtype=np.float64)
    t = np.asarray(measured, dtype=np.float64)
    design = arr[:, :2] / t[:, None]
    target = (t - arr[:, 2]) / t
    (x, gamma), *_ = np.linalg.lstsq(design, target, rcond=None)
    if gamma < 0:  # γ pinned at 0: one-parameter fit of 1/u
        gamma = 0.0
        x = float(design[:, 0] @ target / (design[:, 0] @ design[:, 0]))
    if not (math.isfinite(x) and x >= 1.0):
        raise CalibrationError(
            "utilization", 1.0 / x if x else math.inf, "the fit gives u outside (0, 1]"
        )
    return 1.0 / float(x), float(gamma)


def _summary(rows: list[RowResult]) -> Summary:
    errors = [abs(r.error_pct) for r in rows]
    return Summary(
        len(rows), float(np.mean(errors)) if errors else 0.0, max(errors) if errors else 0.0
    )


def run_validation() -> ValidationReport:
    """Every modelable published run, predicted out of sample (see the module docstring)."""
    runs, excluded = load_runs()
    terms = {run.id: linear_terms(run) for run in runs}
    fit_runs = [r for r in runs if r.in_fit_set]
    u_all, g_all = fit_compute_model(
        [terms[r.id] for r in fit_runs], [r.measured_s for r in fit_runs]
    )
    results: list[RowResult] = []
    for run in runs:
        if run.in_fit_set:
            others = [r for r in fit_runs if r.id != run.id]
            u, g = fit_compute_model([terms[r.id] for r in others], [r.measured_s for r in others])
            fitted_on = f"SC21 Table 1 without {run.id} (leave-one-out)"
        else:
            u, g = u_all, g_all
            fitted_on = "SC21 Table 1 (all 10 rows)"
        a, gg, b = terms[run.id]
        predicted = a / u + gg * g + b
        results.append(
            RowResult(
                run.id,
                run.source,
                predicted,
                run.measured_s,
                100.0 * (predicted - run.measured_s) / run.measured_s,
                fitted_on,
                u,
                g,
            )
        )
    sources = sorted({r.source for r in results})
    by_source = {s: _summary([r for r in results if r.source == s]) for s in sources}
    loo = [r for r in results if "leave-one-out" in r.fitted_on]
    by_source["sc21_table1_leave_one_out"] = _summary(loo)
    return ValidationReport(
        results,
        _summary(results),
        by_source,
        {"utilization": u_all, "memory_traffic_factor": g_all},
        excluded,
    )
