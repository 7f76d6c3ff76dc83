"""Fit the GPU utilization u from measured iteration times (DESIGN §6).

Each sample splits a predicted iteration time into A, the part proportional to 1/u (the
compute-bound terms evaluated at u = 1: T_comp and the compute part of the bubble), and B,
everything else (communication). With x = 1/u the model T = A·x + B is linear, so least
squares has the closed form x = Σ A_i (T_i − B_i) / Σ A_i² and u = 1/x.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from estimator.errors import CalibrationError

#: The fitted u applied without ``force`` (docs/design.md §7.1): below, a fit that blames
#: everything it does not model on the GPU (published MFU of large runs is ~0.2-0.55); above,
#: more than dense matrix multiplication reaches on any GPU.
PLAUSIBLE_UTILIZATION: tuple[float, float] = (0.15, 0.95)


def implausible_utilization(utilization: float) -> str | None:
    """Why a fitted u is outside :data:`PLAUSIBLE_UTILIZATION`, or None when it is inside."""
    low, high = PLAUSIBLE_UTILIZATION
    if low <= utilization <= high:
        return None
    side = "below" if utilization < low else "above"
    why = (
        "the measured runs are slower than the model explains (a small model, data loading, "
        "an unmodelled overhead?)"
        if utilization < low
        else "the measured runs are faster than dense compute allows (a layout or model "
        "field that differs from the run?)"
    )
    return (
        f"the fitted utilization {utilization:.4g} is {side} the plausible range "
        f"[{low}, {high}] of peak: {why}"
    )


@dataclass(frozen=True, slots=True)
class CalibrationSample:
    """One layout run on the cluster: its predicted split and its measured iteration time."""

    scaled_s: float  # A: compute-bound time at u = 1 (scales as 1/u)
    fixed_s: float  # B: the time that does not depend on u
    measured_s: float  # T: the measured iteration time
    label: str | None = None


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """The fitted u and, per sample, the prediction at that u and its residual."""

    utilization: float
    predicted_s: tuple[float, ...]
    residual_s: tuple[float, ...]  # measured − predicted
    residual_pct: tuple[float, ...]  # 100 · residual / measured
    mape_pct: float  # mean |residual_pct|


def sample_from_predictions(
    *, at_full_s: float, at_half_s: float, measured_s: float, label: str | None = None
) -> CalibrationSample:
    """A sample from the engine's predictions at u = 1 and u = 0.5 and a measured time.

    T(u) = A/u + B gives T(1) = A + B and T(0.5) = 2A + B, so A = T(0.5) − T(1), B = T(1) − A.
    The measured time may come from a request body or from a stored measured run (a training
    log, ``profiles.measured_runs.calibration_runs``): the fit is the same.
    """
    scaled = at_half_s - at_full_s
    fixed = at_full_s - scaled
    if -1e-9 * at_full_s < fixed < 0.0:
        fixed = 0.0  # rounding of a purely compute-bound time
    return CalibrationSample(scaled_s=scaled, fixed_s=fixed, measured_s=measured_s, label=label)


def _check(samples: Sequence[CalibrationSample]) -> None:
    if not samples:
        raise CalibrationError("samples", [], "at least one measured iteration time is needed")
    for i, sample in enumerate(samples):
        for name in ("scaled_s", "fixed_s", "measured_s"):
            value = getattr(sample, name)
            if not math.isfinite(value):
                raise CalibrationError(f"samples[{i}].{name}", value, "must be a finite number")
        if sample.measured_s <= 0:
            raise CalibrationError(f"samples[{i}].measured_s", sample.measured_s, "must be > 0")
        if sample.scaled_s < 0:
            raise CalibrationError(f"samples[{i}].scaled_s", sample.scaled_s, "must be ≥ 0")
        if sample.fixed_s < 0:
            raise CalibrationError(f"samples[{i}].fixed_s", sample.fixed_s, "must be ≥ 0")
    if all(sample.scaled_s == 0 for sample in samples):
        raise CalibrationError(
            "samples",
            len(samples),
            "no sample is compute-bound (every scaled_s is 0), so u is not determined",
        )


def fit_utilization(samples: Sequence[CalibrationSample]) -> CalibrationResult:
    """Least-squares u from T = A/u + B; CalibrationError if ill-posed or u ∉ (0, 1]."""
    _check(samples)
    numerator = math.fsum(s.scaled_s * (s.measured_s - s.fixed_s) for s in samples)
    denominator = math.fsum(s.scaled_s * s.scaled_s for s in samples)
    x = numerator / denominator
    if x <= 0:
        raise CalibrationError(
            "utilization",
            math.inf,
            "fitted u must be in (0, 1]: the measured times are not above the fixed "
            "(communication) part of the predictions",
        )
    utilization = 1.0 / x
    if utilization > 1.0:
        raise CalibrationError(
            "utilization",
            utilization,
            "fitted u must be in (0, 1]: the measured times are faster than peak FLOP/s allows",
        )
    predicted = tuple(s.scaled_s * x + s.fixed_s for s in samples)
    residual = tuple(s.measured_s - p for s, p in zip(samples, predicted, strict=True))
    residual_pct = tuple(100.0 * r / s.measured_s for s, r in zip(samples, residual, strict=True))
    mape = math.fsum(abs(r) for r in residual_pct) / len(samples)
    return CalibrationResult(utilization, predicted, residual, residual_pct, mape)
