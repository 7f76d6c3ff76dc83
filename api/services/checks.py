"""Checks: pass/fail of an estimate against a time budget or a stored baseline."""

from __future__ import annotations

from typing import Literal

from api import scenario
from api.caches import Profiles, SessionScope
from api.schemas import BaselineHeld, CheckRequest, CheckResponse, Members, finite_answer
from api.services.baselines import get_baseline
from api.services.estimates import estimate_response
from estimator.errors import ValidationError

DEFAULT_TOLERANCE = 0.05


def create_check(
    *, request: CheckRequest, profiles: Profiles, session_scope: SessionScope
) -> CheckResponse:
    """POST /v1/checks: the estimate against a budget or a stored baseline."""
    budget, name = request.max_iteration_time_s, request.baseline
    if (budget is None) == (name is None):
        raise ValidationError(
            "max_iteration_time_s" if budget is None else "baseline",
            None if budget is None else name,
            "give exactly one criterion: max_iteration_time_s or baseline",
        )
    if request.tolerance is not None and name is None:
        raise ValidationError(
            "tolerance", request.tolerance, "applies to a baseline check only; give baseline"
        )
    baseline: BaselineHeld | None = None
    if name is not None:
        with session_scope() as session:
            stored = get_baseline(session=session, name=name)
        tolerance = DEFAULT_TOLERANCE if request.tolerance is None else request.tolerance
        limit = stored.iteration_time_s * (1.0 + tolerance)
        baseline = BaselineHeld.model_validate(Members(stored, tolerance=tolerance))
        criterion: Literal["budget", "baseline"] = "baseline"
    else:
        assert budget is not None
        limit, criterion = budget, "budget"
    answer = scenario.run(request=request, profiles=profiles)
    predicted = answer.estimate.iteration_time_s
    margin = limit - predicted
    estimate = estimate_response(answer=answer)
    with finite_answer(scenario.figures(answer.cluster.spec)):
        return CheckResponse(
            passed=predicted <= limit,
            criterion=criterion,
            predicted_iteration_time_s=predicted,
            limit_s=limit,
            margin_s=margin,
            margin_pct=100.0 * margin / limit,
            baseline=baseline,
            estimate=estimate,
        )
