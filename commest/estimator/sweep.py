"""Many layouts in one numpy pass, and every valid layout for a GPU count, ranked.

``evaluate_layouts`` feeds arrays to the same kernel that ``estimate`` feeds scalars, so a
layout's iteration time is bit-for-bit the same on both paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from commest.errors import LimitError, ValidationError
from commest.estimator.kernel import TERMS, LayoutVars, evaluate
from commest.estimator.specs import (
    RECOMPUTE_CODE,
    ClusterSpec,
    Fidelity,
    ModelSpec,
    Recompute,
    TrainingSpec,
)

FloatArray = npt.NDArray[np.float64]
COLUMNS = (
    "p",
    "t",
    "d",
    "b",
    "v",
    "cp",
    "ep",
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
) -> SweepResult:
    """The kernel over every layout at once (no Python loop per layout)."""
    k = evaluate(
        model,
        training,
        layouts.vars(),
        gpus_per_node=cluster.gpus_per_node,
        peak_flops=cluster.peak_flops,
        utilization=cluster.utilization,
        bandwidth=cluster.bandwidth,
        fidelity=fidelity,
        rank_order=rank_order,
        gpu_memory_bytes=cluster.gpu_memory_bytes,
        memory_bandwidth_gbps=cluster.memory_bandwidth_gbps,
        memory_traffic_factor=cluster.memory_traffic_factor,
    )
    n = len(layouts)
    terms = {
        name: np.broadcast_to(np.asarray(k.terms[name], dtype=np.float64), (n,)) for name in TERMS
    }
    iteration = np.broadcast_to(np.asarray(k.iteration_s, dtype=np.float64), (n,))
    memory = np.broadcast_to(np.asarray(k.memory["total"], dtype=np.float64), (n,))
    capacity = cluster.gpu_memory_bytes
    fits = memory <= capacity if capacity is not None else np.ones(n, dtype=bool)
    return SweepResult(layouts, terms, iteration, memory, fits)


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
) -> LayoutArrays:
    """Every layout of ``gpus`` GPUs that DESIGN.md §2's rules admit (cp = ep = 1)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
        raise ValidationError("gpus", gpus, "must be a whole number > 0")
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
            f"the layout space for gpus={gpus} has {space:,} candidates, beyond "
            f"the cap of {max_layouts:,} layouts; narrow the options"
        )
    grid = np.meshgrid(ps, ts, bs, vs, rcs, sps, zs, indexing="ij")
    p, t, b, v, rc, sp, zero = (np.asarray(g, dtype=np.float64).ravel() for g in grid)
    d = gpus / (p * t)
    ok = (np.mod(d, 1.0) == 0.0) & (d >= 1.0)
    d = np.where(ok, d, 1.0)
    m = gb / (b * d)
    ok &= np.mod(m, 1.0) == 0.0
    ok &= np.mod(layers / (p * v), 1.0) == 0.0
    ok &= (v == 1.0) | ((p > 1.0) & (np.mod(m, p) == 0.0))
    ok &= (sp == 0.0) | ((t > 1.0) & (np.mod(model.seq_length / t, 1.0) == 0.0))
    idx = np.flatnonzero(ok)
    if len(idx) > max_layouts:
        raise LimitError(
            f"{len(idx):,} valid layouts for gpus={gpus} exceed the cap of "
            f"{max_layouts:,}; narrow the options"
        )
    return LayoutArrays.from_columns(
        p=p[idx],
        t=t[idx],
        d=d[idx],
        b=b[idx],
        v=v[idx],
        recompute=rc[idx],
        sp=sp[idx],
        zero=zero[idx],
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """Every valid layout evaluated; ``order`` ranks them by iteration time."""

    result: SweepResult
    order: npt.NDArray[np.intp]
    evaluated: int
    feasible: int


def plan(
    model: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    gpus: int,
    *,
    fidelity: Fidelity = Fidelity.DETAILED,
    drop_infeasible: bool = False,
    **options: object,
) -> Plan:
    """Enumerate, evaluate in one pass and rank every layout (memory-infeasible marked)."""
    layouts = enumerate_layouts(model, training, gpus, **options)  # type: ignore[arg-type]
    result = evaluate_layouts(model, training, cluster, layouts, fidelity=fidelity)
    keys = (
        np.where(result.fits, result.iteration_s, np.inf)
        if drop_infeasible
        else (result.iteration_s)
    )
    # Feasible first, then by time (stable, so ties keep enumeration order).
    order = np.lexsort((keys, ~result.fits))
    if drop_infeasible:
        order = order[result.fits[order]]
    return Plan(result, order, len(layouts), int(result.fits.sum()))
