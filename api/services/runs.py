"""Runs: benchmark uploads of a profile and what is read from them (bandwidth, curves,
tuning tables)."""

from __future__ import annotations

import math

from sqlalchemy.orm import Session

from api.caches import ProfileSnapshot
from api.schemas import (
    BandwidthResponse,
    CurveOut,
    CurvesResponse,
    Members,
    RunOut,
    RunsPage,
    TuningRowOut,
    TuningTableResponse,
    UploadHints,
    UploadResponse,
    finite_answer,
)
from estimator.bandwidth import Collective, TrafficKind, bus_factor
from estimator.errors import ValidationError
from profiles import repository


def upload_runs(
    *, session: Session, name: str, texts: list[str], hints: UploadHints
) -> tuple[UploadResponse, bool]:
    """Store each text's runs (once per distinct text); (answer, whether anything was new)."""
    repository.get_profile(session=session, name=name)
    runs: list[RunOut] = []
    warnings: list[str] = []
    stored_new = False
    for text in texts:
        outcome = repository.upload_runs(
            session=session, profile_name=name, text=text, **hints.model_dump()
        )
        stored_new = stored_new or not outcome.already_stored
        runs.extend(
            RunOut.model_validate(Members(run, already_stored=outcome.already_stored))
            for run in outcome.runs
        )
        warnings.extend(w for w in outcome.warnings if w not in warnings)
    return UploadResponse(runs=runs, warnings=warnings), stored_new


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
        )


def curves(
    *, snapshot: ProfileSnapshot, op: Collective | None, include_nominal: bool
) -> CurvesResponse:
    """GET /v1/profiles/{name}/curves: busbw against message size per stored (or nominal) run."""
    curves = snapshot.bandwidth.provider.curves(include_nominal=include_nominal)
    if op is not None:
        curves = [c for c in curves if c.op == op.value]
    return CurvesResponse(
        profile=snapshot.name, curves=[CurveOut.model_validate(c) for c in curves]
    )


def tuning_table(
    *, snapshot: ProfileSnapshot, op: Collective, ranks: int, nodes: int | None
) -> TuningTableResponse:
    """GET /v1/profiles/{name}/tuning-table."""
    rows = snapshot.bandwidth.provider.tuning_table(op=op, ranks=ranks, nodes=nodes)
    return TuningTableResponse(
        profile=snapshot.name,
        op=op,
        ranks=ranks,
        nodes=nodes,
        rows=[TuningRowOut.model_validate(r) for r in rows],
    )


def list_runs(
    *, session: Session, name: str, op: Collective | None, backend: str | None, points: bool
) -> RunsPage:
    """A profile's runs in upload order, with their points unless ``points`` is false."""
    runs = repository.list_runs(
        session=session, profile_name=name, op=op, backend=backend, with_points=points
    )
    read = [RunOut.model_validate(r if points else Members(r, points=None)) for r in runs]
    return RunsPage(runs=read, count=len(read))
