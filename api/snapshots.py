"""Stored profiles as the engine sees them, without the database: what an estimate needs.

A ``ProfileSnapshot`` is what an estimate needs of a stored profile (its figures and a
bandwidth provider over its runs); ``Profiles`` is where a request's ``cluster.profile`` is
looked up, ``PinnedProfile`` one snapshot already at hand. The service layer depends on these
only, so it loads without SQLAlchemy: ``api.caches`` reads snapshots from the database for the
server, and the command line reads a SQLite file with the standard library
(``api.cli.sqlite_profiles``); both build the snapshot from the same row with
:func:`snapshot_from_row`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from estimator.bandwidth import BandwidthAnswer, Collective, Num, TrafficKind
from estimator.errors import NotFoundError
from profiles.bandwidth import ProfileBandwidth
from profiles.nominal import NOMINAL_SPECS

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

SessionScope = Callable[[], AbstractContextManager["Session"]]

#: The columns of ``profiles`` a snapshot is made of, under the names its row carries.
SNAPSHOT_COLUMNS = (
    "id",
    "revision",
    "name",
    "gpus_per_node",
    "peak_tflops",
    "by_dtype",  # the peak_flops_json column (ORM: Profile.peak_tflops_by_dtype)
    "gpu_memory_bytes",
    "utilization",
    "utilization_source",
    "nominal",
    "gpu_model",
)


@dataclass(frozen=True, slots=True)
class ProfileSnapshot:
    """What an estimate needs of a stored profile, read in one query."""

    name: str
    gpus_per_node: int
    peak_tflops: float | None
    peak_tflops_by_dtype: dict[str, float]
    gpu_memory_bytes: int | None
    utilization: float | None
    utilization_source: str | None
    nominal: bool
    bandwidth: MemoBandwidth
    memory_bandwidth_gbps: float | None = None  # nominal profiles: the HBM datasheet figure
    memory_traffic_factor: float = 0.0  # nominal profiles: γ fitted with their u
    gpu_model: str | None = None  # the profile's GPU (its family's fitted compute constants)


class MemoBandwidth:
    """A BandwidthProvider that remembers scalar answers of the provider it wraps.

    Answers of a profile's provider are a pure function of (kind, op, ranks, nodes, size) for
    a given set of runs, and estimates ask the same few questions again and again; array
    queries (plans) pass straight through. ``explain`` agrees with ``busbw_gbps`` as the
    wrapped provider's do.
    """

    def __init__(self, provider: ProfileBandwidth, size: int = 4096) -> None:
        self.provider = provider
        self._size = size
        self._busbw: dict[tuple[str, str, float, float, float], float] = {}
        self._explain: dict[tuple[str, str, int, int, float], BandwidthAnswer] = {}

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num:
        if (
            isinstance(ranks, np.ndarray)
            or isinstance(nodes, np.ndarray)
            or isinstance(size_bytes, np.ndarray)
        ):
            return self.provider.busbw_gbps(kind, op, ranks, nodes, size_bytes)
        key = (kind.value, op.value, float(ranks), float(nodes), float(size_bytes))
        value = self._busbw.get(key)
        if value is None:
            value = float(self.provider.busbw_gbps(kind, op, ranks, nodes, size_bytes))
            if len(self._busbw) >= self._size:
                self._busbw.clear()
            self._busbw[key] = value
        return value

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer:
        key = (kind.value, op.value, int(ranks), int(nodes), float(size_bytes))
        answer = self._explain.get(key)
        if answer is None:
            answer = self.provider.explain(kind, op, ranks, nodes, size_bytes)
            if len(self._explain) >= self._size:
                self._explain.clear()
            self._explain[key] = answer
        return answer


class Profiles(Protocol):
    """Where a request's ``cluster.profile`` is looked up."""

    def profile(self, name: str) -> ProfileSnapshot: ...


@dataclass(frozen=True, slots=True)
class PinnedProfile:
    """One snapshot already at hand (answers for its own name only)."""

    snapshot: ProfileSnapshot

    def profile(self, name: str) -> ProfileSnapshot:
        if name != self.snapshot.name:
            raise NotFoundError(f"no profile named {name!r}", name=name)
        return self.snapshot


def snapshot_from_row(row: Any, provider: MemoBandwidth) -> ProfileSnapshot:
    """The snapshot of a ``profiles`` row (attributes named as :data:`SNAPSHOT_COLUMNS`)."""
    nominal = NOMINAL_SPECS.get(row.name) if row.nominal else None
    by_dtype: Mapping[str, float] | None = row.by_dtype
    return ProfileSnapshot(
        name=row.name,
        gpus_per_node=row.gpus_per_node,
        peak_tflops=row.peak_tflops,
        peak_tflops_by_dtype=dict(by_dtype or {}),
        gpu_memory_bytes=row.gpu_memory_bytes,
        utilization=row.utilization,
        utilization_source=row.utilization_source,
        nominal=bool(row.nominal),
        bandwidth=provider,
        memory_bandwidth_gbps=getattr(nominal, "memory_bandwidth_gbps", None),
        memory_traffic_factor=float(getattr(nominal, "memory_traffic_factor", 0.0)),
        gpu_model=row.gpu_model,
    )
