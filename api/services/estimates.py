"""Estimates: one layout's iteration time with every term, collective and assumption."""

from __future__ import annotations

from api import scenario
from api.schemas import EstimateRequest, EstimateResponse, finite_answer
from api.snapshots import Profiles


def estimate_response(*, answer: scenario.Answer) -> EstimateResponse:
    """The response of an estimate (ValidationError when a figure of it is not finite)."""
    with finite_answer(scenario.scenario_figures(answer.estimate.scenario)):
        return EstimateResponse.model_validate(answer)


def create_estimate(*, request: EstimateRequest, profiles: Profiles) -> EstimateResponse:
    """POST /v1/estimates."""
    return estimate_response(answer=scenario.run(request=request, profiles=profiles))
