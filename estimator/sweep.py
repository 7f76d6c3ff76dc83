"""Many layouts in one numpy pass, and every valid layout for a GPU count, ranked.

``evaluate_layouts`` feeds arrays to the same kernel that ``estimate`` feeds scalars, so a
layout's iteration time is bit-for-bit the same on both paths.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from estimator.errors import LimitError, ValidationError
from estimator.kernel import TERMS, LayoutVars, evaluate
from estimator.specs import (
    RECOMPUTE_CODE,
    ClusterSpec,
    Fidelity,
    ModelSpec,
    Recompute,
    TrainingSpec,
    validate_training,
)

FloatArray = npt.NDArray[np.float64]
# Layouts per kernel pass of a sweep: 256 KB per float64 temporary, so a pass's live
# temporaries stay within a 2 MB L2 cache (bench/bench_engine.py, 8k-256k layouts per block;
# docs/design.md, "Sweep blocks").
_BLOCK = 1 << 15
COLUMNS = (
    "p",
    "t",
    "d",
    "b",
    "v",
    "cp",
    "ep",
    "ef",
    "recompute",
    "sp",
    "zero",
    "sg",
    "overlap_dp",
    "overlap_tp",
    "first_layers",
    "last_layers",
)


@dataclass(frozen=True, slots=True)
class LayoutArrays:
    """One column per layout knob, all float64 of one length (flags as 0/1)."""

    columns: dict[str, FloatArray]

    def __len__(self) -> int:
        return len(self.columns["p"])

    def vars(self) -> LayoutVars:
        return LayoutVars(**{name: self.columns[name] for name in COLUMNS})

    def take(self, index: npt.NDArray[np.intp]) -> LayoutArrays:
        return LayoutArrays({k: v[index] for k, v in self.columns.items()})

    @classmethod
    def from_columns(cls, **columns: Iterable[float] | FloatArray) -> LayoutArrays:
        """Columns by name; missing knobs take the engine's defaults."""
        defaults = {
            "v": 1.0,
            "cp": 1.0,
            "ep": 1.0,
            "ef": 0.0,
            "recompute": 2.0,
            "sp": 0.0,
            "zero": 0.0,
            "sg": 1.0,
            "overlap_dp": 0.0,
            "overlap_tp": 0.0,
            "first_layers": 0.0,
            "last_layers": 0.0,
        }
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValidationError("layouts", sorted(unknown), f"known columns: {COLUMNS}")
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
        n = len(arrays["p"])
        for name, value in defaults.items():
            arrays.setdefault(name, np.full(n, value))
        return cls(arrays)


@dataclass(frozen=True, slots=True)
class SweepResult:
    """Per-layout results of one vectorised pass."""

    layouts: LayoutArrays
    terms: dict[str, FloatArray]
    iteration_s: FloatArray
    memory_bytes: FloatArray
    fits: npt.NDArray[np.bool_]


def evaluate_layouts(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    layouts: LayoutArrays,
    *,
    fidelity: Fidelity = Fidelity.DETAILED,
    rank_order: str = "tp-dp-pp",
    memory_headroom: float = 0.0,
) -> SweepResult:
    """The kernel over every layout at once (no Python loop per layout); a layout fits when
    its memory is within ``(1 - memory_headroom)`` of the GPU's (docs/design.md, "Memory
    headroom")."""
    n = len(layouts)
    terms = {name: np.empty(n) for name in TERMS}
    iteration = np.empty(n)
    memory = np.empty(n)
    # In blocks of at most _BLOCK layouts: each block's temporaries stay in the CPU caches and
    # the allocator reuses their memory, where a million-layout pass pays for fresh pages on
    # every temporary. Every term is per layout, so the blocks change no bit of any result.
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        block = {name: layouts.columns[name][start:stop] for name in COLUMNS}
        k = evaluate(
            model,
            training,
            LayoutVars(**block),
            gpus_per_node=cluster.gpus_per_node,
            peak_flops=cluster.peak_flops,
            utilization=cluster.utilization,
            bandwidth=cluster.bandwidth,
            fidelity=fidelity,
            rank_order=rank_order,
            gpu_memory_bytes=cluster.gpu_memory_bytes,
            memory_bandwidth_gbps=cluster.memory_bandwidth_gbps,
            memory_traffic_factor=cluster.memory_traffic_factor,
            gemm_traffic_factor=cluster.gemm_traffic_factor,
            fp8_utilization=cluster.fp8_utilization,
            flash2_efficiency=cluster.flash2_efficiency,
            gemm_half_size_elements=cluster.gemm_half_size_elements,
            cuda_core_peak_flops=cluster.cuda_core_peak_flops,
            fp8_expert_utilization=cluster.fp8_expert_utilization,
        )
        for name in TERMS:
            terms[name][start:stop] = k.terms[name]
        iteration[start:stop] = k.iteration_s
        memory[start:stop] = k.memory["total"]
    capacity = cluster.gpu_memory_bytes
    if not 0.0 <= memory_headroom < 1.0:
        raise ValidationError("memory_headroom", memory_headroom, "must be >= 0 and < 1")
    fits = (
        memory <= capacity * (1.0 - memory_headroom)
        if capacity is not None
        else np.ones(n, dtype=bool)
    )
    return SweepResult(layouts, terms, iteration, memory, fits)


def concat_results(results: Sequence[SweepResult]) -> SweepResult:
    """One result of several passes (e.g. one per precision), in the order given."""
    if len(results) == 1:
        return results[0]
    layouts = LayoutArrays(
        {k: np.concatenate([r.layouts.columns[k] for r in results]) for k in COLUMNS}
    )
    terms = {name: np.concatenate([r.terms[name] for r in results]) for name in TERMS}
    return SweepResult(
        layouts,
        terms,
        np.concatenate([r.iteration_s for r in results]),
        np.concatenate([r.memory_bytes for r in results]),
        np.concatenate([r.fits for r in results]),
    )


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0]
    return sorted(set(small + [n // i for i in small]))


def enumerate_layouts(
    model: ModelSpec,
    training: TrainingSpec,
    gpus: int,
    *,
    micro_batch_sizes: Sequence[int] | None = None,
    max_virtual_stages: int = 8,
    recompute: Sequence[Recompute] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL),
    sequence_parallel: Sequence[bool] = (False, True),
    zero_stages: Sequence[int] = (0, 1),
    max_tensor: int | None = None,
    max_layouts: int = 2_000_000,
    context_parallel: Sequence[int] = (1,),
    expert_parallel: Sequence[int] = (1,),
    experts_folded: Sequence[bool] = (False,),
    tensor_within_node: int | None = None,
    counted: int = 0,
) -> LayoutArrays:
    """Every layout of ``gpus`` GPUs that the layout rules (docs/design.md §3) admit.

    One pass per context-parallel size in ``context_parallel`` (p·t·d·cp = gpus; cp must divide
    ``gpus`` and the sequence, and SP needs the sequence divisible by t·cp). Each layout once
    per expert-parallel size in ``expert_parallel`` that divides its d·cp (every size must
    divide the model's expert count; above 1 only for a MoE model); with True in
    ``experts_folded`` (a MoE model) also once per size dividing its t·d·cp with the experts
    folded over TP (column ef: expert tensor parallelism 1, for t > 1 under SP).
    ``tensor_within_node``: the GPUs per node, when t must divide it (a TP group inside one
    node). ``max_layouts`` caps them all, with the ``counted`` layouts of other passes of the
    same plan (one per precision).
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
        raise ValidationError("gpus", gpus, "must be a whole number > 0")
    sizes = sorted(set(context_parallel))
    for cp in sizes:
        if cp <= 0 or gpus % cp or model.seq_length % cp:
            raise ValidationError(
                "context_parallel",
                list(sizes),
                f"each must divide gpus={gpus} and seq_length={model.seq_length}",
            )
    eps = sorted(set(expert_parallel))
    for ep in eps:
        if ep <= 0 or model.moe_num_experts % ep or (ep > 1 and not model.is_moe):
            raise ValidationError(
                "expert_parallel",
                list(eps),
                f"each must divide moe_num_experts={model.moe_num_experts} (above 1 only for "
                "a MoE model)",
            )
    folds = sorted(set(experts_folded))
    if True in folds and not model.is_moe:
        raise ValidationError("experts_folded", folds, "True only for a MoE model")
    validate_training(model, training)
    parts: list[LayoutArrays] = []
    total = counted
    for cp in sizes:
        part = _enumerate_one(
            model,
            training,
            gpus // cp,
            micro_batch_sizes=micro_batch_sizes,
            max_virtual_stages=max_virtual_stages,
            recompute=recompute,
            sequence_parallel=sequence_parallel,
            zero_stages=zero_stages,
            max_tensor=max_tensor,
            max_layouts=max_layouts,
            tensor_within_node=tensor_within_node,
            gpus_named=gpus,
            counted=total,
        )
        if cp > 1:
            cols = part.columns
            # Megatron: SP shards the sequence over t inside each CP rank (s divisible by t·cp)
            keep = ~((cols["sp"] == 1.0) & (np.mod(model.seq_length / (cols["t"] * cp), 1.0) > 0))
            part = part.take(np.flatnonzero(keep))
            part.columns["cp"][:] = float(cp)
        cols = part.columns
        share = cols["d"] * float(cp)  # experts shard the d·cp ranks (Megatron-Core)
        # folded over TP (t > 1 under SP), the t·d·cp ranks of a stage
        foldable = (cols["t"] > 1.0) & (cols["sp"] == 1.0)
        for ep, fold in itertools.product(eps, folds):
            if fold:
                keep = foldable & (np.mod(cols["t"] * share, ep) == 0.0)
                chosen = part.take(np.flatnonzero(keep))
                chosen.columns["ef"][:] = 1.0
            else:
                chosen = part if ep == 1 else part.take(np.flatnonzero(np.mod(share, ep) == 0.0))
            if ep > 1:
                chosen.columns["ep"][:] = float(ep)
            if (ep > 1 or fold) and total + len(chosen) > max_layouts:
                raise LimitError(
                    f"{total + len(chosen):,} valid layouts for gpus={gpus} exceed the cap of "
                    f"{max_layouts:,}; narrow the options (expert_parallel, experts_folded)"
                )
            parts.append(chosen)
            total += len(chosen)  # (after the SP filter: what is kept is what costs)
    if len(parts) == 1:
        return parts[0]
    return LayoutArrays({k: np.concatenate([p.columns[k] for p in parts]) for k in COLUMNS})


def _enumerate_one(
    model: ModelSpec,
    training: TrainingSpec,
    gpus: int,
    *,
    micro_batch_sizes: Sequence[int] | None,
    max_virtual_stages: int,
    recompute: Sequence[Recompute],
    sequence_parallel: Sequence[bool],
    zero_stages: Sequence[int],
    max_tensor: int | None,
    max_layouts: int,
    tensor_within_node: int | None,
    gpus_named: int,
    counted: int,
) -> LayoutArrays:
    """Every layout (p, t, d, ...) with p·t·d = ``gpus`` (``gpus_named`` in messages), refused
    when they and the ``counted`` ones of other context-parallel sizes exceed ``max_layouts``."""
    gb = training.global_batch_size
    heads, groups, layers = model.num_attention_heads, model.query_groups, model.num_layers
    divs = _divisors(gpus)
    ps = [p for p in divs if layers % p == 0]
    ts = [
        t
        for t in divs
        if heads % t == 0
        and (groups % t == 0 or t % groups == 0)
        and (max_tensor is None or t <= max_tensor)
        and (tensor_within_node is None or tensor_within_node % t == 0)
    ]
    bs = (
        list(micro_batch_sizes)
        if micro_batch_sizes
        else [b for b in (1, 2, 4, 8, 16, 32) if b <= gb]
    )
    vs = list(range(1, max_virtual_stages + 1))
    rcs = [float(RECOMPUTE_CODE[Recompute(r)]) for r in recompute]
    sps = [1.0 if s else 0.0 for s in sequence_parallel]
    zs = [float(z) for z in zero_stages]
    space = len(ps) * len(ts) * len(bs) * len(vs) * len(rcs) * len(sps) * len(zs)
    if space > max_layouts * 64:
        raise LimitError(
            f"the layout space for gpus={gpus_named} has {space:,} candidates, beyond "
            f"the cap of {max_layouts:,} layouts; narrow the options"
        )
    # The candidate space can be ~64x the cap: count the valid layouts factor by factor
    # (memory in the number of (p, t) pairs) and build only those, never the candidate grid.
    # Same float expressions and the same order as the grid (p, t, b, v, recompute, sp, zero).
    f64 = np.float64
    t_all = np.asarray(ts, dtype=f64)
    p_parts, t_parts = [], []
    for p_value in ps:
        d_all = gpus / (float(p_value) * t_all)
        keep = (np.mod(d_all, 1.0) == 0.0) & (d_all >= 1.0)
        p_parts.append(np.full(int(keep.sum()), float(p_value)))
        t_parts.append(t_all[keep])
    p_k = np.concatenate(p_parts) if p_parts else np.empty(0)
    t_k = np.concatenate(t_parts) if t_parts else np.empty(0)
    d_k = gpus / (p_k * t_k)
    sp_capable = (t_k > 1.0) & (np.mod(model.seq_length / t_k, 1.0) == 0.0)
    sps_plain = [s for s in sps if s == 0.0]
    combos_k = len(rcs) * len(zs) * np.where(sp_capable, len(sps), len(sps_plain))
    v_ok = [np.mod(layers / (p_k * v), 1.0) == 0.0 for v in vs]  # per v, over pairs
    v_one = np.zeros(len(p_k), dtype=np.int64)  # valid v = 1 (any m) and v > 1 (m % p == 0)
    v_more = np.zeros(len(p_k), dtype=np.int64)
    for v, ok in zip(vs, v_ok, strict=True):
        if v == 1:
            v_one += ok
        else:
            v_more += ok
    b_ok = np.zeros((len(p_k), len(bs)), dtype=bool)
    m_by_p = np.zeros((len(p_k), len(bs)), dtype=bool)
    per_pair = np.zeros(len(p_k), dtype=np.int64)
    for j, b_value in enumerate(bs):
        m = gb / (float(b_value) * d_k)
        b_ok[:, j] = np.mod(m, 1.0) == 0.0
        m_by_p[:, j] = (p_k > 1.0) & (np.mod(m, p_k) == 0.0)
        per_pair += b_ok[:, j] * (v_one + v_more * m_by_p[:, j])
    total = int(np.sum(per_pair * combos_k.astype(np.int64)))
    if total + counted > max_layouts:
        raise LimitError(
            f"{total + counted:,} valid layouts for gpus={gpus_named} exceed the cap of "
            f"{max_layouts:,}; narrow the options"
        )
    # (pair, b) rows, then (pair, b, v) rows, then the (recompute, sp, zero) combinations
    k_rows, j_rows = np.nonzero(b_ok & (combos_k[:, None] > 0))
    m_rows = m_by_p[k_rows, j_rows]
    per_row = np.zeros(len(k_rows), dtype=np.int64)
    for v, ok in zip(vs, v_ok, strict=True):
        per_row += ok[k_rows] & ((v == 1) | m_rows)
    start = np.cumsum(per_row) - per_row
    filled = np.zeros(len(k_rows), dtype=np.int64)
    v_col = np.empty(int(per_row.sum()))
    for v, ok in zip(vs, v_ok, strict=True):
        hit = ok[k_rows] & ((v == 1) | m_rows)
        v_col[start[hit] + filled[hit]] = v
        filled += hit
    row_k = np.repeat(k_rows, per_row)
    row_b = np.repeat(np.asarray(bs, dtype=f64)[j_rows], per_row)
    capable = sp_capable[row_k]
    tables = []  # (recompute, sp, zero) in grid order: without sp=1, and with every sp option
    for sp_options, used in ((sps_plain, not capable.all()), (sps, capable.any())):
        grid = np.meshgrid(rcs, sp_options if used else [], zs, indexing="ij")
        tables.append([np.asarray(g, dtype=f64).ravel() for g in grid])
    n_combos = np.where(capable, len(tables[1][0]), len(tables[0][0]))
    layout_row = np.repeat(np.arange(len(row_k)), n_combos)
    position = np.arange(len(layout_row)) - (np.cumsum(n_combos) - n_combos)[layout_row]
    wide = capable[layout_row]
    rc, sp, zero = (np.empty(len(layout_row)) for _ in range(3))
    for out, plain, full in zip((rc, sp, zero), tables[0], tables[1], strict=True):
        out[~wide] = plain[position[~wide]]
        out[wide] = full[position[wide]]
    assert len(layout_row) == total
    k = row_k[layout_row]
    return LayoutArrays.from_columns(
        p=p_k[k],
        t=t_k[k],
        d=d_k[k],
        b=row_b[layout_row],
        v=v_col[layout_row],
        recompute=rc,
        sp=sp,
        zero=zero,
    )


#: Terms of the breakdown that are communication (the rest: compute, bubble, optimizer, host).
COMMUNICATION_TERMS = tuple(t for t in TERMS if t not in ("compute", "bubble", "optimizer", "host"))


@dataclass(frozen=True, slots=True)
class Plan:
    """Every valid layout evaluated; ``order`` ranks them (feasible first, by time, ties
    grouped); ``group[i]`` is the tie group (0-based) of ``order[i]`` for the first
    ``len(group)`` ranked layouts."""

    result: SweepResult
    order: npt.NDArray[np.intp]
    evaluated: int
    feasible: int
    group: npt.NDArray[np.intp]


def rank(
    result: SweepResult,
    *,
    gpus_per_node: int,
    drop_infeasible: bool = False,
    tie_tolerance: float = 0.0,
    ranked: int | None = None,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The order of the layouts and the tie groups of its first ``ranked`` (all when None).

    Feasible first, then by iteration time. Going down that order, a group starts at the
    fastest layout not yet grouped and holds every layout (of the same feasibility) within
    ``tie_tolerance`` of it (time <= leader·(1 + tie_tolerance)), so any two members are within
    the tolerance of each other. Inside a group: t dividing ``gpus_per_node`` first (TP inside
    a node), then fewer communication seconds, then time, then enumeration order
    (docs/design.md, "Planner ranking"). Only groups reaching the first ``ranked`` layouts are
    formed: at most ``ranked`` searches, whatever the number of layouts.
    """
    if not 0.0 <= tie_tolerance <= 1.0:
        raise ValidationError("tie_tolerance", tie_tolerance, "must be >= 0 and <= 1")
    fits = result.fits
    order = np.lexsort((result.iteration_s, ~fits))
    if drop_infeasible:
        order = order[fits[order]]
    n = len(order)
    limit = n if ranked is None else min(n, ranked)
    times = result.iteration_s[order]
    feasible_end = int(fits[order].sum())
    t = result.layouts.columns["t"]
    group = np.empty(limit, dtype=np.intp)
    start, index = 0, 0
    while start < limit:
        block_end = feasible_end if start < feasible_end else n
        bound = times[start] * (1.0 + tie_tolerance)
        end = start + int(np.searchsorted(times[start:block_end], bound, side="right"))
        end = max(end, start + 1)
        members = order[start:end]
        if end - start > 1:
            comm = np.zeros(len(members))
            for name in COMMUNICATION_TERMS:
                comm = comm + result.terms[name][members]
            across = (np.mod(float(gpus_per_node), t[members]) != 0.0).astype(np.int8)
            inner = np.lexsort((members, result.iteration_s[members], comm, across))
            order[start:end] = members[inner]
        group[start : min(end, limit)] = index
        start, index = end, index + 1
    return order, group


def plan(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    gpus: int,
    *,
    fidelity: Fidelity = Fidelity.DETAILED,
    drop_infeasible: bool = False,
    memory_headroom: float = 0.0,
    tie_tolerance: float = 0.0,
    ranked: int | None = None,
    **options: object,
) -> Plan:
    """Enumerate, evaluate in one pass and rank every layout (memory-infeasible marked; see
    :func:`rank` for the order and the tie groups)."""
    layouts = enumerate_layouts(model, training, gpus, **options)  # type: ignore[arg-type]
    result = evaluate_layouts(
        model, training, cluster, layouts, fidelity=fidelity, memory_headroom=memory_headroom
    )
    order, group = rank(
        result,
        gpus_per_node=cluster.gpus_per_node,
        drop_infeasible=drop_infeasible,
        tie_tolerance=tie_tolerance,
        ranked=ranked,
    )
    return Plan(result, order, len(layouts), int(result.fits.sum()), group)
