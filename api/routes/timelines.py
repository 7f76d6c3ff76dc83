"""POST /v1/timelines: every pipeline stage's schedule of one iteration (JSON, PNG or SVG)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import TimelineRequest, TimelineResponse
from api.services import timelines as service

router = APIRouter(prefix="/v1", tags=["timelines"])


@router.post(
    "/timelines",
    response_model=TimelineResponse,
    responses={
        200: {
            "description": "the events (json), or a Gantt chart of the stages (png, svg)",
            "content": {
                "image/png": {"schema": {"type": "string", "format": "binary"}},
                "image/svg+xml": {"schema": {"type": "string"}},
            },
        },
        **problem_responses(404, 413, 422, 503),
    },
)
def create_timeline(body: TimelineRequest, runtime: RuntimeDep) -> TimelineResponse | Response:
    """Forward, backward, TP/PP/DP communication, optimizer and idle time of every stage over
    one iteration (1F1B or interleaved 1F1B), bounded by ``max_microbatches_shown``."""
    answer = service.create_timeline(request=body, profiles=runtime.profiles())
    if body.format == "png":
        return Response(service.timeline_picture(answer=answer, fmt="png"), media_type="image/png")
    if body.format == "svg":
        return Response(
            service.timeline_picture(answer=answer, fmt="svg"), media_type="image/svg+xml"
        )
    return service.timeline_response(answer=answer)
