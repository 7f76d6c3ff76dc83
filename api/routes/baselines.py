"""PUT/GET /v1/baselines/{name}: named estimate requests and their iteration times."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from api.deps import RuntimeDep, Writer
from api.problems import problem_responses
from api.schemas import BaselinePut, BaselineRead, BaselineWritten, Name
from api.services import baselines as service

router = APIRouter(prefix="/v1/baselines", tags=["baselines"])

BaselineName = Annotated[Name, Path(description="baseline name")]


@router.put(
    "/{name}",
    response_model=BaselineWritten,
    status_code=200,
    dependencies=[Writer],
    responses={
        201: {"description": "created", "model": BaselineWritten},
        **problem_responses(401, 404, 409, 422, 503),
    },
)
def put_baseline(
    name: BaselineName, body: BaselinePut, runtime: RuntimeDep, response: Response
) -> BaselineWritten:
    """Create (201) or replace (200) a baseline: the request and its predicted time."""
    with runtime.transaction() as session:
        out, created = service.put_baseline(
            session=session, name=name, body=body, profiles=runtime.profiles_in(session)
        )
    response.status_code = 201 if created else 200
    return out


@router.get("/{name}", response_model=BaselineRead, responses=problem_responses(404, 422, 503))
def get_baseline(name: BaselineName, runtime: RuntimeDep) -> BaselineRead:
    """A stored baseline."""
    with runtime.read_session() as session:
        return service.get_baseline(session=session, name=name)


@router.get("", response_model=list[BaselineRead], responses=problem_responses(503))
def list_baselines(runtime: RuntimeDep) -> list[BaselineRead]:
    """Every stored baseline, by name."""
    with runtime.read_session() as session:
        return service.list_baselines(session=session)


@router.delete(
    "/{name}",
    status_code=204,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 503),
)
def delete_baseline(name: BaselineName, runtime: RuntimeDep) -> Response:
    """Delete a baseline."""
    with runtime.transaction() as session:
        service.delete_baseline(session=session, name=name)
    return Response(status_code=204)
