"""Baselines: named estimate requests and the iteration time a check holds them to."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api import scenario
from api.caches import Profiles
from api.schemas import BaselinePut, BaselineRead, BaselineWritten, Members
from api.services.estimates import estimate_response
from profiles import repository


def put_baseline(
    *, session: Session, name: str, body: BaselinePut, profiles: Profiles
) -> tuple[BaselineWritten, bool]:
    """Store a baseline: the request and its predicted (or given) time; (answer, created)."""
    answer = scenario.run(request=body.request, profiles=profiles)
    estimate_response(answer=answer)  # a prediction that is no answer (not finite) stores nothing
    predicted = answer.estimate.iteration_time_s
    given = body.iteration_time_s is not None
    held = body.iteration_time_s if body.iteration_time_s is not None else predicted
    stored_request = body.request.model_dump(mode="json", exclude_unset=True)
    baseline, created = repository.put_baseline(
        session=session, name=name, request=stored_request, iteration_time_s=held
    )
    written = Members(
        baseline, predicted_iteration_time_s=predicted, source="given" if given else "predicted"
    )
    return BaselineWritten.model_validate(written), created


def get_baseline(*, session: Session, name: str) -> BaselineRead:
    """One stored baseline; NotFoundError otherwise."""
    return BaselineRead.model_validate(repository.get_baseline(session=session, name=name))


def list_baselines(*, session: Session) -> list[BaselineRead]:
    """Every stored baseline, by name."""
    return [BaselineRead.model_validate(b) for b in repository.list_baselines(session=session)]


def delete_baseline(*, session: Session, name: str) -> None:
    """Delete a baseline; NotFoundError if there is none of that name."""
    repository.delete_baseline(session=session, name=name)
