"""POST /v1/plans: every valid layout of a GPU count, evaluated in one pass and ranked."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import PlanRequest, PlanResponse
from api.services import plans as service

router = APIRouter(prefix="/v1", tags=["plans"])


@router.post("/plans", response_model=PlanResponse, responses=problem_responses(404, 413, 422, 503))
def create_plan(body: PlanRequest, runtime: RuntimeDep) -> PlanResponse:
    """Rank every layout (p, t, d, v, b, SP, ZeRO, recompute) by iteration time."""
    return service.create_plan(
        request=body,
        profiles=runtime.profiles(),
        max_layouts=runtime.settings.max_plan_layouts,
    )
