"""Calibrations: u fitted to measured iteration times of a profile's cluster."""

from __future__ import annotations

from dataclasses import replace

from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.orm import Session

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
from api.snapshots import Profiles
from estimator import Scenario, estimate
from estimator.errors import CalibrationError, ValidationError
from profiles import measured_runs, repository
from profiles.calibration import (
    PLAUSIBLE_UTILIZATION,
    CalibrationSample,
    fit_utilization,
    implausible_utilization,
    sample_from_predictions,
)
from profiles.models import Calibration


def _calibration_request(run: CalibrationEstimateIn, name: str, where: str) -> EstimateRequest:
    cluster = run.cluster or ClusterIn(profile=name)
    if cluster.profile is None:
        cluster = cluster.model_copy(update={"profile": name})
    elif cluster.profile != name:
        raise ValidationError(
            f"{where}.cluster.profile",
            cluster.profile,
            f"must be the calibrated profile {name!r}",
        )
    if cluster.utilization is not None:
        raise ValidationError(
            f"{where}.cluster.utilization",
            cluster.utilization,
            "calibration fits u; leave it out",
        )
    return EstimateRequest(
        model=run.model,
        layout=run.layout,
        training=run.training,
        fidelity=run.fidelity,
        gpus=run.gpus,
        cluster=cluster,
    )


def _measurements(
    *, session: Session, name: str, body: CalibrationRequest
) -> list[tuple[str, CalibrationEstimateIn, float, str]]:
    """(where, request, measured time, label) of every run to fit: the body's ``runs``, then
    the stored measured runs it names (``stored_run_ids``) or all of them
    (``use_stored_runs``)."""
    out = [
        (
            f"runs[{i}].request",
            run.request,
            run.measured_iteration_time_s,
            run.label or f"runs[{i}]",
        )
        for i, run in enumerate(body.runs)
    ]
    if body.stored_run_ids is not None or body.use_stored_runs:
        stored = measured_runs.calibration_runs(
            session=session, profile_name=name, run_ids=body.stored_run_ids
        )
        for run in stored:
            where = f"stored run {run.run_id}.request"
            try:
                request = CalibrationEstimateIn.model_validate(run.request)
            except PydanticValidationError as exc:
                raise ValidationError(
                    where, run.run_id, f"is not an estimate request any more: {exc}"
                ) from None
            out.append((where, request, run.measured_iteration_time_s, run.label))
    return out


def create_calibration(
    *, session: Session, name: str, body: CalibrationRequest, profiles: Profiles
) -> CalibrationResponse:
    """Fit u from measured iteration times (given, or stored from training logs): T(u) = A/u + B
    from the engine at u = 1 and 0.5."""
    samples = []
    for where, run_request, measured_s, label in _measurements(
        session=session, name=name, body=body
    ):
        request = _calibration_request(run_request, name, where)
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
        samples.append(
            sample_from_predictions(
                at_full_s=at_one, at_half_s=at_half, measured_s=measured_s, label=label
            )
        )
    result = fit_utilization(samples)
    implausible = implausible_utilization(result.utilization)
    if implausible is not None and body.apply and not body.force:
        low, high = PLAUSIBLE_UTILIZATION
        error = CalibrationError(
            "utilization",
            result.utilization,
            f"{implausible}; nothing was stored or applied",
            hint='send "force": true (CLI --force) to apply it anyway, or leave out apply '
            "to store the fit without applying it",
        )
        error.context["plausible_utilization"] = [low, high]
        raise error
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
    implausible = implausible_utilization(calibration.utilization)
    return CalibrationResponse.model_validate(
        Members(
            calibration,
            profile=profile,
            applied=applied,
            residuals=residuals,
            warnings=[implausible] if implausible else [],
        )
    )


def list_calibrations(*, session: Session, name: str) -> list[CalibrationResponse]:
    """A profile's calibrations, newest first."""
    return [
        _response(c, profile=name, applied=None)
        for c in repository.list_calibrations(session=session, profile_name=name)
    ]
