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

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar

from sqlalchemy import Table, and_, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.attributes import set_committed_value

from estimator.bandwidth import Collective, parse_collective
from estimator.errors import ConflictError, NotFoundError, ValidationError
from profiles.bandwidth import (
    ENVELOPE_FORMAT,
    AlphaBetaFit,
    CurveData,
    CurveSet,
    Envelope,
    ProfileBandwidth,
    RunCurve,
    TuningRow,
    curve_data,
    tuning_table,
)
from profiles.calibration import CalibrationResult, CalibrationSample
from profiles.models import (
    NAME_LENGTH,
    UTILIZATION_SOURCES,
    Base,
    Baseline,
    Calibration,
    PlacementCurve,
    Point,
    Profile,
    Run,
    Upload,
    utcnow,
)
from profiles.nominal import (
    FAMILY_SPECS,
    NOMINAL_SPECS,
    family_spec,
    nominal_curve_set,
    nominal_curves,
)
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.uploads import (
    Hints,
    PreparedRun,
    PreparedUpload,
    UploadInput,
    parse_upload,
    prepare_parsed,
    upload_flags,
)

T = TypeVar("T")
# Tables for Core statements (bulk inserts and deletes that the ORM need not track)
_POINTS: Table = Base.metadata.tables["points"]
_RUNS: Table = Base.metadata.tables["runs"]
_UPLOADS: Table = Base.metadata.tables["uploads"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
NAME_RULE = "must be 1-64 characters of A-Z a-z 0-9 . _ -"


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


@dataclass(slots=True)
class UploadOutcome:
    """What an upload stored (or found already stored) for a profile."""

    upload: Upload
    runs: list[Run]
    already_stored: bool
    warnings: list[str] = field(default_factory=list)
    flags: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class UploadInfo:
    """One upload as lists show it (without its text)."""

    id: int
    filename: str | None
    label: str | None
    sha256: str
    content_digest: str | None
    size_bytes: int
    disabled: bool
    flags: list[dict[str, str]]
    run_count: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list: its items, how many there are in all, and where it starts."""

    items: list[T]
    total: int
    limit: int
    offset: int

    @property
    def next_offset(self) -> int | None:
        """The offset of the next page, or None on the last one."""
        following = self.offset + len(self.items)
        return following if following < self.total else None


MAX_PAGE = 1000


def _page_bounds(limit: int, offset: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError("limit", limit, f"must be an integer in 1..{MAX_PAGE}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValidationError("offset", offset, "must be an integer ≥ 0")


def _locked_profile(session: Session, profile_name: str) -> Profile:
    """The profile, its row locked for this transaction (PostgreSQL; SQLite writes serialise).

    Every write to a profile's uploads takes this lock first, so two writers never merge the
    same placement curve from the same old state.
    """
    profile = session.scalar(select(Profile).where(Profile.name == profile_name).with_for_update())
    if profile is None:
        raise NotFoundError(f"no profile named {profile_name!r}", name=profile_name)
    return profile


def bump_profile(*, session: Session, profile: Profile) -> None:
    """Mark a profile changed (its runs, uploads or curves); caches keyed by it must reload."""
    profile.updated_at = utcnow()
    session.flush()


def _find_upload(session: Session, profile_id: int, digest: str) -> Upload | None:
    query = select(Upload).where(Upload.profile_id == profile_id, Upload.content_digest == digest)
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
    return UploadOutcome(
        upload=upload,
        runs=runs,
        already_stored=True,
        warnings=warnings,
        flags=list(upload.flags or []),
    )


def run_label(
    run: Run,
    *,
    filename: str | None = None,
    label: str | None = None,
    flags: Sequence[dict[str, str]] | None = None,
) -> str:
    """How a run is named in bandwidth answers (its upload's file name, label and flags)."""
    return _label_text(
        run.id,
        run.tool,
        run.collective,
        run.backend,
        run.ranks,
        run.nodes,
        run.upload_id,
        filename,
        label,
        flags,
    )


def _label_text(
    run_id: int,
    tool: str,
    collective: str,
    backend: str | None,
    ranks: int,
    nodes: int,
    upload_id: int,
    filename: str | None,
    label: str | None,
    flags: Sequence[dict[str, str]] | None,
) -> str:
    upload = f"upload {upload_id}"
    if filename:
        upload += f" {filename!r}"
    if label:
        upload += f" [{label}]"
    text = (
        f"run {run_id} ({tool} {collective}, {backend or 'unknown backend'}, "
        f"{ranks} ranks on {nodes} node(s), {upload})"
    )
    if flags:
        codes = ", ".join(sorted({f.get("code", "?") for f in flags}))
        text += f" [flagged: {codes}]"
    return text


def _point_values(point: ParsedPoint) -> dict[str, Any]:
    return {
        "size_bytes": point.size_bytes,
        "count": point.count,
        "time_us": point.time_us,
        "algbw_gbps": point.algbw_gbps,
        "busbw_gbps": point.busbw_gbps,
        "in_place": point.in_place,
    }


def store_upload(
    *,
    session: Session,
    profile_name: str,
    prepared: PreparedUpload,
) -> UploadOutcome:
    """Store a prepared upload under a profile, once per distinct parsed content.

    What does not match the profile (``profiles.uploads.upload_flags``: a GPU of another family,
    a busbw beyond its links) is flagged, not refused: the upload is stored with its flags, the
    outcome lists them, and every bandwidth answer drawn from its runs names the flag and is
    weak (so estimates warn). Disable the upload if it was a mistake. The profile's placement
    curves take the new runs in the same transaction.
    """
    profile = _locked_profile(session, profile_name)
    existing = _find_upload(session, profile.id, prepared.content_digest)
    if existing is not None:
        return _stored(session, existing)
    flags = upload_flags(prepared, profile_name=profile.name, profile_gpu_model=profile.gpu_model)
    upload = Upload(
        profile_id=profile.id,
        sha256=prepared.sha256,
        content_digest=prepared.content_digest,
        raw_text=prepared.text,
        size_bytes=len(prepared.text.encode("utf-8")),
        filename=prepared.filename,
        label=prepared.label,
        flags=[f.as_dict() for f in flags] or None,
        disabled=False,
    )
    stored_runs: list[Run] = []
    try:
        with session.begin_nested():
            session.add(upload)
            session.flush()
            for run_values in prepared.runs:
                run = Run(**run_values.values, upload_id=upload.id, profile_id=profile.id)
                session.add(run)
                stored_runs.append(run)
            session.flush()
            rows: list[dict[str, Any]] = []
            for run, run_values in zip(stored_runs, prepared.runs, strict=True):
                ordered = sorted(run_values.points, key=lambda p: (p.in_place, p.size_bytes))
                values = [_point_values(p) for p in ordered]
                rows.extend({"run_id": run.id, **v} for v in values)
                # the points as a read would give them, without reading them back
                set_committed_value(run, "points", [Point(run_id=run.id, **v) for v in values])
            if rows:
                # Core: fast, and the runs' own flush already marked the profile changed
                session.connection().execute(insert(_POINTS), rows)
            _add_to_curves(session, profile, upload, stored_runs, prepared.runs)
    except IntegrityError as exc:
        existing = _find_upload(session, profile.id, prepared.content_digest)
        if existing is None:  # not our unique constraint (the profile went away?)
            raise ConflictError(
                f"upload to profile {profile_name!r} conflicted with a concurrent write; retry"
            ) from exc
        return _stored(session, existing)
    bump_profile(session=session, profile=profile)
    return UploadOutcome(
        upload=upload,
        runs=stored_runs,
        already_stored=False,
        warnings=list(prepared.warnings),
        flags=[f.as_dict() for f in flags],
    )


def store_uploads(
    *,
    session: Session,
    profile_name: str,
    prepared: Sequence[PreparedUpload],
) -> list[UploadOutcome]:
    """Store several prepared uploads (a multipart upload) in the caller's transaction."""
    return [store_upload(session=session, profile_name=profile_name, prepared=p) for p in prepared]


def store_parsed_runs(
    *,
    session: Session,
    profile_name: str,
    text: str,
    runs: Sequence[ParsedRun],
    warnings: Sequence[str] = (),
    filename: str | None = None,
    label: str | None = None,
) -> UploadOutcome:
    """Store ``text`` and runs already parsed from it, once per distinct content."""
    get_profile(session=session, name=profile_name)
    prepared = prepare_parsed(
        text=text, runs=runs, warnings=warnings, filename=filename, label=label
    )
    return store_upload(session=session, profile_name=profile_name, prepared=prepared)


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
    filename: str | None = None,
    label: str | None = None,
) -> UploadOutcome:
    """Parse benchmark text, fill gaps from the hints, fit α/β, and store it all at once.

    Callers that can should ``profiles.uploads.parse_upload`` before opening the transaction
    and ``store_upload`` inside it; this does both, in the caller's session.
    """
    get_profile(session=session, name=profile_name)
    prepared = parse_upload(
        UploadInput(
            text=text,
            filename=filename,
            label=label,
            hints=Hints(op=op, ranks=ranks, nodes=nodes, backend=backend, dtype=dtype),
        )
    )
    return store_upload(session=session, profile_name=profile_name, prepared=prepared)


_RUN_COUNT = (
    select(func.count(Run.id)).where(Run.upload_id == Upload.id).correlate(Upload).scalar_subquery()
)


def _upload_info(row: Any) -> UploadInfo:
    return UploadInfo(
        id=row.id,
        filename=row.filename,
        label=row.label,
        sha256=row.sha256,
        content_digest=row.content_digest,
        size_bytes=row.size_bytes,
        disabled=bool(row.disabled),
        flags=list(row.flags or []),
        run_count=int(row.run_count or 0),
        created_at=row.created_at,
    )


def _upload_columns() -> Any:
    return select(
        Upload.id,
        Upload.filename,
        Upload.label,
        Upload.sha256,
        Upload.content_digest,
        Upload.size_bytes,
        Upload.disabled,
        Upload.flags,
        Upload.created_at,
        _RUN_COUNT.label("run_count"),
    )


def list_uploads(
    *, session: Session, profile_name: str, limit: int = 100, offset: int = 0
) -> Page[UploadInfo]:
    """One page of a profile's uploads, oldest first, without their texts."""
    _page_bounds(limit, offset)
    profile = get_profile(session=session, name=profile_name)
    total = session.scalar(
        select(func.count()).select_from(Upload).where(Upload.profile_id == profile.id)
    )
    rows = session.execute(
        _upload_columns()
        .where(Upload.profile_id == profile.id)
        .order_by(Upload.id)
        .limit(limit)
        .offset(offset)
    ).all()
    return Page([_upload_info(r) for r in rows], int(total or 0), limit, offset)


def upload_info(*, session: Session, profile_name: str, upload_id: int) -> UploadInfo:
    """One upload of a profile as lists show it; NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    row = session.execute(
        _upload_columns().where(Upload.id == upload_id, Upload.profile_id == profile.id)
    ).first()
    if row is None:
        raise NotFoundError(f"profile {profile_name!r} has no upload {upload_id}")
    return _upload_info(row)


def get_upload(*, session: Session, profile_name: str, upload_id: int) -> Upload:
    """One upload of a profile (with its verbatim text); NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    upload = session.get(Upload, upload_id)
    if upload is None or upload.profile_id != profile.id:
        raise NotFoundError(f"profile {profile_name!r} has no upload {upload_id}")
    return upload


def _upload_placements(session: Session, upload_id: int) -> set[tuple[str, int, int]]:
    rows = session.execute(
        select(Run.collective, Run.ranks, Run.nodes).where(Run.upload_id == upload_id).distinct()
    ).all()
    return {(r.collective, int(r.ranks), int(r.nodes)) for r in rows}


def remove_upload(*, session: Session, profile_name: str, upload_id: int) -> UploadInfo:
    """Delete one upload with its runs; every answer that used them changes."""
    profile = _locked_profile(session, profile_name)
    info = upload_info(session=session, profile_name=profile_name, upload_id=upload_id)
    placements = _upload_placements(session, upload_id)
    # Core statements on the session's connection: the deleted rows are this profile's, so
    # bump_profile below marks the one profile changed (an ORM bulk statement could not say
    # which profile it touched). Objects of the upload the session holds are dropped from it.
    connection = session.connection()
    run_ids = select(Run.id).where(Run.upload_id == upload_id)
    connection.execute(delete(_POINTS).where(_POINTS.c.run_id.in_(run_ids)))
    connection.execute(delete(_RUNS).where(_RUNS.c.upload_id == upload_id))
    connection.execute(delete(_UPLOADS).where(_UPLOADS.c.id == upload_id))
    for obj in list(session.identity_map.values()):
        if (
            (isinstance(obj, Upload) and obj.id == upload_id)
            or (isinstance(obj, Run) and obj.upload_id == upload_id)
            or (isinstance(obj, Point) and obj.run is not None and obj.run.upload_id == upload_id)
        ):
            session.expunge(obj)
    _rebuild_curves(session, profile, placements)
    bump_profile(session=session, profile=profile)
    return info


def set_upload_disabled(
    *, session: Session, profile_name: str, upload_id: int, disabled: bool
) -> UploadInfo:
    """Disable (or enable again) one upload: disabled runs stop answering bandwidth queries."""
    if not isinstance(disabled, bool):
        raise ValidationError("disabled", disabled, "must be true or false")
    profile = _locked_profile(session, profile_name)
    upload = get_upload(session=session, profile_name=profile_name, upload_id=upload_id)
    if upload.disabled != disabled:
        upload.disabled = disabled
        session.flush()
        _rebuild_curves(session, profile, _upload_placements(session, upload_id))
        bump_profile(session=session, profile=profile)
    return upload_info(session=session, profile_name=profile_name, upload_id=upload_id)


def _runs_query(
    profile_id: int, op: str | None, backend: str | None, include_disabled: bool
) -> Any:
    query = select(Run).where(Run.profile_id == profile_id)
    if op is not None:
        query = query.where(Run.collective == parse_collective(op).value)
    if backend is not None:
        query = query.where(Run.backend == backend)
    if not include_disabled:
        query = query.where(
            Run.upload_id.in_(
                select(Upload.id).where(Upload.profile_id == profile_id, ~Upload.disabled)
            )
        )
    return query


def list_runs(
    *,
    session: Session,
    profile_name: str,
    op: str | None = None,
    backend: str | None = None,
    with_points: bool = False,
    limit: int | None = None,
    offset: int = 0,
    include_disabled: bool = True,
) -> list[Run]:
    """A profile's runs, optionally of one collective and backend, in upload order.

    ``limit``/``offset`` give one page (``count_runs`` gives the total).
    """
    if limit is not None:
        _page_bounds(limit, offset)
    profile = get_profile(session=session, name=profile_name)
    query = _runs_query(profile.id, op, backend, include_disabled)
    if with_points:
        query = query.options(selectinload(Run.points))
    query = query.order_by(Run.id).offset(offset).limit(limit)
    return list(session.scalars(query))


def count_runs(
    *,
    session: Session,
    profile_name: str,
    op: str | None = None,
    backend: str | None = None,
    include_disabled: bool = True,
) -> int:
    """How many runs ``list_runs`` would list without a page."""
    profile = get_profile(session=session, name=profile_name)
    query = _runs_query(profile.id, op, backend, include_disabled).subquery()
    return int(session.scalar(select(func.count()).select_from(query)) or 0)


def page_runs(
    *,
    session: Session,
    profile_name: str,
    op: str | None = None,
    backend: str | None = None,
    with_points: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> Page[Run]:
    """One page of ``list_runs`` with the total."""
    items = list_runs(
        session=session,
        profile_name=profile_name,
        op=op,
        backend=backend,
        with_points=with_points,
        limit=limit,
        offset=offset,
    )
    total = count_runs(session=session, profile_name=profile_name, op=op, backend=backend)
    return Page(items, total, limit, offset)


def get_run(*, session: Session, profile_name: str, run_id: int) -> Run:
    """One run of a profile with its points; NotFoundError otherwise."""
    profile = get_profile(session=session, name=profile_name)
    query = select(Run).where(Run.id == run_id).options(selectinload(Run.points))
    run = session.scalar(query)
    if run is None or run.profile_id != profile.id:
        raise NotFoundError(f"profile {profile_name!r} has no run {run_id}")
    return run


# --- bandwidth ------------------------------------------------------------------------------


def load_run_curves(
    *,
    session: Session,
    profile_id: int,
    placements: Iterable[tuple[str, int, int]] | None = None,
    op: str | None = None,
    include_disabled: bool = False,
    run_ids: Iterable[int] | None = None,
) -> list[RunCurve]:
    """Curves of a profile's runs (enabled ones unless ``include_disabled``), in one query.

    ``placements`` limits them to some (collective, ranks, nodes); ``op`` to one collective;
    ``run_ids`` to some runs.
    """
    query = (
        select(
            Run.id,
            Run.upload_id,
            Run.tool,
            Run.collective,
            Run.backend,
            Run.ranks,
            Run.nodes,
            Run.dtype,
            Run.alpha_us,
            Run.beta_gbps,
            Upload.filename,
            Upload.label,
            Point.size_bytes,
            Point.time_us,
            Point.in_place,
        )
        .join(Upload, Upload.id == Run.upload_id)
        .join(Point, Point.run_id == Run.id)
        .where(Run.profile_id == profile_id)
        .order_by(Run.id)
    )
    if not include_disabled:
        query = query.where(~Upload.disabled)
    if op is not None:
        query = query.where(Run.collective == parse_collective(op).value)
    if placements is not None:
        wanted = list(placements)
        if not wanted:
            return []
        query = query.where(
            or_(*(and_(Run.collective == c, Run.ranks == r, Run.nodes == k) for c, r, k in wanted))
        )
    if run_ids is not None:
        ids = sorted(set(run_ids))
        if not ids:
            return []
        query = query.where(Run.id.in_(ids))
    curves: list[RunCurve] = []
    rows = session.execute(query).all()
    # an upload's flags once per upload, not once per point row (they may be long)
    upload_ids = sorted({r.upload_id for r in rows})
    flags_of: dict[int, Any] = {}
    for chunk in range(0, len(upload_ids), 500):
        wanted_ids = upload_ids[chunk : chunk + 500]
        found = session.execute(
            select(Upload.id, Upload.flags).where(Upload.id.in_(wanted_ids))
        ).all()
        flags_of.update({u.id: u.flags for u in found})
    start = 0
    while start < len(rows):
        run_id = rows[start].id
        end = start
        while end < len(rows) and rows[end].id == run_id:
            end += 1
        head = rows[start]
        fit = None
        if head.alpha_us is not None and head.beta_gbps is not None:
            fit = AlphaBetaFit(alpha_us=head.alpha_us, beta_gbps=head.beta_gbps)
        curve = RunCurve.from_points(
            op=Collective(head.collective),
            ranks=head.ranks,
            nodes=head.nodes,
            points=[(r.size_bytes, r.time_us, r.in_place) for r in rows[start:end]],
            label=_label_of(head, flags_of.get(head.upload_id)),
            backend=head.backend,
            fit=fit,
            run_id=run_id,
            dtype=head.dtype,
            flagged=bool(flags_of.get(head.upload_id)),
        )
        if curve is not None:
            curves.append(curve)
        start = end
    return curves


def _label_of(row: Any, flags: Any) -> str:
    return _label_text(
        row.id,
        row.tool,
        row.collective,
        row.backend,
        row.ranks,
        row.nodes,
        row.upload_id,
        row.filename,
        row.label,
        flags,
    )


def _add_to_curves(
    session: Session,
    profile: Profile,
    upload: Upload,
    runs: Sequence[Run],
    prepared: Sequence[PreparedRun],
) -> None:
    """Merge new runs into the profile's stored placement curves (rebuild them if stale)."""
    if profile.curves_format != ENVELOPE_FORMAT:
        _rebuild_curves(session, profile, None)
        return
    new: dict[tuple[str, int, int], list[RunCurve]] = {}
    for run, prep in zip(runs, prepared, strict=True):
        if prep.curve is None:
            continue
        label = run_label(run, filename=upload.filename, label=upload.label, flags=upload.flags)
        curve = replace(prep.curve, label=label, run_id=run.id, flagged=bool(upload.flags))
        new.setdefault((run.collective, run.ranks, run.nodes), []).append(curve)
    for (collective, ranks, nodes), curves in new.items():
        envelope = Envelope.of_curves(curves)
        row = session.scalar(
            select(PlacementCurve).where(
                PlacementCurve.profile_id == profile.id,
                PlacementCurve.collective == collective,
                PlacementCurve.ranks == ranks,
                PlacementCurve.nodes == nodes,
            )
        )
        if row is None:
            session.add(_curve_row(profile.id, envelope))
        else:
            merged = Envelope.from_json(row.curve).merge(envelope)
            row.curve = merged.to_json()
            row.run_count = merged.run_count
    session.flush()


def _curve_row(profile_id: int, envelope: Envelope) -> PlacementCurve:
    return PlacementCurve(
        profile_id=profile_id,
        collective=envelope.op.value,
        ranks=envelope.ranks,
        nodes=envelope.nodes,
        run_count=envelope.run_count,
        curve=envelope.to_json(),
    )


def _rebuild_curves(
    session: Session, profile: Profile, placements: set[tuple[str, int, int]] | None
) -> None:
    """Recompute stored placement curves from the enabled runs (all, or some placements)."""
    if profile.curves_format != ENVELOPE_FORMAT:
        placements = None
    stale = select(PlacementCurve).where(PlacementCurve.profile_id == profile.id)
    if placements is not None:
        if not placements:
            return
        stale = stale.where(
            or_(
                *(
                    and_(
                        PlacementCurve.collective == c,
                        PlacementCurve.ranks == r,
                        PlacementCurve.nodes == k,
                    )
                    for c, r, k in placements
                )
            )
        )
    for row in session.scalars(stale):
        session.delete(row)
    session.flush()
    curves = load_run_curves(session=session, profile_id=profile.id, placements=placements)
    groups: dict[tuple[str, int, int], list[RunCurve]] = {}
    for curve in curves:
        groups.setdefault((curve.op.value, curve.ranks, curve.nodes), []).append(curve)
    for members in groups.values():
        session.add(_curve_row(profile.id, Envelope.of_curves(members)))
    profile.curves_format = ENVELOPE_FORMAT
    session.flush()


def refresh_curves(*, session: Session, profile_name: str) -> bool:
    """Rebuild a profile's placement curves from its runs if their format is stale.

    Returns whether it rebuilt them: another process may have done it first (the row lock
    serialises the check and the rebuild).
    """
    profile = _locked_profile(session, profile_name)
    if profile.curves_format == ENVELOPE_FORMAT:
        return False
    _rebuild_curves(session, profile, None)
    bump_profile(session=session, profile=profile)
    return True


def stale_curve_profiles(*, session: Session) -> list[str]:
    """Names of the profiles whose stored placement curves are missing or of an older format.

    Such a profile still answers (from its runs), but slowly; ``refresh_curves`` fixes it.
    """
    stale = select(Profile.name).where(
        or_(Profile.curves_format.is_(None), Profile.curves_format != ENVELOPE_FORMAT)
    )
    return list(session.scalars(stale.order_by(Profile.name)))


def _nominal_for(row: Any) -> tuple[CurveSet | None, str | None, str | None]:
    """The nominal curves a profile falls back on, their name, and why there are none."""
    if row.nominal and row.name in NOMINAL_SPECS:
        return nominal_curve_set(row.name), row.name, None
    spec = family_spec(row.gpu_model)
    if spec is None:
        known = ", ".join(sorted(FAMILY_SPECS))
        return (
            None,
            None,
            f"no nominal curves to fall back on: GPU model {row.gpu_model!r} is not of a "
            f"family commest has nominal figures for ({known})",
        )
    return nominal_curve_set(spec.name), f"{spec.name}, the profile's GPU family", None


_PROFILE_FOR_BANDWIDTH = select(
    Profile.id, Profile.name, Profile.gpu_model, Profile.nominal, Profile.curves_format
)


def load_bandwidth(
    *, session: Session, profile_name: str, with_runs: bool = False
) -> ProfileBandwidth:
    """The profile's bandwidth provider: its placement curves, with nominal ones as fallback.

    Answers come from the stored placement curves (one row per placement, whatever the run
    count; each decoded on first use); ``with_runs`` also loads every enabled run's curve, for
    plots and tuning tables. Two queries in all.
    """
    row = session.execute(_PROFILE_FOR_BANDWIDTH.where(Profile.name == profile_name)).first()
    if row is None:
        raise NotFoundError(f"no profile named {profile_name!r}", name=profile_name)
    nominal, nominal_name, missing = _nominal_for(row)
    runs: list[RunCurve] | None = None
    if with_runs or row.curves_format != ENVELOPE_FORMAT:
        runs = load_run_curves(session=session, profile_id=row.id)
    if row.curves_format == ENVELOPE_FORMAT:
        stored = session.execute(
            select(
                PlacementCurve.collective,
                PlacementCurve.ranks,
                PlacementCurve.nodes,
                PlacementCurve.curve,
            ).where(PlacementCurve.profile_id == row.id)
        ).all()
        measured = CurveSet(stored=[(r[0], r[1], r[2], r[3]) for r in stored])
    else:
        measured = CurveSet(runs or ())
    return ProfileBandwidth(
        row.name,
        measured,
        nominal if nominal is not None else (),
        nominal_name=nominal_name,
        runs=runs if with_runs else (),
        missing_hint=missing,
        nominal_fallback=not row.nominal,
    )


def profile_curves(
    *, session: Session, profile_name: str, op: str | None = None, include_nominal: bool = True
) -> list[CurveData]:
    """A profile's enabled runs as plotting data (of one collective), then, for a nominal
    profile, its nominal curves."""
    row = session.execute(_PROFILE_FOR_BANDWIDTH.where(Profile.name == profile_name)).first()
    if row is None:
        raise NotFoundError(f"no profile named {profile_name!r}", name=profile_name)
    curves = load_run_curves(session=session, profile_id=row.id, op=op)
    if include_nominal and row.nominal and row.name in NOMINAL_SPECS:
        wanted = parse_collective(op) if op is not None else None
        curves += [c for c in nominal_curves(row.name) if wanted is None or c.op is wanted]
    return curve_data(curves)


@dataclass(frozen=True, slots=True)
class PictureCurves:
    """What a curves picture draws: a bounded pick of a profile's runs per collective, how
    many it left out, and the nominal curves of the profile's GPU family to overlay."""

    curves: list[CurveData]
    omitted: dict[str, int]
    family: list[CurveData]
    family_name: str | None


def _spread_pick(count: int, keep: int) -> list[int]:
    """``keep`` indices evenly spread over ``range(count)`` (all of them when it fits)."""
    if count <= keep:
        return list(range(count))
    return sorted({round(i * (count - 1) / (keep - 1)) for i in range(keep)})


def profile_picture_curves(
    *,
    session: Session,
    profile_name: str,
    op: str | None = None,
    include_nominal: bool = True,
    max_per_op: int = 10,
) -> PictureCurves:
    """At most ``max_per_op`` enabled runs per collective, spread over the placements (runs
    are picked from their heads, then only their points are read), whatever the profile
    holds; the nominal curves of a nominal profile, or of a measured profile's GPU family
    (docs/design.md §5.2)."""
    row = session.execute(_PROFILE_FOR_BANDWIDTH.where(Profile.name == profile_name)).first()
    if row is None:
        raise NotFoundError(f"no profile named {profile_name!r}", name=profile_name)
    heads_query = (
        select(Run.id, Run.collective, Run.ranks, Run.nodes, Run.backend)
        .join(Upload, Upload.id == Run.upload_id)
        .where(Run.profile_id == row.id, ~Upload.disabled)
    )
    if op is not None:
        heads_query = heads_query.where(Run.collective == parse_collective(op).value)
    by_op: dict[str, list[Any]] = {}
    for head in session.execute(heads_query).all():
        by_op.setdefault(head.collective, []).append(head)
    chosen: list[int] = []
    omitted: dict[str, int] = {}
    for collective, heads in sorted(by_op.items()):
        heads.sort(key=lambda h: (h.nodes, h.ranks, h.backend or "", h.id))
        picked = _spread_pick(len(heads), max_per_op)
        chosen += [heads[i].id for i in picked]
        if len(heads) > len(picked):
            omitted[collective] = len(heads) - len(picked)
    curves = load_run_curves(session=session, profile_id=row.id, op=op, run_ids=chosen)
    wanted = parse_collective(op) if op is not None else None
    own_nominal = row.nominal and row.name in NOMINAL_SPECS
    if include_nominal and own_nominal:
        curves += [c for c in nominal_curves(row.name) if wanted is None or c.op is wanted]
    family: list[RunCurve] = []
    family_name: str | None = row.name if own_nominal else None
    spec = None if own_nominal else family_spec(row.gpu_model)
    if include_nominal and spec is not None:
        family_name = spec.name
        family = [c for c in nominal_curves(spec.name) if wanted is None or c.op is wanted]
    return PictureCurves(curve_data(curves), omitted, curve_data(family), family_name)


def profile_tuning_table(
    *, session: Session, profile_name: str, op: str, ranks: int, nodes: int | None = None
) -> list[TuningRow]:
    """Per measured size, the fastest backend among a profile's enabled runs of ``op``."""
    profile = get_profile(session=session, name=profile_name)
    curves = load_run_curves(session=session, profile_id=profile.id, op=op)
    return tuning_table(
        curves, name=profile.name, op=parse_collective(op), ranks=ranks, nodes=nodes
    )


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
