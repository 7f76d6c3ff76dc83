"""The GPU-to-GPU traffic matrix of one training iteration (docs/design.md §5).

A :class:`Placement` maps the logical coordinates (tp, cp, dp, pp) of a layout onto global
ranks; a list of :class:`CollectiveLoad` says which collectives run per iteration;
:func:`traffic_matrix` turns both into a :class:`SparseTraffic` of (src, dst, bytes, kind)
entries, bytes per iteration. Everything is vectorised over ranks and groups: the only Python
loops run over loads and kinds, never over GPUs or groups.

Groups by kind of traffic (Megatron-LM's ``initialize_model_parallel``):

- tp: ranks that differ only in the tp coordinate; cp: only in the cp coordinate.
- dp: ranks that differ only in the dp coordinate, or in dp and cp when cp > 1 (Megatron
  reduces dense gradients over the combined data-and-context group).
- pp: stage k -> k+1 (``forward``, activations) and k+1 -> k (``backward``, gradients) for the
  same (tp, cp, dp) coordinate, no wrap-around; ``both`` means both directions, each carrying
  ``size_bytes · calls``.
- embedding_sync: a 2-rank all-reduce between the first and the last stage (only when p > 1).
- expert: the expert-parallel group (Megatron-Core's expert grid tp-ep-dp-pp), blocks of
  ``expert_parallel`` consecutive ranks of a stage's cp·dp ranks with one tp coordinate
  (consecutive dp coordinates when cp = 1); with the experts folded over TP
  (``expert_tensor_parallel`` 1 under tensor > 1, Megatron-Core's parallel folding) blocks of
  ``expert_parallel`` consecutive ranks of a stage's tp·cp·dp ranks.

Volumes (per rank, per call): ring sends ``bus_factor(op, n) · S`` to the ring successor;
direct spreads the same volume evenly over the other n - 1 members; alltoall always spreads
``(n - 1)/n · S`` evenly; sendrecv sends S to the neighbour. Groups of one rank carry nothing.
Ring order within a group is ascending rank (the pipeline group keeps stage order).

A load's ``scope`` narrows which members of a group exchange its bytes (alltoall only): the
whole group; ``across_nodes``, the members at the same position among their node's members, one
per node the group spans (a flex MoE dispatch's RDMA leg: DeepEP sends to the peer of the same
position); ``within_node``, the members on one node (its NVLink leg). Each such subgroup of c
members is an alltoall of its own: every member sends S/c to each other member.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from estimator.bandwidth import Collective, TrafficKind, bus_factor
from estimator.errors import LayoutError, LimitError, ValidationError
from estimator.specs import LayoutSpec, parse_rank_order

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
KindArray = npt.NDArray[np.int8]

#: code -> kind; a SparseTraffic's ``kind`` array holds indices into this tuple.
KINDS: tuple[TrafficKind, ...] = tuple(TrafficKind)
_KIND_CODE: dict[TrafficKind, int] = {k: i for i, k in enumerate(KINDS)}

#: Collectives the matrix knows how to lay out.
SUPPORTED_OPS: frozenset[Collective] = frozenset(
    {
        Collective.ALL_REDUCE,
        Collective.ALL_GATHER,
        Collective.REDUCE_SCATTER,
        Collective.ALLTOALL,
        Collective.SENDRECV,
    }
)
DIRECTIONS = ("both", "forward", "backward")
SCOPES = ("group", "across_nodes", "within_node")
# Kinds whose traffic may be point-to-point: pipeline sends, and the ring passes of context
# parallelism (PyTorch's ring attention passes dK/dV to the next rank: Framework.cp_torch_ring).
_SENDRECV_KINDS = frozenset({TrafficKind.PP, TrafficKind.CP})

# Names accepted by Placement.group_ranks / group_size / group_nodes_spanned.
_GROUP_ALIASES: dict[str, str] = {
    "tp": "tp",
    "cp": "cp",
    "dp": "dp",
    "pp": "pp",
    "ep": "expert",
    "expert": "expert",
    "embedding_sync": "embedding_sync",
    "emb": "embedding_sync",
}


class Algorithm(StrEnum):
    """How a collective's bytes are laid onto pairs: ring successor, or all pairs."""

    RING = "ring"
    DIRECT = "direct"


def _whole_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LayoutError(f"placement.{name}", value, "must be a whole number > 0")


@dataclass(frozen=True, slots=True)
class Placement:
    """Logical layout plus the mapping to global ranks and nodes (node = rank // g).

    ``rank_order`` lists the dimensions fastest first (``tp-dp-pp`` is Megatron's default,
    cp right after tp when not named): rank = Σ coord[dim] · stride[dim], with the stride of
    a dimension the product of the sizes of the dimensions before it.
    """

    pipeline: int
    tensor: int
    data: int
    context_parallel: int = 1
    expert_parallel: int = 1
    gpus_per_node: int = 8
    rank_order: str = "tp-dp-pp"
    expert_tensor_parallel: int | None = None  # 1: experts folded over TP (LayoutSpec's)

    def __post_init__(self) -> None:
        for name in (
            "pipeline",
            "tensor",
            "data",
            "context_parallel",
            "expert_parallel",
            "gpus_per_node",
        ):
            _whole_positive(name, getattr(self, name))
        if self.experts_folded:
            ranks = self.tensor * self.data * self.context_parallel
            if ranks % self.expert_parallel:
                raise LayoutError(
                    "placement.expert_parallel",
                    self.expert_parallel,
                    f"must divide tensor·data·cp = {ranks} (folded expert groups are formed "
                    "inside a stage)",
                )
        elif (self.data * self.context_parallel) % self.expert_parallel:
            raise LayoutError(
                "placement.expert_parallel",
                self.expert_parallel,
                f"must divide data·cp = {self.data * self.context_parallel} (expert groups are "
                "formed inside the DP·CP group)",
            )
        parse_rank_order(self.rank_order)

    @classmethod
    def from_layout(cls, layout: LayoutSpec, gpus_per_node: int) -> Placement:
        """The placement of a validated :class:`LayoutSpec` on nodes of ``gpus_per_node``."""
        return cls(
            pipeline=layout.pipeline,
            tensor=layout.tensor,
            data=layout.data,
            context_parallel=layout.context_parallel,
            expert_parallel=layout.expert_parallel,
            gpus_per_node=gpus_per_node,
            rank_order=layout.rank_order,
            expert_tensor_parallel=layout.expert_tensor_parallel,
        )

    @property
    def experts_folded(self) -> bool:
        """Whether expert groups span the TP ranks (expert tensor parallelism 1, tensor > 1)."""
        return self.expert_tensor_parallel == 1 and self.tensor > 1

    @property
    def gpus(self) -> int:
        return self.pipeline * self.tensor * self.data * self.context_parallel

    @property
    def nodes(self) -> int:
        """Nodes used (the last one may be partly filled)."""
        return -(-self.gpus // self.gpus_per_node)

    @property
    def order(self) -> tuple[str, ...]:
        """Dimensions fastest first, e.g. ("tp", "cp", "dp", "pp")."""
        return parse_rank_order(self.rank_order)

    @property
    def sizes(self) -> dict[str, int]:
        return {
            "tp": self.tensor,
            "cp": self.context_parallel,
            "dp": self.data,
            "pp": self.pipeline,
        }

    @property
    def strides(self) -> dict[str, int]:
        """Rank stride of each dimension under ``rank_order``."""
        sizes = self.sizes
        strides: dict[str, int] = {}
        stride = 1
        for dim in self.order:
            strides[dim] = stride
            stride *= sizes[dim]
        return strides

    def ranks(self, coords: Mapping[str, npt.ArrayLike]) -> IntArray:
        """Global ranks of coordinates; arrays broadcast, missing dimensions count as 0.

        ``placement.ranks({"pp": 1})`` is the rank of (tp, cp, dp) = 0 on stage 1;
        ``placement.ranks({"tp": np.arange(t)})`` is the TP group of rank 0.
        Raises ValidationError for an unknown dimension or a coordinate out of range.
        """
        sizes = self.sizes
        strides = self.strides
        total: IntArray = np.zeros((), dtype=np.int64)
        for dim, value in coords.items():
            if dim not in sizes:
                raise ValidationError("coords", dim, "dimension must be one of tp, cp, dp, pp")
            arr = np.asarray(value, dtype=np.int64)
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= sizes[dim]):
                raise ValidationError(f"coords.{dim}", value, f"must lie in [0, {sizes[dim] - 1}]")
            total = total + arr * strides[dim]
        return total

    def coords(self, ranks: npt.ArrayLike) -> dict[str, IntArray]:
        """Inverse of :meth:`ranks`: the (tp, cp, dp, pp) coordinates of global ranks."""
        arr = np.asarray(ranks, dtype=np.int64)
        sizes = self.sizes
        return {dim: (arr // s) % sizes[dim] for dim, s in self.strides.items()}

    def rank_grid(self) -> IntArray:
        """Ranks indexed by coordinate: shape (t, cp, d, p), ``grid[tp, cp, dp, pp] = rank``."""
        st = self.strides
        tp = np.arange(self.tensor, dtype=np.int64)[:, None, None, None] * st["tp"]
        cp = np.arange(self.context_parallel, dtype=np.int64)[None, :, None, None] * st["cp"]
        dp = np.arange(self.data, dtype=np.int64)[None, None, :, None] * st["dp"]
        pp = np.arange(self.pipeline, dtype=np.int64)[None, None, None, :] * st["pp"]
        grid: IntArray = tp + cp + dp + pp
        return grid

    def group_ranks(self, dim: str) -> IntArray:
        """Every group of a kind of traffic, shape (groups, members); row 0 holds rank 0.

        ``dim``: tp, cp, dp (dp·cp when cp > 1), pp (the whole pipeline, in stage order),
        expert/ep, embedding_sync (first and last stage; one member when p = 1).
        Members are in ascending rank order except pp, which keeps stage order.
        """
        name = _group_name(dim)
        grid = self.rank_grid()  # axes: tp, cp, dp, pp
        t, c, d, p = grid.shape
        if name == "tp":
            return np.ascontiguousarray(np.moveaxis(grid, 0, -1).reshape(-1, t))
        if name == "cp":
            return np.ascontiguousarray(np.moveaxis(grid, 1, -1).reshape(-1, c))
        if name == "pp":
            return np.ascontiguousarray(grid.reshape(-1, p))
        if name == "dp":
            groups = np.moveaxis(grid, (1, 2), (-2, -1)).reshape(-1, c * d)
            return np.sort(groups, axis=1)
        if name == "expert" and self.experts_folded:
            ep = self.expert_parallel
            by_stage = np.sort(np.moveaxis(grid, -1, 0).reshape(p, -1), axis=1)
            return np.ascontiguousarray(by_stage.reshape(-1, ep))
        if name == "expert":
            ep = self.expert_parallel
            by_tp_stage = np.sort(np.moveaxis(grid, -1, 1).reshape(t * p, c * d), axis=1)
            return np.ascontiguousarray(by_tp_stage.reshape(-1, ep))
        # embedding_sync
        stages = [0] if p == 1 else [0, p - 1]
        return np.sort(grid[..., stages].reshape(-1, len(stages)), axis=1)

    def group_size(self, dim: str) -> int:
        """Members of one group of ``dim`` (see :meth:`group_ranks`)."""
        name = _group_name(dim)
        sizes = {
            "tp": self.tensor,
            "cp": self.context_parallel,
            "dp": self.data * self.context_parallel,
            "pp": self.pipeline,
            "expert": self.expert_parallel,
            "embedding_sync": 1 if self.pipeline == 1 else 2,
        }
        return sizes[name]

    def group_nodes_spanned(self, dim: str) -> int:
        """Nodes the group of ``dim`` that contains rank 0 spans (see :meth:`group_ranks`)."""
        name = _group_name(dim)
        sizes = self.sizes
        strides = self.strides
        if name in sizes and name != "dp":
            members = np.arange(sizes[name], dtype=np.int64) * strides[name]
        elif name == "dp":
            members = self.ranks(
                {
                    "dp": np.arange(self.data)[:, None],
                    "cp": np.arange(self.context_parallel)[None, :],
                }
            ).ravel()
        elif name == "expert":
            members = self.group_ranks("expert")[0]
        else:  # embedding_sync
            members = np.array([0, (self.pipeline - 1) * strides["pp"]], dtype=np.int64)
        return int(np.unique(members // self.gpus_per_node).size)


def _group_name(dim: str) -> str:
    key = str(dim).strip().lower()
    if key not in _GROUP_ALIASES:
        raise ValidationError(
            "dim", dim, "must be one of tp, cp, dp, pp, expert (ep), embedding_sync"
        )
    return _GROUP_ALIASES[key]


@dataclass(frozen=True, slots=True)
class CollectiveLoad:
    """``calls`` collectives per iteration per GPU of ``size_bytes`` each, for one purpose.

    ``size_bytes`` is S of one call as nccl-tests counts it (all_reduce: the full buffer;
    all_gather: the output buffer). ``direction`` applies to pp sendrecv only.
    """

    kind: TrafficKind
    op: Collective
    size_bytes: float
    calls: float
    direction: str = "both"
    scope: str = "group"  # which members exchange bytes (SCOPES; module docstring)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", TrafficKind(self.kind))
        except ValueError:
            kinds = ", ".join(k.value for k in TrafficKind)
            raise ValidationError("load.kind", self.kind, f"must be one of {kinds}") from None
        try:
            op = Collective(self.op)
        except ValueError:
            op = None
        if op not in SUPPORTED_OPS:
            ops = ", ".join(sorted(o.value for o in SUPPORTED_OPS))
            raise ValidationError("load.op", self.op, f"must be one of {ops}")
        object.__setattr__(self, "op", op)
        for name in ("size_bytes", "calls"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ValidationError(f"load.{name}", value, "must be a finite number >= 0")
        if (self.kind is TrafficKind.PP and self.op is not Collective.SENDRECV) or (
            self.op is Collective.SENDRECV and self.kind not in _SENDRECV_KINDS
        ):
            raise ValidationError(
                "load.op",
                self.op.value,
                "pp traffic is sendrecv, and sendrecv is pp traffic or a cp ring pass",
            )
        if self.direction not in DIRECTIONS:
            raise ValidationError(
                "load.direction", self.direction, "must be one of both, forward, backward"
            )
        if self.direction != "both" and self.kind is not TrafficKind.PP:
            raise ValidationError(
                "load.direction", self.direction, "only pp sendrecv has a direction"
            )
        if self.scope not in SCOPES:
            raise ValidationError("load.scope", self.scope, f"must be one of {', '.join(SCOPES)}")
        if self.scope != "group" and self.op is not Collective.ALLTOALL:
            raise ValidationError(
                "load.scope", self.scope, "only an alltoall runs over part of its group"
            )

    def volume_per_rank(self, group_size: int) -> float:
        """Bytes one member of a group of ``group_size`` sends per iteration for this load."""
        if group_size <= 1:
            return 0.0
        if self.op is Collective.SENDRECV:
            return self.size_bytes * self.calls
        return float(bus_factor(self.op, float(group_size))) * self.size_bytes * self.calls


@dataclass(frozen=True, slots=True, eq=False)
class SparseTraffic:
    """Bytes per iteration from ``src`` to ``dst`` for a kind of traffic; each
    (src, dst, kind) appears once, entries sorted by (kind, src, dst). ``size`` is the number
    of endpoints (GPUs, or nodes after :meth:`by_node`)."""

    size: int
    src: IntArray
    dst: IntArray
    bytes: FloatArray
    kind: KindArray
    kinds: tuple[TrafficKind, ...] = field(default=KINDS)

    def __len__(self) -> int:
        return int(self.src.size)

    def rows(self) -> Iterator[tuple[int, int, float, str]]:
        """(src, dst, bytes, kind name) per entry."""
        names = [k.value for k in self.kinds]
        for s, d, b, k in zip(
            self.src.tolist(),
            self.dst.tolist(),
            self.bytes.tolist(),
            self.kind.tolist(),
            strict=True,
        ):
            yield s, d, b, names[k]

    @property
    def total_bytes(self) -> float:
        return float(self.bytes.sum())

    def kind_totals(self) -> dict[TrafficKind, float]:
        """Total bytes per kind (every kind, zero where absent)."""
        sums = np.bincount(self.kind, weights=self.bytes, minlength=len(self.kinds))
        return {k: float(sums[i]) for i, k in enumerate(self.kinds)}

    def select(self, kind: TrafficKind | str) -> SparseTraffic:
        """Only the entries of one kind."""
        mask = self.kind == self.kinds.index(TrafficKind(kind))
        return SparseTraffic(
            self.size,
            self.src[mask],
            self.dst[mask],
            self.bytes[mask],
            self.kind[mask],
            self.kinds,
        )

    def crossing(self, endpoints_per_node: int) -> SparseTraffic:
        """Only the entries between different nodes (node = endpoint // endpoints_per_node:
        the GPUs per node for a GPU-level matrix, 1 for a node-level one)."""
        _whole_positive("endpoints_per_node", endpoints_per_node)
        mask = self.src // endpoints_per_node != self.dst // endpoints_per_node
        return SparseTraffic(
            self.size,
            self.src[mask],
            self.dst[mask],
            self.bytes[mask],
            self.kind[mask],
            self.kinds,
        )

    def row_sums(self) -> FloatArray:
        """Bytes each endpoint sends per iteration (length ``size``)."""
        sums = np.bincount(self.src, weights=self.bytes, minlength=self.size)
        return sums.astype(np.float64, copy=False)

    def col_sums(self) -> FloatArray:
        """Bytes each endpoint receives per iteration (length ``size``)."""
        sums = np.bincount(self.dst, weights=self.bytes, minlength=self.size)
        return sums.astype(np.float64, copy=False)

    def to_dense(self, max_gpus: int) -> FloatArray:
        """size×size matrix summed over kinds; LimitError when size > ``max_gpus``."""
        if self.size > max_gpus:
            raise LimitError(
                f"a dense traffic matrix of {self.size} endpoints exceeds the cap of "
                f"{max_gpus}; use the sparse form or aggregate by node",
                size=self.size,
                max_gpus=max_gpus,
            )
        flat = np.bincount(
            self.src * self.size + self.dst, weights=self.bytes, minlength=self.size**2
        )
        return flat.astype(np.float64, copy=False).reshape(self.size, self.size)

    def by_node(self, gpus_per_node: int) -> SparseTraffic:
        """Aggregated to node ids (rank // g), kinds kept; intra-node bytes on the diagonal."""
        _whole_positive("gpus_per_node", gpus_per_node)
        nodes = -(-self.size // gpus_per_node)
        return _merged(
            nodes,
            self.src // gpus_per_node,
            self.dst // gpus_per_node,
            self.bytes,
            self.kind,
            self.kinds,
        )


def _merged(
    size: int,
    src: IntArray,
    dst: IntArray,
    nbytes: FloatArray,
    kind: KindArray,
    kinds: tuple[TrafficKind, ...],
) -> SparseTraffic:
    """Sum duplicate (src, dst, kind) entries and sort by (kind, src, dst)."""
    if src.size == 0:
        return SparseTraffic(size, src, dst, nbytes, kind, kinds)
    key = (kind.astype(np.int64) * size + src) * size + dst
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    sums = np.add.reduceat(nbytes[order], starts)
    first = order[starts]
    return SparseTraffic(
        size,
        src[first],
        dst[first],
        sums.astype(np.float64, copy=False),
        kind[first],
        kinds,
    )


def _ring_pairs(groups: IntArray) -> tuple[IntArray, IntArray]:
    return groups.ravel(), np.roll(groups, -1, axis=1).ravel()


def _all_pairs(groups: IntArray) -> tuple[IntArray, IntArray]:
    n = groups.shape[1]
    others = (np.arange(n)[:, None] + np.arange(1, n)[None, :]) % n  # (n, n-1)
    dst = groups[:, others]  # (groups, n, n-1)
    src = np.broadcast_to(groups[:, :, None], dst.shape)
    return src.ravel(), dst.ravel()


@dataclass(frozen=True, slots=True)
class _Patterns:
    """Bytes per pair of each pattern, per kind: loads of one pattern share their pairs."""

    ring: dict[TrafficKind, float]
    spread: dict[TrafficKind, float]
    forward: float
    backward: float
    # (kind, scope) -> S · calls of the loads over part of their group (per-pair bytes S/c)
    scoped: dict[tuple[TrafficKind, str], float]


def _patterns(
    placement: Placement, loads: Sequence[CollectiveLoad], algorithm: Algorithm
) -> _Patterns:
    ring: dict[TrafficKind, float] = {}
    spread: dict[TrafficKind, float] = {}
    scoped: dict[tuple[TrafficKind, str], float] = {}
    forward = 0.0
    backward = 0.0
    for load in loads:
        kind = load.kind
        if load.scope != "group":
            key = (kind, load.scope)
            scoped[key] = scoped.get(key, 0.0) + load.size_bytes * load.calls
            continue
        if kind is TrafficKind.PP:
            volume = load.volume_per_rank(placement.pipeline)
            if load.direction in ("both", "forward"):
                forward += volume
            if load.direction in ("both", "backward"):
                backward += volume
            continue
        n = placement.group_size(kind)
        volume = load.volume_per_rank(n)
        if volume == 0.0:
            continue
        if load.op is Collective.SENDRECV:  # a ring pass: each member to the next, any algorithm
            ring[kind] = ring.get(kind, 0.0) + volume
        elif load.op is Collective.ALLTOALL or algorithm is Algorithm.DIRECT or n == 2:
            spread[kind] = spread.get(kind, 0.0) + volume / (n - 1)
        else:
            ring[kind] = ring.get(kind, 0.0) + volume
    if placement.pipeline == 1:
        forward = backward = 0.0
    return _Patterns(ring, spread, forward, backward, scoped)


def _node_positions(placement: Placement, kind: TrafficKind) -> tuple[IntArray, IntArray, IntArray]:
    """Each group's members in ascending order, their nodes, and their positions among the
    group's members on their node (all shaped (groups, members))."""
    groups = np.sort(placement.group_ranks(kind), axis=1)
    node = groups // placement.gpus_per_node
    index = np.broadcast_to(np.arange(groups.shape[1]), groups.shape)
    change = np.ones(groups.shape, dtype=bool)
    change[:, 1:] = node[:, 1:] != node[:, :-1]
    position = index - np.maximum.accumulate(np.where(change, index, 0), axis=1)
    return groups, node, position


def _scope_runs(placement: Placement, kind: TrafficKind, scope: str) -> tuple[IntArray, IntArray]:
    """The subgroups of a scope (module docstring), run after run: (members, run lengths)."""
    groups, node, position = _node_positions(placement, kind)
    rows, n = groups.shape
    if scope == "within_node":  # ascending members: each node's members are one run already
        members = groups.ravel()
        starts = np.flatnonzero(position.ravel() == 0)
    else:  # across_nodes: group by (row, position among the row's members on its node)
        row = np.broadcast_to(np.arange(rows)[:, None], groups.shape)
        order = np.lexsort((node.ravel(), position.ravel(), row.ravel()))
        members = groups.ravel()[order]
        key = (row.ravel() * n + position.ravel())[order]
        starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    lengths = np.diff(np.append(starts, members.size))
    return members, lengths


def _run_pairs(
    members: IntArray, lengths: IntArray, total: float
) -> tuple[IntArray, IntArray, FloatArray]:
    """Every ordered pair of distinct members within each run, and its bytes (total / c)."""
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)  # per member: its run's start
    sizes = np.repeat(lengths, lengths)
    others = sizes - 1
    src_index = np.repeat(np.arange(members.size), others)
    offset = np.repeat(np.arange(members.size) - starts, others)
    j = np.arange(int(others.sum())) - np.repeat(np.cumsum(others) - others, others)
    partner = np.repeat(starts, others) + np.where(j < offset, j, j + 1)
    per_pair = total / np.repeat(sizes, others).astype(np.float64)
    return members[src_index], members[partner], per_pair


def _ring_pairs_in_scope(placement: Placement, kind: TrafficKind, scope: str) -> int:
    """The ring pairs of a kind (each member to the next) that are pairs of a scope too."""
    ring = placement.group_ranks(kind)
    if ring.shape[1] < 2:
        return 0
    _, node, position = _node_positions(placement, kind)
    where = np.argsort(np.argsort(ring, axis=1), axis=1)  # each ring member's sorted index
    rows = np.arange(ring.shape[0])[:, None]
    nxt = np.roll(where, -1, axis=1)
    same_node = node[rows, where] == node[rows, nxt]
    if scope == "within_node":
        return int(same_node.sum())
    return int((~same_node & (position[rows, where] == position[rows, nxt])).sum())


def _group_count(placement: Placement, kind: TrafficKind) -> int:
    """Groups of ``kind`` (the rows of :meth:`Placement.group_ranks`), in closed form."""
    if kind is TrafficKind.EMBEDDING_SYNC:
        return placement.gpus // placement.pipeline
    return placement.gpus // placement.group_size(kind)


def traffic_entry_count(
    placement: Placement,
    loads: Sequence[CollectiveLoad],
    algorithm: Algorithm = Algorithm.RING,
    level: str = "gpu",
) -> int:
    """Entries :func:`traffic_matrix` (``level="gpu"``) or :func:`node_traffic_matrix`
    (``level="node"``) will build, computed before building anything (docs/design.md
    §5.2).

    GPU level, exact: a ring of n members has n pairs, all pairs n(n-1) (a ring's pairs are
    among them when both patterns meet in one kind); pp has p-1 pairs per pipeline and
    direction. Node level, the work of the aggregated build (an upper bound of the merged
    entries): ring and pp pairs as at GPU level, then k² node pairs per all-pairs group
    spanning k nodes (O(G) to count, no pair is made).
    """
    pat = _patterns(placement, loads, Algorithm(algorithm))
    count = 0
    for kind, scope in pat.scoped:
        if kind not in pat.spread:  # else the spread's all pairs hold these
            lengths = _scope_runs(placement, kind, scope)[1]
            count += int((lengths * (lengths - 1)).sum())
            if kind in pat.ring:  # ring pairs the scope holds too are counted once
                count -= _ring_pairs_in_scope(placement, kind, scope)
    for kind in set(pat.ring) | set(pat.spread):
        n = placement.group_size(kind)
        groups = _group_count(placement, kind)
        if kind in pat.spread and level == "node":
            count += int(np.square(_nodes_per_group(placement, kind)).sum())
            if kind in pat.ring:
                count += groups * n
        elif kind in pat.spread:
            count += groups * n * (n - 1)
        else:
            count += groups * n
    pipelines = placement.gpus // placement.pipeline
    for volume in (pat.forward, pat.backward):
        if volume > 0.0:
            count += pipelines * (placement.pipeline - 1)
    return count


def _nodes_per_group(placement: Placement, kind: TrafficKind) -> IntArray:
    """Distinct nodes each group of ``kind`` spans, shape (groups,)."""
    nodes = np.sort(placement.group_ranks(kind) // placement.gpus_per_node, axis=1)
    spans: IntArray = 1 + np.count_nonzero(np.diff(nodes, axis=1), axis=1)
    return spans


def traffic_matrix(
    placement: Placement,
    loads: Sequence[CollectiveLoad],
    algorithm: Algorithm = Algorithm.RING,
) -> SparseTraffic:
    """Bytes per iteration between every pair of GPUs, by kind of traffic (docs/design.md §5).

    Builds :func:`traffic_entry_count` entries: check that count first when it may be large.
    """
    return _build(placement, loads, Algorithm(algorithm), by_node=False)


def node_traffic_matrix(
    placement: Placement,
    loads: Sequence[CollectiveLoad],
    algorithm: Algorithm = Algorithm.RING,
) -> SparseTraffic:
    """``traffic_matrix(...).by_node(g)``, without making the GPU pairs of all-pairs groups.

    A group whose members number c_a on node a sends w · (c_a c_b - [a = b] c_a) bytes from
    node a to node b (w per GPU pair), so only the k² node pairs of a group spanning k nodes
    are made (docs/design.md §5.2).
    """
    return _build(placement, loads, Algorithm(algorithm), by_node=True)


def _node_pairs(
    placement: Placement, groups: IntArray, per_pair: float
) -> tuple[IntArray, IntArray, FloatArray]:
    """Node-to-node bytes of the all-pairs pattern over ``groups`` (before merging)."""
    g = placement.gpus_per_node
    count, width = groups.shape
    nodes = np.sort(groups // g, axis=1)
    # (group, node, members on that node) triples, in group order
    first = np.ones(nodes.shape, dtype=bool)
    first[:, 1:] = nodes[:, 1:] != nodes[:, :-1]
    flat_first = first.ravel()
    starts = np.flatnonzero(flat_first)
    node = nodes.ravel()[starts]
    members = np.diff(np.append(starts, count * width))
    group = starts // width
    spans = np.bincount(group, minlength=count)
    group_start = np.concatenate(([0], np.cumsum(spans)[:-1]))
    # every triple i meets every triple j of its group (i = j included)
    reps = spans[group]
    left = np.repeat(np.arange(node.size), reps)
    offset = np.arange(left.size) - np.repeat(np.cumsum(reps) - reps, reps)
    right = group_start[group[left]] + offset
    weight = members[left] * members[right] - np.where(left == right, members[left], 0)
    keep = weight > 0
    src: IntArray = node[left][keep]
    dst: IntArray = node[right][keep]
    nbytes: FloatArray = weight[keep].astype(np.float64) * per_pair
    return src, dst, nbytes


def _build(
    placement: Placement,
    loads: Sequence[CollectiveLoad],
    algorithm: Algorithm,
    *,
    by_node: bool,
) -> SparseTraffic:
    pat = _patterns(placement, loads, algorithm)
    srcs: list[IntArray] = []
    dsts: list[IntArray] = []
    weights: list[FloatArray] = []
    codes: list[KindArray] = []
    g = placement.gpus_per_node if by_node else 1

    def add(
        kind: TrafficKind, pairs: tuple[IntArray, IntArray], per_pair: float | FloatArray
    ) -> None:
        src, dst = pairs
        srcs.append(src // g)
        dsts.append(dst // g)
        weights.append(np.broadcast_to(np.asarray(per_pair, dtype=np.float64), src.shape))
        codes.append(np.full(src.size, _KIND_CODE[kind], dtype=np.int8))

    for kind in KINDS:
        if kind not in pat.ring and kind not in pat.spread:
            continue
        groups = placement.group_ranks(kind)
        if kind in pat.ring:
            add(kind, _ring_pairs(groups), pat.ring[kind])
        if kind in pat.spread and by_node:
            src, dst, nbytes = _node_pairs(placement, groups, pat.spread[kind])
            srcs.append(src)
            dsts.append(dst)
            weights.append(nbytes)
            codes.append(np.full(src.size, _KIND_CODE[kind], dtype=np.int8))
        elif kind in pat.spread:
            add(kind, _all_pairs(groups), pat.spread[kind])
    for (kind, scope), total in pat.scoped.items():
        src, dst, per_pair = _run_pairs(*_scope_runs(placement, kind, scope), total)
        add(kind, (src, dst), per_pair)
    if pat.forward > 0.0 or pat.backward > 0.0:
        stages = placement.group_ranks("pp")
        if pat.forward > 0.0:
            add(TrafficKind.PP, (stages[:, :-1].ravel(), stages[:, 1:].ravel()), pat.forward)
        if pat.backward > 0.0:
            add(TrafficKind.PP, (stages[:, 1:].ravel(), stages[:, :-1].ravel()), pat.backward)

    size = placement.nodes if by_node else placement.gpus
    if not srcs:
        return SparseTraffic(
            size,
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.float64),
            np.zeros(0, dtype=np.int8),
        )
    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    nbytes = np.concatenate(weights)
    kind_codes = np.concatenate(codes)
    # Ring and spread pairs of one kind may coincide: merge (and sort, for determinism).
    return _merged(size, src, dst, nbytes, kind_codes, KINDS)


def per_gpu_volume_bytes(
    placement: Placement, loads: Sequence[CollectiveLoad]
) -> dict[TrafficKind, FloatArray]:
    """Analytic bytes each GPU sends per iteration, per kind (every kind), shape (G,).

    Independent of the algorithm: ring and direct move the same volume per rank.
    """
    size = placement.gpus
    out: dict[TrafficKind, FloatArray] = {k: np.zeros(size, dtype=np.float64) for k in KINDS}
    stage: IntArray | None = None
    for load in loads:
        kind = load.kind
        if load.scope != "group":
            members, lengths = _scope_runs(placement, kind, load.scope)
            sent = (lengths - 1) / lengths * load.size_bytes * load.calls
            np.add.at(out[kind], members, np.repeat(sent, lengths))
            continue
        if kind is TrafficKind.PP:
            if placement.pipeline == 1:
                continue
            if stage is None:
                stage = placement.coords(np.arange(size))["pp"]
            volume = load.volume_per_rank(placement.pipeline)
            if load.direction in ("both", "forward"):
                out[kind] += np.where(stage < placement.pipeline - 1, volume, 0.0)
            if load.direction in ("both", "backward"):
                out[kind] += np.where(stage > 0, volume, 0.0)
            continue
        volume = load.volume_per_rank(placement.group_size(kind))
        if kind is TrafficKind.EMBEDDING_SYNC:
            if stage is None:
                stage = placement.coords(np.arange(size))["pp"]
            ends = (stage == 0) | (stage == placement.pipeline - 1)
            out[kind] += np.where(ends, volume, 0.0)
        else:
            out[kind] += volume
    return out
