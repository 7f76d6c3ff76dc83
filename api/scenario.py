"""A request as the engine's objects: the translation every scenario-taking resource shares.

Keyword-only functions turn the API's request schemas into the estimator's typed specs
(``ModelSpec``, ``TrainingSpec``, ``LayoutSpec``, ``ClusterSpec``) and resolve a cluster from a
stored profile (through a :class:`~api.snapshots.Profiles` source) or from explicit figures.
Every choice made for the user is written into ``ResolvedCluster.notes`` (the answer's
``assumptions``); nothing is filled in silently. No HTTP in here.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from api.schemas import (
    GB,
    CalibrationEstimateIn,
    ClusterIn,
    EstimateRequest,
    LayoutIn,
    ModelIn,
    PlanTrainingIn,
    TrainingIn,
)
from api.snapshots import Profiles
from estimator import (
    ClusterSpec,
    Estimate,
    FixedBandwidth,
    LayoutSpec,
    ModelSpec,
    Scenario,
    TrainingSpec,
    estimate,
)
from estimator.bandwidth import weak_answer_warning
from estimator.calibrated import fitted_for_gpu
from estimator.engine import attention_on_cuda_cores
from estimator.errors import ValidationError
from estimator.frameworks import Framework, resolve_framework
from estimator.presets import GpuPreset, gpu_family_preset, gpu_preset, model_preset
from estimator.specs import Fidelity, Precision

#: ModelSpec fields without a default: an explicit model (no preset) must give them all.
_REQUIRED_MODEL_FIELDS = tuple(
    f.name
    for f in fields(ModelSpec)
    if f.default is MISSING and f.default_factory is MISSING and f.init
)


def model_spec(*, model: ModelIn) -> ModelSpec:
    """A ModelSpec from a preset (plus overrides) or from explicit shape fields."""
    given = model.model_dump(exclude_none=True, exclude={"preset"})
    if model.preset is not None:
        base = model_preset(model.preset)
        return replace(base, **given) if given else base
    for name in _REQUIRED_MODEL_FIELDS:
        if name not in given:
            raise ValidationError(
                f"model.{name}", None, "required unless model.preset names a preset"
            )
    return ModelSpec(**given)


def framework(*, training: TrainingIn | PlanTrainingIn) -> Framework:
    """The framework preset a request names, with its overridden flags."""
    overrides = (
        training.framework_overrides.model_dump(exclude_none=True)
        if training.framework_overrides is not None
        else {}
    )
    return resolve_framework(training.framework, overrides)


def training_spec(*, training: TrainingIn) -> TrainingSpec:
    """A TrainingSpec (the engine checks the ranges)."""
    given = training.model_dump(exclude={"framework", "framework_overrides"})
    return TrainingSpec(**given, framework=framework(training=training))


def layout_spec(*, layout: LayoutIn) -> LayoutSpec:
    """A LayoutSpec (the engine checks the ranges and the rank order)."""
    return LayoutSpec(**layout.model_dump())


@dataclass(slots=True)
class ResolvedCluster:
    """A ClusterSpec and where its figures came from (the ``cluster`` member of an answer)."""

    spec: ClusterSpec
    profile: str | None
    utilization_source: str
    bandwidth: str  # how the bandwidths were obtained, e.g. "profile 'x'" or "fixed scalar C"
    notes: list[str] = field(default_factory=list)

    @property
    def peak_tflops(self) -> float:
        return self.spec.peak_flops / 1e12

    @property
    def cuda_core_peak_tflops(self) -> float | None:
        peak = self.spec.cuda_core_peak_flops
        return None if peak is None else peak / 1e12


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
    roofline = _roofline(cluster, snap.gpu_model, f"profile {snap.name!r}", notes, hbm)
    spec = ClusterSpec(
        gpus_per_node=snap.gpus_per_node,
        peak_flops=peak_tflops * 1e12,
        utilization=utilization,
        bandwidth=snap.bandwidth,
        gpu_memory_bytes=memory,
        name=snap.name,
        memory_bandwidth_gbps=hbm,
        memory_traffic_factor=gamma,
        **roofline,
    )
    return ResolvedCluster(spec, snap.name, source, label, notes)


def _roofline(
    cluster: ClusterIn, gpu_model: str | None, where: str, notes: list[str], hbm: float | None
) -> dict[str, Any]:
    """c, u8 and FlashAttention-2's efficiency: as given, else the GPU family's (noted)."""
    fitted = fitted_for_gpu(gpu_model)
    family = gpu_family_preset(gpu_model)
    out: dict[str, Any] = {}
    if cluster.gemm_traffic_factor is not None:
        out["gemm_traffic_factor"] = cluster.gemm_traffic_factor
    elif fitted is not None and hbm:
        out["gemm_traffic_factor"] = fitted.gemm_traffic_factor
    if cluster.gemm_half_size_elements is not None:
        out["gemm_half_size_elements"] = cluster.gemm_half_size_elements
    elif fitted is not None and fitted.gemm_half_size_elements:
        out["gemm_half_size_elements"] = fitted.gemm_half_size_elements
        notes.append(
            f"linear-layer GEMMs at u·x/(x + {fitted.gemm_half_size_elements:g}), x the harmonic "
            f"mean of the per-GPU weight's dimensions: {where}'s GPU family ({fitted.source})"
        )
    for name, symbol, what in (
        ("fp8_utilization", "u8", "FP8 GEMMs"),
        ("fp8_expert_utilization", "u8e", "FP8 MoE expert GEMMs"),
    ):
        given = getattr(cluster, name)
        if given is not None:
            out[name] = given
        elif fitted is not None and (fit := getattr(fitted, name)) is not None:
            out[name] = fit
            notes.append(f"{symbol}={fit:g} for {what}: {where}'s GPU family ({fitted.source})")
    if cluster.flash2_efficiency is not None:
        out["flash2_efficiency"] = cluster.flash2_efficiency
    elif family is not None and family.flash2_efficiency != 1.0:
        out["flash2_efficiency"] = family.flash2_efficiency
        notes.append(
            f"FlashAttention-2 at {family.flash2_efficiency:g} x the GEMM efficiency: {where}'s "
            f"GPU family ({family.name})"
        )
    out["cuda_core_peak_flops"] = _cuda_core_peak_flops(cluster, family)
    return out


def _cuda_core_peak_flops(cluster: ClusterIn, gpu: GpuPreset | None) -> float | None:
    """The CUDA cores' FP32 rate: as given, else the GPU's datasheet FP32 figure, else None."""
    if cluster.cuda_core_peak_tflops is not None:
        return cluster.cuda_core_peak_tflops * 1e12
    return None if gpu is None else gpu.cuda_core_peak_flops


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
    roofline = {
        "gemm_traffic_factor": cluster.gemm_traffic_factor or 0.0,
        "gemm_half_size_elements": cluster.gemm_half_size_elements or 0.0,
        "fp8_utilization": cluster.fp8_utilization,
        "fp8_expert_utilization": cluster.fp8_expert_utilization,
    }
    preset = None if cluster.gpu is None else gpu_preset(cluster.gpu)
    if cluster.flash2_efficiency is not None:
        roofline["flash2_efficiency"] = cluster.flash2_efficiency
    elif preset is not None:
        roofline["flash2_efficiency"] = preset.flash2_efficiency
    roofline["cuda_core_peak_flops"] = _cuda_core_peak_flops(cluster, preset)
    spec = ClusterSpec(
        gpus_per_node=cluster.gpus_per_node,
        peak_flops=peak_tflops * 1e12,
        utilization=cluster.utilization,
        bandwidth=_fixed_bandwidth(cluster),
        gpu_memory_bytes=memory,
        memory_bandwidth_gbps=hbm,
        memory_traffic_factor=cluster.memory_traffic_factor or 0.0,
        **roofline,  # type: ignore[arg-type]
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


@dataclass(frozen=True, slots=True)
class Answer:
    """An estimate and the cluster it was made on: what an estimate response shows (each
    collective carries its bandwidth provider's answer, with its quality)."""

    estimate: Estimate
    cluster: ResolvedCluster

    @property
    def assumptions(self) -> list[str]:
        """The cluster's notes, then the engine's."""
        return [*self.cluster.notes, *self.estimate.assumptions]

    @property
    def warnings(self) -> list[str]:
        """The engine's warnings, then one line per weak bandwidth answer (issue 10)."""
        out = list(self.estimate.warnings)
        for use in self.estimate.collectives:
            line = weak_answer_warning(use.op, use.ranks, use.nodes, use.size_bytes, use.explain())
            if line is not None and line not in out:
                out.append(line)
        return out


def run(*, request: EstimateRequest, profiles: Profiles) -> Answer:
    """The engine's estimate for a request, with its resolved cluster."""
    prepared = prepare(request=request, profiles=profiles)
    result = estimate(prepared.scenario)
    return Answer(result, prepared.cluster)


def figures(
    cluster: ClusterSpec,
    model: ModelSpec | None = None,
    training: TrainingSpec | None = None,
    fidelity: Fidelity = Fidelity.DETAILED,
) -> dict[str, float]:
    """The cluster figures a scenario's times scale with: what a 422 for an answer that is
    not a finite number names (``api.schemas.finite_answer``). The CUDA cores' rate is one of
    them where the model's attention runs on them (given the model and training)."""
    out = {
        "cluster.peak_tflops": cluster.peak_flops / 1e12,
        "cluster.utilization": cluster.utilization,
    }
    if (
        model is not None
        and training is not None
        and cluster.cuda_core_peak_flops is not None
        and attention_on_cuda_cores(model, training, cluster, fidelity)
    ):
        out["cluster.cuda_core_peak_tflops"] = cluster.cuda_core_peak_flops / 1e12
    return out


def scenario_figures(sc: Scenario) -> dict[str, float]:
    """``figures`` of a scenario's cluster, model and training."""
    return figures(sc.cluster, sc.model, sc.training, sc.fidelity)
