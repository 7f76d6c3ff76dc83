"""The compute constants `commest validate` fits, per GPU family, with their provenance.

The detailed model's per-operation roofline (estimator.compute) has five fitted constants; the
validation report (profiles.validation.report) fits them on its declared training subset only:
the A100 GEMM efficiency u, the element-wise factor γ and the GEMM operand-traffic factor c on
Megatron-LM SC21 Table 1; the H100 16-bit and FP8 GEMM efficiencies on the dense runs of NVIDIA's
DGX Cloud benchmarking recipes; then the size x0 of the size-dependent GEMM efficiency jointly on
both, with u, γ and u8 refitted alongside. The nominal DGX profiles carry these values; a test
checks that they equal what the report fits today.

The same report scores every published run out of sample; ``VALIDATED_ACCURACY`` keeps its
figures per kind of trainer, so an estimate can say how far runs of its kind were off (a test
checks them against the report too); ``FINE_GRAINED_MOE_ACCURACY`` the same for MoE models whose
experts are narrower than the model, the kind of run it predicts worst.
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
    "FineGrainedMoeAccuracy",
    "FittedCompute",
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


_SUBSET = "fitted by commest validate on its declared training subset"
FITTED_COMPUTE: dict[str, FittedCompute] = {
    "a100": FittedCompute(
        utilization=0.7697,
        memory_traffic_factor=1.9414,
        gemm_traffic_factor=0.0,
        fp8_utilization=None,
        source=f"{_SUBSET} (Megatron-LM SC21 Table 1, A100; x0 jointly with the H100 runs)",
        gemm_half_size_elements=670.35,
    ),
    "h100": FittedCompute(
        utilization=0.6584,
        memory_traffic_factor=1.9414,
        gemm_traffic_factor=0.0,
        fp8_utilization=0.5950,
        source=f"{_SUBSET} (γ and c from SC21 Table 1; u and u8 from the dense DGX Cloud "
        "benchmarking runs, H100; x0 jointly with SC21 Table 1)",
        gemm_half_size_elements=670.35,
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
) -> bool:
    """Whether these are one GPU family's fitted constants, i.e. the model `commest validate`
    scores (for FP8 training, the family's fitted u8 too)."""
    return any(
        utilization == f.utilization
        and memory_traffic_factor == f.memory_traffic_factor
        and gemm_traffic_factor == f.gemm_traffic_factor
        and gemm_half_size_elements == f.gemm_half_size_elements
        and (not fp8 or (f.fp8_utilization is not None and fp8_utilization == f.fp8_utilization))
        for f in FITTED_COMPUTE.values()
    )


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


@dataclass(frozen=True, slots=True)
class FineGrainedMoeAccuracy:
    """How the detailed model did on the published MoE runs whose experts are narrower than the
    model (``ModelSpec.fine_grained_moe``; ``commest validate``, kind "fine-grained moe")."""

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
        greatest of these runs' (there are too few of them for percentiles)."""
        return _measured_range_s(predicted_s, self.min_error_pct, self.max_error_pct)


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
        ValidatedAccuracy("megatron-style", 95, 7.2, -3.2, error_p10_pct=-12.7, error_p90_pct=6.1),
        ValidatedAccuracy("fsdp-style", 63, 5.4, -2.4, error_p10_pct=-12.4, error_p90_pct=4.6),
        ValidatedAccuracy("deepspeed", 32, 8.8, -5.0, error_p10_pct=-15.9, error_p90_pct=4.3),
    )
}


# ``commest validate`` today: Qwen3-30B-A3B on 16 H100s in six Megatron-Bridge releases (25.11 to
# 26.06, FP8: -64 to -35 %, whose same layout ran at 5,113 and 9,058 tokens/s/GPU in two of them)
# and in three BF16 runs of its model verification card and performance skills (flex
# dispatcher: -12 to +8 %), and in one BF16 run of Megatron-LM's MoE recipes on 32 H100s (-21 %);
# Qwen3-235B-A22B on 256 H100s (experts folded over TP) in five (+10 to +18 %).
FINE_GRAINED_MOE_ACCURACY = FineGrainedMoeAccuracy(
    runs=15, mean_abs_error_pct=25.2, mean_error_pct=-14.7, min_error_pct=-63.8, max_error_pct=17.8
)

# The same kinds for an estimate whose model has experts narrower than itself: each carries
# FINE_GRAINED_MOE_ACCURACY, the runs among its own that such an estimate resembles.
VALIDATED_ACCURACY_FINE_GRAINED_MOE: dict[str, ValidatedAccuracy] = {
    kind: replace(acc, fine_grained_moe=FINE_GRAINED_MOE_ACCURACY)
    for kind, acc in VALIDATED_ACCURACY.items()
}
