"""profiles.revisions: every committed write to a profile or its data renews its revision.

On real databases (SQLite file and PostgreSQL). A read, a rolled-back write and a write to
another profile leave a revision as it was; a revision never comes back, even when SQLite
gives a re-created profile the id of the deleted one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from profiles import repository as repo
from profiles import revisions
from profiles.db import read_session_factory, transaction
from profiles.models import Calibration, Point, Profile, Upload

FIXTURES = Path(__file__).parent / "fixtures"
TEXT = (FIXTURES / "nccl_all_reduce_8gpu.txt").read_text(encoding="utf-8")
HEX = set("0123456789abcdef")


def revision(db_sessions: sessionmaker[Session], name: str) -> str:
    with db_sessions() as session:
        value = session.scalar(select(Profile.revision).where(Profile.name == name))
    assert value is not None and len(value) == 32 and set(value) <= HEX
    return value


def make(db_sessions: sessionmaker[Session], *names: str) -> None:
    with transaction(db_sessions) as session:
        for name in names:
            repo.create_profile(session=session, name=name, gpu_model="H100", gpus_per_node=8)


def upload(session: Session, name: str = "lab", text: str = TEXT) -> None:
    repo.upload_runs(session=session, profile_name=name, text=text)


def _upload_another(session: Session) -> None:
    # another measurement (the same table with a comment added is the same upload: issue 10)
    lines = TEXT.split("\n")
    row = next(n for n, line in enumerate(lines) if line.strip()[:1].isdigit())
    tokens = lines[row].split()
    tokens[5] = f"{float(tokens[5]) + 0.01:.2f}"
    lines[row] = "  ".join(tokens)
    upload(session, text="\n".join(lines))


def _update(session: Session) -> None:
    repo.update_profile(session=session, name="lab", changes={"description": "changed"})


def _calibrate(session: Session) -> None:
    profile = repo.get_profile(session=session, name="lab")
    session.add(
        Calibration(profile_id=profile.id, inputs={}, utilization=0.5, mape_pct=1.0, residuals=[])
    )


def _delete_upload(session: Session) -> None:
    session.delete(session.scalars(select(Upload)).one())


def _delete_point(session: Session) -> None:
    session.delete(session.scalars(select(Point).limit(1)).one())


def _bulk_update(session: Session) -> None:
    session.execute(update(Point).values(busbw_gbps=Point.busbw_gbps / 2))


WRITES: dict[str, Callable[[Session], None]] = {
    "update": _update,
    "upload": _upload_another,
    "calibration": _calibrate,
    "delete upload": _delete_upload,
    "delete point": _delete_point,
    "bulk update": _bulk_update,
}


@pytest.mark.parametrize("write", list(WRITES))
def test_every_kind_of_committed_write_renews_the_revision(
    db_sessions: sessionmaker[Session], write: str
) -> None:
    make(db_sessions, "lab")
    with transaction(db_sessions) as session:
        upload(session)
    before = revision(db_sessions, "lab")
    with transaction(db_sessions) as session:
        WRITES[write](session)
    assert revision(db_sessions, "lab") != before


def test_the_revision_is_renewed_by_the_commit_and_the_session_knows_it_is_pending(
    db_sessions: sessionmaker[Session],
) -> None:
    make(db_sessions, "lab")
    before = revision(db_sessions, "lab")
    with transaction(db_sessions) as session:
        profile = repo.get_profile(session=session, name="lab")
        assert not revisions.uncommitted(session, profile.id)
        upload(session)
        session.flush()
        assert revisions.uncommitted(session, profile.id)
        inside = session.scalar(select(Profile.revision).where(Profile.id == profile.id))
        assert inside == before  # renewed as the commit's last statement, not earlier
    assert profile.revision == revision(db_sessions, "lab") != before
    with db_sessions() as session:
        assert not revisions.uncommitted(session, profile.id)


def test_reads_rollbacks_and_other_profiles_leave_a_revision_alone(
    db_sessions: sessionmaker[Session],
) -> None:
    make(db_sessions, "lab", "other")
    before = revision(db_sessions, "lab")
    with read_session_factory(db_sessions.kw["bind"])() as session, session.begin():
        repo.load_bandwidth(session=session, profile_name="lab")
        repo.list_runs(session=session, profile_name="lab")
    with pytest.raises(RuntimeError, match="boom"), transaction(db_sessions) as session:
        upload(session)
        _update(session)
        session.flush()
        raise RuntimeError("boom")
    with transaction(db_sessions) as session:
        upload(session, "other")
    assert revision(db_sessions, "lab") == before


def test_a_profile_created_again_never_gets_an_old_revision(
    db_sessions: sessionmaker[Session],
) -> None:
    seen: set[str] = set()
    ids: set[int] = set()
    for _ in range(3):
        make(db_sessions, "lab")
        with transaction(db_sessions) as session:
            upload(session)
            ids.add(repo.get_profile(session=session, name="lab").id)
        value = revision(db_sessions, "lab")
        assert value not in seen
        seen.add(value)
        with transaction(db_sessions) as session:
            repo.delete_profile(session=session, name="lab")
    if db_sessions.kw["bind"].dialect.name == "sqlite":
        assert len(ids) == 1  # the id came back each time: only the revision tells them apart
