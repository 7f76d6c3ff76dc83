"""Effective bus bandwidth from benchmark runs: ``ProfileBandwidth`` (a ``BandwidthProvider``).

Every answer says how it was obtained (``BandwidthAnswer.method``):

- ``measured``: a run of that collective at that placement (ranks, nodes) has a point at that
  message size; its value is returned.
- ``interpolated``: between two sizes of such a run, linear in busbw over log(size).
- ``extrapolated``: beyond the run's sizes, from its latency-bandwidth fit T = α + S/β,
  anchored at the nearest measured size: busbw(S) = busbw(S_edge) · a(S)/a(S_edge) with
  a(S) = S/(α + S/β) the fit's algorithm bandwidth, so the curve stays continuous. Without a
  usable fit the edge value is held (and the source says so).
- ``derived``: no run of that collective at that placement; the rule used is named in
  ``source``. Rules, in order of preference:

  1. Same collective, other placement. Within one node busbw is kept (it is the
     rank-count-independent figure by construction, nccl-tests doc/PERFORMANCE.md).
     Across nodes the chosen run is, in order: the same ranks per node r, then the nearest
     larger r, then the nearest smaller r, then the nearest node count. Its busbw is
     converted through the per-GPU share of the node's inter-node bandwidth: for ring
     collectives (all_reduce, all_gather, reduce_scatter, broadcast, reduce) every GPU of a
     node drives its own NIC, so busbw ∝ ranks per node and the share is busbw / r_ref; for
     per-rank traffic (sendrecv, alltoall) busbw already is one GPU's share. A query with
     r ranks per node gets share · min(r, r_ref) for ring collectives (never more NICs than
     the measurement showed) and the share itself for per-rank traffic.
  2. A related collective (``RELATED``): reduce_scatter / all_gather / all_reduce stand in
     for one another (ring algorithms drive the same links at the same bus bandwidth);
     broadcast and reduce use them too; sendrecv uses them through the per-GPU share.
     alltoall has no stand-in: its inter-node busbw is bound by one NIC per GPU and the
     off-node share of its traffic, which no ring measurement shows.
  3. An intra-node query with only inter-node runs takes the inter-node figure as a lower
     bound (NVLink is never slower than the NICs).

  An inter-node query is never answered from single-node runs.
- ``nominal``: the same rules over a nominal profile's synthetic curves (vendor link rates,
  see ``profiles.nominal``), used only when no stored run answers.

Otherwise ``NotFoundError`` says which benchmark to upload. Where several runs share the
chosen placement (several backends, repeated uploads) the highest busbw at each size wins:
the answer is what the best backend achieves, as a tuning table would pick it.

Points: out-of-place rows are used; in-place only when a run has no out-of-place row. Each
point's busbw is recomputed from its time, busbw = factor(op, n) · S / t, which agrees with the
printed busbw to its two decimals and stays non-zero for small sizes that nccl-tests prints
as 0.00.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from estimator.bandwidth import (
    BandwidthAnswer,
    Collective,
    FloatArray,
    Num,
    TrafficKind,
    bus_factor,
)
from estimator.errors import NotFoundError, ValidationError

RING_OPS = frozenset(
    {
        Collective.ALL_REDUCE,
        Collective.ALL_GATHER,
        Collective.REDUCE_SCATTER,
        Collective.BROADCAST,
        Collective.REDUCE,
    }
)

RELATED: Mapping[Collective, tuple[Collective, ...]] = {
    Collective.ALL_REDUCE: (Collective.REDUCE_SCATTER, Collective.ALL_GATHER),
    Collective.ALL_GATHER: (Collective.REDUCE_SCATTER, Collective.ALL_REDUCE),
    Collective.REDUCE_SCATTER: (Collective.ALL_GATHER, Collective.ALL_REDUCE),
    Collective.BROADCAST: (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE),
    Collective.REDUCE: (Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_REDUCE),
    Collective.SENDRECV: (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER),
}

BENCHMARK_BINARY: Mapping[Collective, str] = {
    Collective.ALL_REDUCE: "all_reduce_perf",
    Collective.ALL_GATHER: "all_gather_perf",
    Collective.REDUCE_SCATTER: "reduce_scatter_perf",
    Collective.ALLTOALL: "alltoall_perf",
    Collective.SENDRECV: "sendrecv_perf (or osu_bw)",
    Collective.BROADCAST: "broadcast_perf",
    Collective.REDUCE: "reduce_perf",
    Collective.GATHER: "gather_perf",
    Collective.SCATTER: "scatter_perf",
    Collective.HYPERCUBE: "hypercube_perf",
}

_MEASURED, _INTERPOLATED, _EXTRAPOLATED = 0, 1, 2
_KEY_SHIFT = np.int64(1 << 32)


# --- latency-bandwidth fit ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlphaBetaFit:
    """T = α + S/β: latency α (µs) and asymptotic algorithm bandwidth β (GB/s, 10^9 B/s)."""

    alpha_us: float
    beta_gbps: float

    def time_us(self, size_bytes: Num) -> Num:
        """Predicted time of one operation on ``size_bytes``."""
        return self.alpha_us + size_bytes / (self.beta_gbps * 1e3)

    def algbw_gbps(self, size_bytes: Num) -> Num:
        """Predicted algorithm bandwidth S / T."""
        return size_bytes / (self.alpha_us * 1e3 + size_bytes / self.beta_gbps)


def fit_alpha_beta(
    size_bytes: Sequence[float] | FloatArray, time_us: Sequence[float] | FloatArray
) -> AlphaBetaFit | None:
    """Least-squares α, β of T = α + S/β in relative error; None if no sound fit exists.

    Residuals are weighted by 1/T (relative error) so the latency-bound small sizes count as
    much as the bandwidth-bound large ones; α is kept ≥ 0 (refit through the origin when the
    free fit goes negative). Needs two distinct sizes and a time that grows with size.
    """
    s = np.asarray(size_bytes, dtype=np.float64)
    t = np.asarray(time_us, dtype=np.float64)
    keep = (s > 0) & (t > 0) & np.isfinite(s) & np.isfinite(t)
    s, t = s[keep], t[keep]
    if np.unique(s).size < 2:
        return None
    # Model T = α + S·y with y = 1/(β·1e3) µs per byte; weighted rows divide by T.
    scale = float(s.max())
    design = np.column_stack([1.0 / t, (s / scale) / t])
    (alpha, y_scaled), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    y = float(y_scaled) / scale
    alpha = float(alpha)
    if alpha < 0:
        u = s / t
        alpha, y = 0.0, float(np.sum(u) / np.sum(u * u))
    if not (y > 0 and math.isfinite(y) and math.isfinite(alpha)):
        return None
    if y * float(s.max()) < 1e-6 * (alpha + y * float(s.max())):
        return None  # times do not grow with size: the data hold no bandwidth
    return AlphaBetaFit(alpha_us=alpha, beta_gbps=1.0 / (y * 1e3))


# --- one run's curve ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RunCurve:
    """busbw over message size for one run (or one nominal curve), ready for lookups."""

    op: Collective
    ranks: int
    nodes: int
    backend: str
    sizes_bytes: FloatArray  # ascending, unique, > 0
    busbw_gbps: FloatArray
    fit: AlphaBetaFit | None
    label: str
    run_id: int | None = None
    dtype: str | None = None
    in_place: bool = False
    nominal: bool = False
    log_sizes: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "log_sizes", np.log(self.sizes_bytes))

    @property
    def ranks_per_node(self) -> float:
        """Ranks per node (fractional when ranks do not divide evenly)."""
        return self.ranks / self.nodes

    @classmethod
    def from_points(
        cls,
        *,
        op: Collective,
        ranks: int,
        nodes: int,
        points: Iterable[tuple[float, float, bool]],
        label: str,
        backend: str | None = None,
        fit: AlphaBetaFit | None = None,
        run_id: int | None = None,
        dtype: str | None = None,
        nominal: bool = False,
    ) -> RunCurve | None:
        """A curve from (size_bytes, time_us, in_place) rows; None if nothing is usable.

        Out-of-place rows are used when present, else in-place rows. Repeated sizes are
        averaged in time. ``fit`` defaults to :func:`fit_alpha_beta` on the same rows.
        """
        if ranks < 2 or nodes < 1 or nodes > ranks:
            return None
        rows = [(float(s), float(t), bool(p)) for s, t, p in points]
        rows = [r for r in rows if r[0] > 0 and r[1] > 0 and math.isfinite(r[0] + r[1])]
        in_place = not any(not p for _, _, p in rows)
        chosen = [(s, t) for s, t, p in rows if p is in_place]
        if not chosen:
            return None
        sizes = np.array([s for s, _ in chosen])
        times = np.array([t for _, t in chosen])
        unique, inverse = np.unique(sizes, return_inverse=True)
        mean_times = np.bincount(inverse, weights=times) / np.bincount(inverse)
        factor = float(bus_factor(op, float(ranks)))
        busbw = factor * unique / (mean_times * 1e3)
        if fit is None:
            fit = fit_alpha_beta(unique, mean_times)
        return cls(
            op=op,
            ranks=ranks,
            nodes=nodes,
            backend=backend or "unknown",
            sizes_bytes=unique.astype(np.float64),
            busbw_gbps=busbw.astype(np.float64),
            fit=fit,
            label=label,
            run_id=run_id,
            dtype=dtype,
            in_place=in_place,
            nominal=nominal,
        )

    def values(self, size_bytes: FloatArray, log_size: FloatArray) -> FloatArray:
        """busbw at each size: interpolated inside the run, fit-extrapolated outside."""
        out: FloatArray = np.interp(log_size, self.log_sizes, self.busbw_gbps)
        if self.fit is None:
            return out
        for edge in (0, -1):
            mask = (
                size_bytes < self.sizes_bytes[0] if edge == 0 else size_bytes > self.sizes_bytes[-1]
            )
            if mask.any():
                edge_size = self.sizes_bytes[edge]
                ratio = self.fit.algbw_gbps(size_bytes[mask]) / self.fit.algbw_gbps(edge_size)
                out[mask] = self.busbw_gbps[edge] * ratio
        return out

    def method_of(self, size_bytes: float) -> int:
        """Whether a size is measured, interpolated or extrapolated in this run."""
        if size_bytes < self.sizes_bytes[0] or size_bytes > self.sizes_bytes[-1]:
            return _EXTRAPOLATED
        index = int(np.searchsorted(self.sizes_bytes, size_bytes))
        if self.sizes_bytes[index] == size_bytes:
            return _MEASURED
        return _INTERPOLATED

    def describe(self, size_bytes: float) -> str:
        """How this run gives a value at ``size_bytes``, for ``BandwidthAnswer.source``."""
        method = self.method_of(size_bytes)
        if method == _MEASURED:
            return f"{self.label}, point at {size_bytes:.0f} B"
        if method == _INTERPOLATED:
            index = int(np.searchsorted(self.sizes_bytes, size_bytes))
            low, high = self.sizes_bytes[index - 1], self.sizes_bytes[index]
            return f"{self.label}, between {low:.0f} B and {high:.0f} B (linear in log size)"
        below = size_bytes < self.sizes_bytes[0]
        edge = self.sizes_bytes[0] if below else self.sizes_bytes[-1]
        side = "below the smallest" if below else "beyond the largest"
        if self.fit is None:
            return f"{self.label}, {side} measured size {edge:.0f} B: edge value held (no α-β fit)"
        return (
            f"{self.label}, {side} measured size {edge:.0f} B: α-β fit "
            f"α={self.fit.alpha_us:.4g} us, β={self.fit.beta_gbps:.4g} GB/s, "
            f"anchored at {edge:.0f} B"
        )


# --- lookup plans ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Plan:
    """How queries at one (op, ranks, nodes) are answered: curves × scale, max over curves."""

    curves: tuple[RunCurve, ...]
    scale: float
    derivation: str | None  # None: the runs are at the queried placement and op

    def values(self, size_bytes: FloatArray, log_size: FloatArray) -> FloatArray:
        if len(self.curves) == 1:
            out = self.curves[0].values(size_bytes, log_size)
        else:
            out = np.max([c.values(size_bytes, log_size) for c in self.curves], axis=0)
        if self.scale != 1.0:
            out = out * self.scale
        return out

    def winner(self, size_bytes: float) -> RunCurve:
        s = np.array([size_bytes])
        values = [float(c.values(s, np.log(s))[0]) for c in self.curves]
        return self.curves[int(np.argmax(values))]


def _share_scale(ref_op: Collective, r_ref: float, op: Collective, r_q: float) -> float:
    """busbw(query) / busbw(ref) across nodes, through the per-GPU share (module docstring)."""
    per_gpu = 1.0 / r_ref if ref_op in RING_OPS else 1.0
    if op in RING_OPS:
        return per_gpu * min(r_q, r_ref)
    return per_gpu


def _group(curves: Sequence[RunCurve], best: RunCurve) -> tuple[RunCurve, ...]:
    return tuple(c for c in curves if c.ranks == best.ranks and c.nodes == best.nodes)


def _plan_from(
    op: Collective, ref_op: Collective, curves: Sequence[RunCurve], ranks: int, nodes: int
) -> _Plan | None:
    """The plan answering (op, ranks, nodes) from runs of ``ref_op``, or None."""
    exact = tuple(c for c in curves if c.ranks == ranks and c.nodes == nodes)
    if exact and op is ref_op:
        return _Plan(exact, 1.0, None)
    stand_in = "" if op is ref_op else f"{ref_op.value} busbw stands in for {op.value}; "
    r_q = ranks / nodes
    if nodes == 1:
        intra = [c for c in curves if c.nodes == 1]
        if intra:
            best = min(intra, key=lambda c: (abs(math.log(c.ranks / ranks)), -c.ranks))
            how = (
                f"{stand_in}single-node busbw kept from {best.ranks} to {ranks} ranks "
                "(bus bandwidth does not depend on the rank count)"
            )
            return _Plan(_group(intra, best), 1.0, how)
        inter = [c for c in curves if c.nodes > 1]
        if not inter:
            return None
        best = max(inter, key=lambda c: (c.ranks_per_node, -c.nodes))
        scale = _share_scale(ref_op, best.ranks_per_node, op, r_q)
        how = (
            f"{stand_in}no single-node run: the inter-node figure with "
            f"{best.ranks_per_node:g} ranks per node × {scale:.6g} is a lower bound within a node"
        )
        return _Plan(_group(inter, best), scale, how)
    inter = [c for c in curves if c.nodes > 1]
    if not inter:
        return None

    def preference(c: RunCurve) -> tuple[bool, float, float, int, int]:
        r = c.ranks_per_node
        return (r < r_q, abs(math.log(r / r_q)), abs(math.log(c.nodes / nodes)), -c.nodes, -c.ranks)

    best = min(inter, key=preference)
    scale = _share_scale(ref_op, best.ranks_per_node, op, r_q)
    how = (
        f"{stand_in}measured with {best.ranks} ranks on {best.nodes} nodes "
        f"({best.ranks_per_node:g} per node), used for {ranks} ranks on {nodes} nodes "
        f"({r_q:g} per node) through the per-GPU share of inter-node bandwidth: × {scale:.6g}"
    )
    return _Plan(_group(inter, best), scale, how)


# --- the provider ---------------------------------------------------------------------------


class TuningRow(NamedTuple):
    """One row of a tuning table: at this size, this backend is fastest."""

    size_bytes: int
    best_backend: str
    busbw_gbps: float


@dataclass(frozen=True, slots=True)
class CurveData:
    """One curve for plotting: sizes and busbw as stored, with the fit and provenance."""

    op: str
    ranks: int
    nodes: int
    backend: str
    dtype: str | None
    run_id: int | None
    label: str
    nominal: bool
    in_place: bool
    sizes_bytes: list[int]
    busbw_gbps: list[float]
    alpha_us: float | None
    beta_gbps: float | None


def _by_op(curves: Iterable[RunCurve]) -> dict[Collective, list[RunCurve]]:
    out: dict[Collective, list[RunCurve]] = {}
    for curve in curves:
        out.setdefault(curve.op, []).append(curve)
    return out


class ProfileBandwidth:
    """A ``BandwidthProvider`` over a profile's runs, with nominal curves as a last resort."""

    def __init__(
        self,
        name: str,
        curves: Iterable[RunCurve],
        nominal_curves: Iterable[RunCurve] = (),
    ) -> None:
        self.name = name
        self._measured = _by_op(curves)
        self._nominal = _by_op(nominal_curves)
        self._plans: dict[tuple[Collective, int, int], tuple[_Plan, bool]] = {}

    # -- resolution -------------------------------------------------------------------------

    def _resolve(self, op: Collective, ranks: int, nodes: int) -> tuple[_Plan, bool]:
        key = (op, ranks, nodes)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        for pool, nominal in ((self._measured, False), (self._nominal, True)):
            for ref_op in (op, *RELATED.get(op, ())):
                curves = pool.get(ref_op)
                if not curves:
                    continue
                plan = _plan_from(op, ref_op, curves, ranks, nodes)
                if plan is not None:
                    self._plans[key] = (plan, nominal)
                    return plan, nominal
        raise NotFoundError(self._missing_message(op, ranks, nodes))

    def _missing_message(self, op: Collective, ranks: int, nodes: int) -> str:
        binary = BENCHMARK_BINARY.get(op, f"{op.value}_perf")
        message = (
            f"profile {self.name!r} has no benchmark run usable for {op.value} over {ranks} "
            f"ranks on {nodes} node(s); upload nccl-tests {binary} output measured with "
            f"{ranks} ranks on {nodes} node(s)"
        )
        if nodes > 1 and any(
            c.nodes == 1 for ref in (op, *RELATED.get(op, ())) for c in self._measured.get(ref, [])
        ):
            message += " (only single-node runs are stored; they say nothing of inter-node links)"
        return message

    # -- BandwidthProvider ------------------------------------------------------------------

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num:
        """busbw (GB/s) for scalars or equal-shaped arrays; arrays come back in that shape."""
        op = Collective(op)
        scalar = np.ndim(ranks) == 0 and np.ndim(nodes) == 0 and np.ndim(size_bytes) == 0
        r, k, s = np.broadcast_arrays(
            np.asarray(ranks, dtype=np.float64),
            np.asarray(nodes, dtype=np.float64),
            np.asarray(size_bytes, dtype=np.float64),
        )
        out = self._evaluate(op, r.ravel(), k.ravel(), s.ravel()).reshape(r.shape)
        if scalar:
            return float(out.reshape(-1)[0])
        return out

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer:
        """One answer with its method and source; equal to ``busbw_gbps`` for the query."""
        op = Collective(op)
        value = self._evaluate(
            op, np.array([float(ranks)]), np.array([float(nodes)]), np.array([float(size_bytes)])
        )
        ranks_i, nodes_i = int(ranks), int(nodes)
        size = max(float(size_bytes), 1.0)
        plan, nominal = self._resolve(op, ranks_i, nodes_i)
        curve = plan.winner(size)
        inner = curve.describe(size)
        if nominal:
            method = "nominal"
            source = f"nominal curves of {self.name!r}: {inner}"
            if plan.derivation:
                source += f"; {plan.derivation}"
        elif plan.derivation is not None:
            method = "derived"
            source = f"derived from {inner}; {plan.derivation}"
        else:
            method = ("measured", "interpolated", "extrapolated")[curve.method_of(size)]
            source = inner
            if len(plan.curves) > 1:
                source += f" (best of {len(plan.curves)} runs at this placement)"
        return BandwidthAnswer(float(value[0]), method, source)

    def _evaluate(
        self, op: Collective, ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray
    ) -> FloatArray:
        ranks_i = np.rint(ranks).astype(np.int64)
        nodes_i = np.rint(nodes).astype(np.int64)
        _validate(ranks, nodes, size_bytes, ranks_i, nodes_i)
        sizes = np.maximum(size_bytes, 1.0)
        log_sizes = np.log(sizes)
        if ranks_i.size == 0:
            return np.empty(0)
        r0, k0 = int(ranks_i[0]), int(nodes_i[0])
        if (ranks_i == r0).all() and (nodes_i == k0).all():
            plan, _ = self._resolve(op, r0, k0)
            return plan.values(sizes, log_sizes)
        keys = ranks_i * _KEY_SHIFT + nodes_i
        unique, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=unique.size))[:-1]
        out = np.empty(sizes.shape, dtype=np.float64)
        for key, idx in zip(unique.tolist(), np.split(order, bounds), strict=True):
            plan, _ = self._resolve(op, key >> 32, key & 0xFFFFFFFF)
            out[idx] = plan.values(sizes[idx], log_sizes[idx])
        return out

    # -- tables and plots -------------------------------------------------------------------

    def alpha_beta(self) -> list[tuple[str, AlphaBetaFit | None]]:
        """Each stored run's label and latency-bandwidth fit."""
        return [(c.label, c.fit) for curves in self._measured.values() for c in curves]

    def tuning_table(
        self, *, op: Collective, ranks: int, nodes: int | None = None
    ) -> list[TuningRow]:
        """Per measured size, the backend with the highest busbw among runs covering it."""
        op = Collective(op)
        curves = [c for c in self._measured.get(op, []) if c.ranks == ranks]
        if nodes is not None:
            curves = [c for c in curves if c.nodes == nodes]
        if not curves:
            where = f"{ranks} ranks" + (f" on {nodes} node(s)" if nodes is not None else "")
            raise NotFoundError(
                f"profile {self.name!r} has no {op.value} run at {where}; upload "
                f"{BENCHMARK_BINARY.get(op, op.value)} output for each backend to compare"
            )
        node_counts = sorted({c.nodes for c in curves})
        if len(node_counts) > 1:
            raise ValidationError(
                "nodes", nodes, f"runs at {ranks} ranks exist on {node_counts} nodes; say which"
            )
        sizes = np.unique(np.concatenate([c.sizes_bytes for c in curves]))
        log_sizes = np.log(sizes)
        best = np.full(sizes.shape, -np.inf)
        best_backend = np.full(sizes.shape, "", dtype=object)
        for curve in sorted(curves, key=lambda c: c.backend):
            inside = (sizes >= curve.sizes_bytes[0]) & (sizes <= curve.sizes_bytes[-1])
            values = np.where(
                inside, np.interp(log_sizes, curve.log_sizes, curve.busbw_gbps), -np.inf
            )
            better = values > best
            best = np.where(better, values, best)
            best_backend = np.where(better, curve.backend, best_backend)
        return [
            TuningRow(int(s), str(b), float(v))
            for s, b, v in zip(sizes, best_backend, best, strict=True)
        ]

    def curves(self, *, include_nominal: bool = True) -> list[CurveData]:
        """Every curve (stored runs, then nominal ones) as plain data for plotting."""
        pools = [self._measured] + ([self._nominal] if include_nominal else [])
        return [
            CurveData(
                op=c.op.value,
                ranks=c.ranks,
                nodes=c.nodes,
                backend=c.backend,
                dtype=c.dtype,
                run_id=c.run_id,
                label=c.label,
                nominal=c.nominal,
                in_place=c.in_place,
                sizes_bytes=[int(s) for s in c.sizes_bytes],
                busbw_gbps=[float(v) for v in c.busbw_gbps],
                alpha_us=c.fit.alpha_us if c.fit else None,
                beta_gbps=c.fit.beta_gbps if c.fit else None,
            )
            for pool in pools
            for curves in pool.values()
            for c in curves
        ]

    def only_backend(self, backend: str) -> ProfileBandwidth:
        """The same provider restricted to one backend's runs (nominal curves kept)."""
        kept = [c for cs in self._measured.values() for c in cs if c.backend == backend]
        nominal = [c for cs in self._nominal.values() for c in cs]
        return ProfileBandwidth(self.name, kept, nominal)


def _validate(
    ranks: FloatArray,
    nodes: FloatArray,
    size_bytes: FloatArray,
    ranks_i: np.ndarray[tuple[int], np.dtype[np.int64]],
    nodes_i: np.ndarray[tuple[int], np.dtype[np.int64]],
) -> None:
    if not (np.isfinite(ranks).all() and (ranks_i == ranks).all() and (ranks_i >= 1).all()):
        bad = ranks[~(np.isfinite(ranks) & (np.rint(ranks) == ranks) & (ranks >= 1))]
        raise ValidationError("ranks", float(bad[0]), "must be an integer ≥ 1")
    if not (np.isfinite(nodes).all() and (nodes_i == nodes).all() and (nodes_i >= 1).all()):
        bad = nodes[~(np.isfinite(nodes) & (np.rint(nodes) == nodes) & (nodes >= 1))]
        raise ValidationError("nodes", float(bad[0]), "must be an integer ≥ 1")
    if (nodes_i > ranks_i).any():
        index = int(np.argmax(nodes_i > ranks_i))
        raise ValidationError(
            "nodes", int(nodes_i[index]), f"must not exceed ranks ({int(ranks_i[index])})"
        )
    if not (np.isfinite(size_bytes).all() and (size_bytes >= 0).all()):
        bad = size_bytes[~(np.isfinite(size_bytes) & (size_bytes >= 0))]
        raise ValidationError("size_bytes", float(bad[0]), "must be a finite number ≥ 0")
