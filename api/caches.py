"""Stored profiles as the engine sees them, and the caches that keep them between requests.

A ``ProfileSnapshot`` is what an estimate needs of a stored profile (its figures and a
bandwidth provider over its runs), read in one query by ``load_snapshot``. Two caches keep the
expensive parts: ``ProviderCache`` holds bandwidth providers (loading runs and building curves
is the costly step), ``SnapshotCache`` whole snapshots (so a hot estimate needs no database
read). ``ProfileSource`` is the read path the routes use; ``PinnedProfile`` answers from one
snapshot already at hand.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from sqlalchemy import Connection, bindparam, func, select
from sqlalchemy.orm import Session

from estimator.bandwidth import BandwidthAnswer, Collective, Num, TrafficKind
from estimator.errors import NotFoundError
from profiles import repository
from profiles.bandwidth import ProfileBandwidth
from profiles.models import Profile, Run
from profiles.nominal import NOMINAL_SPECS


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


class ProviderCache:
    """Bandwidth providers of profiles, keyed by (profile id, newest run id, run count).

    Loading a profile's runs and building its curves is the expensive part of an estimate
    with a profile; the key changes with every upload or deleted run, so a hit is never stale.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[tuple[int, int, int], MemoBandwidth] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[int, int, int]) -> MemoBandwidth | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple[int, int, int], value: MemoBandwidth) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


SessionScope = Callable[[], AbstractContextManager[Session]]
ReadScope = Callable[[], AbstractContextManager[Session | Connection]]

_NEWEST_RUN = select(func.max(Run.id)).where(Run.profile_id == Profile.id).scalar_subquery()
_RUN_COUNT = select(func.count(Run.id)).where(Run.profile_id == Profile.id).scalar_subquery()
_SNAPSHOT = select(
    Profile.id,
    Profile.name,
    Profile.gpus_per_node,
    Profile.peak_tflops,
    Profile.peak_tflops_by_dtype.label("by_dtype"),
    Profile.gpu_memory_bytes,
    Profile.utilization,
    Profile.utilization_source,
    Profile.nominal,
    Profile.gpu_model,
    _NEWEST_RUN.label("newest_run"),
    _RUN_COUNT.label("run_count"),
).where(Profile.name == bindparam("name"))


class SnapshotCache:
    """Profile snapshots kept between requests, so a hot estimate needs no database read.

    An entry is used while it is younger than ``ttl_s`` and no write has been committed
    through this process since it was read (``generation``); writes made by another process
    (another server worker) are therefore seen within ``ttl_s``.
    """

    def __init__(self, *, ttl_s: float = 1.0, size: int = 256) -> None:
        self.ttl_s = ttl_s
        self._size = size
        self.generation = 0
        self._items: dict[str, tuple[ProfileSnapshot, float, int]] = {}

    def bump(self) -> None:
        """A write was committed: every cached snapshot may be stale."""
        self.generation += 1

    def get(self, name: str) -> ProfileSnapshot | None:
        item = self._items.get(name)
        if item is None:
            return None
        snapshot, loaded_at, generation = item
        if generation != self.generation or time.monotonic() - loaded_at > self.ttl_s:
            return None
        return snapshot

    def put(self, name: str, snapshot: ProfileSnapshot, *, generation: int, at: float) -> None:
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[name] = (snapshot, at, generation)


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


class ProfileSource:
    """Profiles read from the database, with bandwidth providers from a :class:`ProviderCache`
    and, when given, whole snapshots from a :class:`SnapshotCache`."""

    def __init__(
        self,
        *,
        scope: ReadScope,
        cache: ProviderCache,
        snapshots: SnapshotCache | None = None,
    ) -> None:
        self._scope = scope
        self._cache = cache
        self._snapshots = snapshots

    def cached(self, name: str) -> ProfileSnapshot | None:
        """The named profile if a fresh snapshot is at hand (no database read)."""
        return self._snapshots.get(name) if self._snapshots is not None else None

    def profile(self, name: str) -> ProfileSnapshot:
        """The named profile and its bandwidth provider; NotFoundError if unknown."""
        snapshots = self._snapshots
        if snapshots is not None:
            hit = snapshots.get(name)
            if hit is not None:
                return hit
            generation, at = snapshots.generation, time.monotonic()
        with self._scope() as connection:
            snapshot = load_snapshot(connection=connection, name=name, cache=self._cache)
        if snapshots is not None:
            snapshots.put(name, snapshot, generation=generation, at=at)
        return snapshot


def load_snapshot(
    *, connection: Session | Connection, name: str, cache: ProviderCache
) -> ProfileSnapshot:
    """The profile of that name with a (cached) bandwidth provider, in one Core query."""
    row = connection.execute(_SNAPSHOT, {"name": name}).first()
    if row is None:
        raise NotFoundError(f"no profile named {name!r}", name=name)
    key = (int(row.id), int(row.newest_run or 0), int(row.run_count or 0))
    provider = cache.get(key)
    if provider is None:
        if isinstance(connection, Session):
            loaded = repository.load_bandwidth(session=connection, profile_name=name)
        else:
            with Session(bind=connection) as session:
                loaded = repository.load_bandwidth(session=session, profile_name=name)
        provider = MemoBandwidth(loaded)
        cache.put(key, provider)
    nominal = NOMINAL_SPECS.get(row.name) if row.nominal else None
    return ProfileSnapshot(
        name=row.name,
        gpus_per_node=row.gpus_per_node,
        peak_tflops=row.peak_tflops,
        peak_tflops_by_dtype=dict(row.by_dtype or {}),
        gpu_memory_bytes=row.gpu_memory_bytes,
        utilization=row.utilization,
        utilization_source=row.utilization_source,
        nominal=bool(row.nominal),
        bandwidth=provider,
        memory_bandwidth_gbps=getattr(nominal, "memory_bandwidth_gbps", None),
        memory_traffic_factor=float(getattr(nominal, "memory_traffic_factor", 0.0)),
        gpu_model=row.gpu_model,
    )
