"""Profile revisions: a token that changes with every committed write to a profile or its data.

``profiles.revision`` is a random UUID (hex). Every ORM unit of work that writes a profile or a
row that belongs to one (anything with a ``profile_id``: uploads, runs, calibrations; points
through their run) gives each profile it touched a new revision when it commits. Caches of what
is derived from a profile (its bandwidth provider) are keyed by ``(profile id, revision)``: a
key that can never come back, even when SQLite reuses the ids of a deleted profile and of its
runs for a new one, and that a reader obtains in the same query as the profile itself.

How it works: ``after_flush`` collects the ids of the profiles the flush touched, and the
commit of the outermost transaction updates their revisions, as its last statement (so the row
lock a PostgreSQL writer takes on the profile is held only while it commits, in id order).
A rolled-back transaction changes no revision. Reads inside a write transaction that see
uncommitted changes of a profile must not use or fill a cache: ask :func:`uncommitted`.
ORM-enabled bulk ``INSERT``/``UPDATE``/``DELETE`` statements on those tables cannot say which
profiles they touched, so they renew the revision of every profile; raw SQL text is not seen.
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Final

from sqlalchemy import event, inspect, select, update
from sqlalchemy.orm import ORMExecuteState, Session, UOWTransaction
from sqlalchemy.orm.attributes import set_committed_value

from profiles.models import Point, Profile, Run, new_revision

_TOUCHED: Final = "commest_touched_profiles"
_ALL: Final = -1  # a bulk statement touched profiles we cannot name: renew them all
_PROFILE_TABLES: Final = frozenset({Profile.__tablename__, Run.__tablename__, Point.__tablename__})


def uncommitted(session: Session, profile_id: int) -> bool:
    """Whether this session changed (or may have changed) that profile and not committed yet."""
    ids = session.info.get(_TOUCHED, ())
    return profile_id in ids or _ALL in ids


def _pending(session: Session) -> set[int]:
    ids: set[int] = session.info.setdefault(_TOUCHED, set())
    return ids


@event.listens_for(Session, "after_flush")
def _collect(session: Session, _flush_context: UOWTransaction) -> None:
    ids = _pending(session)
    run_ids: set[int] = set()
    # still the pre-flush lists here, with their primary and foreign keys assigned
    for obj in chain(session.new, session.dirty, session.deleted):
        if isinstance(obj, Profile):
            if obj not in session.new and obj not in session.deleted:
                ids.add(obj.id)  # a new profile already has a fresh revision
        elif isinstance(obj, Point):
            run = inspect(obj).dict.get("run")  # the loaded run, if any (no lazy load here)
            if run is not None and run.profile_id is not None:
                ids.add(run.profile_id)
            elif obj.run_id is not None:
                run_ids.add(obj.run_id)
        else:
            profile_id = getattr(obj, "profile_id", None)
            if isinstance(profile_id, int):
                ids.add(profile_id)
    if run_ids:
        query = select(Run.profile_id).where(Run.id.in_(sorted(run_ids))).distinct()
        ids.update(session.connection().scalars(query))


@event.listens_for(Session, "do_orm_execute")
def _bulk(state: ORMExecuteState) -> None:
    if not (state.is_insert or state.is_update or state.is_delete):
        return
    table = getattr(state.statement, "table", None)
    name = getattr(table, "name", None)
    columns = getattr(table, "c", None)
    if name in _PROFILE_TABLES or (columns is not None and "profile_id" in columns):
        _pending(state.session).add(_ALL)


@event.listens_for(Session, "before_commit")
def _renew(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a SAVEPOINT: the outermost commit renews
    session.flush()  # collect what the commit would flush anyway
    ids = session.info.pop(_TOUCHED, None)
    if not ids:
        return
    connection = session.connection()  # Core: no ORM events, no session synchronisation
    fresh: dict[int, str] = {}
    if _ALL in ids:
        revision = new_revision()  # one new token for all: keys also hold the profile id
        connection.execute(update(Profile).values(revision=revision))
        fresh = {key: revision for key in _identity_profiles(session)}
    else:
        for profile_id in sorted(ids):  # a fixed order: concurrent writers cannot deadlock
            fresh[profile_id] = new_revision()
            connection.execute(
                update(Profile).where(Profile.id == profile_id).values(revision=fresh[profile_id])
            )
    for profile_id, profile in _identity_profiles(session).items():
        if profile_id in fresh:
            set_committed_value(profile, "revision", fresh[profile_id])


def _identity_profiles(session: Session) -> dict[int, Profile]:
    return {obj.id: obj for obj in session.identity_map.values() if isinstance(obj, Profile)}


@event.listens_for(Session, "after_transaction_end")
def _forget(session: Session, transaction: Any) -> None:
    if transaction.parent is None:  # the outermost one ended (committed or rolled back)
        session.info.pop(_TOUCHED, None)
