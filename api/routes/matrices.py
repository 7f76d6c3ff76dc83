"""POST /v1/traffic-matrices: GPU-to-GPU (or node-to-node) bytes per iteration."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

from api.deps import RuntimeDep
from api.problems import problem_responses
from api.schemas import TrafficMatrixRequest, TrafficMatrixResponse
from api.services import matrices as service

router = APIRouter(prefix="/v1", tags=["traffic matrices"])


@router.post(
    "/traffic-matrices",
    response_model=TrafficMatrixResponse,
    responses={
        200: {
            "description": "sparse rows (json), CSV with header src,dst,bytes,kind, or a PNG",
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "image/png": {"schema": {"type": "string", "format": "binary"}},
            },
        },
        **problem_responses(404, 413, 422, 503),
    },
)
def create_traffic_matrix(
    body: TrafficMatrixRequest, runtime: RuntimeDep
) -> TrafficMatrixResponse | Response:
    """The traffic matrix of one layout as sparse JSON rows, CSV or a heatmap PNG."""
    settings = runtime.settings
    answer = service.create_traffic_matrix(
        request=body,
        profiles=runtime.profiles(),
        max_matrix_gpus=settings.max_matrix_gpus,
        max_dense_gpus=settings.max_dense_gpus,
        max_matrix_entries=settings.max_matrix_entries,
    )
    if body.format == "csv":
        return StreamingResponse(
            service.traffic_csv_lines(answer=answer),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="traffic.csv"'},
        )
    if body.format == "png":
        png = service.traffic_png(answer=answer, layout=body.layout)
        return Response(png, media_type="image/png")
    return service.traffic_response(answer=answer)
