"""Filling what a benchmark text did not say from the user's hints."""

from __future__ import annotations

import math
from dataclasses import replace

from estimator.bandwidth import Collective, bus_factor, parse_collective
from estimator.errors import ValidationError
from profiles.parsed import ParsedRun
from profiles.parsers._common import canonical_dtype
from profiles.parsers.osu import PER_RANK_SIZE

_MAX_RANKS = 10_000_000
_RULES = {
    "collective": (
        "op",
        "the benchmark text does not say which collective ran; add the query parameter "
        "op=<collective> (e.g. op=all_reduce)",
    ),
    "ranks": (
        "ranks",
        "the benchmark text does not say how many ranks ran; add the query parameter ranks=N",
    ),
    "nodes": (
        "nodes",
        "the benchmark text does not say how many nodes the ranks spanned; add the query "
        "parameter nodes=N",
    ),
}


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_RANKS:
        raise ValidationError(name, value, f"must be an integer between 1 and {_MAX_RANKS}")
    return value


def apply_hints(
    run: ParsedRun,
    *,
    op: str | None = None,
    ranks: int | None = None,
    nodes: int | None = None,
    backend: str | None = None,
    dtype: str | None = None,
) -> ParsedRun:
    """A copy of ``run`` with the fields the text left open filled from the hints.

    Where a hint contradicts the text, the text wins and a warning says so. busbw is
    recomputed where it depended on a rank count the text did not give (OSU collectives),
    and OSU per-rank sizes become nccl-tests sizes. Raises ``ValidationError`` naming the
    query parameter when the collective, ranks or nodes are still unknown, or a hint is bad.
    """
    hint_op = parse_collective(op) if op is not None else None
    hint_ranks = _count("ranks", ranks) if ranks is not None else None
    hint_nodes = _count("nodes", nodes) if nodes is not None else None
    hint_backend = None
    if backend is not None:
        hint_backend = backend.strip().lower()
        if not hint_backend or len(hint_backend) > 64:
            raise ValidationError("backend", backend, "must be a short name such as nccl or mpi")
    hint_dtype = None
    if dtype is not None:
        hint_dtype = canonical_dtype(dtype)
        if not hint_dtype or len(hint_dtype) > 64:
            raise ValidationError("dtype", dtype, "must be a data type name such as bfloat16")

    warnings = list(run.warnings)
    out = replace(run, points=list(run.points), hosts=list(run.hosts), warnings=warnings)
    had_ranks = run.ranks is not None

    def conflict(param: str, hint: object, text: object) -> None:
        warnings.append(f"hint {param}={hint} contradicts the text ({text}); the text wins")

    if hint_op is not None:
        if out.collective is None:
            out.collective = hint_op.value
        elif out.collective != hint_op.value:
            conflict("op", hint_op.value, out.collective)
    if hint_ranks is not None:
        if out.ranks is None:
            out.ranks = hint_ranks
        elif out.ranks != hint_ranks:
            conflict("ranks", hint_ranks, out.ranks)
    if hint_nodes is not None:
        if out.nodes is None:
            if out.ranks is not None and hint_nodes > out.ranks:
                raise ValidationError(
                    "nodes", hint_nodes, f"must not exceed the rank count ({out.ranks})"
                )
            out.nodes = hint_nodes
        elif out.nodes != hint_nodes:
            conflict("nodes", hint_nodes, out.nodes)
    if hint_backend is not None:
        if out.backend is None:
            out.backend = hint_backend
        elif out.backend.lower() != hint_backend:
            conflict("backend", hint_backend, out.backend)
    if hint_dtype is not None:
        if out.dtype is None:
            out.dtype = hint_dtype
        elif canonical_dtype(out.dtype) != hint_dtype:
            conflict("dtype", hint_dtype, out.dtype)

    if out.nodes is None and out.ranks is not None:
        if out.ranks_per_node and out.ranks % out.ranks_per_node == 0:
            out.nodes = out.ranks // out.ranks_per_node
        elif out.ranks == 1:
            out.nodes = 1
    if out.ranks_per_node is None and out.ranks and out.nodes and out.ranks % out.nodes == 0:
        out.ranks_per_node = out.ranks // out.nodes

    missing = out.missing
    if missing:
        param, rule = _RULES[missing[0]]
        others = ", ".join(_RULES[m][0] for m in missing[1:])
        raise ValidationError(param, None, rule, hint=f"also missing: {others}" if others else None)

    assert out.collective is not None and out.ranks is not None
    collective = Collective(out.collective)
    scale = (
        out.ranks if (out.tool == "osu" and not had_ranks and collective in PER_RANK_SIZE) else 1
    )
    recompute = out.tool == "osu" and not had_ranks
    if scale != 1 or recompute or any(math.isnan(p.busbw_gbps) for p in out.points):
        factor = float(bus_factor(collective, out.ranks))
        points = []
        for p in out.points:
            size = p.size_bytes * scale
            algbw = size / p.time_us / 1e3
            busbw = algbw * factor if (recompute or math.isnan(p.busbw_gbps)) else p.busbw_gbps
            points.append(replace(p, size_bytes=size, algbw_gbps=algbw, busbw_gbps=busbw))
        out.points = points
        if scale != 1:
            warnings.append(f"sizes multiplied by ranks={out.ranks} to nccl-tests' convention")
    return out
