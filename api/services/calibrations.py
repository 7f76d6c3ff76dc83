"""Calibrations: u fitted to measured iteration times of a profile's cluster."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from api.caches import Profiles
from api.scenario import prepare
from api.schemas import (
    CalibrationEstimateIn,
    CalibrationRequest,
    CalibrationResponse,
    ClusterIn,
    EstimateRequest,
    Members,
    finite_answer,
)
from estimator import Scenario, estimate
from estimator.errors import ValidationError
from profiles import repository
from profiles.calibration import CalibrationSample, fit_utilization
from profiles.models import Calibration


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


def create_calibration(
    *, session: Session, name: str, body: CalibrationRequest, profiles: Profiles
) -> CalibrationResponse:
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
    with finite_answer({"runs": [s.label for s in samples]}):  # raised: the write rolls back
        return _response(calibration, samples=samples, applied=body.apply, profile=name)


def _response(
    calibration: Calibration,
    *,
    profile: str,
    applied: bool | None,
    samples: list[CalibrationSample] | None = None,
) -> CalibrationResponse:
    """A stored calibration; with the samples just fitted, each residual's A and B too."""
    residuals = calibration.residuals or []
    if samples:
        residuals = [
            {**r, "scaled_s": sample.scaled_s, "fixed_s": sample.fixed_s}
            for r, sample in zip(residuals, samples, strict=True)
        ]
    return CalibrationResponse.model_validate(
        Members(calibration, profile=profile, applied=applied, residuals=residuals)
    )


def list_calibrations(*, session: Session, name: str) -> list[CalibrationResponse]:
    """A profile's calibrations, newest first."""
    return [
        _response(c, profile=name, applied=None)
        for c in repository.list_calibrations(session=session, profile_name=name)
    ]
