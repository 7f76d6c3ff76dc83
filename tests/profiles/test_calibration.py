"""fit_utilization: closed-form least squares of T = A/u + B, and its refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from estimator.errors import CalibrationError, ValidationError
from profiles.calibration import CalibrationSample, fit_utilization


def _exact(u: float) -> list[CalibrationSample]:
    splits = [(10.0, 2.0), (4.0, 1.5), (25.0, 0.0), (1.0, 3.0)]
    return [
        CalibrationSample(a, b, a / u + b, label=f"layout {i}") for i, (a, b) in enumerate(splits)
    ]


def test_recovers_a_known_utilization_from_exact_samples() -> None:
    result = fit_utilization(_exact(0.43))
    assert result.utilization == pytest.approx(0.43, rel=1e-12)
    assert max(abs(r) for r in result.residual_s) < 1e-12
    assert result.mape_pct < 1e-10


def test_fit_equals_the_least_squares_solution_on_noisy_samples() -> None:
    rng = np.random.default_rng(7)
    a = rng.uniform(1, 20, size=12)
    b = rng.uniform(0, 5, size=12)
    t = a / 0.5 + b + rng.normal(0, 0.3, size=12)
    samples = [CalibrationSample(*v) for v in zip(a, b, t, strict=True)]
    (x,), *_ = np.linalg.lstsq(a[:, None], t - b, rcond=None)
    result = fit_utilization(samples)
    assert result.utilization == pytest.approx(1 / x, rel=1e-12)


def test_residuals_are_measured_minus_predicted_with_percentages() -> None:
    samples = [CalibrationSample(10.0, 0.0, 20.0), CalibrationSample(10.0, 0.0, 30.0)]
    result = fit_utilization(samples)  # x = (200 + 300) / 200 = 2.5, u = 0.4
    assert result.utilization == pytest.approx(0.4)
    assert result.predicted_s == pytest.approx((25.0, 25.0))
    assert result.residual_s == pytest.approx((-5.0, 5.0))
    assert result.residual_pct == pytest.approx((-25.0, 100 * 5 / 30))
    assert result.mape_pct == pytest.approx((25.0 + 100 * 5 / 30) / 2)


def test_refuses_when_no_sample_is_compute_bound() -> None:
    with pytest.raises(CalibrationError, match="compute-bound") as info:
        fit_utilization([CalibrationSample(0.0, 1.0, 2.0), CalibrationSample(0.0, 2.0, 3.0)])
    assert info.value.field == "samples"


@pytest.mark.parametrize("measured", [0.0, -1.0])
def test_refuses_a_measured_time_that_is_not_positive(measured: float) -> None:
    with pytest.raises(CalibrationError) as info:
        fit_utilization([CalibrationSample(1.0, 0.0, 2.0), CalibrationSample(1.0, 0.0, measured)])
    assert info.value.field == "samples[1].measured_s"


def test_refuses_a_fit_above_one() -> None:
    with pytest.raises(CalibrationError, match=r"\(0, 1\]") as info:
        fit_utilization([CalibrationSample(10.0, 1.0, 6.0)])  # u = 2
    assert info.value.value == pytest.approx(2.0)


def test_refuses_measured_times_below_the_fixed_part() -> None:
    with pytest.raises(CalibrationError, match=r"\(0, 1\]"):
        fit_utilization([CalibrationSample(10.0, 5.0, 4.0)])


def test_refuses_no_samples_and_non_finite_values() -> None:
    with pytest.raises(CalibrationError):
        fit_utilization([])
    with pytest.raises(CalibrationError) as info:
        fit_utilization([CalibrationSample(math.inf, 0.0, 1.0)])
    assert info.value.field == "samples[0].scaled_s"


def test_calibration_error_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        fit_utilization([CalibrationSample(0.0, 0.0, 1.0)])
