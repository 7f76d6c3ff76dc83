"""/v1/profiles/{name}/calibrations: fit u from measured iteration times."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RuntimeDep, Writer
from api.problems import problem_responses
from api.schemas import CalibrationRequest, CalibrationResponse
from api.services import calibrations as service

router = APIRouter(prefix="/v1/profiles", tags=["calibrations"])


@router.post(
    "/{name}/calibrations",
    response_model=CalibrationResponse,
    status_code=201,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 422, 503),
)
def create_calibration(
    name: str, body: CalibrationRequest, runtime: RuntimeDep
) -> CalibrationResponse:
    """Fit u by least squares on T = A/u + B; ``apply`` sets it on the profile (fitted)."""
    with runtime.transaction() as session:
        return service.create_calibration(
            session=session, name=name, body=body, profiles=runtime.profiles_in(session)
        )


@router.get(
    "/{name}/calibrations",
    response_model=list[CalibrationResponse],
    responses=problem_responses(404, 503),
)
def list_calibrations(name: str, runtime: RuntimeDep) -> list[CalibrationResponse]:
    """A profile's calibrations, newest first."""
    with runtime.read_session() as session:
        return service.list_calibrations(session=session, name=name)
