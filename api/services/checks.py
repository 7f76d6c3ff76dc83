"""Checks: pass/fail of an estimate against a time budget or a stored baseline, the GPU
memory (less a headroom), and optional ratio thresholds."""

from __future__ import annotations

from typing import Literal

from api import scenario
from api.schemas import (
    BaselineHeld,
    CheckComparisonOut,
    CheckMemoryOut,
    CheckRequest,
    CheckResponse,
    EstimateResponse,
    Members,
    finite_answer,
)
from api.services.estimates import estimate_response
from api.snapshots import Profiles, SessionScope
from estimator.errors import ValidationError

DEFAULT_TOLERANCE = 0.05
GB = 1e9


def _memory(request: CheckRequest, estimate: EstimateResponse) -> CheckMemoryOut:
    total, capacity = estimate.memory.total_bytes, estimate.memory.capacity_bytes
    usable = None if capacity is None else capacity * (1.0 - request.memory_headroom)
    return CheckMemoryOut(
        total_bytes=total,
        capacity_bytes=capacity,
        memory_headroom=request.memory_headroom,
        usable_bytes=usable,
        fits=None if usable is None else total <= usable,
        allow_memory_overflow=request.allow_memory_overflow,
    )


def _memory_comparison(memory: CheckMemoryOut) -> CheckComparisonOut:
    total = memory.total_bytes
    if memory.usable_bytes is None or memory.capacity_bytes is None:
        return CheckComparisonOut(
            name="memory_bytes",
            value=total,
            limit=None,
            relation="<=",
            passed=None,
            enforced=False,
            detail=f"memory {total / GB:.4g} GB per GPU, capacity unknown (give cluster.gpu "
            "or cluster.gpu_memory_gb to check it)",
        )
    headroom = memory.memory_headroom
    relation = "<=" if memory.fits else ">"
    detail = (
        f"memory {total / GB:.4g} GB per GPU {relation} usable {memory.usable_bytes / GB:.4g} GB"
        f" ({memory.capacity_bytes / GB:.4g} GB less {100 * headroom:g}% headroom)"
    )
    if memory.allow_memory_overflow:
        detail += ", overflow allowed"
    return CheckComparisonOut(
        name="memory_bytes",
        value=total,
        limit=memory.usable_bytes,
        relation="<=",
        passed=memory.fits,
        enforced=not memory.allow_memory_overflow,
        detail=detail,
    )


def _thresholds(request: CheckRequest, estimate: EstimateResponse) -> list[CheckComparisonOut]:
    given: list[tuple[Literal["communication_ratio", "bubble_ratio", "mfu"], float, float | None]]
    given = [
        ("communication_ratio", estimate.ratios.communication, request.max_communication_ratio),
        ("bubble_ratio", estimate.ratios.bubble, request.max_bubble_ratio),
        ("mfu", estimate.throughput.mfu, request.min_mfu),
    ]
    out = []
    for name, value, limit in given:
        if limit is None:
            continue
        relation: Literal["<=", ">="] = ">=" if name == "mfu" else "<="
        passed = value >= limit if name == "mfu" else value <= limit
        label = name.replace("_", " ")
        out.append(
            CheckComparisonOut(
                name=name,
                value=value,
                limit=limit,
                relation=relation,
                passed=passed,
                enforced=True,
                detail=f"{label} {value:.4g} {relation if passed else _NOT[relation]} {limit:g}",
            )
        )
    return out


_NOT = {"<=": ">", ">=": "<"}


def create_check(
    *, request: CheckRequest, profiles: Profiles, session_scope: SessionScope
) -> CheckResponse:
    """POST /v1/checks: the estimate against a budget or a stored baseline, the memory and
    the thresholds given; ``passed`` when every enforced comparison holds."""
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
        # the database layer is loaded only when a baseline is read (a budget check needs none)
        from api.services.baselines import get_baseline

        with session_scope() as session:
            stored = get_baseline(session=session, name=name)
        tolerance = DEFAULT_TOLERANCE if request.tolerance is None else request.tolerance
        limit = stored.iteration_time_s * (1.0 + tolerance)
        baseline = BaselineHeld.model_validate(Members(stored, tolerance=tolerance))
        criterion: Literal["budget", "baseline"] = "baseline"
        against = f"baseline {name!r}: {stored.iteration_time_s:.4g} s + {100 * tolerance:g}%"
    else:
        assert budget is not None
        limit, criterion = budget, "budget"
        against = "budget"
    answer = scenario.run(request=request, profiles=profiles)
    predicted = answer.estimate.iteration_time_s
    margin = limit - predicted
    with finite_answer(scenario.scenario_figures(answer.estimate.scenario)):
        estimate = estimate_response(answer=answer)
        memory = _memory(request, estimate)
        on_time = predicted <= limit
        comparisons = [
            CheckComparisonOut(
                name="iteration_time_s",
                value=predicted,
                limit=limit,
                relation="<=",
                passed=on_time,
                enforced=True,
                detail=f"iteration {predicted:.4g} s {'<=' if on_time else '>'} limit "
                f"{limit:.4g} s ({against})",
            ),
            _memory_comparison(memory),
            *_thresholds(request, estimate),
        ]
        reasons = [c.detail for c in comparisons if c.enforced and c.passed is False]
        return CheckResponse(
            passed=not reasons,
            criterion=criterion,
            predicted_iteration_time_s=predicted,
            limit_s=limit,
            margin_s=margin,
            margin_pct=100.0 * margin / limit,
            baseline=baseline,
            estimate=estimate,
            memory=memory,
            comparisons=comparisons,
            reasons=reasons,
        )
