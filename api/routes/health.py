"""GET /healthz (the process answers) and GET /readyz (the database answers too)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import HealthResponse, ReadyResponse
from profiles.db import is_sqlite

router = APIRouter(tags=["health"])

try:
    VERSION = version("commest")
except PackageNotFoundError:  # a checkout that was not installed
    VERSION = "0+unknown"


@router.get("/healthz", response_model=HealthResponse)
async def healthz() -> HealthResponse:
    """Liveness: no database access."""
    return HealthResponse(status="ok", version=VERSION)


@router.get("/readyz", response_model=ReadyResponse, responses=problem_responses(503))
def readyz(runtime: RuntimeDep) -> ReadyResponse:
    """Readiness: pings the database (503 problem details when it is down)."""
    runtime.ping()
    database = "sqlite" if is_sqlite(runtime.url) else "postgresql"
    return ReadyResponse(status="ready", database=database)
