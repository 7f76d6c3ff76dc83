"""Runs: benchmark uploads of a profile and what is read from them (bandwidth, curves,
tuning tables)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from api.caches import ProfileSnapshot
from estimator.bandwidth import TrafficKind, bus_factor, parse_collective
from estimator.errors import ValidationError
from profiles import repository
from profiles.models import Run


def run_dict(run: Run, *, points: bool, already_stored: bool | None = None) -> dict[str, Any]:
    """A stored run (optionally with its points) as a response body."""
    out: dict[str, Any] = {
        "id": run.id,
        "upload_id": run.upload_id,
        "collective": run.collective,
        "tool": run.tool,
        "backend": run.backend,
        "ranks": run.ranks,
        "nodes": run.nodes,
        "ranks_per_node": run.ranks_per_node,
        "gpu_model": run.gpu_model,
        "dtype": run.dtype,
        "tool_version": run.tool_version,
        "alpha_us": run.alpha_us,
        "beta_gbps": run.beta_gbps,
        "warnings": list(run.warnings or []),
        "created_at": run.created_at,
        "points": (
            [
                {
                    "size_bytes": p.size_bytes,
                    "time_us": p.time_us,
                    "algbw_gbps": p.algbw_gbps,
                    "busbw_gbps": p.busbw_gbps,
                    "in_place": p.in_place,
                }
                for p in run.points
            ]
            if points
            else None
        ),
    }
    if already_stored is not None:
        out["already_stored"] = already_stored
    return out


@dataclass(frozen=True, slots=True)
class Hints:
    """What the uploader said about a benchmark text the text may not say itself."""

    op: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    backend: str | None = None
    dtype: str | None = None


def upload_runs(
    *, session: Session, name: str, texts: list[str], hints: Hints
) -> tuple[dict[str, Any], bool]:
    """Store each text's runs (once per distinct text); (body, whether anything was new)."""
    repository.get_profile(session=session, name=name)
    runs: list[dict[str, Any]] = []
    warnings: list[str] = []
    stored_new = False
    for text in texts:
        outcome = repository.upload_runs(
            session=session,
            profile_name=name,
            text=text,
            op=hints.op,
            ranks=hints.ranks,
            nodes=hints.nodes,
            backend=hints.backend,
            dtype=hints.dtype,
        )
        stored_new = stored_new or not outcome.already_stored
        runs.extend(
            run_dict(run, points=True, already_stored=outcome.already_stored)
            for run in outcome.runs
        )
        warnings.extend(w for w in outcome.warnings if w not in warnings)
    return {"runs": runs, "warnings": warnings}, stored_new


def bandwidth(
    *, snapshot: ProfileSnapshot, op: str, ranks: int, nodes: int, size_bytes: float
) -> dict[str, Any]:
    """GET /v1/profiles/{name}/bandwidth: one effective-bandwidth answer with provenance."""
    collective = parse_collective(op)
    if ranks < 1:
        raise ValidationError("ranks", ranks, "must be >= 1")
    if not 1 <= nodes <= ranks:
        raise ValidationError("nodes", nodes, f"must be in 1..ranks ({ranks})")
    if not (math.isfinite(size_bytes) and size_bytes > 0):
        raise ValidationError("bytes", size_bytes, "must be a finite number > 0")
    answer = snapshot.bandwidth.explain(TrafficKind.DP, collective, ranks, nodes, size_bytes)
    factor = float(bus_factor(collective, float(ranks)))
    algbw = answer.busbw_gbps / factor if factor else math.inf
    time_us = size_bytes / (algbw * 1e3) if factor else 0.0
    return {
        "profile": snapshot.name,
        "op": collective.value,
        "ranks": ranks,
        "nodes": nodes,
        "bytes": size_bytes,
        "busbw_gbps": answer.busbw_gbps,
        "algbw_gbps": algbw,
        "time_us": time_us,
        "method": answer.method,
        "source": answer.source,
    }


def curves(*, snapshot: ProfileSnapshot, op: str | None, include_nominal: bool) -> dict[str, Any]:
    """GET /v1/profiles/{name}/curves (json)."""
    curves = snapshot.bandwidth.provider.curves(include_nominal=include_nominal)
    if op is not None:
        wanted = parse_collective(op).value
        curves = [c for c in curves if c.op == wanted]
    return {
        "profile": snapshot.name,
        "curves": [
            {
                "op": c.op,
                "ranks": c.ranks,
                "nodes": c.nodes,
                "backend": c.backend,
                "dtype": c.dtype,
                "run_id": c.run_id,
                "label": c.label,
                "nominal": c.nominal,
                "in_place": c.in_place,
                "sizes_bytes": c.sizes_bytes,
                "busbw_gbps": c.busbw_gbps,
                "alpha_us": c.alpha_us,
                "beta_gbps": c.beta_gbps,
            }
            for c in curves
        ],
    }


def tuning_table(
    *, snapshot: ProfileSnapshot, op: str, ranks: int, nodes: int | None
) -> dict[str, Any]:
    """GET /v1/profiles/{name}/tuning-table."""
    collective = parse_collective(op)
    rows = snapshot.bandwidth.provider.tuning_table(op=collective, ranks=ranks, nodes=nodes)
    return {
        "profile": snapshot.name,
        "op": collective.value,
        "ranks": ranks,
        "nodes": nodes,
        "rows": [r._asdict() for r in rows],
    }


def list_runs(
    *, session: Session, name: str, op: str | None, backend: str | None, points: bool
) -> dict[str, Any]:
    """A profile's runs in upload order, with their points unless ``points`` is false."""
    runs = repository.list_runs(
        session=session, profile_name=name, op=op, backend=backend, with_points=points
    )
    return {"runs": [run_dict(r, points=points) for r in runs], "count": len(runs)}
