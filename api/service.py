"""Requests to engine objects and engine results to response bodies; no HTTP in here.

Keyword-only functions. They turn the API's request schemas into the estimator's typed specs
(``ModelSpec``, ``TrainingSpec``, ``LayoutSpec``, ``ClusterSpec``), resolve a cluster from a
stored profile through a :class:`ProfileSource`, run the engine, and shape its results as the
plain dicts the routes return. Every choice made for the user is written into the answer's
``assumptions`` or ``warnings``; nothing is filled in silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from sqlalchemy.orm import Session

from api.caches import Profiles, ProfileSnapshot, SessionScope
from api.schemas import (
    BaselinePut,
    CalibrationEstimateIn,
    CalibrationRequest,
    CheckRequest,
    ClusterIn,
    EstimateRequest,
    LayoutIn,
    ModelIn,
    PlanRequest,
    ProfileCreate,
    ProfileUpdate,
    TrafficMatrixRequest,
    TrainingIn,
)
from estimator import (
    TERMS,
    Algorithm,
    ClusterSpec,
    Estimate,
    FixedBandwidth,
    LayoutSpec,
    ModelSpec,
    Recompute,
    Scenario,
    SparseTraffic,
    TrainingSpec,
    estimate,
    estimate_traffic,
    megatron_parameters,
    plan,
)
from estimator.bandwidth import (
    FloatArray,
    TrafficKind,
    bus_factor,
    parse_collective,
)
from estimator.errors import ConflictError, LimitError, ValidationError
from estimator.presets import GPU_PRESETS, MODEL_PRESETS, gpu_preset, model_preset
from estimator.specs import Precision
from profiles import repository
from profiles.calibration import CalibrationSample, fit_utilization
from profiles.models import Baseline, Calibration, Profile, Run

GB = 1e9
DEFAULT_TOLERANCE = 0.05
_MODEL_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "vocab_size",
    "ffn_hidden_size",
    "swiglu",
    "num_query_groups",
    "tied_embeddings",
    "num_parameters",
    "moe_num_experts",
    "moe_top_k",
    "moe_every_k_layers",
    "moe_ffn_hidden_size",
)
_REQUIRED_MODEL_FIELDS = _MODEL_FIELDS[:5]


# --- request -> engine specs ------------------------------------------------------------------


def model_spec(*, model: ModelIn) -> ModelSpec:
    """A ModelSpec from a preset (plus overrides) or from explicit shape fields."""
    given = {
        name: getattr(model, name) for name in _MODEL_FIELDS if getattr(model, name) is not None
    }
    if model.preset is not None:
        base = model_preset(model.preset)
        return replace(base, **given) if given else base
    for name in _REQUIRED_MODEL_FIELDS:
        if name not in given:
            raise ValidationError(
                f"model.{name}", None, "required unless model.preset names a preset"
            )
    return ModelSpec(**given)


def training_spec(*, training: TrainingIn) -> TrainingSpec:
    """A TrainingSpec (the engine checks the ranges)."""
    return TrainingSpec(
        global_batch_size=training.global_batch_size,
        micro_batch_size=training.micro_batch_size,
        recompute=training.recompute,
        precision=training.precision,
        grad_reduce_precision=training.grad_reduce_precision,
        flash_attention=training.flash_attention,
    )


def layout_spec(*, layout: LayoutIn) -> LayoutSpec:
    """A LayoutSpec (the engine checks the ranges and the rank order)."""
    return LayoutSpec(**layout.model_dump())


@dataclass(slots=True)
class ResolvedCluster:
    """A ClusterSpec and where its figures came from."""

    spec: ClusterSpec
    profile: str | None
    utilization_source: str
    bandwidth_label: str
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The ``cluster`` member of a response."""
        return {
            "profile": self.profile,
            "gpus_per_node": self.spec.gpus_per_node,
            "peak_tflops": self.spec.peak_flops / 1e12,
            "utilization": self.spec.utilization,
            "utilization_source": self.utilization_source,
            "gpu_memory_bytes": self.spec.gpu_memory_bytes,
            "memory_bandwidth_gbps": self.spec.memory_bandwidth_gbps,
            "memory_traffic_factor": self.spec.memory_traffic_factor,
            "bandwidth": self.bandwidth_label,
        }


def _fixed_bandwidth(cluster: ClusterIn) -> FixedBandwidth:
    bw = cluster.bandwidth_gbps
    assert bw is not None
    return FixedBandwidth(
        tp_gbps=bw.tp,
        pp_gbps=bw.pp,
        dp_gbps=bw.dp,
        cp_gbps=bw.cp,
        expert_gbps=bw.expert,
        embedding_sync_gbps=bw.embedding_sync,
    )


def _forbid_with_profile(cluster: ClusterIn) -> None:
    for name, why in (
        ("gpus_per_node", "the profile gives GPUs per node"),
        ("bandwidth_gbps", "the profile gives the bandwidths; leave out profile to use scalar C"),
        ("gpu", "the profile gives the GPU; override peak_tflops or gpu_memory_gb instead"),
    ):
        value = getattr(cluster, name)
        if value is not None:
            raise ValidationError(
                f"cluster.{name}",
                value.model_dump() if hasattr(value, "model_dump") else value,
                f"not allowed with cluster.profile: {why}",
            )


def _profile_cluster(
    cluster: ClusterIn, precision: Precision, profiles: Profiles
) -> ResolvedCluster:
    assert cluster.profile is not None
    _forbid_with_profile(cluster)
    snap = profiles.profile(cluster.profile)
    notes: list[str] = []
    if cluster.peak_tflops is not None:
        peak_tflops = cluster.peak_tflops
        notes.append(f"peak {peak_tflops:g} TFLOP/s as given (overrides the profile's)")
    elif precision.value in snap.peak_tflops_by_dtype:
        peak_tflops = snap.peak_tflops_by_dtype[precision.value]
        notes.append(f"peak {peak_tflops:g} TFLOP/s: profile {snap.name!r}, {precision.value}")
    elif snap.peak_tflops is not None:
        peak_tflops = snap.peak_tflops
        listed = ", ".join(sorted(snap.peak_tflops_by_dtype)) or "none"
        notes.append(
            f"peak {peak_tflops:g} TFLOP/s: profile {snap.name!r}'s peak_tflops (it lists no "
            f"{precision.value} figure; per-dtype figures: {listed})"
        )
    else:
        raise ValidationError(
            "cluster.peak_tflops",
            None,
            f"profile {snap.name!r} has no peak FLOP/s for {precision.value}; give "
            "cluster.peak_tflops or PATCH the profile's peak_tflops",
        )
    if cluster.utilization is not None:
        utilization, source = cluster.utilization, "request"
    elif snap.utilization is not None:
        utilization = snap.utilization
        source = f"profile ({snap.utilization_source or 'given'})"
    else:
        raise ValidationError(
            "cluster.utilization",
            None,
            f"profile {snap.name!r} has no utilization u (neither given nor fitted); give "
            "cluster.utilization, PATCH the profile's utilization, or POST a calibration",
        )
    memory: float | None = snap.gpu_memory_bytes
    if cluster.gpu_memory_gb is not None:
        memory = cluster.gpu_memory_gb * GB
    label = f"profile {snap.name!r}" + (" (nominal: vendor link rates)" if snap.nominal else "")
    hbm = cluster.memory_bandwidth_gbps or snap.memory_bandwidth_gbps
    gamma = (
        cluster.memory_traffic_factor
        if cluster.memory_traffic_factor is not None
        else snap.memory_traffic_factor
    )
    if cluster.memory_traffic_factor is None and gamma > 0:
        notes.append(
            f"γ={gamma:g} and HBM {hbm:g} GB/s: profile {snap.name!r}'s compute model "
            "(fitted together with its u); give cluster.memory_traffic_factor=0 for pure FLOPs"
        )
    spec = ClusterSpec(
        gpus_per_node=snap.gpus_per_node,
        peak_flops=peak_tflops * 1e12,
        utilization=utilization,
        bandwidth=snap.bandwidth,
        gpu_memory_bytes=memory,
        name=snap.name,
        memory_bandwidth_gbps=hbm,
        memory_traffic_factor=gamma,
    )
    return ResolvedCluster(spec, snap.name, source, label, notes)


def _explicit_cluster(cluster: ClusterIn, precision: Precision) -> ResolvedCluster:
    for name, rule in (
        ("gpus_per_node", "required without cluster.profile"),
        ("utilization", "required without cluster.profile (u, the fraction of peak achieved)"),
        ("bandwidth_gbps", "required without cluster.profile: {tp, pp, dp} busbw in GB/s"),
    ):
        if getattr(cluster, name) is None:
            raise ValidationError(f"cluster.{name}", None, rule)
    assert cluster.gpus_per_node is not None and cluster.utilization is not None
    notes: list[str] = []
    memory: float | None = None
    hbm = cluster.memory_bandwidth_gbps
    peak_tflops = cluster.peak_tflops
    if cluster.gpu is not None:
        gpu = gpu_preset(cluster.gpu)
        memory = gpu.memory_bytes
        hbm = hbm or gpu.memory_bandwidth_gbps
        if peak_tflops is None:
            if precision not in gpu.peak_flops:
                raise ValidationError(
                    "cluster.gpu",
                    cluster.gpu,
                    f"{gpu.name} has no {precision.value} peak; give cluster.peak_tflops",
                )
            peak_tflops = gpu.peak_flops[precision] / 1e12
            notes.append(f"peak {peak_tflops:g} TFLOP/s: {gpu.name} {precision.value} datasheet")
        else:
            notes.append(f"peak {peak_tflops:g} TFLOP/s as given (not {gpu.name}'s datasheet)")
    elif peak_tflops is None:
        raise ValidationError(
            "cluster.peak_tflops", None, "required without cluster.profile or cluster.gpu"
        )
    if cluster.gpu_memory_gb is not None:
        memory = cluster.gpu_memory_gb * GB
    if memory is None:
        notes.append("no GPU memory given: memory.fits is unknown (null)")
    spec = ClusterSpec(
        gpus_per_node=cluster.gpus_per_node,
        peak_flops=peak_tflops * 1e12,
        utilization=cluster.utilization,
        bandwidth=_fixed_bandwidth(cluster),
        gpu_memory_bytes=memory,
        memory_bandwidth_gbps=hbm,
        memory_traffic_factor=cluster.memory_traffic_factor or 0.0,
    )
    return ResolvedCluster(spec, None, "request", "fixed scalar C (bandwidth_gbps)", notes)


def cluster_spec(
    *, cluster: ClusterIn, precision: Precision, profiles: Profiles
) -> ResolvedCluster:
    """The cluster of a request: from a stored profile or from explicit figures."""
    if cluster.profile is not None:
        return _profile_cluster(cluster, precision, profiles)
    return _explicit_cluster(cluster, precision)


@dataclass(slots=True)
class Prepared:
    """A request as engine objects."""

    scenario: Scenario
    cluster: ResolvedCluster


def prepare(*, request: EstimateRequest | CalibrationEstimateIn, profiles: Profiles) -> Prepared:
    """The scenario of an estimate request (cluster resolved)."""
    model = model_spec(model=request.model)
    training = training_spec(training=request.training)
    layout = layout_spec(layout=request.layout)
    assert request.cluster is not None
    cluster = cluster_spec(cluster=request.cluster, precision=training.precision, profiles=profiles)
    scenario = Scenario(
        model, training, layout, cluster.spec, fidelity=request.fidelity, gpus=request.gpus
    )
    return Prepared(scenario, cluster)


# --- estimates ----------------------------------------------------------------------------------


def _require_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise ValidationError(
            "cluster",
            what,
            "the figures give a non-finite time; check peak_tflops, utilization, bandwidths",
        )


def estimate_body(*, result: Estimate, cluster: ResolvedCluster) -> dict[str, Any]:
    """The response body of an estimate."""
    _require_finite(result.iteration_time_s, "iteration_time_s")
    mem = result.memory
    tp = result.throughput
    return {
        "iteration_time_s": result.iteration_time_s,
        "breakdown_s": result.breakdown.as_dict(),
        "link_time_s": dict(result.link_s),
        "ratios": {
            "communication": result.communication_ratio,
            "bubble": result.bubble_ratio,
        },
        "throughput": {
            "tokens_per_s": tp.tokens_per_s,
            "model_tflops_per_gpu": tp.model_tflops_per_gpu,
            "hardware_tflops_per_gpu": tp.hardware_tflops_per_gpu,
            "mfu": tp.mfu,
            "hfu": tp.hfu,
        },
        "traffic_bytes_per_gpu": dict(result.traffic_bytes),
        "collectives": [
            {
                "kind": c.kind.value,
                "term": c.term,
                "op": c.op.value,
                "ranks": c.ranks,
                "nodes": c.nodes,
                "size_bytes": c.size_bytes,
                "calls_per_iteration": c.calls_per_iteration,
                "busbw_gbps": c.busbw_gbps,
                "method": c.method,
                "source": c.source,
                "time_per_call_s": c.time_per_call_s,
                "link_time_s": c.link_time_s,
            }
            for c in result.collectives
        ],
        "memory": {
            "weights_bytes": mem.weights_bytes,
            "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes,
            "activations_bytes": mem.activations_bytes,
            "total_bytes": mem.total_bytes,
            "capacity_bytes": mem.capacity_bytes,
            "fits": mem.fits,
        },
        "micro_batches": result.micro_batches,
        "parameters": result.parameters,
        "parameters_per_gpu": result.gpu_parameters,
        "model_flops_per_iteration": result.model_flops,
        "hardware_flops_per_iteration": result.hardware_flops,
        "gpus": result.scenario.layout.gpus,
        "fidelity": result.scenario.fidelity.value,
        "cluster": cluster.describe(),
        "assumptions": [*cluster.notes, *result.assumptions],
        "warnings": list(result.warnings),
    }


def run_estimate(
    *, request: EstimateRequest, profiles: Profiles
) -> tuple[Estimate, ResolvedCluster]:
    """The engine's estimate for a request."""
    prepared = prepare(request=request, profiles=profiles)
    return estimate(prepared.scenario), prepared.cluster


def estimate_request_body(*, request: EstimateRequest, profiles: Profiles) -> dict[str, Any]:
    """POST /v1/estimates."""
    result, cluster = run_estimate(request=request, profiles=profiles)
    return estimate_body(result=result, cluster=cluster)


# --- traffic matrices -------------------------------------------------------------------------


@dataclass(slots=True)
class TrafficAnswer:
    """A traffic matrix at GPU or node level, with the estimate it came from."""

    traffic: SparseTraffic
    level: Literal["gpu", "node"]
    gpus: int
    gpus_per_node: int
    algorithm: Algorithm
    result: Estimate


def traffic_matrix(
    *,
    request: TrafficMatrixRequest,
    profiles: Profiles,
    max_matrix_gpus: int,
    max_dense_gpus: int,
) -> TrafficAnswer:
    """The request's traffic matrix; LimitError before any allocation when over the caps."""
    layout = request.layout
    gpus = layout.pipeline * layout.tensor * layout.data * layout.context_parallel
    if gpus > max_matrix_gpus:
        raise LimitError(
            f"a traffic matrix of {gpus} GPUs exceeds the cap of {max_matrix_gpus} "
            "(COMMEST_MAX_MATRIX_GPUS)",
            gpus=gpus,
            max_matrix_gpus=max_matrix_gpus,
        )
    dense = request.format == "png"
    if dense and request.level == "gpu" and gpus > max_dense_gpus:
        raise LimitError(
            f"a GPU-level heatmap of {gpus} GPUs exceeds the dense cap of {max_dense_gpus} "
            "(COMMEST_MAX_DENSE_GPUS); ask for level=node or format=json/csv",
            gpus=gpus,
            max_dense_gpus=max_dense_gpus,
        )
    prepared = prepare(request=request, profiles=profiles)
    g = prepared.scenario.cluster.gpus_per_node
    nodes = -(-gpus // g)
    if dense and request.level == "node" and nodes > max_dense_gpus:
        raise LimitError(
            f"a node-level heatmap of {nodes} nodes exceeds the dense cap of {max_dense_gpus}",
            nodes=nodes,
            max_dense_gpus=max_dense_gpus,
        )
    result = estimate(prepared.scenario)
    traffic = estimate_traffic(result, request.algorithm)
    if request.level == "node":
        traffic = traffic.by_node(g)
    return TrafficAnswer(traffic, request.level, gpus, g, request.algorithm, result)


def traffic_json(*, answer: TrafficAnswer) -> dict[str, Any]:
    """Sparse rows and totals of a traffic matrix."""
    t = answer.traffic
    names = [k.value for k in t.kinds]
    rows = [
        {"src": s, "dst": d, "bytes": b, "kind": names[k]}
        for s, d, b, k in zip(
            t.src.tolist(), t.dst.tolist(), t.bytes.tolist(), t.kind.tolist(), strict=True
        )
    ]
    by_kind = {k.value: v for k, v in t.kind_totals().items() if v}
    return {
        "gpus": answer.gpus,
        "gpus_per_node": answer.gpus_per_node,
        "level": answer.level,
        "size": t.size,
        "algorithm": answer.algorithm.value,
        "unit": "bytes per iteration",
        "rows": rows,
        "totals": {"bytes": t.total_bytes, "by_kind": by_kind, "entries": len(t)},
        "iteration_time_s": answer.result.iteration_time_s,
    }


def binned_matrix(*, traffic: SparseTraffic, max_cells: int = 512) -> tuple[FloatArray, int]:
    """The dense matrix summed over kinds, in blocks of k×k endpoints so that it has at most
    ``max_cells`` rows (k = 1 when it already fits); built from the sparse entries directly."""
    size = traffic.size
    k = max(1, -(-size // max_cells))
    cells = -(-size // k)
    flat = np.bincount(
        (traffic.src // k) * cells + traffic.dst // k,
        weights=traffic.bytes,
        minlength=cells * cells,
    )
    return flat.astype(np.float64, copy=False).reshape(cells, cells), k


def traffic_csv_lines(*, answer: TrafficAnswer) -> Iterator[str]:
    """CSV text of a traffic matrix, header ``src,dst,bytes,kind``, in chunks."""
    t = answer.traffic
    names = [k.value for k in t.kinds]
    yield "src,dst,bytes,kind\n"
    step = 50_000
    for start in range(0, len(t), step):
        stop = start + step
        yield "".join(
            f"{s},{d},{b!r},{names[k]}\n"
            for s, d, b, k in zip(
                t.src[start:stop].tolist(),
                t.dst[start:stop].tolist(),
                t.bytes[start:stop].tolist(),
                t.kind[start:stop].tolist(),
                strict=True,
            )
        )


# --- plans ------------------------------------------------------------------------------------


def _sweep_options(request: PlanRequest) -> tuple[dict[str, Any], TrainingSpec]:
    tr = request.training
    pinned = tr.model_fields_set
    b_list = request.micro_batch_sizes
    if "micro_batch_size" in pinned and tr.micro_batch_size is not None:
        if b_list is not None and b_list != [tr.micro_batch_size]:
            raise ValidationError(
                "micro_batch_sizes",
                b_list,
                f"conflicts with training.micro_batch_size={tr.micro_batch_size}; give one",
            )
        b_list = [tr.micro_batch_size]
    rc_list = request.recompute
    if "recompute" in pinned and tr.recompute is not None:
        if rc_list is not None and rc_list != [tr.recompute]:
            raise ValidationError(
                "recompute",
                [r.value for r in rc_list],
                f"conflicts with training.recompute={tr.recompute.value}; give one",
            )
        rc_list = [tr.recompute]
    for b in b_list or ():
        if b <= 0:
            raise ValidationError("micro_batch_sizes", b_list, "each must be a whole number > 0")
    if request.max_tensor is not None and request.max_tensor < 1:
        raise ValidationError("max_tensor", request.max_tensor, "must be >= 1")
    options: dict[str, Any] = {"max_virtual_stages": request.max_virtual_stages}
    if b_list is not None:
        options["micro_batch_sizes"] = sorted(set(b_list))
    if rc_list is not None:
        options["recompute"] = tuple(dict.fromkeys(rc_list))
    if request.sequence_parallel is not None:
        options["sequence_parallel"] = tuple(dict.fromkeys(request.sequence_parallel))
    if request.zero_stages is not None:
        options["zero_stages"] = tuple(sorted(set(request.zero_stages)))
    if request.max_tensor is not None:
        options["max_tensor"] = request.max_tensor
    training = TrainingSpec(
        global_batch_size=tr.global_batch_size,
        micro_batch_size=1,  # swept
        precision=tr.precision,
        grad_reduce_precision=tr.grad_reduce_precision,
        flash_attention=tr.flash_attention,
    )
    return options, training


_RECOMPUTE_BY_CODE = {0: Recompute.NONE, 1: Recompute.SELECTIVE, 2: Recompute.FULL}


def plan_body(*, request: PlanRequest, profiles: Profiles, max_layouts: int) -> dict[str, Any]:
    """POST /v1/plans: every valid layout, evaluated in one pass, the best ``top_k`` shown."""
    model = model_spec(model=request.model)
    options, training = _sweep_options(request)
    cluster = cluster_spec(cluster=request.cluster, precision=training.precision, profiles=profiles)
    found = plan(
        model,
        training,
        cluster.spec,
        request.gpus,
        fidelity=request.fidelity,
        drop_infeasible=request.drop_infeasible,
        max_layouts=max_layouts,
        **options,
    )
    res = found.result
    top = found.order[: request.top_k]
    if len(top) and not np.isfinite(res.iteration_s[top]).all():
        _require_finite(math.inf, "iteration_time_s")
    cols = {name: res.layouts.columns[name][top] for name in ("p", "t", "d", "b", "v")}
    flags = {name: res.layouts.columns[name][top] for name in ("sp", "zero", "recompute")}
    iteration = res.iteration_s[top]
    memory = res.memory_bytes[top]
    fits = res.fits[top]
    terms = {name: np.asarray(res.terms[name])[top] for name in TERMS}
    known_capacity = cluster.spec.gpu_memory_bytes is not None
    gb = training.global_batch_size
    entries = []
    for i in range(len(top)):
        b, d = int(cols["b"][i]), int(cols["d"][i])
        entries.append(
            {
                "rank": i + 1,
                "layout": {
                    "pipeline": int(cols["p"][i]),
                    "tensor": int(cols["t"][i]),
                    "data": d,
                    "virtual_stages": int(cols["v"][i]),
                    "sequence_parallel": bool(flags["sp"][i]),
                    "zero_stage": int(flags["zero"][i]),
                    "micro_batch_size": b,
                    "recompute": _RECOMPUTE_BY_CODE[int(flags["recompute"][i])].value,
                },
                "iteration_time_s": float(iteration[i]),
                "breakdown_s": {name: float(terms[name][i]) for name in TERMS},
                "micro_batches": gb // (b * d),
                "memory_bytes": float(memory[i]),
                "fits": bool(fits[i]) if known_capacity else None,
            }
        )
    warnings: list[str] = []
    if not known_capacity:
        warnings.append(
            "no GPU memory capacity known (give cluster.gpu or cluster.gpu_memory_gb): "
            "layouts are not filtered by memory and fits is null"
        )
    if found.evaluated == 0:
        warnings.append(
            f"no valid layout of {request.gpus} GPUs for this model and batch under the "
            "constraints (p·t·d = gpus, heads divisible by t, layers by p·v, gb by b·d)"
        )
    elif not entries:
        warnings.append("every layout exceeds the GPU memory (drop_infeasible removed them all)")
    assumptions = [
        *cluster.notes,
        "layouts with context_parallel = expert_parallel = 1, rank order tp-dp-pp; "
        "feasible (fits in memory) first, then by iteration time",
        f"swept: {', '.join(f'{k}={v}' for k, v in sorted(options.items()))}",
    ]
    return {
        "gpus": request.gpus,
        "evaluated": found.evaluated,
        "feasible": found.feasible if known_capacity else None,
        "layouts": entries,
        "cluster": cluster.describe(),
        "assumptions": assumptions,
        "warnings": warnings,
    }


# --- checks and baselines ---------------------------------------------------------------------


def baseline_dict(baseline: Baseline) -> dict[str, Any]:
    """A stored baseline as a response body."""
    return {
        "name": baseline.name,
        "iteration_time_s": baseline.iteration_time_s,
        "request": baseline.request,
        "created_at": baseline.created_at,
        "updated_at": baseline.updated_at,
    }


def check_body(
    *, request: CheckRequest, profiles: Profiles, session_scope: SessionScope
) -> dict[str, Any]:
    """POST /v1/checks: the estimate against a budget or a stored baseline."""
    budget, name = request.max_iteration_time_s, request.baseline
    if (budget is None) == (name is None):
        raise ValidationError(
            "max_iteration_time_s" if budget is None else "baseline",
            None if budget is None else name,
            "give exactly one criterion: max_iteration_time_s or baseline",
        )
    if request.tolerance is not None and name is None:
        raise ValidationError(
            "tolerance", request.tolerance, "applies to a baseline check only; give baseline"
        )
    baseline: dict[str, Any] | None = None
    if name is not None:
        with session_scope() as session:
            stored = baseline_dict(repository.get_baseline(session=session, name=name))
        tolerance = DEFAULT_TOLERANCE if request.tolerance is None else request.tolerance
        limit = stored["iteration_time_s"] * (1.0 + tolerance)
        baseline = {**stored, "tolerance": tolerance}
        criterion: Literal["budget", "baseline"] = "baseline"
    else:
        assert budget is not None
        limit, criterion = budget, "budget"
    result, cluster = run_estimate(request=request, profiles=profiles)
    predicted = result.iteration_time_s
    margin = limit - predicted
    return {
        "passed": predicted <= limit,
        "criterion": criterion,
        "predicted_iteration_time_s": predicted,
        "limit_s": limit,
        "margin_s": margin,
        "margin_pct": 100.0 * margin / limit,
        "baseline": baseline,
        "estimate": estimate_body(result=result, cluster=cluster),
    }


def put_baseline(
    *, session: Session, name: str, body: BaselinePut, profiles: Profiles
) -> tuple[dict[str, Any], bool]:
    """Store a baseline: the request and its predicted (or given) time; (body, created)."""
    result, _ = run_estimate(request=body.request, profiles=profiles)
    predicted = result.iteration_time_s
    held = body.iteration_time_s if body.iteration_time_s is not None else predicted
    stored_request = body.request.model_dump(mode="json", exclude_unset=True)
    baseline, created = repository.put_baseline(
        session=session, name=name, request=stored_request, iteration_time_s=held
    )
    out = baseline_dict(baseline)
    out["predicted_iteration_time_s"] = predicted
    out["source"] = "given" if body.iteration_time_s is not None else "predicted"
    return out, created


# --- profiles ---------------------------------------------------------------------------------


def profile_dict(profile: Profile) -> dict[str, Any]:
    """A stored profile as a response body."""
    memory = profile.gpu_memory_bytes
    return {
        "name": profile.name,
        "gpu_model": profile.gpu_model,
        "gpus_per_node": profile.gpus_per_node,
        "peak_tflops": profile.peak_tflops,
        "peak_tflops_by_dtype": profile.peak_tflops_by_dtype,
        "gpu_memory_bytes": memory,
        "gpu_memory_gb": memory / GB if memory is not None else None,
        "utilization": profile.utilization,
        "utilization_source": profile.utilization_source,
        "description": profile.description or "",
        "nominal": bool(profile.nominal),
        "created_at": profile.created_at,
        "updated_at": profile.updated_at,
    }


def _memory_bytes(gb: float | None) -> int | None:
    return None if gb is None else round(gb * GB)


def create_profile(*, session: Session, body: ProfileCreate) -> dict[str, Any]:
    """POST /v1/profiles."""
    profile = repository.create_profile(
        session=session,
        name=body.name,
        gpu_model=body.gpu_model,
        gpus_per_node=body.gpus_per_node,
        peak_tflops=body.peak_tflops,
        peak_tflops_by_dtype=body.peak_tflops_by_dtype,
        gpu_memory_bytes=_memory_bytes(body.gpu_memory_gb),
        utilization=body.utilization,
        description=body.description,
    )
    session.flush()
    return profile_dict(profile)


_NOT_NULL = ("name", "gpu_model", "gpus_per_node", "description")


def update_profile(*, session: Session, name: str, body: ProfileUpdate) -> dict[str, Any]:
    """PATCH /v1/profiles/{name}: the fields given change; nominal profiles keep their name."""
    changes: repository.ProfileChanges = {}
    for key in body.model_fields_set:
        value = getattr(body, key)
        if value is None and key in _NOT_NULL:
            raise ValidationError(key, None, "cannot be null")
        if key == "gpu_memory_gb":
            changes["gpu_memory_bytes"] = _memory_bytes(value)
        else:
            changes[key] = value  # type: ignore[literal-required]
    current = repository.get_profile(session=session, name=name)
    if current.nominal and "name" in changes and changes["name"] != name:
        raise ConflictError(f"profile {name!r} is built in (nominal) and keeps its name", name=name)
    profile = repository.update_profile(session=session, name=name, changes=changes)
    session.flush()
    return profile_dict(profile)


def delete_profile(*, session: Session, name: str) -> None:
    """DELETE /v1/profiles/{name}; built-in nominal profiles cannot be deleted (409)."""
    profile = repository.get_profile(session=session, name=name)
    if profile.nominal:
        raise ConflictError(
            f"profile {name!r} is built in (nominal) and is restored on every start; "
            "it cannot be deleted",
            name=name,
        )
    repository.delete_profile(session=session, name=name)


def run_dict(run: Run, *, points: bool, already_stored: bool | None = None) -> dict[str, Any]:
    """A stored run (optionally with its points) as a response body."""
    out: dict[str, Any] = {
        "id": run.id,
        "upload_id": run.upload_id,
        "collective": run.collective,
        "tool": run.tool,
        "backend": run.backend,
        "ranks": run.ranks,
        "nodes": run.nodes,
        "ranks_per_node": run.ranks_per_node,
        "gpu_model": run.gpu_model,
        "dtype": run.dtype,
        "tool_version": run.tool_version,
        "alpha_us": run.alpha_us,
        "beta_gbps": run.beta_gbps,
        "warnings": list(run.warnings or []),
        "created_at": run.created_at,
        "points": (
            [
                {
                    "size_bytes": p.size_bytes,
                    "time_us": p.time_us,
                    "algbw_gbps": p.algbw_gbps,
                    "busbw_gbps": p.busbw_gbps,
                    "in_place": p.in_place,
                }
                for p in run.points
            ]
            if points
            else None
        ),
    }
    if already_stored is not None:
        out["already_stored"] = already_stored
    return out


@dataclass(frozen=True, slots=True)
class Hints:
    """What the uploader said about a benchmark text the text may not say itself."""

    op: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    backend: str | None = None
    dtype: str | None = None


def upload_texts(
    *, session: Session, name: str, texts: list[str], hints: Hints
) -> tuple[dict[str, Any], bool]:
    """Store each text's runs (once per distinct text); (body, whether anything was new)."""
    repository.get_profile(session=session, name=name)
    runs: list[dict[str, Any]] = []
    warnings: list[str] = []
    stored_new = False
    for text in texts:
        outcome = repository.upload_runs(
            session=session,
            profile_name=name,
            text=text,
            op=hints.op,
            ranks=hints.ranks,
            nodes=hints.nodes,
            backend=hints.backend,
            dtype=hints.dtype,
        )
        stored_new = stored_new or not outcome.already_stored
        runs.extend(
            run_dict(run, points=True, already_stored=outcome.already_stored)
            for run in outcome.runs
        )
        warnings.extend(w for w in outcome.warnings if w not in warnings)
    return {"runs": runs, "warnings": warnings}, stored_new


def bandwidth_body(
    *, snapshot: ProfileSnapshot, op: str, ranks: int, nodes: int, size_bytes: float
) -> dict[str, Any]:
    """GET /v1/profiles/{name}/bandwidth: one effective-bandwidth answer with provenance."""
    collective = parse_collective(op)
    if ranks < 1:
        raise ValidationError("ranks", ranks, "must be >= 1")
    if not 1 <= nodes <= ranks:
        raise ValidationError("nodes", nodes, f"must be in 1..ranks ({ranks})")
    if not (math.isfinite(size_bytes) and size_bytes > 0):
        raise ValidationError("bytes", size_bytes, "must be a finite number > 0")
    answer = snapshot.bandwidth.explain(TrafficKind.DP, collective, ranks, nodes, size_bytes)
    factor = float(bus_factor(collective, float(ranks)))
    algbw = answer.busbw_gbps / factor if factor else math.inf
    time_us = size_bytes / (algbw * 1e3) if factor else 0.0
    return {
        "profile": snapshot.name,
        "op": collective.value,
        "ranks": ranks,
        "nodes": nodes,
        "bytes": size_bytes,
        "busbw_gbps": answer.busbw_gbps,
        "algbw_gbps": algbw,
        "time_us": time_us,
        "method": answer.method,
        "source": answer.source,
    }


def curves_body(
    *, snapshot: ProfileSnapshot, op: str | None, include_nominal: bool
) -> dict[str, Any]:
    """GET /v1/profiles/{name}/curves (json)."""
    curves = snapshot.bandwidth.provider.curves(include_nominal=include_nominal)
    if op is not None:
        wanted = parse_collective(op).value
        curves = [c for c in curves if c.op == wanted]
    return {
        "profile": snapshot.name,
        "curves": [
            {
                "op": c.op,
                "ranks": c.ranks,
                "nodes": c.nodes,
                "backend": c.backend,
                "dtype": c.dtype,
                "run_id": c.run_id,
                "label": c.label,
                "nominal": c.nominal,
                "in_place": c.in_place,
                "sizes_bytes": c.sizes_bytes,
                "busbw_gbps": c.busbw_gbps,
                "alpha_us": c.alpha_us,
                "beta_gbps": c.beta_gbps,
            }
            for c in curves
        ],
    }


def tuning_body(
    *, snapshot: ProfileSnapshot, op: str, ranks: int, nodes: int | None
) -> dict[str, Any]:
    """GET /v1/profiles/{name}/tuning-table."""
    collective = parse_collective(op)
    rows = snapshot.bandwidth.provider.tuning_table(op=collective, ranks=ranks, nodes=nodes)
    return {
        "profile": snapshot.name,
        "op": collective.value,
        "ranks": ranks,
        "nodes": nodes,
        "rows": [r._asdict() for r in rows],
    }


# --- calibrations -----------------------------------------------------------------------------


def _calibration_request(run: CalibrationEstimateIn, name: str, index: int) -> EstimateRequest:
    where = f"runs[{index}].request.cluster"
    cluster = run.cluster or ClusterIn(profile=name)
    if cluster.profile is None:
        cluster = cluster.model_copy(update={"profile": name})
    elif cluster.profile != name:
        raise ValidationError(
            f"{where}.profile", cluster.profile, f"must be the calibrated profile {name!r}"
        )
    if cluster.utilization is not None:
        raise ValidationError(
            f"{where}.utilization", cluster.utilization, "calibration fits u; leave it out"
        )
    return EstimateRequest(
        model=run.model,
        layout=run.layout,
        training=run.training,
        fidelity=run.fidelity,
        gpus=run.gpus,
        cluster=cluster,
    )


def calibrate(
    *, session: Session, name: str, body: CalibrationRequest, profiles: Profiles
) -> dict[str, Any]:
    """Fit u from measured iteration times: T(u) = A/u + B from the engine at u = 1 and 0.5."""
    samples = []
    for i, run in enumerate(body.runs):
        request = _calibration_request(run.request, name, i)
        with_u = request.model_copy(
            update={"cluster": request.cluster.model_copy(update={"utilization": 1.0})}
        )
        prepared = prepare(request=with_u, profiles=profiles)
        at_one = estimate(prepared.scenario).iteration_time_s
        sc = prepared.scenario
        half = Scenario(
            sc.model,
            sc.training,
            sc.layout,
            replace(sc.cluster, utilization=0.5),
            fidelity=sc.fidelity,
            gpus=sc.gpus,
        )
        at_half = estimate(half).iteration_time_s
        # T(u) = A/u + B: T(1) = A + B and T(0.5) = 2A + B, so A = T(0.5) - T(1).
        scaled = at_half - at_one
        fixed = at_one - scaled
        if -1e-9 * at_one < fixed < 0.0:
            fixed = 0.0  # rounding of a purely compute-bound time
        samples.append(
            CalibrationSample(
                scaled_s=scaled,
                fixed_s=fixed,
                measured_s=run.measured_iteration_time_s,
                label=run.label or f"runs[{i}]",
            )
        )
    result = fit_utilization(samples)
    inputs = body.model_dump(mode="json", exclude_unset=True)
    calibration = repository.save_calibration(
        session=session,
        profile_name=name,
        inputs=inputs,
        samples=samples,
        result=result,
        apply=body.apply,
    )
    session.flush()
    return calibration_dict(calibration, samples=samples, applied=body.apply, profile=name)


def calibration_dict(
    calibration: Calibration,
    *,
    profile: str,
    applied: bool | None,
    samples: list[CalibrationSample] | None = None,
) -> dict[str, Any]:
    """A stored calibration as a response body."""
    residuals = []
    for i, r in enumerate(calibration.residuals or []):
        sample = samples[i] if samples else None
        residuals.append(
            {
                **r,
                "scaled_s": sample.scaled_s if sample else r.get("scaled_s"),
                "fixed_s": sample.fixed_s if sample else r.get("fixed_s"),
            }
        )
    return {
        "id": calibration.id,
        "profile": profile,
        "utilization": calibration.utilization,
        "mape_pct": calibration.mape_pct,
        "residuals": residuals,
        "applied": applied,
        "created_at": calibration.created_at,
    }


# --- presets ----------------------------------------------------------------------------------


def model_presets_body() -> list[dict[str, Any]]:
    """GET /v1/presets/models."""
    out = []
    for key, preset in MODEL_PRESETS.items():
        spec = preset.spec
        out.append(
            {
                "key": key,
                "source": preset.source,
                "published_parameters": preset.published_parameters,
                "parameters": megatron_parameters(spec)
                if spec.num_parameters is None
                else float(spec.num_parameters),
                "spec": {name: getattr(spec, name) for name in _MODEL_FIELDS},
            }
        )
    return out


def gpu_presets_body() -> list[dict[str, Any]]:
    """GET /v1/presets/gpus."""
    return [
        {
            "key": key,
            "name": gpu.name,
            "memory_bytes": gpu.memory_bytes,
            "peak_tflops": {p.value: flops / 1e12 for p, flops in gpu.peak_flops.items()},
            "source": gpu.source,
        }
        for key, gpu in GPU_PRESETS.items()
    ]
