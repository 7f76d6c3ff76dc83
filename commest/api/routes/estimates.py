"""POST /v1/estimates: iteration time, its named terms, traffic, memory and throughput."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from commest.api import service
from commest.api.deps import RuntimeDep
from commest.api.problems import problem_responses
from commest.api.schemas import EstimateRequest, EstimateResponse

router = APIRouter(prefix="/v1", tags=["estimates"])


@router.post(
    "/estimates",
    response_model=EstimateResponse,
    responses=problem_responses(404, 422, 503),
)
async def create_estimate(body: EstimateRequest, runtime: RuntimeDep) -> dict[str, Any]:
    """One layout's iteration time with every term, collective and assumption behind it."""
    return service.estimate_request_body(request=body, profiles=runtime.profiles())
