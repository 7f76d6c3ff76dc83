"""Collectives, the bus-bandwidth convention and the bandwidth-provider protocol.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md): busbw = algbw · factor, with
algbw = S / t, S the message size as nccl-tests counts it. So the time of one collective is
``time_s = factor(op, n) · S / (busbw_gbps · 1e9)`` (GB = 10^9 bytes, as nccl-tests prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from estimator.errors import ValidationError

FloatArray = npt.NDArray[np.float64]
Num = float | FloatArray


class Collective(StrEnum):
    """nccl-tests collective names (OSU point-to-point tests count as sendrecv)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALLTOALL = "alltoall"
    SENDRECV = "sendrecv"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    HYPERCUBE = "hypercube"


class TrafficKind(StrEnum):
    """What a collective is for; the paper's C is given per kind (C_TP, C_PP, C_DP)."""

    TP = "tp"
    CP = "cp"
    PP = "pp"
    DP = "dp"
    EMBEDDING_SYNC = "embedding_sync"
    EXPERT = "expert"


# Enum members as module constants: ``Collective.ALL_REDUCE`` is a class-attribute lookup
# through the Enum metaclass (~100 ns in CPython 3.11), and the engine asks per collective.
_ALL_REDUCE = Collective.ALL_REDUCE
_TP, _PP, _CP = TrafficKind.TP, TrafficKind.PP, TrafficKind.CP
_EXPERT, _EMBEDDING_SYNC = TrafficKind.EXPERT, TrafficKind.EMBEDDING_SYNC
_ONE_MINUS_ONE_OVER_N = (
    Collective.ALL_GATHER,
    Collective.REDUCE_SCATTER,
    Collective.ALLTOALL,
    Collective.GATHER,
    Collective.SCATTER,
    Collective.HYPERCUBE,
)


def bus_factor(op: Collective, ranks: Num) -> Num:
    """busbw / algbw for ``op`` over ``ranks`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    n = ranks
    if op is _ALL_REDUCE:
        return 2.0 * (n - 1.0) / n
    if op in _ONE_MINUS_ONE_OVER_N:
        return (n - 1.0) / n
    return 1.0 + 0.0 * n  # broadcast, reduce, sendrecv: factor 1 (keeps the array shape)


def parse_collective(value: str) -> Collective:
    """``Collective`` from a user's spelling (``all_reduce``, ``allreduce``, ``all-reduce``)."""
    key = value.strip().lower().replace("-", "_")
    aliases = {
        "allreduce": "all_reduce",
        "allgather": "all_gather",
        "reducescatter": "reduce_scatter",
        "all_to_all": "alltoall",
        "alltoallv": "alltoall",
        "send_recv": "sendrecv",
        "bcast": "broadcast",
        "p2p": "sendrecv",
    }
    key = aliases.get(key, key)
    try:
        return Collective(key)
    except ValueError:
        names = ", ".join(c.value for c in Collective)
        raise ValidationError("op", value, f"must be one of {names}") from None


@dataclass(frozen=True, slots=True)
class BandwidthAnswer:
    """One effective-bandwidth answer and how it was obtained.

    ``method`` is one of: fixed (a scalar C given by the user), measured, interpolated,
    extrapolated, derived, nominal. ``source`` says which run or figure it came from.

    Quality (how far the answer is from data; defaults describe a fixed or measured answer):
    ``distance_octaves`` is |log2(size / nearest measured size)| of the runs that answered
    (0 at a measured size); ``derived_placement`` says the runs were measured at another
    (ranks, nodes); ``derived_op`` names the collective whose runs stood in for this one;
    ``weak`` is true when the answer is nominal, more than ``WEAK_DISTANCE_OCTAVES`` from the
    nearest measured size, beyond the bound its rule allows, only a lower bound, or drawn from
    an upload flagged as not matching its profile; ``advice`` says what to upload instead.
    """

    busbw_gbps: float
    method: str
    source: str
    distance_octaves: float = 0.0
    derived_placement: bool = False
    derived_op: str | None = None
    weak: bool = False
    advice: str | None = None


#: An answer further than this from the nearest measured size (binary orders of magnitude,
#: a factor 4) is weak: see ``profiles.bandwidth`` for why the bound sits there.
WEAK_DISTANCE_OCTAVES = 2.0


def weak_answer_warning(
    op: Collective, ranks: int, nodes: int, size_bytes: float, answer: BandwidthAnswer
) -> str | None:
    """The ``warnings`` line for one collective whose bandwidth answer is weak, else None."""
    if not answer.weak:
        return None
    where = f"{Collective(op).value} over {ranks} ranks on {nodes} node(s) at {size_bytes:.0f} B"
    text = f"bandwidth of {where} is weak ({answer.method}"
    if answer.distance_octaves > 0:
        text += f", {answer.distance_octaves:.1f} binary orders of magnitude from measured sizes"
    text += f"): {answer.source}"
    if answer.advice:
        text += f"; {answer.advice}"
    return text


@runtime_checkable
class BandwidthProvider(Protocol):
    """Effective bus bandwidth for a collective at a scale, placement and message size.

    ``busbw_gbps`` must accept scalars or equal-shaped arrays for ranks, nodes and size and
    return the same shape (the sweep calls it with arrays of a million layouts); ``explain``
    answers one query with its provenance and must agree with ``busbw_gbps`` exactly.
    """

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num: ...

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer: ...


@dataclass(frozen=True, slots=True)
class FixedBandwidth:
    """The paper's scalar effective bandwidths C (busbw, GB/s) per kind of traffic.

    Kinds without their own figure use ``dp_gbps`` (expert and embedding traffic cross the
    same fabric as DP in the default rank order) and context parallel uses ``tp_gbps``.
    """

    tp_gbps: float
    pp_gbps: float
    dp_gbps: float
    expert_gbps: float | None = None
    embedding_sync_gbps: float | None = None
    cp_gbps: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "tp_gbps",
            "pp_gbps",
            "dp_gbps",
            "expert_gbps",
            "embedding_sync_gbps",
            "cp_gbps",
        ):
            value = getattr(self, name)
            if value is not None and not (value > 0 and np.isfinite(value)):
                raise ValidationError(f"bandwidth.{name}", value, "must be a finite number > 0")

    def _gbps(self, kind: TrafficKind) -> float:
        if kind is _TP:
            return self.tp_gbps
        if kind is _PP:
            return self.pp_gbps
        if kind is _CP:
            return self.cp_gbps or self.tp_gbps
        if kind is _EXPERT:
            return self.expert_gbps or self.dp_gbps
        if kind is _EMBEDDING_SYNC:
            return self.embedding_sync_gbps or self.dp_gbps
        return self.dp_gbps

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num:
        value = self._gbps(kind)
        if isinstance(size_bytes, np.ndarray):
            return np.full(size_bytes.shape, value)
        return value

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer:
        return BandwidthAnswer(self._gbps(kind), "fixed", f"user-given C_{kind.value}")


def collective_time_s(op: Collective, ranks: Num, size_bytes: Num, busbw_gbps: Num) -> Num:
    """Seconds for one collective: factor(op, n) · S / busbw (nccl-tests convention)."""
    return bus_factor(op, ranks) * size_bytes / (busbw_gbps * 1e9)
