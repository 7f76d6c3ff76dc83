"""The compute constants `commest validate` fits, per GPU family, with their provenance.

The detailed model's per-operation roofline (estimator.compute) has six fitted constants; the
validation report (profiles.validation.report) fits them on its declared training subset only:
the A100 GEMM efficiency u, the element-wise factor γ and the GEMM operand-traffic factor c on
Megatron-LM SC21 Table 1; the H100 16-bit and FP8 GEMM efficiencies on the dense runs of NVIDIA's
DGX Cloud benchmarking recipes; then the size x0 of the size-dependent GEMM efficiency jointly on
both, with u, γ and u8 refitted alongside; last, u8e, the FP8 efficiency of MoE expert GEMMs, on
the FP8 Grok-1 runs of the same DGX Cloud recipes. The nominal DGX profiles carry these values;
a test checks that they equal what the report fits today.

The same report scores every published run out of sample; ``VALIDATED_ACCURACY`` keeps its
figures per kind of trainer, so an estimate can say how far runs of its kind were off (a test
checks them against the report too); ``FINE_GRAINED_MOE_ACCURACY`` the same for MoE models whose
experts are narrower than the model, the kind of run it predicts worst; ``VALIDATED_BY_MODEL``
the same per kind of trainer and model, for an estimate of a model commest was validated on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from estimator.frameworks import TrainerKind

__all__ = [
    "ACCURACY_WARNING_PCT",
    "FINE_GRAINED_MOE_ACCURACY",
    "FITTED_COMPUTE",
    "VALIDATED_ACCURACY",
    "VALIDATED_ACCURACY_FINE_GRAINED_MOE",
    "VALIDATED_BY_MODEL",
    "FineGrainedMoeAccuracy",
    "FittedCompute",
    "ModelAccuracy",
    "RunsAccuracy",
    "ValidatedAccuracy",
    "fitted_for_gpu",
    "runs_fitted_compute",
]


@dataclass(frozen=True, slots=True)
class FittedCompute:
    """One GPU family's fitted compute constants (see estimator.compute)."""

    utilization: float  # u: 16-bit GEMMs as large as x >> x0, fraction of the dense peak
    memory_traffic_factor: float  # γ
    gemm_traffic_factor: float  # c
    fp8_utilization: float | None  # u8: FP8 GEMMs, fraction of the FP8 peak
    source: str
    # x0: the per-GPU weight size (elements) at which a linear layer runs at half of u
    # (estimator.compute.size_factor); one value for both families.
    gemm_half_size_elements: float = 0.0
    # u8e: MoE expert GEMMs in FP8, fraction of the FP8 peak; None: u8
    fp8_expert_utilization: float | None = None


_SUBSET = "fitted by commest validate on its declared training subset"
FITTED_COMPUTE: dict[str, FittedCompute] = {
    "a100": FittedCompute(
        utilization=0.7800,
        memory_traffic_factor=1.9709,
        gemm_traffic_factor=0.0,
        fp8_utilization=None,
        source=f"{_SUBSET} (Megatron-LM SC21 Table 1, A100; x0 jointly with the H100 runs)",
        gemm_half_size_elements=842.11,
    ),
    "h100": FittedCompute(
        utilization=0.6714,
        memory_traffic_factor=1.9709,
        gemm_traffic_factor=0.0,
        fp8_utilization=0.6056,
        source=f"{_SUBSET} (γ and c from SC21 Table 1; u and u8 from the dense DGX Cloud "
        "benchmarking runs, H100; x0 jointly with SC21 Table 1; u8e from the FP8 Grok-1 DGX "
        "Cloud runs)",
        gemm_half_size_elements=842.11,
        fp8_expert_utilization=0.4656,
    ),
}


def runs_fitted_compute(
    utilization: float,
    memory_traffic_factor: float,
    gemm_traffic_factor: float,
    gemm_half_size_elements: float,
    fp8_utilization: float | None,
    *,
    fp8: bool,
    fp8_expert_utilization: float | None = None,
    moe: bool = False,
) -> bool:
    """Whether these are one GPU family's fitted constants, i.e. the model `commest validate`
    scores (for FP8 training, the family's fitted u8 too, and for a MoE model its u8e)."""
    families = _FITTED_BY_CONSTANTS.get(
        (utilization, memory_traffic_factor, gemm_traffic_factor, gemm_half_size_elements), ()
    )
    return any(
        not fp8
        or (
            f.fp8_utilization is not None
            and fp8_utilization == f.fp8_utilization
            and (not moe or fp8_expert_utilization == f.fp8_expert_utilization)
        )
        for f in families
    )


def _by_constants() -> dict[tuple[float, float, float, float], tuple[FittedCompute, ...]]:
    """The families by their 16-bit constants (u, γ, c, x0): every estimate asks whether it
    runs one, so one lookup of the floats instead of a comparison per family and constant."""
    out: dict[tuple[float, float, float, float], tuple[FittedCompute, ...]] = {}
    for f in FITTED_COMPUTE.values():
        key = (
            f.utilization,
            f.memory_traffic_factor,
            f.gemm_traffic_factor,
            f.gemm_half_size_elements,
        )
        out[key] = (*out.get(key, ()), f)
    return out


_FITTED_BY_CONSTANTS = _by_constants()


def fitted_for_gpu(gpu_model: str | None) -> FittedCompute | None:
    """The fitted constants of the family a GPU model name belongs to (H200 runs the H100's
    tensor cores), or None when commest has fitted none for it."""
    text = (gpu_model or "").upper()
    if "H100" in text or "H200" in text:
        return FITTED_COMPUTE["h100"]
    if "A100" in text:
        return FITTED_COMPUTE["a100"]
    return None


# An estimate warns when runs of its kind were off by more than this on average: the per-family
# target of the validation protocol (README "Accuracy").
ACCURACY_WARNING_PCT = 8.0


def _measured_range_s(predicted_s: float, low_pct: float, high_pct: float) -> tuple[float, float]:
    """The measured times that put a prediction's signed error (predicted - measured) /
    measured between ``low_pct`` and ``high_pct``: measured = predicted / (1 + error)."""
    return predicted_s / (1.0 + high_pct / 100.0), predicted_s / (1.0 + low_pct / 100.0)


# ``ModelSpec.architecture``: layers, width, heads, experts (0: dense), the MLP's width.
Architecture = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class RunsAccuracy:
    """How the detailed model did on a handful of published runs, out of sample (``commest
    validate``): too few of them for percentiles, so their least and greatest error."""

    runs: int
    mean_abs_error_pct: float
    mean_error_pct: float
    min_error_pct: float
    max_error_pct: float

    @property
    def misses_target(self) -> bool:
        """Whether these runs were off by more than ACCURACY_WARNING_PCT on average."""
        return self.mean_abs_error_pct > ACCURACY_WARNING_PCT

    def measured_range_s(self, predicted_s: float) -> tuple[float, float]:
        """The iteration times that put this prediction's error between the least and the
        greatest of these runs'."""
        return _measured_range_s(predicted_s, self.min_error_pct, self.max_error_pct)


@dataclass(frozen=True, slots=True)
class FineGrainedMoeAccuracy(RunsAccuracy):
    """The published MoE runs whose experts are narrower than the model
    (``ModelSpec.fine_grained_moe``; ``commest validate``, kind "fine-grained moe")."""


@dataclass(frozen=True, slots=True)
class ModelAccuracy(RunsAccuracy):
    """The published runs of one model (``ModelSpec.architecture``: the same layers, width,
    heads, experts and MLP width) under one kind of trainer."""

    model: str  # the name(s) the published runs give it
    trainer_kind: TrainerKind
    architecture: Architecture


@dataclass(frozen=True, slots=True)
class ValidatedAccuracy:
    """How the detailed model did on the published runs of one kind of trainer, out of sample
    (``commest validate``, "by kind")."""

    trainer_kind: TrainerKind
    runs: int
    mean_abs_error_pct: float
    mean_error_pct: float  # signed: below 0, the runs took longer than predicted
    # The 10th and 90th percentiles of the signed error (predicted - measured) / measured, %:
    # 80 % of those runs fell between them (numpy's linear interpolation).
    error_p10_pct: float
    error_p90_pct: float
    # Where the estimate's model has experts narrower than itself (ModelSpec.fine_grained_moe):
    # how the published runs of such models were off (else None).
    fine_grained_moe: FineGrainedMoeAccuracy | None = None
    # Where commest was validated on published runs of the estimate's own model under this kind
    # of trainer: how far those were off (else None).
    same_model: ModelAccuracy | None = None

    @property
    def misses_target(self) -> bool:
        """Whether runs of this kind were off by more than ACCURACY_WARNING_PCT on average."""
        return self.mean_abs_error_pct > ACCURACY_WARNING_PCT

    def measured_range_s(self, predicted_s: float) -> tuple[float, float]:
        """The iteration times that put this prediction's error between the 10th and 90th
        percentile of the kind's published runs."""
        return _measured_range_s(predicted_s, self.error_p10_pct, self.error_p90_pct)


# ``commest validate`` today, keyed by ``estimator.frameworks.trainer_kind``.
VALIDATED_ACCURACY: dict[str, ValidatedAccuracy] = {
    acc.trainer_kind: acc
    for acc in (
        ValidatedAccuracy("megatron-style", 107, 3.4, 0.1, error_p10_pct=-5.4, error_p90_pct=6.1),
        ValidatedAccuracy("fsdp-style", 63, 5.7, -1.7, error_p10_pct=-12.2, error_p90_pct=6.2),
        ValidatedAccuracy("deepspeed", 32, 7.0, -5.4, error_p10_pct=-23.4, error_p90_pct=2.2),
    )
}


# ``commest validate`` today: Qwen3-30B-A3B on 16 H100s in four Megatron-Bridge releases (26.02.01
# to 26.06, FP8 current scaling, eager: -10 to +1 %; 25.11's and 26.02's figures are excluded, the
# source's tracker records them as a 2x regression) and in three BF16 runs of its model
# verification card and performance skills (flex dispatcher, CUDA graphs: -10 to +1.5 %), and in
# one BF16 run of Megatron-LM's MoE recipes on 32 H100s (+7.6 %, its eager host time fitted on
# Megatron-Bridge's eager runs);
# Qwen3-235B-A22B on 256 H100s (experts folded over TP, FP8) in five (-8 to -1 %).
FINE_GRAINED_MOE_ACCURACY = FineGrainedMoeAccuracy(
    runs=13, mean_abs_error_pct=5.9, mean_error_pct=-4.4, min_error_pct=-10.3, max_error_pct=7.6
)

# The same kinds for an estimate whose model has experts narrower than itself: each carries
# FINE_GRAINED_MOE_ACCURACY, the runs among its own that such an estimate resembles.
VALIDATED_ACCURACY_FINE_GRAINED_MOE: dict[str, ValidatedAccuracy] = {
    kind: replace(acc, fine_grained_moe=FINE_GRAINED_MOE_ACCURACY)
    for kind, acc in VALIDATED_ACCURACY.items()
}


# ``commest validate`` today, by kind of trainer and model (``ModelSpec.architecture``; the
# names are the published runs' own): runs, mean |error|, mean signed error, least and greatest
# error (%, out of sample). Pinned by a test against the report.
_ModelRow = tuple[Architecture, int, float, float, float, float, str]
_BY_MODEL: dict[TrainerKind, tuple[_ModelRow, ...]] = {
    "deepspeed": (
        ((70, 14336, 64, 0, 57344), 3, 2.7, -0.5, -4.8, 1.8, "bigscience-prequel-70x14336"),
        (
            (70, 14336, 112, 0, 57344),
            3,
            8.9,
            -8.3,
            -25.9,
            0.6,
            "bigscience-prequel-70x14336 / bloom-176b",
        ),
        ((70, 14336, 128, 0, 57344), 1, 0.3, -0.3, -0.3, -0.3, "bigscience-prequel-70x14336"),
        ((80, 14400, 96, 0, 57600), 4, 1.9, 1.8, -0.2, 3.6, "bigscience-prequel-80x14400"),
        ((82, 13312, 64, 0, 53248), 3, 1.9, 1.9, 1.8, 2.0, "bigscience-prequel-82x13312"),
        ((82, 13312, 104, 0, 53248), 1, 12.9, -12.9, -12.9, -12.9, "bigscience-prequel-82x13312"),
        ((82, 13312, 128, 0, 53248), 1, 0.2, 0.2, 0.2, 0.2, "bigscience-prequel-82x13312"),
        ((94, 13312, 128, 0, 53248), 1, 0.0, 0.0, 0.0, 0.0, "bigscience-prequel-94x13312"),
        ((96, 12288, 96, 0, 49152), 3, 15.4, -15.4, -19.8, -11.3, "gpt3-175b"),
        ((100, 12288, 64, 0, 49152), 2, 3.7, -3.1, -6.8, 0.6, "bigscience-prequel-100x12288"),
        ((105, 20480, 128, 0, 81920), 6, 17.0, -17.0, -40.4, -0.8, "megatron-529.6b"),
        ((106, 12288, 64, 0, 49152), 1, 2.8, 2.8, 2.8, 2.8, "bigscience-prequel-106x12288"),
        ((106, 12288, 96, 0, 49152), 2, 1.4, 1.4, 0.7, 2.2, "bigscience-prequel-106x12288"),
        ((106, 12288, 128, 0, 49152), 1, 1.3, 1.3, 1.3, 1.3, "bigscience-prequel-106x12288"),
    ),
    "fsdp-style": (
        ((12, 768, 12, 0, 3072), 2, 5.0, 5.0, 2.3, 7.7, "mpt-125m"),
        ((24, 1024, 16, 0, 4096), 2, 9.9, 9.9, 7.1, 12.7, "mpt-350m"),
        ((24, 1536, 12, 0, 6144), 3, 6.1, 6.1, 3.8, 10.1, "mpt-760m"),
        ((24, 2048, 16, 0, 8192), 6, 4.3, 1.5, -8.3, 7.9, "mpt-1b"),
        ((32, 2560, 20, 0, 10240), 7, 4.7, -1.9, -16.3, 7.1, "mpt-3b"),
        ((32, 4096, 32, 0, 14336), 16, 6.7, -4.4, -26.6, 6.3, "llama3-8b / llama3.1-8b"),
        ((32, 4096, 32, 0, 16384), 7, 6.9, -2.7, -19.1, 5.5, "mpt-7b"),
        ((40, 5120, 40, 0, 20480), 6, 4.8, -1.9, -12.7, 5.8, "mpt-13b"),
        ((48, 7168, 56, 0, 28672), 3, 2.3, 1.3, -1.5, 3.7, "mpt-30b"),
        ((80, 8192, 64, 0, 28672), 6, 3.6, -3.2, -7.3, 1.0, "llama3-70b / llama3.1-70b"),
        ((80, 8192, 64, 0, 32768), 5, 7.2, -7.2, -13.6, -3.0, "mpt-70b"),
    ),
    "megatron-style": (
        ((2, 6144, 48, 8, 32768), 2, 1.9, -1.2, -3.1, 0.7, "grok1-314b-proxy-2l"),
        ((4, 6144, 48, 8, 32768), 4, 2.3, -1.3, -3.9, 2.0, "grok1-314b-proxy-4l"),
        ((7, 16384, 128, 0, 53248), 2, 2.4, -0.4, -2.8, 2.0, "llama3.1-405b-proxy-7l"),
        ((8, 6144, 48, 8, 32768), 2, 3.7, -3.7, -4.3, -3.0, "grok1-314b-proxy-8l"),
        ((16, 6144, 48, 8, 32768), 2, 1.8, 0.4, -1.4, 2.2, "grok1-314b-proxy-16l"),
        ((21, 16384, 128, 0, 53248), 2, 2.7, 1.0, -1.7, 3.6, "llama3.1-405b-proxy-21l"),
        ((24, 2304, 24, 0, 9216), 1, 3.4, -3.4, -3.4, -3.4, "megatron-1.7b"),
        ((30, 3072, 32, 0, 12288), 1, 2.4, -2.4, -2.4, -2.4, "megatron-3.6b"),
        ((32, 4096, 32, 0, 14336), 5, 6.5, 6.5, 3.3, 10.3, "llama3-8b / llama3.1-8b"),
        ((32, 6144, 48, 0, 24576), 5, 1.5, -1.2, -2.5, 0.7, "nemotron4-15b"),
        ((36, 4096, 32, 0, 16384), 1, 1.8, 1.8, 1.8, 1.8, "megatron-7.5b"),
        ((40, 6144, 48, 0, 24576), 1, 1.2, 1.2, 1.2, 1.2, "megatron-18.4b"),
        ((48, 2048, 32, 128, 768), 8, 6.5, -3.9, -10.3, 7.6, "qwen3-30b-a3b"),
        ((48, 6144, 64, 0, 24576), 2, 1.4, 0.8, -0.6, 2.1, "korthikanti-22b"),
        ((48, 8192, 64, 0, 32768), 1, 4.9, 4.9, 4.9, 4.9, "megatron-39.1b"),
        ((60, 10240, 80, 0, 40960), 1, 4.1, -4.1, -4.1, -4.1, "megatron-76.1b"),
        ((64, 6144, 48, 8, 32768), 4, 2.0, -1.4, -3.5, 1.2, "grok1-314b"),
        ((80, 8192, 64, 0, 28672), 9, 4.1, 0.1, -9.8, 5.5, "llama3-70b / llama3.1-70b"),
        ((80, 12288, 96, 0, 49152), 1, 1.0, -1.0, -1.0, -1.0, "megatron-145.6b"),
        ((94, 4096, 64, 128, 1536), 5, 5.1, -5.1, -8.3, -1.3, "qwen3-235b-a22b"),
        ((96, 12288, 96, 0, 49152), 25, 2.9, 2.0, -5.1, 11.1, "gpt3-175b"),
        ((96, 16384, 128, 0, 65536), 1, 2.0, -2.0, -2.0, -2.0, "megatron-310.1b"),
        ((96, 18432, 96, 0, 73728), 4, 2.0, -2.0, -3.2, -0.8, "nemotron4-340b"),
        ((105, 20480, 128, 0, 81920), 7, 1.9, 1.8, -0.4, 4.1, "megatron-529.6b"),
        ((126, 16384, 128, 0, 53248), 8, 4.0, -1.3, -10.1, 6.1, "llama3.1-405b"),
        ((128, 25600, 160, 0, 102400), 3, 5.7, 5.7, 4.0, 7.0, "megatron-1t"),
    ),
}
VALIDATED_BY_MODEL: dict[tuple[str, Architecture], ModelAccuracy] = {
    (kind, arch): ModelAccuracy(runs, mean_abs, mean, low, high, model, kind, arch)
    for kind, rows in _BY_MODEL.items()
    for arch, runs, mean_abs, mean, low, high, model in rows
}
