"""POST /v1/estimates: iteration time, its named terms, traffic, memory and throughput."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import EstimateRequest, EstimateResponse
from api.services import estimates as service
from api.snapshots import PinnedProfile, ProfileSnapshot

router = APIRouter(prefix="/v1", tags=["estimates"])


@router.post(
    "/estimates",
    response_model=EstimateResponse,
    responses=problem_responses(404, 422, 503),
)
async def create_estimate(body: EstimateRequest, runtime: RuntimeDep) -> EstimateResponse:
    """One layout's iteration time with every term, collective and assumption behind it."""
    profiles = runtime.profiles()
    name = body.cluster.profile
    if name is None:  # pure CPU, sub-millisecond: no thread hop, no database
        return service.create_estimate(request=body, profiles=profiles)

    def on(snapshot: ProfileSnapshot) -> EstimateResponse:
        return service.create_estimate(request=body, profiles=PinnedProfile(snapshot))

    answered = await profiles.answer(name, on)
    if answered is not None:
        return answered
    # a database read: never block the event loop on it
    return await run_in_threadpool(service.create_estimate, request=body, profiles=profiles)
