"""A profile whose placement curves are missing or stale is rebuilt once, at start-up.

A database upgraded from before the curves existed holds runs but no envelopes
(``curves_format`` NULL): such a profile answers from all its runs on every read until the
service rebuilds its curves (docs/design.md §6).
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from api.runtime import Runtime
from api.settings import Settings
from profiles.repository import stale_curve_profiles
from tests.api.conftest import AUTH, make_client
from tests.api.test_uploads import A100, OKE


def _bandwidth(client: TestClient, size: float) -> dict[str, Any]:
    params = {"op": "all_reduce", "ranks": 16, "nodes": 2, "bytes": size}
    response = client.get("/v1/profiles/a100/bandwidth", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _curves_state(url: str) -> tuple[int | None, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            fmt = conn.execute(text("SELECT curves_format FROM profiles WHERE name='a100'"))
            rows = conn.execute(
                text(
                    "SELECT count(*) FROM placement_curves pc JOIN profiles p "
                    "ON p.id = pc.profile_id WHERE p.name = 'a100'"
                )
            )
            return fmt.scalar_one(), rows.scalar_one()
    finally:
        engine.dispose()


def _forget_curves(url: str) -> None:
    """What an upgrade from before the curves existed leaves: runs, no envelopes."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "DELETE FROM placement_curves WHERE profile_id = "
                    "(SELECT id FROM profiles WHERE name = 'a100')"
                )
            )
            conn.execute(text("UPDATE profiles SET curves_format = NULL WHERE name = 'a100'"))
    finally:
        engine.dispose()


def test_start_rebuilds_missing_curves_and_answers_the_same(settings: Settings) -> None:
    url = settings.database_url
    assert url is not None
    with make_client(settings) as client:
        assert client.post("/v1/profiles", json=A100, headers=AUTH).status_code == 201
        stored = client.post(
            "/v1/profiles/a100/runs",
            content=OKE,
            headers={**AUTH, "Content-Type": "text/plain"},
            params={"ranks": 16, "nodes": 2},
        )
        assert stored.status_code == 201, stored.text
        before = [_bandwidth(client, size) for size in (8192, 1 << 20, 1 << 30)]
    fmt, rows = _curves_state(url)
    assert fmt is not None and rows > 0

    _forget_curves(url)
    assert _curves_state(url) == (None, 0)

    with make_client(settings) as client:  # start-up runs here
        assert _curves_state(url) == (fmt, rows)
        after = [_bandwidth(client, size) for size in (8192, 1 << 20, 1 << 30)]
    assert [a["busbw_gbps"] for a in after] == [b["busbw_gbps"] for b in before]


def test_a_second_start_rebuilds_nothing(settings: Settings) -> None:
    first = Runtime(settings)
    first.start()
    first.close()
    second = Runtime(settings)
    try:
        with second.sessions() as session, session.begin():
            assert stale_curve_profiles(session=session) == []
        assert second._refresh_stale_curves() == []
    finally:
        second.close()
