"""GET /v1/validation: the published runs commest was scored on, predicted out of sample."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.problems import problem_responses
from api.schemas import ValidationOut
from api.services import validation as service

router = APIRouter(prefix="/v1", tags=["validation"])


@router.get("/validation", response_model=ValidationOut, responses=problem_responses(422))
def published_runs(
    source: Annotated[list[str] | None, Query(description="rows of any of these sources")] = None,
    model: Annotated[list[str] | None, Query(description="rows of any of these models")] = None,
    kind: Annotated[
        list[str] | None, Query(description="rows with every one of these kinds")
    ] = None,
    sort: Annotated[
        service.RowOrder, Query(description="file order, or error: the largest |error| first")
    ] = "file",
) -> ValidationOut:
    """The published runs `commest validate` scores, as it scored them today (out of sample):
    each with its citation, model, trainer, GPU and layout, the predicted and published
    iteration times, and the accuracy of the rows listed beside every row's."""
    return service.validation_results(
        sources=source or (), models=model or (), kinds=kind or (), order=sort
    )
