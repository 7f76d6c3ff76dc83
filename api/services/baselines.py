"""Baselines: named estimate requests and the iteration time a check holds them to."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from api import scenario
from api.caches import Profiles
from api.schemas import BaselinePut
from profiles import repository
from profiles.models import Baseline


def baseline_dict(baseline: Baseline) -> dict[str, Any]:
    """A stored baseline as a response body."""
    return {
        "name": baseline.name,
        "iteration_time_s": baseline.iteration_time_s,
        "request": baseline.request,
        "created_at": baseline.created_at,
        "updated_at": baseline.updated_at,
    }


def put_baseline(
    *, session: Session, name: str, body: BaselinePut, profiles: Profiles
) -> tuple[dict[str, Any], bool]:
    """Store a baseline: the request and its predicted (or given) time; (body, created)."""
    predicted = scenario.run(request=body.request, profiles=profiles).estimate.iteration_time_s
    held = body.iteration_time_s if body.iteration_time_s is not None else predicted
    stored_request = body.request.model_dump(mode="json", exclude_unset=True)
    baseline, created = repository.put_baseline(
        session=session, name=name, request=stored_request, iteration_time_s=held
    )
    out = baseline_dict(baseline)
    out["predicted_iteration_time_s"] = predicted
    out["source"] = "given" if body.iteration_time_s is not None else "predicted"
    return out, created


def get_baseline(*, session: Session, name: str) -> dict[str, Any]:
    """One stored baseline; NotFoundError otherwise."""
    return baseline_dict(repository.get_baseline(session=session, name=name))


def list_baselines(*, session: Session) -> list[dict[str, Any]]:
    """Every stored baseline, by name."""
    return [baseline_dict(b) for b in repository.list_baselines(session=session)]


def delete_baseline(*, session: Session, name: str) -> None:
    """Delete a baseline; NotFoundError if there is none of that name."""
    repository.delete_baseline(session=session, name=name)
