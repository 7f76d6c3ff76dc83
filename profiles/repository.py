"""Persistence of profiles, uploads, runs, calibrations and baselines.

Keyword-only functions over a SQLAlchemy ``Session``; they know nothing of HTTP.

Transactions: these functions flush but never commit. The caller owns the unit of work,
normally ``with profiles.db.transaction(factory) as session: ...``, which commits on
success and rolls back on any error. Writes that can lose a race on a unique constraint (a
profile or baseline name, an identical upload) run inside a SAVEPOINT: the loser's savepoint
is rolled back and it gets ``ConflictError`` (or, for an identical upload, the stored one),
while the caller's transaction stays usable. An upload is written whole inside one savepoint,
so a failure part-way leaves nothing behind even if the caller goes on to commit.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from estimator.bandwidth import Collective, parse_collective
from estimator.errors import ConflictError, NotFoundError, ParseError, ValidationError
from profiles.bandwidth import AlphaBetaFit, ProfileBandwidth, RunCurve
from profiles.calibration import CalibrationResult, CalibrationSample
from profiles.models import (
    NAME_LENGTH,
    UTILIZATION_SOURCES,
    Baseline,
    Calibration,
    Point,
    Profile,
    Run,
    Upload,
)
from profiles.nominal import NOMINAL_SPECS, nominal_curves
from profiles.parsed import ParsedRun

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE = "must be 1-64 characters of A-Z a-z 0-9 . _ -"
_STRING_LIMITS = {
    "collective": 32,
    "tool": 32,
    "backend": 32,
    "gpu_model": NAME_LENGTH,
    "dtype": 16,
    "redop": 16,
    "tool_version": NAME_LENGTH,
}


class ProfileChanges(TypedDict, total=False):
    """Fields ``update_profile`` may change (absent keys stay as they are)."""

    name: str
    gpu_model: str
    gpus_per_node: int
    peak_tflops: float | None
    peak_tflops_by_dtype: dict[str, float] | None
    gpu_memory_bytes: int | None
    utilization: float | None
    utilization_source: str | None
    description: str


@dataclass(slots=True)
class UploadOutcome:
    """What an upload stored (or found already stored) for a profile."""

    upload: Upload
    runs: list[Run]
    already_stored: bool
    warnings: list[str] = field(default_factory=list)


# --- validation -----------------------------------------------------------------------------


def validate_name(name: str, *, field_name: str = "name") -> str:
    """``name`` if it is 1-64 characters of [A-Za-z0-9._-]; ValidationError otherwise."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ValidationError(field_name, name, NAME_RULE)
    return name


def _positive(field_name: str, value: float | None, *, upper: float | None = None) -> None:
    if value is None:
        return
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValidationError(field_name, value, "must be a finite number > 0")
    if upper is not None and value > upper:
        raise ValidationError(field_name, value, f"must be ≤ {upper:g}")


def _validate_profile_fields(values: ProfileChanges) -> None:
    if "name" in values:
        validate_name(values["name"])
    if "gpu_model" in values:
        model = values["gpu_model"]
        if not (isinstance(model, str) and 1 <= len(model.strip()) <= NAME_LENGTH):
            raise ValidationError("gpu_model", model, "must be 1-64 characters")
    if "gpus_per_node" in values:
        g = values["gpus_per_node"]
        if not (isinstance(g, int) and not isinstance(g, bool) and 1 <= g <= 1024):
            raise ValidationError("gpus_per_node", g, "must be an integer in 1..1024")
    _positive("peak_tflops", values.get("peak_tflops"))
    for dtype, tflops in (values.get("peak_tflops_by_dtype") or {}).items():
        if not (isinstance(dtype, str) and 1 <= len(dtype) <= 16):
            raise ValidationError("peak_tflops_by_dtype", dtype, "keys must be 1-16 characters")
        _positive(f"peak_tflops_by_dtype.{dtype}", tflops)
    _positive("gpu_memory_bytes", values.get("gpu_memory_bytes"))
    _positive("utilization", values.get("utilization"), upper=1.0)
    source = values.get("utilization_source")
    if source is not None and source not in UTILIZATION_SOURCES:
        raise ValidationError("utilization_source", source, "must be 'given' or 'fitted'")


# --- profiles -------------------------------------------------------------------------------


def create_profile(
    *,
    session: Session,
    name: str,
    gpu_model: str,
    gpus_per_node: int,
    peak_tflops: float | None = None,
    peak_tflops_by_dtype: dict[str, float] | None = None,
    gpu_memory_bytes: int | None = None,
    utilization: float | None = None,
    utilization_source: str | None = None,
    description: str = "",
    nominal: bool = False,
) -> Profile:
    """Insert a profile; ConflictError if the name is taken (also under a race)."""
    if utilization is not None and utilization_source is None:
        utilization_source = "given"
    values: ProfileChanges = {
        "name": name,
        "gpu_model": gpu_model,
        "gpus_per_node": gpus_per_node,
        "peak_tflops": peak_tflops,
        "peak_tflops_by_dtype": peak_tflops_by_dtype,
        "gpu_memory_bytes": gpu_memory_bytes,
        "utilization": utilization,
        "utilization_source": utilization_source,
        "description": description,
    }
    _validate_profile_fields(values)
    profile = Profile(**values, nominal=nominal)
    try:
        with session.begin_nested():
            session.add(profile)
    except IntegrityError:
        raise ConflictError(f"profile {name!r} already exists", name=name) from None
    return profile


def profile_exists(*, session: Session, name: str) -> bool:
    """Whether a profile of that name exists."""
    return session.scalar(select(Profile.id).where(Profile.name == name)) is not None


def get_profile(*, session: Session, name: str) -> Profile:
    """The profile of that name; NotFoundError if there is none."""
    profile = session.scalar(select(Profile).where(Profile.name == name))
    if profile is None:
        raise NotFoundError(f"no profile named {name!r}", name=name)
    return profile


def list_profiles(*, session: Session, offset: int = 0, limit: int | None = None) -> list[Profile]:
    """Profiles ordered by name, optionally one page of them."""
    query = select(Profile).order_by(Profile.name).offset(offset).limit(limit)
    return list(session.scalars(query))


def count_profiles(*, session: Session) -> int:
    """How many profiles exist."""
    return session.scalar(select(func.count()).select_from(Profile)) or 0


def update_profile(*, session: Session, name: str, changes: ProfileChanges) -> Profile:
    """Apply ``changes`` to a profile; ConflictError if a new name is taken."""
    unknown = set(changes) - set(ProfileChanges.__annotations__)
    if unknown:
        raise ValidationError("changes", sorted(unknown), "unknown profile fields")
    _validate_profile_fields(changes)
    profile = get_profile(session=session, name=name)
    updates = dict(changes)
    if "utilization" in updates and "utilization_source" not in updates:
        updates["utilization_source"] = "given" if updates["utilization"] is not None else None
    try:
        with session.begin_nested():
            for key, value in updates.items():
                setattr(profile, key, value)
    except IntegrityError:
        session.refresh(profile)
        new_name = changes.get("name")
        raise ConflictError(f"profile {new_name!r} already exists", name=new_name) from None
    return profile


def delete_profile(*, session: Session, name: str) -> None:
    """Delete a profile with its uploads, runs and calibrations."""
    profile = get_profile(session=session, name=name)
    session.delete(profile)
    session.flush()


def ensure_nominal_profiles(*, session: Session) -> list[str]:
    """Insert the nominal profiles that are missing (by name); returns the names inserted."""
    inserted = []
    for spec in NOMINAL_SPECS.values():
        if profile_exists(session=session, name=spec.name):
            continue
        try:
            create_profile(
                session=session,
                name=spec.name,
                gpu_model=spec.gpu_model,
                gpus_per_node=spec.gpus_per_node,
                peak_tflops=spec.peak_tflops,
                peak_tflops_by_dtype=dict(spec.peak_tflops_by_dtype),
                gpu_memory_bytes=spec.gpu_memory_bytes,
                utilization=spec.utilization,
                utilization_source="fitted",
                description=spec.description,
                nominal=True,
            )
        except ConflictError:
            continue  # a concurrent starter inserted it first
        inserted.append(spec.name)
    return inserted


# --- uploads and runs -----------------------------------------------------------------------


def _digest(text: str) -> str:
    if not isinstance(text, str):
        raise ValidationError("text", type(text).__name__, "must be text")
    if "\x00" in text:
        raise ValidationError("text", "…\\x00…", "must not contain NUL characters")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _find_upload(session: Session, profile_id: int, sha256: str) -> Upload | None:
    query = select(Upload).where(Upload.profile_id == profile_id, Upload.sha256 == sha256)
    return session.scalar(query)


def _stored(session: Session, upload: Upload) -> UploadOutcome:
    runs = list(
        session.scalars(
            select(Run)
            .where(Run.upload_id == upload.id)
            .options(selectinload(Run.points))
            .order_by(Run.table_index)
        )
    )
    warnings = [w for run in runs for w in run.warnings]
    return UploadOutcome(upload=upload, runs=runs, already_stored=True, warnings=warnings)


def _clip(field_name: str, value: str | None, warnings: list[str]) -> str | None:
    if value is None:
        return None
    limit = _STRING_LIMITS[field_name]
    if len(value) > limit:
        warnings.append(f"{field_name} {value!r} cut to {limit} characters")
        return value[:limit]
    return value


def _prepare_run(parsed: ParsedRun, index: int) -> tuple[Run, list[Point]]:
    """A Run and its Points from a parsed table (not yet added); ValidationError if unusable."""
    where = f"runs[{index}]"
    if parsed.missing:
        raise ValidationError(
            f"{where}.{parsed.missing[0]}",
            None,
            "the benchmark text does not say it",
            hint=f"pass {parsed.missing[0]} as a query parameter",
        )
    assert parsed.collective is not None and parsed.ranks is not None
    assert parsed.nodes is not None
    op = parse_collective(parsed.collective)
    ranks, nodes = parsed.ranks, parsed.nodes
    if ranks < 1:
        raise ValidationError(f"{where}.ranks", ranks, "must be ≥ 1")
    if not 1 <= nodes <= ranks:
        raise ValidationError(f"{where}.nodes", nodes, f"must be in 1..ranks ({ranks})")
    if not parsed.points:
        raise ParseError(f"table {index + 1} ({op.value}) has no rows")
    for point in parsed.points:
        if point.size_bytes < 0 or not math.isfinite(point.time_us):
            raise ValidationError(
                f"{where}.points", (point.size_bytes, point.time_us), "sizes ≥ 0, finite times"
            )
    warnings = list(parsed.warnings)
    wrong = sum(1 for p in parsed.points if p.wrong)
    if wrong:
        warnings.append(f"{wrong} rows report #wrong > 0 (results not verified)")
    curve = RunCurve.from_points(
        op=op,
        ranks=ranks,
        nodes=nodes,
        points=[(p.size_bytes, p.time_us, p.in_place) for p in parsed.points],
        label="",
    )
    fit: AlphaBetaFit | None = curve.fit if curve is not None else None
    if fit is None:
        warnings.append("no latency-bandwidth fit (needs two sizes with times growing with size)")
    per_node = parsed.ranks_per_node
    if per_node is None and ranks % nodes == 0:
        per_node = ranks // nodes
    run = Run(
        table_index=index,
        collective=op.value,
        tool=_clip("tool", parsed.tool, warnings) or "unknown",
        backend=_clip("backend", parsed.backend, warnings),
        ranks=ranks,
        nodes=nodes,
        ranks_per_node=per_node,
        gpu_model=_clip("gpu_model", parsed.gpu_model, warnings),
        dtype=_clip("dtype", parsed.dtype, warnings),
        redop=_clip("redop", parsed.redop, warnings),
        tool_version=_clip("tool_version", parsed.tool_version, warnings),
        warnings=warnings,
        alpha_us=fit.alpha_us if fit else None,
        beta_gbps=fit.beta_gbps if fit else None,
    )
    points = [
        Point(
            size_bytes=p.size_bytes,
            count=p.count,
            time_us=p.time_us,
            algbw_gbps=p.algbw_gbps,
            busbw_gbps=p.busbw_gbps,
            in_place=p.in_place,
        )
        for p in parsed.points
    ]
    return run, points


def store_parsed_runs(
    *,
    session: Session,
    profile_name: str,
    text: str,
    runs: Sequence[ParsedRun],
    warnings: Sequence[str] = (),
) -> UploadOutcome:
    """Store ``text`` and its parsed runs under a profile, once per distinct text."""
    sha256 = _digest(text)
    profile = get_profile(session=session, name=profile_name)
    existing = _find_upload(session, profile.id, sha256)
    if existing is not None:
        return _stored(session, existing)
    if not runs:
        raise ParseError("the text holds no benchmark table")
    prepared = [_prepare_run(parsed, i) for i, parsed in enumerate(runs)]
    upload = Upload(
        profile_id=profile.id,
        sha256=sha256,
        raw_text=text,
        size_bytes=len(text.encode("utf-8")),
    )
    stored_runs = []
    try:
        with session.begin_nested():
            session.add(upload)
            session.flush()
            for run, points in prepared:
                run.upload_id = upload.id
                run.profile_id = profile.id
                run.points = points
                session.add(run)
                stored_runs.append(run)
    except IntegrityError as exc:
        existing = _find_upload(session, profile.id, sha256)
        if existing is None:  # not our unique constraint (the profile went away?)
            raise ConflictError(
                f"upload to profile {profile_name!r} conflicted with a concurrent write; retry"
            ) from exc
        return _stored(session, existing)
    all_warnings = list(warnings) + [w for run in stored_runs for w in run.warnings]
    return UploadOutcome(
        upload=upload, runs=stored_runs, already_stored=False, warnings=all_warnings
    )


def upload_runs(
    *,
    session: Session,
    profile_name: str,
    text: str,
    op: str | None = None,
    ranks: int | None = None,
    nodes: int | None = None,
    backend: str | None = None,
    dtype: str | None = None,
) -> UploadOutcome:
    """Parse benchmark text, fill gaps from the hints, fit α/β, and store it all at once."""
    sha256 = _digest(text)
    profile = get_profile(session=session, name=profile_name)
    existing = _find_upload(session, profile.id, sha256)
    if existing is not None:
        return _stored(session, existing)
    from profiles.parsers import apply_hints, parse_benchmark_text

    result = parse_benchmark_text(text)
    runs = [
        apply_hints(run, op=op, ranks=ranks, nodes=nodes, backend=backend, dtype=dtype)
        for run in result.runs
    ]
    return store_parsed_runs(
        session=session, profile_name=profile_name, text=text, runs=runs, warnings=result.warnings
    )


def list_uploads(*, session: Session, profile_name: str) -> list[Upload]:
    """A profile's uploads, oldest first."""
    profile = get_profile(session=session, name=profile_name)
    query = select(Upload).where(Upload.profile_id == profile.id).order_by(Upload.id)
    return list(session.scalars(query))


def get_upload(*, session: Session, profile_name: str, upload_id: int) -> Upload:
    """One upload of a profile (with its verbatim text); NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    upload = session.get(Upload, upload_id)
    if upload is None or upload.profile_id != profile.id:
        raise NotFoundError(f"profile {profile_name!r} has no upload {upload_id}")
    return upload


def list_runs(
    *,
    session: Session,
    profile_name: str,
    op: str | None = None,
    backend: str | None = None,
    with_points: bool = False,
) -> list[Run]:
    """A profile's runs, optionally of one collective and backend, in upload order."""
    profile = get_profile(session=session, name=profile_name)
    query = select(Run).where(Run.profile_id == profile.id)
    if op is not None:
        query = query.where(Run.collective == parse_collective(op).value)
    if backend is not None:
        query = query.where(Run.backend == backend)
    if with_points:
        query = query.options(selectinload(Run.points))
    return list(session.scalars(query.order_by(Run.id)))


def get_run(*, session: Session, profile_name: str, run_id: int) -> Run:
    """One run of a profile with its points; NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    query = select(Run).where(Run.id == run_id).options(selectinload(Run.points))
    run = session.scalar(query)
    if run is None or run.profile_id != profile.id:
        raise NotFoundError(f"profile {profile_name!r} has no run {run_id}")
    return run


def run_label(run: Run) -> str:
    """How a run is named in bandwidth answers."""
    return (
        f"run {run.id} ({run.tool} {run.collective}, {run.backend or 'unknown backend'}, "
        f"{run.ranks} ranks on {run.nodes} node(s), upload {run.upload_id})"
    )


def load_bandwidth(*, session: Session, profile_name: str) -> ProfileBandwidth:
    """The profile's bandwidth provider from its stored runs (and nominal curves if nominal)."""
    profile = get_profile(session=session, name=profile_name)
    runs = session.scalars(
        select(Run)
        .where(Run.profile_id == profile.id)
        .options(selectinload(Run.points))
        .order_by(Run.id)
    )
    curves = []
    for run in runs:
        fit = None
        if run.alpha_us is not None and run.beta_gbps is not None:
            fit = AlphaBetaFit(alpha_us=run.alpha_us, beta_gbps=run.beta_gbps)
        curve = RunCurve.from_points(
            op=Collective(run.collective),
            ranks=run.ranks,
            nodes=run.nodes,
            points=[(p.size_bytes, p.time_us, p.in_place) for p in run.points],
            label=run_label(run),
            backend=run.backend,
            fit=fit,
            run_id=run.id,
            dtype=run.dtype,
        )
        if curve is not None:
            curves.append(curve)
    nominal: tuple[RunCurve, ...] = ()
    if profile.nominal and profile.name in NOMINAL_SPECS:
        nominal = nominal_curves(profile.name)
    return ProfileBandwidth(profile.name, curves, nominal)


# --- calibrations ---------------------------------------------------------------------------


def save_calibration(
    *,
    session: Session,
    profile_name: str,
    inputs: Any,
    samples: Sequence[CalibrationSample],
    result: CalibrationResult,
    apply: bool = True,
) -> Calibration:
    """Record a fit of u (inputs, u, MAPE, residuals); with ``apply`` set it on the profile."""
    profile = get_profile(session=session, name=profile_name)
    residuals = [
        {
            "label": sample.label,
            "measured_s": sample.measured_s,
            "predicted_s": predicted,
            "residual_s": residual,
            "residual_pct": pct,
        }
        for sample, predicted, residual, pct in zip(
            samples, result.predicted_s, result.residual_s, result.residual_pct, strict=True
        )
    ]
    calibration = Calibration(
        profile_id=profile.id,
        inputs=inputs,
        utilization=result.utilization,
        mape_pct=result.mape_pct,
        residuals=residuals,
    )
    session.add(calibration)
    if apply:
        profile.utilization = result.utilization
        profile.utilization_source = "fitted"
    session.flush()
    return calibration


def list_calibrations(*, session: Session, profile_name: str) -> list[Calibration]:
    """A profile's calibrations, newest first."""
    profile = get_profile(session=session, name=profile_name)
    query = (
        select(Calibration)
        .where(Calibration.profile_id == profile.id)
        .order_by(Calibration.id.desc())
    )
    return list(session.scalars(query))


# --- baselines ------------------------------------------------------------------------------


def put_baseline(
    *, session: Session, name: str, request: Any, iteration_time_s: float
) -> tuple[Baseline, bool]:
    """Create or replace a named baseline; returns it and whether it was created."""
    validate_name(name)
    _positive("iteration_time_s", iteration_time_s)
    for _attempt in range(3):
        baseline = session.scalar(select(Baseline).where(Baseline.name == name))
        if baseline is not None:
            baseline.request = request
            baseline.iteration_time_s = iteration_time_s
            session.flush()
            return baseline, False
        baseline = Baseline(name=name, request=request, iteration_time_s=iteration_time_s)
        try:
            with session.begin_nested():
                session.add(baseline)
        except IntegrityError:
            continue  # a concurrent writer created it: update theirs
        return baseline, True
    raise ConflictError(f"baseline {name!r} is being written concurrently; retry", name=name)


def get_baseline(*, session: Session, name: str) -> Baseline:
    """The baseline of that name; NotFoundError if there is none."""
    baseline = session.scalar(select(Baseline).where(Baseline.name == name))
    if baseline is None:
        raise NotFoundError(f"no baseline named {name!r}", name=name)
    return baseline


def list_baselines(*, session: Session) -> list[Baseline]:
    """Baselines ordered by name."""
    return list(session.scalars(select(Baseline).order_by(Baseline.name)))


def delete_baseline(*, session: Session, name: str) -> None:
    """Delete a baseline; NotFoundError if there is none."""
    session.delete(get_baseline(session=session, name=name))
    session.flush()
