"""Training logs: a run's log read into a measured run of the profile, for calibration.

The log is parsed before the write transaction (``parse``, in the request's worker thread);
``store`` then writes the measured run, once per profile and parsed content.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.schemas import (
    MeasuredRunRead,
    MeasuredRunsPage,
    Members,
    TrainingLogHints,
    TrainingLogResponse,
)
from profiles import measured_runs, repository
from profiles.models import MeasuredRun
from profiles.training_logs import LogHints, ParsedTrainingLog, parse_training_log


def log_hints(hints: TrainingLogHints) -> LogHints:
    """The query parameters as the parser's hints."""
    return LogHints(**hints.model_dump(mode="json", exclude={"label"}))


def parse(*, text: str, hints: TrainingLogHints) -> ParsedTrainingLog:
    """Read a training log (pure; ParseError / ValidationError say what is wrong, and a log
    that leaves a required field unstated is a ValidationError naming the query parameters)."""
    parsed = parse_training_log(text, log_hints(hints))
    measured_runs.require_complete(parsed)
    return parsed


def store(
    *,
    session: Session,
    name: str,
    text: str,
    parsed: ParsedTrainingLog,
    hints: TrainingLogHints,
    file_name: str | None,
) -> tuple[TrainingLogResponse, bool]:
    """Store the parsed log as a measured run; the answer, and whether it is new."""
    outcome = measured_runs.add_measured_run(
        session=session,
        profile_name=name,
        parsed=parsed,
        source_text=text,
        hints=measured_runs.hints_dict(log_hints(hints)),
        file_name=file_name,
        label=hints.label,
    )
    session.flush()
    warnings = list(outcome.run.warnings)
    profile = repository.get_profile(session=session, name=name)
    if hints.gpus_per_node is not None and hints.gpus_per_node != profile.gpus_per_node:
        warnings.append(
            f"the run had {hints.gpus_per_node} GPUs per node, the profile {profile.gpus_per_node}:"
            " its estimates place ranks as the profile says"
        )
    answer = TrainingLogResponse.model_validate(
        Members(
            outcome.run,
            profile=name,
            warnings=warnings,
            already_stored=outcome.already_stored,
            missing=[m for m in parsed.missing if not m.required],
            dropped_count=parsed.dropped_count,
            warmup=parsed.warmup,
        )
    )
    return answer, not outcome.already_stored


def _read(run: MeasuredRun, name: str) -> MeasuredRunRead:
    return MeasuredRunRead.model_validate(Members(run, profile=name))


def list_logs(*, session: Session, name: str, offset: int, limit: int) -> MeasuredRunsPage:
    """A profile's measured runs, one page."""
    runs = measured_runs.list_measured_runs(
        session=session, profile_name=name, offset=offset, limit=limit
    )
    count = measured_runs.count_measured_runs(session=session, profile_name=name)
    return MeasuredRunsPage(runs=[_read(r, name) for r in runs], count=count)


def get_log(*, session: Session, name: str, run_id: int) -> MeasuredRunRead:
    """One measured run."""
    return _read(
        measured_runs.get_measured_run(session=session, profile_name=name, run_id=run_id), name
    )


def delete_log(*, session: Session, name: str, run_id: int) -> None:
    """Delete one measured run."""
    measured_runs.delete_measured_run(session=session, profile_name=name, run_id=run_id)
