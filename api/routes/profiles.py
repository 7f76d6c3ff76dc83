"""/v1/profiles: clusters (GPU model, GPUs per node, peak FLOP/s, u) as stored resources."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from api.deps import RuntimeDep, Writer
from api.problems import problem_responses
from api.schemas import (
    ProfileCreate,
    ProfileRead,
    ProfilesPage,
    ProfileUpdate,
)
from api.services import profiles as service

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])

ProfileName = Annotated[str, Path(description="profile name")]


@router.post(
    "",
    response_model=ProfileRead,
    status_code=201,
    dependencies=[Writer],
    responses=problem_responses(401, 409, 422, 503),
)
def create_profile(body: ProfileCreate, runtime: RuntimeDep, response: Response) -> ProfileRead:
    """Create a profile (409 if the name is taken)."""
    with runtime.transaction() as session:
        out = service.create_profile(session=session, body=body)
    response.headers["Location"] = f"/v1/profiles/{out.name}"
    return out


@router.get("", response_model=ProfilesPage, responses=problem_responses(422, 503))
def list_profiles(
    runtime: RuntimeDep,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ProfilesPage:
    """Profiles by name, one page at a time."""
    with runtime.read_session() as session:
        return service.list_profiles(session=session, offset=offset, limit=limit)


@router.get("/{name}", response_model=ProfileRead, responses=problem_responses(404, 503))
def get_profile(name: ProfileName, runtime: RuntimeDep) -> ProfileRead:
    """One profile."""
    with runtime.read_session() as session:
        return service.get_profile(session=session, name=name)


@router.patch(
    "/{name}",
    response_model=ProfileRead,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 409, 422, 503),
)
def update_profile(name: ProfileName, body: ProfileUpdate, runtime: RuntimeDep) -> ProfileRead:
    """Change the fields given (null clears a nullable one)."""
    with runtime.transaction() as session:
        return service.update_profile(session=session, name=name, body=body)


@router.delete(
    "/{name}",
    status_code=204,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 409, 503),
)
def delete_profile(name: ProfileName, runtime: RuntimeDep) -> Response:
    """Delete a profile with its uploads, runs and calibrations."""
    with runtime.transaction() as session:
        service.delete_profile(session=session, name=name)
    return Response(status_code=204)
