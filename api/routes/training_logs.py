"""/v1/profiles/{name}/training-logs: training runs of the cluster, read from their logs.

An upload takes the text a run printed as the raw body (``text/plain``) or as one file of a
``multipart/form-data`` body; query parameters supply what the log does not state. The body
is capped as benchmark uploads are, and parsed before the write transaction opens.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from api.deps import Runtime, RuntimeDep, Writer
from api.problems import problem_responses
from api.routes.runs import read_named_upload
from api.schemas import (
    MeasuredRunRead,
    MeasuredRunsPage,
    TrainingLogHints,
    TrainingLogResponse,
)
from api.services import training_logs as service
from estimator.errors import ValidationError

router = APIRouter(prefix="/v1/profiles", tags=["training-logs"])

_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the text a Megatron-LM / Megatron-DeepSpeed / NeMo run printed",
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
        },
    }
}


_HINT_NAMES = "gpus, gpus_per_node, vocab_size, precision, tensor, pipeline, ... (see /docs)"


def _parse_and_store(
    runtime: Runtime, name: str, text: str, hints: TrainingLogHints, file_name: str | None
) -> tuple[TrainingLogResponse, bool]:
    parsed = service.parse(text=text, hints=hints)  # before the write transaction
    with runtime.transaction() as session:
        return service.store(
            session=session, name=name, text=text, parsed=parsed, hints=hints, file_name=file_name
        )


@router.post(
    "/{name}/training-logs",
    response_model=TrainingLogResponse,
    status_code=201,
    dependencies=[Writer],
    openapi_extra=_UPLOAD_BODY,
    responses={
        200: {"description": "this run was already stored", "model": TrainingLogResponse},
        **problem_responses(401, 404, 413, 422, 503),
    },
)
async def upload_training_log(
    name: str,
    request: Request,
    response: Response,
    runtime: RuntimeDep,
    hints: Annotated[TrainingLogHints, Query()],
) -> TrainingLogResponse:
    """Read a run's log (steady-state iteration time, the request it ran) and store it as a
    measured run: 201 when new, 200 when the same run was stored before."""
    uploaded = await read_named_upload(
        request,
        max_bytes=runtime.settings.max_upload_bytes,
        max_files=1,
        hint_names=_HINT_NAMES,
    )
    if len(uploaded) != 1:
        raise ValidationError(
            "files", len(uploaded), "a training-log upload holds exactly one file (one run)"
        )
    file_name, text = uploaded[0]
    out, stored_new = await run_in_threadpool(
        _parse_and_store, runtime, name, text, hints, file_name
    )
    response.status_code = 201 if stored_new else 200
    return out


@router.get(
    "/{name}/training-logs",
    response_model=MeasuredRunsPage,
    responses=problem_responses(404, 422, 503),
)
def list_training_logs(
    name: str,
    runtime: RuntimeDep,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> MeasuredRunsPage:
    """A profile's measured runs, oldest first, one page at a time."""
    with runtime.transaction() as session:
        return service.list_logs(session=session, name=name, offset=offset, limit=limit)


@router.get(
    "/{name}/training-logs/{run_id}",
    response_model=MeasuredRunRead,
    responses=problem_responses(404, 422, 503),
)
def get_training_log(
    name: str, run_id: Annotated[int, Path(ge=1, le=2**31 - 1)], runtime: RuntimeDep
) -> MeasuredRunRead:
    """One measured run."""
    with runtime.transaction() as session:
        return service.get_log(session=session, name=name, run_id=run_id)


@router.delete(
    "/{name}/training-logs/{run_id}",
    status_code=204,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 422, 503),
)
def delete_training_log(
    name: str, run_id: Annotated[int, Path(ge=1, le=2**31 - 1)], runtime: RuntimeDep
) -> Response:
    """Delete one measured run (token required)."""
    with runtime.transaction() as session:
        service.delete_log(session=session, name=name, run_id=run_id)
    return Response(status_code=204)
