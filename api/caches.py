"""Stored profiles as the engine sees them, and the caches that keep them between requests.

A ``ProfileSnapshot`` is what an estimate needs of a stored profile (its figures and a
bandwidth provider over its runs), read in one single-row query by ``load_snapshot``. Two
caches keep the expensive parts, and neither can serve what a committed write replaced:

- ``ProviderCache`` holds bandwidth providers (loading runs and building curves is the costly
  step) keyed by (profile id, revision). The revision is a random token every committed write
  to the profile or its runs renews (``profiles/revisions.py``), read in the snapshot query
  itself: a key never repeats, even when SQLite reuses a deleted profile's ids.
- ``SnapshotCache`` holds whole snapshots, valid while nothing was committed to their
  profile since they were read, by any process (``profiles.db.ChangeSignal``): on SQLite
  ``PRAGMA data_version`` (microseconds, no transaction); on PostgreSQL the profile's
  revision, read in one autocommit round trip on a connection of its own (asyncio on the
  hot path: no worker thread). There is no TTL: once a write is acknowledged, the next
  request of any worker sees it.

Reads never invalidate anything; a rolled-back write renews no revision and commits nothing.
``ProfileSource`` is the read path the routes use; ``PinnedProfile`` answers from one
snapshot already at hand.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import TypeVar

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.orm import Session

# ProfileSnapshot and its kin moved to api.snapshots (no SQLAlchemy there); importable here too.
from api.snapshots import MemoBandwidth as MemoBandwidth
from api.snapshots import PinnedProfile as PinnedProfile
from api.snapshots import Profiles as Profiles
from api.snapshots import ProfileSnapshot as ProfileSnapshot
from api.snapshots import SessionScope as SessionScope
from api.snapshots import snapshot_from_row
from estimator.errors import NotFoundError
from profiles import repository, revisions
from profiles.db import ChangeSignal
from profiles.models import Profile

ProviderKey = tuple[int, str]  # (profile id, revision)
T = TypeVar("T")


class ProviderCache:
    """Bandwidth providers of profiles, keyed by (profile id, revision), least recently used
    out first.

    Loading a profile's runs and building its curves is the expensive part of an estimate
    with a profile; every committed write to the profile or its runs renews its revision, and
    a revision is never reused, so a hit is never stale. Requests that miss the same key at
    once (every reader right after an upload) wait for one build instead of each doing it.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[ProviderKey, MemoBandwidth] = OrderedDict()
        self._building: dict[ProviderKey, Future[MemoBandwidth]] = {}
        self._lock = threading.Lock()

    def get_or_build(self, key: ProviderKey, build: Callable[[], MemoBandwidth]) -> MemoBandwidth:
        """The cached provider, else the one a concurrent build makes, else ``build()``'s."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                return value
            pending = self._building.get(key)
            if pending is None:
                pending = self._building[key] = Future()
                owner = True
            else:
                owner = False
        if not owner:
            return pending.result()  # the builder's provider, or its error
        try:
            value = build()
        except BaseException as exc:
            with self._lock:
                del self._building[key]
            pending.set_exception(exc)
            raise
        self.put(key, value)
        with self._lock:
            del self._building[key]
        pending.set_result(value)
        return value

    def get(self, key: ProviderKey) -> MemoBandwidth | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: ProviderKey, value: MemoBandwidth) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


ReadScope = Callable[[], AbstractContextManager[Session | Connection]]

_SNAPSHOT = select(
    Profile.id,
    Profile.revision,
    Profile.name,
    Profile.gpus_per_node,
    Profile.peak_tflops,
    Profile.peak_tflops_by_dtype.label("by_dtype"),
    Profile.gpu_memory_bytes,
    Profile.utilization,
    Profile.utilization_source,
    Profile.nominal,
    Profile.gpu_model,
).where(Profile.name == bindparam("name"))


class SnapshotCache:
    """Profile snapshots kept while nothing was committed to their profile since they were read.

    ``signal`` (``profiles.db.ChangeSignal``) says what is committed now: a snapshot is stored
    with the token seen *before* it was read and served while the token is unchanged, so a
    commit that lands while the read is in flight makes it stale at once rather than kept as
    fresh. There is no TTL: the first request after a commit, in any worker, misses.
    """

    def __init__(self, signal: ChangeSignal, *, size: int = 256) -> None:
        self.signal = signal
        self._size = size
        self._items: dict[str, tuple[ProfileSnapshot, Hashable]] = {}

    def token(self, name: str) -> Hashable:
        """What is committed about ``name`` now (read it before loading a snapshot)."""
        return self.signal.token(name)

    def get(self, name: str, token: Hashable | None = None) -> ProfileSnapshot | None:
        """The snapshot if nothing was committed since it was read (``token``: already asked)."""
        item = self._items.get(name)
        if item is None:
            return None
        snapshot, seen = item
        now = self.signal.token(name) if token is None else token
        return snapshot if seen == now else None

    def held(self, name: str) -> tuple[ProfileSnapshot, Hashable] | None:
        """The snapshot kept for ``name`` and the token it was read under, unchecked."""
        return self._items.get(name)

    def put(self, name: str, snapshot: ProfileSnapshot, *, token: Hashable) -> None:
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[name] = (snapshot, token)


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

    async def answer(self, name: str, work: Callable[[ProfileSnapshot], T]) -> T | None:
        """``work`` done on the named profile's snapshot at hand, if nothing was committed to
        the profile since it was read; None when no fresh snapshot is at hand (read it through
        :meth:`profile` then). Never blocks the event loop: no read through the pool, no worker
        thread, and no read at all when no snapshot is held.

        Where asking the change signal is a round trip (PostgreSQL), the question is sent
        first and ``work`` runs while the answer travels; its result (or its error, raised) is
        kept only if the answer says the snapshot is current, so a reply is the one that
        asking first and working after would give, sooner by the wait it hides.
        """
        snapshots = self._snapshots
        held = snapshots.held(name) if snapshots is not None else None
        if snapshots is None or held is None:
            return None
        snapshot, seen = held
        signal = snapshots.signal
        if not signal.round_trip:
            return work(snapshot) if await signal.token_async(name) == seen else None
        asking = asyncio.ensure_future(signal.token_async(name))
        await asyncio.sleep(0)  # one step of the question: it is on the wire when this resumes
        result: T | None = None
        error: Exception | None = None
        try:
            result = work(snapshot)
        except Exception as exc:  # kept until the answer says whether this snapshot counts
            error = exc
        except BaseException:
            asking.cancel()  # nobody will read the answer
            raise
        if await asking != seen:
            return None  # a commit since the snapshot was read: whatever work gave is dropped
        if error is not None:
            raise error
        return result

    def profile(self, name: str) -> ProfileSnapshot:
        """The named profile and its bandwidth provider; NotFoundError if unknown."""
        snapshots = self._snapshots
        if snapshots is None:
            with self._scope() as connection:
                return load_snapshot(connection=connection, name=name, cache=self._cache)
        token = snapshots.token(name)
        hit = snapshots.get(name, token)
        if hit is not None:
            return hit
        with self._scope() as connection:
            snapshot = load_snapshot(connection=connection, name=name, cache=self._cache)
        snapshots.put(name, snapshot, token=token)
        return snapshot


def load_snapshot(
    *, connection: Session | Connection, name: str, cache: ProviderCache
) -> ProfileSnapshot:
    """The profile of that name with a (cached) bandwidth provider, in one Core query.

    Inside a write transaction that changed the profile (not committed yet, its revision not
    renewed yet) the provider is built from what the transaction sees and not cached.
    """
    row = connection.execute(_SNAPSHOT, {"name": name}).first()
    if row is None:
        raise NotFoundError(f"no profile named {name!r}", name=name)
    key = (int(row.id), str(row.revision))

    def build() -> MemoBandwidth:
        if isinstance(connection, Session):
            return MemoBandwidth(repository.load_bandwidth(session=connection, profile_name=name))
        with Session(bind=connection) as session:
            return MemoBandwidth(repository.load_bandwidth(session=session, profile_name=name))

    if isinstance(connection, Session) and revisions.uncommitted(connection, key[0]):
        provider = build()  # this transaction's own view: never cached
    else:
        provider = cache.get_or_build(key, build)
    return snapshot_from_row(row, provider)
