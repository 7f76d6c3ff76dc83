"""Effective bus bandwidth from benchmark runs: ``ProfileBandwidth`` (a ``BandwidthProvider``).

Runs by placement
-----------------
Runs are grouped by placement: the collective and the (ranks, nodes) they were measured at.
The runs of one placement merge into an :class:`Envelope`: at each message size, the highest
busbw among the runs that measured *at or around* that size, where a run counts only from its
smallest to its largest measured size (linear in busbw over log size between its points).
So "best of" (the tuning table across backends, repeated uploads) compares runs only where each
was measured, and a run never answers far outside its sizes while another run measured there.
Where runs of a placement leave a gap (one measured up to 1 MiB, another from 1 GiB), the
envelope interpolates across it, as long as the size is within the extrapolation bound of one
side.

Bounded extrapolation
---------------------
Beyond the sizes a placement's runs measured, the edge run answers only so far:

- with a latency-bandwidth fit T = α + S/β of the edge run, busbw(S) = busbw(S_edge) ·
  a(S)/a(S_edge), a(S) = S/(α + S/β) its algorithm bandwidth (continuous at the edge), up to
  ``EXTRAPOLATION_OCTAVES`` = 2 binary orders of magnitude (a factor 4 in size);
- without a fit (one size, or times that do not grow), the edge value is held up to
  ``HOLD_OCTAVES`` = 1 (a factor 2).

Why these bounds: time never falls as a message grows, and sending a message as two halves never
saves time, so a factor F beyond an edge the true busbw lies between busbw(S_edge) and
F · busbw(S_edge) (mirrored below the smallest size). A held value is therefore within F of the
truth whatever the curve: F = 2 keeps it within 2x. An anchored α-β curve stays inside the same
bracket and follows the curve's shape (exact on α-β data), so it is trusted twice as far, F = 4.

Past the bound, in this order (the first that covers the size answers):

1. the edge run's fit, on a side where its data pin the fit down ("reaches"): at least
   ``MIN_FIT_SIZES`` sizes with an RMS relative residual under ``MAX_FIT_RESIDUAL``, and below
   the data a latency α of at least ``REACH_LATENCY_SHARE`` of the modelled time at the smallest
   size (the latency regime was measured, and smaller messages only tend further to T = α), or
   above the data a bandwidth term S/β of at least ``REACH_BANDWIDTH_SHARE`` at the largest size
   (the bandwidth regime was measured, larger messages tend to T = S/β);
2. a related measurement (the rules below: the same collective at another placement, then a
   related collective), each with the same bounds;
3. the nominal curves of the profile's GPU family (``profiles.nominal``);
4. as a last resort (no nominal family known), the first of these held or extrapolated anyway,
   and the answer says it is beyond the bound.

Related measurements
--------------------
1. Same collective, other placement. Within one node busbw is kept (it is the
   rank-count-independent figure by construction, nccl-tests doc/PERFORMANCE.md). Across
   nodes the runs are tried in this order: the same ranks per node r, then the nearest larger r,
   then the nearest smaller r, then the nearest node count. busbw is converted through the
   per-GPU share of the node's inter-node bandwidth: for ring collectives (all_reduce,
   all_gather, reduce_scatter, broadcast, reduce) every GPU of a node drives its own NIC, so
   busbw ∝ ranks per node and the share is busbw / r_ref; for per-rank traffic (sendrecv,
   alltoall) busbw already is one GPU's share. A query with r ranks per node gets
   share · min(r, r_ref) for ring collectives (never more NICs than the measurement showed) and
   the share itself for per-rank traffic.
2. A related collective (``RELATED``): reduce_scatter / all_gather / all_reduce stand in for
   one another (ring algorithms drive the same links at the same bus bandwidth); broadcast and
   reduce use them too; sendrecv uses them through the per-GPU share. alltoall has no stand-in:
   its inter-node busbw is bound by one NIC per GPU and the off-node share of its traffic,
   which no ring measurement shows.
3. An intra-node query with only inter-node runs takes the inter-node figure as a lower bound
   (NVLink is never slower than the NICs).

An inter-node query is never answered from single-node runs. With nothing to answer from (no
run, no nominal family), ``NotFoundError`` says which benchmark to upload.

Quality
-------
Every ``explain`` answer carries its method (measured / interpolated / extrapolated / derived /
nominal), ``distance_octaves`` (|log2| of the size over the nearest size measured at the
answering placement), whether placement or collective were derived, and ``weak``: true when the
answer is nominal, more than ``WEAK_DISTANCE_OCTAVES`` (= the extrapolation bound) from measured
sizes, answered beyond its rule's bound (the last resort), only a lower bound, or drawn from a
flagged upload (one that did not match the profile, ``profiles.uploads``).

Points: out-of-place rows are used; in-place only when a run has no out-of-place row. Each
point's busbw is recomputed from its time, busbw = factor(op, n) · S / t, which agrees with the
printed busbw to its two decimals and stays non-zero for small sizes that nccl-tests prints
as 0.00.

Speed: envelopes and the rule chain of an (op, ranks, nodes) are built on first use and kept;
a scalar query walks the chain with ``bisect`` and a few float operations, an array query does
the same with numpy, with the same operations in the same order (so both agree exactly).
A sweep's arrays repeat a few distinct queries thousands of times (about 100 distinct
(ranks, nodes, size) in a block of 32,768 layouts): an array is grouped by hashing, each
distinct query answered once (by the same numpy pass, or from a memo of earlier array answers)
and copied to its repeats. Answers are elementwise, so grouping changes no bit.
"""

from __future__ import annotations

import json
import math
import threading
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from estimator.bandwidth import (
    WEAK_DISTANCE_OCTAVES,
    BandwidthAnswer,
    Collective,
    FloatArray,
    Num,
    TrafficKind,
    bus_factor,
)
from estimator.errors import NotFoundError, ValidationError

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HOLD_OCTAVES = 1.0
EXTRAPOLATION_OCTAVES = WEAK_DISTANCE_OCTAVES
MIN_FIT_SIZES = 4
MAX_FIT_RESIDUAL = 0.25
REACH_LATENCY_SHARE = 0.25
REACH_BANDWIDTH_SHARE = 0.5
ENVELOPE_FORMAT = 1  # version of Envelope.to_json; stored envelopes of another version rebuild

_LN2 = math.log(2.0)
_SLACK = 1e-9  # octaves: a size exactly at a bound (2^31 from 2^30) counts as within it
_CHAIN_CACHE = 4096
_SCALAR = (int, float, np.integer, np.floating)
_OPS: dict[str, Collective] = {c.value: c for c in Collective}
_MEMO_SIZE = 8192
# Array queries: a sweep asks the same few (ranks, nodes, size) many times over, so an array of
# at least _GROUP_MIN queries is grouped by hashing (_group) and each distinct query answered
# once; more than 1/_GROUP_SHARE of them distinct, the per-placement pass is cheaper.
_GROUP_MIN = 512
_GROUP_SHARE = 8
_GROUP_CHUNK = 1 << 15  # queries grouped at once (a sweep block)
_GROUP_BITS = 14  # hash slots: 2^14, sparse for the ~100 distinct queries of a sweep block
# one odd multiplier per round; a round's colliding queries are grouped again with the next
_GROUP_MULTIPLIERS = (0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0xBF58476D1CE4E5B9)
_INDEX = np.arange(_GROUP_CHUNK)  # query indices of a chunk, made once
_INDEX.flags.writeable = False
_ARRAY_MEMO_SIZE = 1 << 14

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


def _log(x: float) -> float:
    """Natural log through numpy's ufunc, so scalar and array queries agree to the bit."""
    return float(np.log(x))


# --- latency-bandwidth fit ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlphaBetaFit:
    """T = α + S/β: latency α (µs) and asymptotic algorithm bandwidth β (GB/s, 10^9 B/s).

    β is in algbw (S / T, nccl-tests' algbw); ``beta_busbw_gbps`` converts it to busbw.
    """

    alpha_us: float
    beta_gbps: float

    def time_us(self, size_bytes: Num) -> Num:
        """Predicted time of one operation on ``size_bytes``."""
        return self.alpha_us + size_bytes / (self.beta_gbps * 1e3)

    def algbw_gbps(self, size_bytes: Num) -> Num:
        """Predicted algorithm bandwidth S / T."""
        return size_bytes / (self.alpha_us * 1e3 + size_bytes / self.beta_gbps)

    def beta_busbw_gbps(self, op: Collective, ranks: int) -> float:
        """β as bus bandwidth (busbw = algbw · factor(op, ranks), nccl-tests convention)."""
        return self.beta_gbps * float(bus_factor(Collective(op), float(ranks)))


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


def fit_reach(
    fit: AlphaBetaFit | None, sizes_bytes: FloatArray, times_us: FloatArray
) -> tuple[bool, bool]:
    """Whether the data pin ``fit`` down below / above the sizes measured (module docstring)."""
    if fit is None or sizes_bytes.size < MIN_FIT_SIZES:
        return False, False
    predicted = np.asarray(fit.time_us(sizes_bytes))
    residual = float(np.sqrt(np.mean(((predicted - times_us) / times_us) ** 2)))
    if not residual <= MAX_FIT_RESIDUAL:
        return False, False
    low, high = float(sizes_bytes[0]), float(sizes_bytes[-1])
    below = fit.alpha_us >= REACH_LATENCY_SHARE * float(fit.time_us(low))
    above = high / (fit.beta_gbps * 1e3) >= REACH_BANDWIDTH_SHARE * float(fit.time_us(high))
    return below, above


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
    reach_low: bool = False
    reach_high: bool = False
    flagged: bool = False  # its upload did not match the profile (profiles.uploads)
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
        flagged: bool = False,
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
        reach_low, reach_high = fit_reach(fit, unique, mean_times)
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
            reach_low=reach_low,
            reach_high=reach_high,
            flagged=flagged,
        )


# --- a placement's runs merged --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    """A run (or nominal curve) an envelope answers from, as answers name it."""

    label: str
    backend: str
    fit: AlphaBetaFit | None
    reach_low: bool
    reach_high: bool
    run_id: int | None = None
    flagged: bool = False

    @classmethod
    def of(cls, curve: RunCurve) -> Source:
        return cls(
            label=curve.label,
            backend=curve.backend,
            fit=curve.fit,
            reach_low=curve.reach_low,
            reach_high=curve.reach_high,
            run_id=curve.run_id,
            flagged=curve.flagged,
        )


# Where a scalar lookup landed (for explain).
_AT_POINT, _IN_RUN, _BELOW, _ABOVE = range(4)


class _Hit(NamedTuple):
    value: float
    where: int
    knot: int  # the knot answered from (for _IN_RUN: the lower knot of the piece)
    distance_octaves: float
    within_bound: bool


class Envelope:
    """The runs of one (op, ranks, nodes) merged: busbw over log size, piecewise linear.

    Knots are the sizes the runs measured (plus the points where two runs' curves cross).
    At a knot the value is the highest among the runs covering it; a piece between knots
    belongs to the run that is highest on it, or to none (a gap between runs' sizes).
    """

    __slots__ = (
        "_algbw",
        "_alpha_ns",
        "_beta",
        "_covers_all",
        "_down",
        "_gaps",
        "_lk",
        "_ml2",
        "_pieces",
        "_slopes",
        "_up",
        "_v",
        "knot_measured",
        "knot_src",
        "log_knots",
        "measured_log2",
        "nodes",
        "op",
        "piece_src",
        "ranks",
        "run_count",
        "slopes",
        "sources",
        "values",
        "x_algbw",
        "x_alpha_ns",
        "x_beta",
        "x_down",
        "x_up",
    )

    def __init__(
        self,
        *,
        op: Collective,
        ranks: int,
        nodes: int,
        log_knots: FloatArray,
        values: FloatArray,
        knot_src: IntArray,
        knot_measured: BoolArray,
        piece_src: IntArray,
        measured_log2: FloatArray,
        sources: tuple[Source, ...],
        run_count: int,
    ) -> None:
        self.op, self.ranks, self.nodes = op, ranks, nodes
        self.log_knots, self.values = log_knots, values
        self.knot_src, self.knot_measured, self.piece_src = knot_src, knot_measured, piece_src
        self.measured_log2, self.sources, self.run_count = measured_log2, sources, run_count
        self.slopes: FloatArray = np.diff(values) / np.diff(log_knots)
        self._lk: list[float] = log_knots.tolist()
        self._v: list[float] = values.tolist()
        self._slopes: list[float] = self.slopes.tolist()
        self._ml2: list[float] = measured_log2.tolist()
        self._pieces: list[int] = piece_src.tolist()
        # Extrapolation from each knot, from the fit of the run winning there (module
        # docstring): a(S) = S / (α_ns + S / β) anchored at a(S_knot), held where a == 0;
        # how far it may go up (x_up) and down (x_down), in octaves.
        fits = [sources[i].fit for i in knot_src.tolist()]
        alpha_ns = np.array([f.alpha_us * 1e3 if f else 0.0 for f in fits])
        beta = np.array([f.beta_gbps if f else 1.0 for f in fits])
        size = np.exp(log_knots)
        has_fit = np.array([f is not None for f in fits], dtype=np.bool_)
        algbw = np.where(has_fit, size / (alpha_ns + size / beta), 0.0)
        fit_bound = EXTRAPOLATION_OCTAVES + _SLACK
        hold = HOLD_OCTAVES + _SLACK
        reach_up = np.array([sources[i].reach_high for i in knot_src.tolist()], dtype=np.bool_)
        reach_down = np.array([sources[i].reach_low for i in knot_src.tolist()], dtype=np.bool_)
        self.x_alpha_ns: FloatArray = alpha_ns
        self.x_beta: FloatArray = beta
        self.x_algbw: FloatArray = algbw
        self.x_up: FloatArray = np.where(has_fit, np.where(reach_up, np.inf, fit_bound), hold)
        self.x_down: FloatArray = np.where(has_fit, np.where(reach_down, np.inf, fit_bound), hold)
        self._alpha_ns: list[float] = alpha_ns.tolist()
        self._beta: list[float] = beta.tolist()
        self._algbw: list[float] = algbw.tolist()
        self._up: list[float] = self.x_up.tolist()
        self._down: list[float] = self.x_down.tolist()
        self._gaps = bool((piece_src < 0).any())
        # fits that reach both ways and no gap: every size is within bounds
        self._covers_all = not self._gaps and self._down[0] == self._up[-1] == math.inf

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def of_curve(cls, curve: RunCurve) -> Envelope:
        """A one-run envelope."""
        n = curve.sizes_bytes.size
        return cls(
            op=curve.op,
            ranks=curve.ranks,
            nodes=curve.nodes,
            log_knots=curve.log_sizes,
            values=curve.busbw_gbps,
            knot_src=np.zeros(n, dtype=np.int64),
            knot_measured=np.ones(n, dtype=np.bool_),
            piece_src=np.zeros(max(n - 1, 0), dtype=np.int64),
            measured_log2=np.log2(curve.sizes_bytes),
            sources=(Source.of(curve),),
            run_count=1,
        )

    @classmethod
    def of_curves(cls, curves: Sequence[RunCurve]) -> Envelope:
        """The envelope of several runs at one placement.

        Runs measured at the same sizes (the usual case: repeated nccl-tests sweeps) are
        merged at once (:meth:`of_grid`); those envelopes are then merged pairwise.
        """
        grids: dict[tuple[float, ...], list[RunCurve]] = {}
        for curve in curves:
            grids.setdefault(tuple(curve.sizes_bytes.tolist()), []).append(curve)
        envelopes = [cls.of_grid(group) for group in grids.values()]
        while len(envelopes) > 1:
            merged = [a.merge(b) for a, b in zip(envelopes[::2], envelopes[1::2], strict=False)]
            if len(envelopes) % 2:
                merged.append(envelopes[-1])
            envelopes = merged
        return envelopes[0]

    @classmethod
    def of_grid(cls, curves: Sequence[RunCurve]) -> Envelope:
        """The envelope of runs measured at the same sizes, exact, in one pass.

        At each size the highest run wins. On a piece between two sizes every run is a line
        (linear in log size); where the winners at its ends differ, the upper envelope of those
        lines is found by splitting at crossings (the line highest at the crossing of the two
        current winners joins them, until none does).
        """
        if len(curves) == 1:
            return cls.of_curve(curves[0])
        lk = curves[0].log_sizes
        table = np.stack([c.busbw_gbps for c in curves])  # runs × sizes
        winner = np.argmax(table, axis=0)
        knots: list[float] = []
        values: list[float] = []
        knot_src: list[int] = []
        measured: list[bool] = []
        pieces: list[int] = []
        lk_list, win = lk.tolist(), winner.tolist()
        for i in range(lk.size):
            knots.append(lk_list[i])
            values.append(float(table[win[i], i]))
            knot_src.append(win[i])
            measured.append(True)
            if i == lk.size - 1:
                break
            if win[i] == win[i + 1]:
                pieces.append(win[i])
                continue
            left, right = table[:, i], table[:, i + 1]
            x0, dx = lk_list[i], lk_list[i + 1] - lk_list[i]
            chain = _upper_chain(left, right, win[i], win[i + 1])
            owner, last_t = chain[0][1], 0.0
            for t, line in chain[1:]:
                if not last_t < t < 1.0:  # a crossing at a knot: no piece of its own
                    owner = line
                    continue
                pieces.append(owner)
                knots.append(x0 + t * dx)
                values.append(float(left[line] + t * (right[line] - left[line])))
                knot_src.append(line)
                measured.append(False)
                owner, last_t = line, t
            pieces.append(owner)
        sources = tuple(Source.of(c) for c in curves)
        used = sorted(set(knot_src) | set(pieces))
        remap = {old: new for new, old in enumerate(used)}
        return cls(
            op=curves[0].op,
            ranks=curves[0].ranks,
            nodes=curves[0].nodes,
            log_knots=np.array(knots),
            values=np.array(values),
            knot_src=np.array([remap[i] for i in knot_src], dtype=np.int64),
            knot_measured=np.array(measured, dtype=np.bool_),
            piece_src=np.array([remap[i] for i in pieces], dtype=np.int64),
            measured_log2=np.log2(curves[0].sizes_bytes),
            sources=tuple(sources[i] for i in used),
            run_count=len(curves),
        )

    def _sample(self, lx: FloatArray) -> tuple[FloatArray, IntArray, BoolArray]:
        """Values, answering source and measured flag at log sizes (NaN/-1 where uncovered)."""
        lk = self.log_knots
        n = lk.size
        j = np.searchsorted(lk, lx, side="right") - 1
        inside = (j >= 0) & (lx <= lk[-1])
        jk = np.clip(j, 0, n - 1)
        at_knot = inside & (lx == lk[jk])
        values = np.full(lx.shape, np.nan)
        src = np.full(lx.shape, -1, dtype=np.int64)
        measured = np.zeros(lx.shape, dtype=np.bool_)
        values[at_knot] = self.values[jk[at_knot]]
        src[at_knot] = self.knot_src[jk[at_knot]]
        measured[at_knot] = self.knot_measured[jk[at_knot]]
        if n > 1:
            jp = np.clip(j, 0, n - 2)
            interior = inside & ~at_knot & (self.piece_src[jp] >= 0)
            p = jp[interior]
            values[interior] = self.slopes[p] * (lx[interior] - lk[p]) + self.values[p]
            src[interior] = self.piece_src[p]
        return values, src, measured

    def merge(self, other: Envelope) -> Envelope:
        """The envelope of both: per size the higher of the two where both measured."""
        offset = len(self.sources)
        x = np.union1d(self.log_knots, other.log_knots)
        if x.size > 1:
            va, _, _ = self._sample(x)
            vb, _, _ = other._sample(x)
            mid = (x[:-1] + x[1:]) / 2
            both = ~np.isnan(self._sample(mid)[0]) & ~np.isnan(other._sample(mid)[0])
            d0, d1 = (va - vb)[:-1], (va - vb)[1:]
            cross = both & (d0 * d1 < 0)
            if cross.any():
                t = d0[cross] / (d0[cross] - d1[cross])
                lo, hi = x[:-1][cross], x[1:][cross]
                x = np.union1d(x, lo + t * (hi - lo))
        va, sa, ma = self._sample(x)
        vb, sb, mb = other._sample(x)
        a_wins = ~np.isnan(va) & (np.isnan(vb) | (va >= vb))
        values = np.where(a_wins, va, vb)
        knot_src = np.where(a_wins, sa, sb + offset)
        knot_measured = np.where(a_wins, ma, mb) | ((va == vb) & (ma | mb))
        if x.size > 1:
            mid = (x[:-1] + x[1:]) / 2
            pa_v, pa_s, _ = self._sample(mid)
            pb_v, pb_s, _ = other._sample(mid)
            pa_wins = ~np.isnan(pa_v) & (np.isnan(pb_v) | (pa_v >= pb_v))
            piece_src = np.where(pa_wins, pa_s, np.where(np.isnan(pb_v), -1, pb_s + offset))
        else:
            piece_src = np.zeros(0, dtype=np.int64)
        sources = self.sources + other.sources
        used = np.unique(np.concatenate([knot_src, piece_src[piece_src >= 0]]))
        remap = np.full(len(sources), -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        return Envelope(
            op=self.op,
            ranks=self.ranks,
            nodes=self.nodes,
            log_knots=x,
            values=values.astype(np.float64),
            knot_src=remap[knot_src],
            knot_measured=knot_measured.astype(np.bool_),
            piece_src=np.where(piece_src >= 0, remap[np.maximum(piece_src, 0)], -1),
            measured_log2=np.union1d(self.measured_log2, other.measured_log2),
            sources=tuple(sources[i] for i in used.tolist()),
            run_count=self.run_count + other.run_count,
        )

    # -- storage ----------------------------------------------------------------------------

    def to_json(self) -> str:
        """A compact JSON text of this envelope (floats round-trip exactly)."""
        data: dict[str, Any] = {
            "format": ENVELOPE_FORMAT,
            "op": self.op.value,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "log_knots": self._lk,
            "values": self._v,
            "knot_src": self.knot_src.tolist(),
            "knot_measured": self.knot_measured.tolist(),
            "piece_src": self.piece_src.tolist(),
            "measured_log2": self._ml2,
            "run_count": self.run_count,
            "sources": [
                {
                    "run_id": s.run_id,
                    "label": s.label,
                    "backend": s.backend,
                    "alpha_us": s.fit.alpha_us if s.fit else None,
                    "beta_gbps": s.fit.beta_gbps if s.fit else None,
                    "reach_low": s.reach_low,
                    "reach_high": s.reach_high,
                    "flagged": s.flagged,
                }
                for s in self.sources
            ],
        }
        return json.dumps(data, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Envelope:
        """The envelope :meth:`to_json` wrote; ValueError for another format."""
        data = json.loads(text)
        if data.get("format") != ENVELOPE_FORMAT:
            raise ValueError(f"envelope format {data.get('format')!r} is not {ENVELOPE_FORMAT}")
        sources = tuple(
            Source(
                label=s["label"],
                backend=s["backend"],
                fit=(
                    AlphaBetaFit(s["alpha_us"], s["beta_gbps"])
                    if s["alpha_us"] is not None and s["beta_gbps"] is not None
                    else None
                ),
                reach_low=bool(s["reach_low"]),
                reach_high=bool(s["reach_high"]),
                run_id=s["run_id"],
                flagged=bool(s.get("flagged", False)),
            )
            for s in data["sources"]
        )
        return cls(
            op=Collective(data["op"]),
            ranks=int(data["ranks"]),
            nodes=int(data["nodes"]),
            log_knots=np.array(data["log_knots"], dtype=np.float64),
            values=np.array(data["values"], dtype=np.float64),
            knot_src=np.array(data["knot_src"], dtype=np.int64),
            knot_measured=np.array(data["knot_measured"], dtype=np.bool_),
            piece_src=np.array(data["piece_src"], dtype=np.int64),
            measured_log2=np.array(data["measured_log2"], dtype=np.float64),
            sources=sources,
            run_count=int(data["run_count"]),
        )

    # -- lookups ----------------------------------------------------------------------------

    def _distance(self, log_size: float) -> float:
        """Octaves from ``log_size`` to the nearest size any run here measured."""
        ml2 = self._ml2
        l2 = log_size / _LN2
        i = bisect_right(ml2, l2)
        best = math.inf
        if i > 0:
            best = l2 - ml2[i - 1]
        if i < len(ml2):
            best = min(best, ml2[i] - l2)
        return best

    def _from_knot(self, k: int, size_bytes: float) -> float:
        """The value at ``size_bytes`` extrapolated from knot ``k`` (held without a fit)."""
        algbw_k = self._algbw[k]
        if algbw_k:
            algbw = size_bytes / (self._alpha_ns[k] + size_bytes / self._beta[k])
            return self._v[k] * (algbw / algbw_k)
        return self._v[k]

    def locate(self, size_bytes: float, log_size: float, force: bool) -> _Hit | None:
        """Where a size lands and its value; None when beyond the bounds (unless ``force``).

        Within a run's sizes: the point or the line between points. Below, above, or in a gap
        between runs: extrapolated from the nearer knot whose bound reaches that far (the
        nearer knot when ``force``).
        """
        lk = self._lk
        n = len(lk)
        if log_size < lk[0]:
            distance = (lk[0] - log_size) / _LN2
            within = distance <= self._down[0]
            if not (within or force):
                return None
            return _Hit(self._from_knot(0, size_bytes), _BELOW, 0, distance, within)
        if log_size > lk[-1]:
            distance = (log_size - lk[-1]) / _LN2
            within = distance <= self._up[-1]
            if not (within or force):
                return None
            return _Hit(self._from_knot(n - 1, size_bytes), _ABOVE, n - 1, distance, within)
        j = bisect_right(lk, log_size) - 1
        if log_size == lk[j]:
            return _Hit(self._v[j], _AT_POINT, j, self._distance(log_size), True)
        if self.piece_src[j] >= 0:
            value = self._slopes[j] * (log_size - lk[j]) + self._v[j]
            return _Hit(value, _IN_RUN, j, self._distance(log_size), True)
        up = (log_size - lk[j]) / _LN2  # octaves above knot j
        down = (lk[j + 1] - log_size) / _LN2  # octaves below knot j + 1
        ok_up, ok_down = up <= self._up[j], down <= self._down[j + 1]
        if not (ok_up or ok_down or force):
            return None
        if (ok_up and (not ok_down or up <= down)) or (not ok_down and up <= down):
            return _Hit(self._from_knot(j, size_bytes), _ABOVE, j, up, ok_up)
        return _Hit(self._from_knot(j + 1, size_bytes), _BELOW, j + 1, down, ok_down)

    def value_at(self, size_bytes: float, log_size: float) -> float | None:
        """:meth:`locate`'s value without its provenance (the hot path of scalar queries)."""
        lk = self._lk
        if log_size < lk[0]:
            if (lk[0] - log_size) / _LN2 <= self._down[0]:
                return self._from_knot(0, size_bytes)
            return None
        last = len(lk) - 1
        if log_size > lk[last]:
            if (log_size - lk[last]) / _LN2 <= self._up[last]:
                return self._from_knot(last, size_bytes)
            return None
        j = bisect_right(lk, log_size) - 1
        if log_size == lk[j]:
            return self._v[j]
        if self._pieces[j] >= 0:
            return self._slopes[j] * (log_size - lk[j]) + self._v[j]
        hit = self.locate(size_bytes, log_size, False)
        return None if hit is None else hit.value

    def _gap_sides(self, log_sizes: FloatArray) -> tuple[IntArray, BoolArray, BoolArray]:
        """For gap points: the knot below, whether to answer from it, and whether in bound."""
        lk = self.log_knots
        j = np.clip(np.searchsorted(lk, log_sizes, side="right") - 1, 0, lk.size - 2)
        up = (log_sizes - lk[j]) / _LN2
        down = (lk[j + 1] - log_sizes) / _LN2
        ok_up, ok_down = up <= self.x_up[j], down <= self.x_down[j + 1]
        use_up = (ok_up & (~ok_down | (up <= down))) | (~ok_down & (up <= down))
        return j, use_up, ok_up | ok_down

    def covers(self, log_sizes: FloatArray) -> BoolArray | None:
        """Which sizes this envelope answers within its bounds (as :meth:`locate`); None: all."""
        if self._covers_all:
            return None
        lk = self.log_knots
        below, above = log_sizes < lk[0], log_sizes > lk[-1]
        out = ~(below | above)
        if lk.size > 1 and (self.piece_src < 0).any():
            j = np.clip(np.searchsorted(lk, log_sizes, side="right") - 1, 0, lk.size - 2)
            gap = out & (self.piece_src[j] < 0) & (log_sizes != lk[j]) & (log_sizes != lk[j + 1])
            if gap.any():
                out[gap] = self._gap_sides(log_sizes[gap])[2]
        out |= below & ((lk[0] - log_sizes) / _LN2 <= self.x_down[0])
        out |= above & ((log_sizes - lk[-1]) / _LN2 <= self.x_up[-1])
        covered: BoolArray = out
        return covered

    def _extrapolate(self, k: IntArray, size_bytes: FloatArray) -> FloatArray:
        algbw_k = self.x_algbw[k]
        algbw = size_bytes / (self.x_alpha_ns[k] + size_bytes / self.x_beta[k])
        held = algbw_k == 0.0
        ratio = algbw / np.where(held, 1.0, algbw_k)
        out: FloatArray = np.where(held, self.values[k], self.values[k] * ratio)
        return out

    def evaluate(self, size_bytes: FloatArray, log_sizes: FloatArray) -> FloatArray:
        """Values at every size, bounds ignored (the same arithmetic as :meth:`locate`).

        ``np.interp`` computes slope · (x - x_j) + y_j with the slope (y_j+1 - y_j) / (x_j+1 -
        x_j) and returns y_j at a knot, as :meth:`locate` does, so both agree to the bit.
        """
        lk = self.log_knots
        n = lk.size
        out: FloatArray = np.interp(log_sizes, lk, self.values)
        if self._gaps:
            j = np.searchsorted(lk, log_sizes, side="right") - 1
            jp = np.clip(j, 0, n - 2)
            gap = (self.piece_src[jp] < 0) & (j >= 0) & (j < n - 1) & (log_sizes != lk[jp])
            if gap.any():
                idx = np.flatnonzero(gap)
                knot, use_up, _ = self._gap_sides(log_sizes[idx])
                out[idx] = self._extrapolate(np.where(use_up, knot, knot + 1), size_bytes[idx])
        for k, outside in ((0, log_sizes < lk[0]), (n - 1, log_sizes > lk[-1])):
            if outside.any():
                out[outside] = self._from_knot_array(k, size_bytes[outside])
        return out

    def _from_knot_array(self, k: int, size_bytes: FloatArray) -> FloatArray:
        """:meth:`_from_knot` for many sizes (the same operations)."""
        algbw_k = self._algbw[k]
        if algbw_k:
            algbw = size_bytes / (self._alpha_ns[k] + size_bytes / self._beta[k])
            out: FloatArray = self._v[k] * (algbw / algbw_k)
            return out
        return np.full(size_bytes.shape, self._v[k])

    # -- provenance -------------------------------------------------------------------------

    def source_of(self, hit: _Hit) -> Source:
        """The run a lookup answered from."""
        if hit.where == _IN_RUN:
            return self.sources[int(self.piece_src[hit.knot])]
        return self.sources[int(self.knot_src[hit.knot])]

    def describe(self, hit: _Hit) -> tuple[str, str]:
        """(method word, sentence) for a lookup of this envelope."""
        many = f" (best of {self.run_count} runs at this placement)" if self.run_count > 1 else ""
        lk = self._lk
        if hit.where == _AT_POINT:
            source = self.sources[int(self.knot_src[hit.knot])]
            size = math.exp(lk[hit.knot])
            if bool(self.knot_measured[hit.knot]):
                return "measured", f"{source.label}, point at {size:.0f} B{many}"
            return "interpolated", f"{source.label}, between its points at {size:.0f} B{many}"
        if hit.where == _IN_RUN:
            low, high = math.exp(lk[hit.knot]), math.exp(lk[hit.knot + 1])
            source = self.sources[int(self.piece_src[hit.knot])]
            return "interpolated", (
                f"{source.label}, between {low:.0f} B and {high:.0f} B (linear in log size){many}"
            )
        below = hit.where == _BELOW
        source = self.sources[int(self.knot_src[hit.knot])]
        size = math.exp(lk[hit.knot])
        side = "below its smallest" if below else "beyond its largest"
        far = f"{hit.distance_octaves:.1f} binary orders of magnitude {side} measured size"
        if source.fit is None:
            how = f"edge value held (no α-β fit; held up to {HOLD_OCTAVES:g})"
        else:
            fit = source.fit
            reach = source.reach_low if below else source.reach_high
            bound = (
                "its data pin the fit down on this side"
                if reach
                else f"followed up to {EXTRAPOLATION_OCTAVES:g}"
            )
            how = (
                f"α-β fit α={fit.alpha_us:.4g} us, β={fit.beta_gbps:.4g} GB/s algbw "
                f"anchored at {size:.0f} B ({bound})"
            )
        text = f"{source.label}, {far} {size:.0f} B: {how}"
        if not hit.within_bound:
            text += "; beyond that bound, and nothing else measured this size"
        return "extrapolated", text


def _upper_chain(
    left: FloatArray, right: FloatArray, first: int, last: int
) -> list[tuple[float, int]]:
    """The upper envelope of lines on [0, 1] from their values at 0 and 1, as (start t, line).

    ``first`` is highest at 0 and ``last`` at 1. Where the line highest at the crossing of two
    neighbours is neither, it joins the chain between them (each line joins at most once).
    """

    def crossing(a: int, b: int) -> float:
        d0, d1 = left[a] - left[b], right[a] - right[b]
        return float(d0 / (d0 - d1)) if d0 != d1 else 0.5

    chain = [(0.0, first), (1.0, last)]
    i = 0
    while i < len(chain) - 1 and len(chain) <= left.size + 1:
        (_, a), (_, b) = chain[i], chain[i + 1]
        t = crossing(a, b)
        at = left + t * (right - left)
        top = int(np.argmax(at))
        if top not in (a, b) and at[top] > at[a] + 1e-12 * abs(at[a]):
            chain.insert(i + 1, (t, top))
            continue  # look again between a and the new line
        chain[i + 1] = (t, b)
        i += 1
    return chain


# --- pools of envelopes ---------------------------------------------------------------------


Placement = tuple[int, int]


class CurveSet:
    """Runs (or stored envelopes) by collective and placement, merged into envelopes lazily.

    Items are ``RunCurve`` objects, ``Envelope`` objects or stored envelope JSON texts keyed by
    (op, ranks, nodes). Which placements exist is known at once; an envelope is decoded or
    merged on its first lookup and kept, so a query pays only for the placements it reads.
    """

    def __init__(
        self,
        curves: Iterable[RunCurve] = (),
        *,
        envelopes: Iterable[Envelope] = (),
        stored: Iterable[tuple[str, int, int, str]] = (),
        nominal: bool = False,
    ) -> None:
        self.nominal = nominal
        self._items: dict[Collective, dict[Placement, list[RunCurve | Envelope | str]]] = {}
        for curve in curves:
            self._add(curve.op, (curve.ranks, curve.nodes), curve)
        for envelope in envelopes:
            self._add(envelope.op, (envelope.ranks, envelope.nodes), envelope)
        for op, ranks, nodes, text in stored:
            self._add(Collective(op), (int(ranks), int(nodes)), text)
        self._ready: dict[tuple[Collective, Placement], Envelope] = {}
        self._lock = threading.Lock()

    def _add(self, op: Collective, placement: Placement, item: RunCurve | Envelope | str) -> None:
        self._items.setdefault(op, {}).setdefault(placement, []).append(item)

    def curves(self) -> list[RunCurve]:
        """The run curves this set was given (not the stored envelopes)."""
        return [
            item
            for groups in self._items.values()
            for items in groups.values()
            for item in items
            if isinstance(item, RunCurve)
        ]

    def placements(self, op: Collective) -> list[Placement]:
        """The (ranks, nodes) that ``op`` has runs at."""
        return list(self._items.get(op, {}))

    def envelope(self, op: Collective, placement: Placement) -> Envelope:
        """The envelope of ``op`` at ``placement`` (built on first use)."""
        key = (op, placement)
        ready = self._ready.get(key)
        if ready is not None:
            return ready
        with self._lock:
            ready = self._ready.get(key)
            if ready is None:
                ready = self._build(self._items[op][placement])
                self._ready[key] = ready
        return ready

    def get(self, op: Collective) -> dict[Placement, Envelope]:
        """Every envelope of ``op`` by (ranks, nodes)."""
        return {placement: self.envelope(op, placement) for placement in self.placements(op)}

    @staticmethod
    def _build(items: Sequence[RunCurve | Envelope | str]) -> Envelope:
        envelopes = [Envelope.from_json(i) for i in items if isinstance(i, str)]
        envelopes += [i for i in items if isinstance(i, Envelope)]
        curves = [i for i in items if isinstance(i, RunCurve)]
        if curves:
            envelopes.append(Envelope.of_curves(curves))
        merged = envelopes[0]
        for other in envelopes[1:]:
            merged = merged.merge(other)
        return merged


# --- the rule chain of one query ------------------------------------------------------------


class _Rule:
    """One candidate answer for an (op, ranks, nodes): an envelope × scale, and why.

    The envelope is read from its set on first use, so building a chain reads none.
    """

    __slots__ = (
        "_envelope",
        "derivation",
        "derived_op",
        "derived_placement",
        "lower_bound",
        "nominal",
        "placement",
        "pool",
        "ref_op",
        "scale",
    )

    def __init__(
        self,
        pool: CurveSet,
        ref_op: Collective,
        placement: Placement,
        scale: float,
        derivation: str | None,
        derived_placement: bool,
        derived_op: Collective | None,
        lower_bound: bool,
    ) -> None:
        self.pool, self.ref_op, self.placement = pool, ref_op, placement
        self.scale = scale
        self.derivation = derivation  # None: runs of the queried op at the queried placement
        self.nominal = pool.nominal
        self.derived_placement = derived_placement
        self.derived_op = derived_op
        self.lower_bound = lower_bound
        self._envelope: Envelope | None = None

    @property
    def envelope(self) -> Envelope:
        envelope = self._envelope
        if envelope is None:
            envelope = self.pool.envelope(self.ref_op, self.placement)
            self._envelope = envelope
        return envelope


def _share_scale(ref_op: Collective, r_ref: float, op: Collective, r_q: float) -> float:
    """busbw(query) / busbw(ref) across nodes, through the per-GPU share (module docstring)."""
    per_gpu = 1.0 / r_ref if ref_op in RING_OPS else 1.0
    if op in RING_OPS:
        return per_gpu * min(r_q, r_ref)
    return per_gpu


def _rules_from(
    op: Collective, ref_op: Collective, pool: CurveSet, ranks: int, nodes: int
) -> list[_Rule]:
    """Rules answering (op, ranks, nodes) from ``ref_op`` runs of ``pool``, best first."""
    stand_in = None if op is ref_op else ref_op
    prefix = "" if stand_in is None else f"{ref_op.value} busbw stands in for {op.value}; "
    rules: list[_Rule] = []
    placements = pool.placements(ref_op)
    if (ranks, nodes) in placements:
        how = None if stand_in is None else prefix.removesuffix("; ")
        rules.append(_Rule(pool, ref_op, (ranks, nodes), 1.0, how, False, stand_in, False))
    others = [p for p in placements if p != (ranks, nodes)]
    r_q = ranks / nodes
    if nodes == 1:
        intra = sorted(
            (p for p in others if p[1] == 1),
            key=lambda p: (abs(math.log(p[0] / ranks)), -p[0]),
        )
        for r, _ in intra:
            how = (
                f"{prefix}single-node busbw kept from {r} to {ranks} ranks "
                "(bus bandwidth does not depend on the rank count)"
            )
            rules.append(_Rule(pool, ref_op, (r, 1), 1.0, how, True, stand_in, False))
        inter = sorted((p for p in others if p[1] > 1), key=lambda p: (-p[0] / p[1], p[1]))
        for r, k in inter:
            rpn = r / k
            scale = _share_scale(ref_op, rpn, op, r_q)
            how = (
                f"{prefix}no single-node run: the inter-node figure with {rpn:g} ranks per "
                f"node × {scale:.6g} is a lower bound within a node"
            )
            rules.append(_Rule(pool, ref_op, (r, k), scale, how, True, stand_in, True))
        return rules

    def preference(p: Placement) -> tuple[bool, float, float, int, int]:
        rpn = p[0] / p[1]
        return (rpn < r_q, abs(math.log(rpn / r_q)), abs(math.log(p[1] / nodes)), -p[1], -p[0])

    for r, k in sorted((p for p in others if p[1] > 1), key=preference):
        rpn = r / k
        scale = _share_scale(ref_op, rpn, op, r_q)
        how = (
            f"{prefix}measured with {r} ranks on {k} nodes ({rpn:g} per node), "
            f"used for {ranks} ranks on {nodes} nodes ({r_q:g} per node) through the per-GPU "
            f"share of inter-node bandwidth: × {scale:.6g}"
        )
        rules.append(_Rule(pool, ref_op, (r, k), scale, how, True, stand_in, False))
    return rules


# --- the provider ---------------------------------------------------------------------------


class TuningRow(NamedTuple):
    """One row of a tuning table: at this size, this backend is fastest."""

    size_bytes: int
    best_backend: str
    busbw_gbps: float


@dataclass(frozen=True, slots=True)
class CurveData:
    """One curve for plotting: sizes and busbw as stored, with the fit and provenance.

    ``beta_gbps`` is the fit's β in algbw (the stored figure, S / T); ``beta_busbw_gbps`` is the
    same β as bus bandwidth, the unit nccl-tests users compare with.
    """

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
    beta_busbw_gbps: float | None = None

    @property
    def beta_algbw_gbps(self) -> float | None:
        """β in algorithm bandwidth (the same figure as ``beta_gbps``)."""
        return self.beta_gbps


def curve_data(curves: Iterable[RunCurve]) -> list[CurveData]:
    """Curves as plain data for plotting."""
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
            beta_busbw_gbps=c.fit.beta_busbw_gbps(c.op, c.ranks) if c.fit else None,
        )
        for c in curves
    ]


def tuning_table(
    curves: Iterable[RunCurve], *, name: str, op: Collective, ranks: int, nodes: int | None = None
) -> list[TuningRow]:
    """Per measured size, the backend with the highest busbw among runs covering it."""
    op = Collective(op)
    chosen = [c for c in curves if c.op is op and c.ranks == ranks]
    if nodes is not None:
        chosen = [c for c in chosen if c.nodes == nodes]
    if not chosen:
        where = f"{ranks} ranks" + (f" on {nodes} node(s)" if nodes is not None else "")
        raise NotFoundError(
            f"profile {name!r} has no {op.value} run at {where}; upload "
            f"{BENCHMARK_BINARY.get(op, op.value)} output for each backend to compare"
        )
    node_counts = sorted({c.nodes for c in chosen})
    if len(node_counts) > 1:
        raise ValidationError(
            "nodes", nodes, f"runs at {ranks} ranks exist on {node_counts} nodes; say which"
        )
    sizes = np.unique(np.concatenate([c.sizes_bytes for c in chosen]))
    log_sizes = np.log(sizes)
    best = np.full(sizes.shape, -np.inf)
    best_backend = np.full(sizes.shape, "", dtype=object)
    for curve in sorted(chosen, key=lambda c: c.backend):
        inside = (sizes >= curve.sizes_bytes[0]) & (sizes <= curve.sizes_bytes[-1])
        values = np.where(inside, np.interp(log_sizes, curve.log_sizes, curve.busbw_gbps), -np.inf)
        better = values > best
        best = np.where(better, values, best)
        best_backend = np.where(better, curve.backend, best_backend)
    return [
        TuningRow(int(s), str(b), float(v))
        for s, b, v in zip(sizes, best_backend, best, strict=True)
    ]


class ProfileBandwidth:
    """A ``BandwidthProvider`` over a profile's runs, with nominal curves as a fallback.

    ``curves`` are runs (or a ready :class:`CurveSet`); ``nominal_curves`` the curves of the
    profile's GPU family (``profiles.nominal``), used only where no run answers, and named
    ``nominal_name`` in answers (``nominal_fallback``: they are not the profile's own, so plots
    leave them out). ``runs`` keeps per-run curves for plots and tuning tables when the
    answering set was built from stored envelopes.
    """

    def __init__(
        self,
        name: str,
        curves: Iterable[RunCurve] | CurveSet = (),
        nominal_curves: Iterable[RunCurve] | CurveSet = (),
        *,
        nominal_name: str | None = None,
        runs: Iterable[RunCurve] | None = None,
        missing_hint: str | None = None,
        nominal_fallback: bool = False,
    ) -> None:
        self.name = name
        if isinstance(curves, CurveSet):
            self._measured = curves
            self._runs: tuple[RunCurve, ...] = tuple(runs or ())
        else:
            listed = tuple(curves)
            self._measured = CurveSet(listed)
            self._runs = tuple(runs) if runs is not None else listed
        if isinstance(nominal_curves, CurveSet):
            self._nominal = nominal_curves
            self._nominal_runs: tuple[RunCurve, ...] = tuple(nominal_curves.curves())
        else:
            self._nominal_runs = tuple(nominal_curves)
            self._nominal = CurveSet(self._nominal_runs, nominal=True)
        if nominal_fallback:  # the GPU family's curves answer gaps but are not this profile's
            self._nominal_runs = ()
        self.nominal_name = nominal_name
        self._missing_hint = missing_hint
        self._chains: dict[tuple[Collective, int, int], tuple[_Rule, ...]] = {}
        self._memo: dict[tuple[Collective, float, float, float], float] = {}
        self._array_memo: dict[tuple[Collective, float, float, float], float] = {}
        self._answers: dict[tuple[Collective, int, int, float], BandwidthAnswer] = {}

    # -- resolution -------------------------------------------------------------------------

    def _chain(self, op: Collective, ranks: int, nodes: int) -> tuple[_Rule, ...]:
        key = (op, ranks, nodes)
        chain = self._chains.get(key)
        if chain is not None:
            return chain
        rules: list[_Rule] = []
        for pool in (self._measured, self._nominal):
            for ref_op in (op, *RELATED.get(op, ())):
                rules.extend(_rules_from(op, ref_op, pool, ranks, nodes))
        if not rules:
            raise NotFoundError(self._missing_message(op, ranks, nodes))
        chain = tuple(rules)
        if len(self._chains) >= _CHAIN_CACHE:
            self._chains.clear()
        self._chains[key] = chain
        return chain

    def _missing_message(self, op: Collective, ranks: int, nodes: int) -> str:
        binary = BENCHMARK_BINARY.get(op, f"{op.value}_perf")
        message = (
            f"profile {self.name!r} has no benchmark run usable for {op.value} over {ranks} "
            f"ranks on {nodes} node(s); upload nccl-tests {binary} output measured with "
            f"{ranks} ranks on {nodes} node(s)"
        )
        if nodes > 1 and any(
            k == 1 for ref in (op, *RELATED.get(op, ())) for _, k in self._measured.placements(ref)
        ):
            message += " (only single-node runs are stored; they say nothing of inter-node links)"
        if self._missing_hint:
            message += f" ({self._missing_hint})"
        return message

    def _advice(self, op: Collective, ranks: int, nodes: int, size_bytes: float) -> str:
        binary = BENCHMARK_BINARY.get(op, f"{op.value}_perf")
        return (
            f"upload nccl-tests {binary} output measured with {ranks} ranks on {nodes} node(s) "
            f"over sizes around {size_bytes:.0f} B"
        )

    # -- BandwidthProvider ------------------------------------------------------------------

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num:
        """busbw (GB/s) for scalars or equal-shaped arrays; arrays come back in that shape."""
        if (
            isinstance(ranks, _SCALAR)
            and isinstance(nodes, _SCALAR)
            and isinstance(size_bytes, _SCALAR)
        ):
            # Collective is a StrEnum: "all_reduce" and Collective.ALL_REDUCE hash alike.
            memo = self._memo.get((op, ranks, nodes, size_bytes))
            if memo is not None:
                return memo
            return self._scalar(_OPS.get(op) or Collective(op), ranks, nodes, size_bytes)
        op = Collective(op)
        if np.ndim(ranks) == 0 and np.ndim(nodes) == 0 and np.ndim(size_bytes) == 0:
            return self._scalar(op, float(ranks), float(nodes), float(size_bytes))
        r, k, s = np.broadcast_arrays(
            np.asarray(ranks, dtype=np.float64),
            np.asarray(nodes, dtype=np.float64),
            np.asarray(size_bytes, dtype=np.float64),
        )
        out: FloatArray = self._evaluate(op, r.ravel(), k.ravel(), s.ravel()).reshape(r.shape)
        return out

    def _scalar(self, op: Collective, ranks: float, nodes: float, size_bytes: float) -> float:
        key = (op, ranks, nodes, size_bytes)
        memo = self._memo.get(key)
        if memo is not None:
            return memo
        ranks_i, nodes_i, size = _validate_scalar(ranks, nodes, size_bytes)
        chain = self._chain(op, ranks_i, nodes_i)
        log_size = _log(size)
        value = None
        for rule in chain:
            found = rule.envelope.value_at(size, log_size)
            if found is not None:
                value = found * rule.scale
                break
        if value is None:
            hit = chain[0].envelope.locate(size, log_size, True)
            assert hit is not None
            value = hit.value * chain[0].scale
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = value
        return value

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer:
        """One answer with its method, source and quality; equal to ``busbw_gbps``."""
        key = (op, ranks, nodes, size_bytes)
        answer = self._answers.get(key)
        if answer is not None:
            return answer
        op = _OPS.get(op) or Collective(op)
        ranks_i, nodes_i, size = _validate_scalar(ranks, nodes, size_bytes)
        chain = self._chain(op, ranks_i, nodes_i)
        log_size = _log(size)
        found: tuple[_Rule, _Hit] | None = None
        for rule in chain:
            hit = rule.envelope.locate(size, log_size, False)
            if hit is not None:
                found = (rule, hit)
                break
        if found is None:
            hit = chain[0].envelope.locate(size, log_size, True)
            assert hit is not None
            found = (chain[0], hit)
        rule, hit = found
        answer = self._answer(op, ranks_i, nodes_i, size, rule, hit)
        if len(self._answers) >= _MEMO_SIZE:
            self._answers.clear()
        self._answers[key] = answer
        return answer

    def _answer(
        self, op: Collective, ranks: int, nodes: int, size: float, rule: _Rule, hit: _Hit
    ) -> BandwidthAnswer:
        word, inner = rule.envelope.describe(hit)
        if rule.nominal:
            method = "nominal"
            family = f" ({self.nominal_name})" if self.nominal_name else ""
            source = f"nominal curves{family}, no measured run answers here: {inner}"
            if rule.derivation:
                source += f"; {rule.derivation}"
        elif rule.derivation is not None:
            method = "derived"
            source = f"derived from {inner}; {rule.derivation}"
        else:
            method, source = word, inner
        weak = (
            rule.nominal
            or hit.distance_octaves > WEAK_DISTANCE_OCTAVES
            or not hit.within_bound
            or rule.lower_bound
            or rule.envelope.source_of(hit).flagged
        )
        return BandwidthAnswer(
            busbw_gbps=hit.value * rule.scale,
            method=method,
            source=source,
            distance_octaves=hit.distance_octaves,
            derived_placement=rule.derived_placement,
            derived_op=rule.derived_op.value if rule.derived_op is not None else None,
            weak=weak,
            advice=self._advice(op, ranks, nodes, size) if weak else None,
        )

    def _evaluate(
        self, op: Collective, ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray
    ) -> FloatArray:
        n = ranks.size
        if n >= _GROUP_MIN:
            # in chunks, so an array of distinct queries is given up after its first chunk
            parts = []
            for start in range(0, n, _GROUP_CHUNK):
                part = slice(start, start + _GROUP_CHUNK)
                grouped = self._evaluate_grouped(op, ranks[part], nodes[part], size_bytes[part], 0)
                if grouped is None:  # the whole array per placement: errors as it reports them
                    return self._evaluate_placements(op, ranks, nodes, size_bytes)
                parts.append(grouped)
            return parts[0] if len(parts) == 1 else np.concatenate(parts)
        return self._evaluate_placements(op, ranks, nodes, size_bytes)

    def _evaluate_grouped(
        self,
        op: Collective,
        ranks: FloatArray,
        nodes: FloatArray,
        size_bytes: FloatArray,
        round_index: int,
    ) -> FloatArray | None:
        """Each distinct query answered once and copied to its repeats (elementwise, so the
        same bits as :meth:`_evaluate_placements`); None where that pass must answer instead:
        too many distinct queries, an invalid or unanswerable one (its error is that pass's),
        or collisions left after the last round."""
        slots, first = _group(ranks, nodes, size_bytes, _GROUP_MULTIPLIERS[round_index])
        present = np.flatnonzero(first >= 0)
        # mostly distinct, or slots so full that most queries collide: not worth grouping
        if present.size * _GROUP_SHARE > min(ranks.size, first.size):
            return None
        same = _same_as_first(ranks, nodes, size_bytes, first[slots])
        reps = first[present]
        values = self._distinct_values(op, ranks[reps], nodes[reps], size_bytes[reps])
        if values is None:
            return None
        table = np.empty(first.size)
        table[present] = values
        out: FloatArray = table[slots]
        if not same.all():
            if round_index + 1 == len(_GROUP_MULTIPLIERS):
                return None
            rest = np.flatnonzero(~same)
            again = self._evaluate_grouped(
                op, ranks[rest], nodes[rest], size_bytes[rest], round_index + 1
            )
            if again is None:
                return None
            out[rest] = again
        return out

    def _distinct_values(
        self, op: Collective, ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray
    ) -> FloatArray | None:
        """Answers to distinct queries, from the memo of earlier array answers or else from
        :meth:`_evaluate_placements`; None if any query is invalid or has no answer."""
        memo = self._array_memo
        keys = [
            (op, r, k, s)
            for r, k, s in zip(ranks.tolist(), nodes.tolist(), size_bytes.tolist(), strict=True)
        ]
        found = [memo.get(key) for key in keys]
        missing = [i for i, value in enumerate(found) if value is None]
        if missing:  # (the memo holds valid queries only)
            idx = np.array(missing)
            if not _valid(ranks[idx], nodes[idx], size_bytes[idx]):
                return None
            try:
                fresh = self._evaluate_placements(op, ranks[idx], nodes[idx], size_bytes[idx])
            except NotFoundError:
                return None
            if len(memo) + len(missing) > _ARRAY_MEMO_SIZE:
                memo.clear()
            for i, value in zip(missing, fresh.tolist(), strict=True):
                found[i] = memo[keys[i]] = value
        return np.array(found, dtype=np.float64)

    def _evaluate_placements(
        self, op: Collective, ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray
    ) -> FloatArray:
        with np.errstate(invalid="ignore"):  # NaN and inf are refused by _validate
            ranks_i = ranks.astype(np.int64)  # exact for whole numbers; others fail _validate
            nodes_i = nodes.astype(np.int64)
        _validate(ranks, nodes, size_bytes, ranks_i, nodes_i)
        if ranks_i.size == 0:
            return np.empty(0)
        sizes = np.maximum(size_bytes, 1.0)
        log_sizes = np.log(sizes)
        r0, k0 = int(ranks_i[0]), int(nodes_i[0])
        if (ranks_i == r0).all() and (nodes_i == k0).all():
            return self._evaluate_at(op, r0, k0, sizes, log_sizes)
        placements, inverse = _factorize(ranks_i, nodes_i)
        # a stable sort of small integers is a radix sort: linear in the number of queries
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=len(placements)))[:-1]
        out = np.empty(sizes.shape, dtype=np.float64)
        for (r, k), idx in zip(placements, np.split(order, bounds), strict=True):
            out[idx] = self._evaluate_at(op, r, k, sizes[idx], log_sizes[idx])
        return out

    def _evaluate_at(
        self, op: Collective, ranks: int, nodes: int, sizes: FloatArray, log_sizes: FloatArray
    ) -> FloatArray:
        chain = self._chain(op, ranks, nodes)
        first = chain[0]
        covered = first.envelope.covers(log_sizes)
        if covered is None or covered.all():
            out = first.envelope.evaluate(sizes, log_sizes)
            return out if first.scale == 1.0 else out * first.scale
        out = np.full(sizes.shape, np.nan)
        todo = np.arange(sizes.size)
        for rule in chain:
            mask = covered if rule is first else rule.envelope.covers(log_sizes[todo])
            idx = todo if mask is None else todo[mask]
            if idx.size:
                out[idx] = rule.envelope.evaluate(sizes[idx], log_sizes[idx]) * rule.scale
                todo = todo[:0] if mask is None else todo[~mask]
                if todo.size == 0:
                    return out
        out[todo] = first.envelope.evaluate(sizes[todo], log_sizes[todo]) * first.scale
        return out

    # -- tables and plots -------------------------------------------------------------------

    def alpha_beta(self) -> list[tuple[str, AlphaBetaFit | None]]:
        """Each stored run's label and latency-bandwidth fit."""
        return [(c.label, c.fit) for c in self._runs]

    def tuning_table(
        self, *, op: Collective, ranks: int, nodes: int | None = None
    ) -> list[TuningRow]:
        """Per measured size, the backend with the highest busbw among runs covering it."""
        return tuning_table(self._runs, name=self.name, op=op, ranks=ranks, nodes=nodes)

    def curves(self, *, include_nominal: bool = True) -> list[CurveData]:
        """Every curve (stored runs, then nominal ones) as plain data for plotting."""
        return curve_data(self._runs + (self._nominal_runs if include_nominal else ()))

    def only_backend(self, backend: str) -> ProfileBandwidth:
        """The same provider restricted to one backend's runs (nominal curves kept)."""
        kept = [c for c in self._runs if c.backend == backend]
        return ProfileBandwidth(
            self.name, kept, self._nominal_runs or self._nominal, nominal_name=self.nominal_name
        )


_FACTOR_LIMIT = 1 << 16  # ranks and nodes below it are factorized by counting, not sorting


def _factorize(ranks: IntArray, nodes: IntArray) -> tuple[list[Placement], npt.NDArray[Any]]:
    """The distinct (ranks, nodes) pairs and, per query, the index of its pair.

    Counting (``bincount``) where the values are small, as a sweep's are; ``np.unique`` (a
    sort) otherwise. The index array is as narrow as the pair count allows, so sorting it by
    ``argsort(kind="stable")`` is numpy's radix sort.
    """
    if int(ranks.max()) < _FACTOR_LIMIT and int(nodes.max()) < _FACTOR_LIMIT:
        rank_values = np.flatnonzero(np.bincount(ranks))
        node_values = np.flatnonzero(np.bincount(nodes))
        rank_index = np.zeros(int(rank_values[-1]) + 1, dtype=np.int64)
        rank_index[rank_values] = np.arange(rank_values.size)
        node_index = np.zeros(int(node_values[-1]) + 1, dtype=np.int64)
        node_index[node_values] = np.arange(node_values.size)
        combined = rank_index[ranks] * node_values.size + node_index[nodes]
        present = np.flatnonzero(np.bincount(combined))
        pair_index = np.zeros(rank_values.size * node_values.size, dtype=np.int64)
        pair_index[present] = np.arange(present.size)
        inverse = pair_index[combined]
        pairs = [
            (int(rank_values[c // node_values.size]), int(node_values[c % node_values.size]))
            for c in present.tolist()
        ]
    else:
        keys = ranks * np.int64(1 << 32) + nodes
        unique, inverse = np.unique(keys, return_inverse=True)
        pairs = [(key >> 32, key & 0xFFFFFFFF) for key in unique.tolist()]
    narrow = np.uint8 if len(pairs) <= 0xFF else np.uint16 if len(pairs) <= 0xFFFF else np.int64
    return pairs, inverse.astype(narrow)


def _group(
    ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray, multiplier: int
) -> tuple[IntArray, IntArray]:
    """Identical queries found by hashing, without a sort: each query's slot (a hash of its
    three floats' bits) and per slot the index of one query hashed there (-1: none). Queries
    unlike their slot's one (:func:`_same_as_first`) collided; a later round regroups them."""
    # the floats' high bits (sign, exponent, leading mantissa) side by side, then
    # multiply-shift: keys that differ only in their top _GROUP_BITS bits never collide
    key = ranks.view(np.uint64) >> np.uint64(21)
    key ^= size_bytes.view(np.uint64)
    key ^= nodes.view(np.uint64) >> np.uint64(42)
    key *= np.uint64(multiplier)
    key >>= np.uint64(64 - _GROUP_BITS)
    slots: IntArray = key.view(np.int64)
    first: IntArray = np.full(1 << _GROUP_BITS, -1, dtype=np.int64)
    index = _INDEX[: slots.size] if slots.size <= _INDEX.size else np.arange(slots.size)
    first[slots] = index  # one of the queries of each slot wins it
    return slots, first


def _same_as_first(
    ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray, first: IntArray
) -> BoolArray:
    """Per query, whether it equals query ``first`` (its slot's) in ranks, nodes and size."""
    same: BoolArray = ranks[first] == ranks
    same &= nodes[first] == nodes
    same &= size_bytes[first] == size_bytes
    return same


def _valid(ranks: FloatArray, nodes: FloatArray, size_bytes: FloatArray) -> bool:
    """Whether :func:`_validate` accepts these queries (the grouped path falls back to the whole
    array's pass on any refusal, which then reports it as before)."""
    with np.errstate(invalid="ignore"):  # NaN and inf are refused by _validate
        ranks_i = ranks.astype(np.int64)
        nodes_i = nodes.astype(np.int64)
    try:
        _validate(ranks, nodes, size_bytes, ranks_i, nodes_i)
    except ValidationError:
        return False
    return True


def _validate_scalar(ranks: float, nodes: float, size_bytes: float) -> tuple[int, int, float]:
    """Integer ranks and nodes and a size ≥ 1 B, or the ValidationError ``_validate`` gives."""
    try:
        r, k, s = float(ranks), float(nodes), float(size_bytes)
    except (TypeError, ValueError):
        r = k = s = math.nan
    # 1 <= k <= r < inf, both whole, 0 <= s < inf (comparisons are False for NaN)
    if 1.0 <= k <= r < math.inf and r.is_integer() and k.is_integer() and 0.0 <= s < math.inf:
        return int(r), int(k), s if s > 1.0 else 1.0
    _validate(np.array([r]), np.array([k]), np.array([s]), np.array([_int(r)]), np.array([_int(k)]))
    raise AssertionError("unreachable: _validate raises")  # pragma: no cover


def _int(value: float) -> int:
    return round(value) if math.isfinite(value) else 0


def _validate(
    ranks: FloatArray,
    nodes: FloatArray,
    size_bytes: FloatArray,
    ranks_i: IntArray,
    nodes_i: IntArray,
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


__all__ = [
    "BENCHMARK_BINARY",
    "EXTRAPOLATION_OCTAVES",
    "HOLD_OCTAVES",
    "RELATED",
    "RING_OPS",
    "AlphaBetaFit",
    "CurveData",
    "CurveSet",
    "Envelope",
    "ProfileBandwidth",
    "RunCurve",
    "Source",
    "TuningRow",
    "curve_data",
    "fit_alpha_beta",
    "fit_reach",
    "tuning_table",
]
