"""POST /v1/checks: pass/fail of an estimate against a time budget or a stored baseline."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import CheckRequest, CheckResponse
from api.services import checks as service

router = APIRouter(prefix="/v1", tags=["checks"])


@router.post("/checks", response_model=CheckResponse, responses=problem_responses(404, 422, 503))
def create_check(body: CheckRequest, runtime: RuntimeDep) -> CheckResponse:
    """``passed`` when the predicted iteration time is within the limit (a read: no token)."""
    return service.create_check(
        request=body, profiles=runtime.profiles(), session_scope=runtime.read_session
    )
