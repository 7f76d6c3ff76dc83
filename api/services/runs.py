"""Runs: benchmark uploads of a profile and what is read from them (bandwidth, curves,
tuning tables)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from api.schemas import (
    BandwidthQualityOut,
    BandwidthResponse,
    CurveOut,
    CurvesResponse,
    FileHints,
    FlagOut,
    Members,
    RunOut,
    RunsPage,
    TuningRowOut,
    TuningTableResponse,
    UploadHints,
    UploadOut,
    UploadResponse,
    finite_answer,
)
from api.snapshots import ProfileSnapshot
from estimator.bandwidth import Collective, TrafficKind, bus_factor, weak_answer_warning
from estimator.errors import ValidationError
from profiles import repository
from profiles.uploads import Hints, PreparedUpload, UploadInput, parse_uploads


def decode_upload(data: bytes, where: str) -> str:
    """The text of uploaded bytes (UTF-8, a BOM dropped); ValidationError naming ``where``."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            where,
            f"<{len(data)} bytes>",
            f"must be UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start} is not); "
            "upload the text the benchmark or training run printed, saved as UTF-8",
        ) from None


def _hints(model: UploadHints) -> Hints:
    return Hints(
        op=model.op.value if model.op is not None else None,
        ranks=model.ranks,
        nodes=model.nodes,
        backend=model.backend,
        dtype=model.dtype,
    )


def prepare_uploads(
    *,
    texts: Sequence[tuple[str | None, str]],
    hints: UploadHints,
    label: str | None,
    per_file: dict[str, FileHints] | None = None,
) -> list[PreparedUpload]:
    """Parse every (file name, text) of an upload, before any transaction: no database.

    ``per_file`` (a multipart upload's ``hints`` part) gives a file its own hints and label,
    over the query's; an entry that names no file of the upload is refused.
    """
    per_file = per_file or {}
    names = {name for name, _ in texts}
    unknown = sorted(set(per_file) - names)
    if unknown:
        raise ValidationError(
            "hints", unknown, f"names no file of this upload (files: {sorted(map(str, names))})"
        )
    inputs = []
    for name, text in texts:
        own = per_file.get(name) if name is not None else None
        file_hints = _hints(hints).merged(_hints(own) if own is not None else None)
        file_label = own.label if own is not None and own.label is not None else label
        inputs.append(UploadInput(text=text, filename=name, label=file_label, hints=file_hints))
    return parse_uploads(inputs)


def upload_out(info: repository.UploadInfo, *, already_stored: bool | None = None) -> UploadOut:
    """An upload as answers show it."""
    return UploadOut.model_validate(Members(info, already_stored=already_stored))


def store_uploads(
    *, session: Session, name: str, prepared: Sequence[PreparedUpload]
) -> tuple[UploadResponse, bool]:
    """Store parsed uploads (once per distinct content); (answer, whether anything was new)."""
    repository.get_profile(session=session, name=name)
    runs: list[RunOut] = []
    uploads: list[UploadOut] = []
    flags: list[FlagOut] = []
    warnings: list[str] = []
    stored_new = False
    for outcome in repository.store_uploads(session=session, profile_name=name, prepared=prepared):
        stored_new = stored_new or not outcome.already_stored
        runs.extend(
            RunOut.model_validate(Members(run, already_stored=outcome.already_stored))
            for run in outcome.runs
        )
        info = repository.upload_info(
            session=session, profile_name=name, upload_id=outcome.upload.id
        )
        uploads.append(upload_out(info, already_stored=outcome.already_stored))
        for flag in outcome.flags:
            flags.append(FlagOut.model_validate(flag))
            line = f"flagged ({flag['code']}): {flag['message']}"
            if line not in warnings:
                warnings.append(line)
        warnings.extend(w for w in outcome.warnings if w not in warnings)
    return UploadResponse(runs=runs, warnings=warnings, uploads=uploads, flags=flags), stored_new


def bandwidth(
    *, snapshot: ProfileSnapshot, op: Collective, ranks: int, nodes: int, size_bytes: float
) -> BandwidthResponse:
    """GET /v1/profiles/{name}/bandwidth: one effective-bandwidth answer with provenance."""
    if ranks < 1:
        raise ValidationError("ranks", ranks, "must be >= 1")
    if not 1 <= nodes <= ranks:
        raise ValidationError("nodes", nodes, f"must be in 1..ranks ({ranks})")
    if not (math.isfinite(size_bytes) and size_bytes > 0):
        raise ValidationError("bytes", size_bytes, "must be a finite number > 0")
    answer = snapshot.bandwidth.explain(TrafficKind.DP, op, ranks, nodes, size_bytes)
    factor = float(bus_factor(op, float(ranks)))  # 0 for a reduction over one rank
    algbw = answer.busbw_gbps / factor if factor else math.inf
    time_us = size_bytes / (algbw * 1e3) if factor else 0.0
    weak = weak_answer_warning(op, ranks, nodes, size_bytes, answer)
    with finite_answer({"op": op.value, "ranks": ranks, "nodes": nodes, "bytes": size_bytes}):
        return BandwidthResponse(
            profile=snapshot.name,
            op=op,
            ranks=ranks,
            nodes=nodes,
            bytes=size_bytes,
            busbw_gbps=answer.busbw_gbps,
            algbw_gbps=algbw,
            time_us=time_us,
            method=answer.method,
            source=answer.source,
            quality=BandwidthQualityOut.model_validate(answer),
            warnings=[weak] if weak is not None else [],
        )


def curves(
    *, session: Session, name: str, op: Collective | None, include_nominal: bool
) -> CurvesResponse:
    """GET /v1/profiles/{name}/curves: busbw against message size per enabled (or nominal)
    run."""
    data = repository.profile_curves(
        session=session,
        profile_name=name,
        op=op.value if op is not None else None,
        include_nominal=include_nominal,
    )
    return CurvesResponse(profile=name, curves=[CurveOut.model_validate(c) for c in data])


def picture_curves(
    *, session: Session, name: str, op: Collective | None, include_nominal: bool
) -> repository.PictureCurves:
    """What GET /v1/profiles/{name}/curves?format=png draws: at most ``plots.MAX_SERIES``
    runs per collective (the rest counted) and the GPU family's nominal curves, read without
    the points of the runs left out (docs/design.md §5.2)."""
    from api import plots

    return repository.profile_picture_curves(
        session=session,
        profile_name=name,
        op=op.value if op is not None else None,
        include_nominal=include_nominal,
        max_per_op=plots.MAX_SERIES,
    )


def curves_png(*, picked: repository.PictureCurves, name: str, op: Collective | None) -> bytes:
    """The picture of :func:`picture_curves`: one panel per collective, nominal dashed."""
    from api import plots

    title = f"profile {name}: bus bandwidth by message size" + (f" ({op.value})" if op else "")
    return plots.bandwidth_curves(
        [CurveOut.model_validate(c) for c in picked.curves],
        title=title,
        omitted=picked.omitted,
        family=[CurveOut.model_validate(c) for c in picked.family],
        family_name=picked.family_name,
    )


def tuning_table(
    *, session: Session, name: str, op: Collective, ranks: int, nodes: int | None
) -> TuningTableResponse:
    """GET /v1/profiles/{name}/tuning-table."""
    rows = repository.profile_tuning_table(
        session=session, profile_name=name, op=op.value, ranks=ranks, nodes=nodes
    )
    return TuningTableResponse(
        profile=name,
        op=op,
        ranks=ranks,
        nodes=nodes,
        rows=[TuningRowOut.model_validate(r) for r in rows],
    )


def list_runs(
    *,
    session: Session,
    name: str,
    op: Collective | None,
    backend: str | None,
    points: bool,
    limit: int,
    offset: int,
) -> RunsPage:
    """One page of a profile's runs in upload order, with their points unless ``points`` is
    false."""
    page = repository.page_runs(
        session=session,
        profile_name=name,
        op=op,
        backend=backend,
        with_points=points,
        limit=limit,
        offset=offset,
    )
    read = [RunOut.model_validate(r if points else Members(r, points=None)) for r in page.items]
    return RunsPage(runs=read, **page_members(page))


def page_members(page: repository.Page[Any]) -> dict[str, Any]:
    """The members every page answer has besides its items."""
    return {
        "count": len(page.items),
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
        "next_offset": page.next_offset,
    }
