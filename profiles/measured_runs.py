"""Persistence of measured runs: training runs of a profile's cluster read from their logs.

Keyword-only functions over a SQLAlchemy ``Session``; they flush, never commit (the caller owns
the transaction, as in ``profiles.repository``). Parse the log first
(``profiles.training_logs.parse_training_log``), outside the write transaction, then
:func:`add_measured_run`: a run is stored once per profile and parsed content, so the same log
pasted with CRLF line ends, launcher prefixes or inside a markdown fence is the same run.
:func:`calibration_runs` hands stored runs to a calibration (``profiles.calibration``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from estimator.errors import ConflictError, LimitError, NotFoundError, ValidationError
from profiles.models import MeasuredRun
from profiles.repository import get_profile
from profiles.training_logs import LogHints, ParsedTrainingLog

LABEL_LENGTH = 200
FILE_NAME_LENGTH = 255
MAX_CALIBRATION_RUNS = 1000  # as many runs as a calibration request may list


@dataclass(slots=True)
class MeasuredRunOutcome:
    """What an upload stored, or found already stored."""

    run: MeasuredRun
    already_stored: bool


@dataclass(frozen=True, slots=True)
class StoredCalibrationRun:
    """A stored run as a calibration takes it: the request, the measured time, a label."""

    run_id: int
    request: dict[str, Any]
    measured_iteration_time_s: float
    label: str


def _clip(value: str | None, limit: int) -> str | None:
    if value is None:
        return None
    value = "".join(ch for ch in value if ch >= " ").strip()
    return value[:limit] or None


def hints_dict(hints: LogHints) -> dict[str, Any]:
    """The hints the user gave (the ``None`` ones left out), as stored with the run."""
    return {k: v for k, v in asdict(hints).items() if v is not None}


def require_complete(parsed: ParsedTrainingLog) -> None:
    """ValidationError naming every query parameter still needed, when the log leaves a
    required request field unstated (the problem's ``missing`` member lists them)."""
    needed = [m for m in parsed.missing if m.required]
    if needed:
        listed = ", ".join(f"{m.query_parameter} ({m.what})" for m in needed)
        error = ValidationError(
            needed[0].field,
            None,
            f"the log does not state it; pass the query parameter(s) {listed}",
        )
        error.context["missing"] = [
            {"field": m.field, "query_parameter": m.query_parameter, "what": m.what} for m in needed
        ]
        raise error


def _find(session: Session, profile_id: int, content_sha256: str) -> MeasuredRun | None:
    query = select(MeasuredRun).where(
        MeasuredRun.profile_id == profile_id, MeasuredRun.content_sha256 == content_sha256
    )
    return session.scalar(query)


def add_measured_run(
    *,
    session: Session,
    profile_name: str,
    parsed: ParsedTrainingLog,
    source_text: str,
    hints: Mapping[str, Any] | None = None,
    file_name: str | None = None,
    label: str | None = None,
) -> MeasuredRunOutcome:
    """Store a parsed log as a measured run of the profile, once per parsed content.

    ValidationError if the log leaves a required request field unstated (it names the query
    parameters to pass); NotFoundError for an unknown profile.
    """
    require_complete(parsed)
    profile = get_profile(session=session, name=profile_name)
    content = parsed.content_sha256
    existing = _find(session, profile.id, content)
    if existing is not None:
        return MeasuredRunOutcome(existing, already_stored=True)
    file_name = _clip(file_name, FILE_NAME_LENGTH)
    default_label = (
        f"{file_name or parsed.format} ({parsed.intervals_used} intervals, "
        f"{parsed.iteration_time_s:.4g} s)"
    )
    run = MeasuredRun(
        profile_id=profile.id,
        label=_clip(label, LABEL_LENGTH) or default_label[:LABEL_LENGTH],
        file_name=file_name,
        format=parsed.format,
        source_sha256=hashlib.sha256(source_text.encode("utf-8", "replace")).hexdigest(),
        content_sha256=content,
        request=parsed.request,
        iteration_time_s=parsed.iteration_time_s,
        intervals_used=parsed.intervals_used,
        iterations_used=parsed.iterations_used,
        dropped=[{"iteration": d.iteration, "reason": d.reason} for d in parsed.dropped],
        hints=dict(hints or {}),
        notes=parsed.notes,
        warnings=parsed.warnings,
    )
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
    except IntegrityError as exc:
        existing = _find(session, profile.id, content)
        if existing is None:
            raise ConflictError(
                f"storing a run of profile {profile_name!r} conflicted with a concurrent write; "
                "retry"
            ) from exc
        return MeasuredRunOutcome(existing, already_stored=True)
    return MeasuredRunOutcome(run, already_stored=False)


def list_measured_runs(
    *, session: Session, profile_name: str, offset: int = 0, limit: int | None = None
) -> list[MeasuredRun]:
    """A profile's measured runs, oldest first, one page of them."""
    profile = get_profile(session=session, name=profile_name)
    query = (
        select(MeasuredRun)
        .where(MeasuredRun.profile_id == profile.id)
        .order_by(MeasuredRun.id)
        .offset(offset)
        .limit(limit)
    )
    return list(session.scalars(query))


def count_measured_runs(*, session: Session, profile_name: str) -> int:
    """How many measured runs a profile holds."""
    profile = get_profile(session=session, name=profile_name)
    query = (
        select(func.count()).select_from(MeasuredRun).where(MeasuredRun.profile_id == profile.id)
    )
    return int(session.scalar(query) or 0)


def get_measured_run(*, session: Session, profile_name: str, run_id: int) -> MeasuredRun:
    """One measured run of a profile; NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    run = session.get(MeasuredRun, run_id)
    if run is None or run.profile_id != profile.id:
        raise NotFoundError(f"profile {profile_name!r} has no measured run {run_id}")
    return run


def delete_measured_run(*, session: Session, profile_name: str, run_id: int) -> None:
    """Delete one measured run of a profile; NotFoundError if it has none by that id."""
    run = get_measured_run(session=session, profile_name=profile_name, run_id=run_id)
    session.delete(run)
    session.flush()


def calibration_runs(
    *, session: Session, profile_name: str, run_ids: Sequence[int] | None = None
) -> list[StoredCalibrationRun]:
    """Stored runs for a calibration: those named (in that order), or all of the profile's.

    NotFoundError for an id the profile does not hold, ValidationError when there is none,
    LimitError beyond :data:`MAX_CALIBRATION_RUNS`.
    """
    if run_ids is None:
        total = count_measured_runs(session=session, profile_name=profile_name)
        if total > MAX_CALIBRATION_RUNS:
            raise LimitError(
                f"profile {profile_name!r} holds {total} measured runs; a calibration takes at "
                f"most {MAX_CALIBRATION_RUNS}: name them with stored_run_ids"
            )
        runs = list_measured_runs(session=session, profile_name=profile_name)
    else:
        if len(run_ids) > MAX_CALIBRATION_RUNS:
            raise LimitError(
                f"{len(run_ids)} stored runs named; a calibration takes at most "
                f"{MAX_CALIBRATION_RUNS}"
            )
        if len(set(run_ids)) != len(run_ids):
            raise ValidationError("stored_run_ids", list(run_ids), "names a run twice")
        runs = [
            get_measured_run(session=session, profile_name=profile_name, run_id=i) for i in run_ids
        ]
    if not runs:
        raise ValidationError(
            "stored_run_ids",
            [],
            f"profile {profile_name!r} holds no measured run: upload a training log first "
            f"(POST /v1/profiles/{profile_name}/training-logs)",
        )
    return [
        StoredCalibrationRun(
            run_id=run.id,
            request=dict(run.request),
            measured_iteration_time_s=run.iteration_time_s,
            label=f"run {run.id}: {run.label}",
        )
        for run in runs
    ]
