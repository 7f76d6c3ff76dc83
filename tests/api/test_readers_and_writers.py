"""Issue 10 §4: reads never wait for a writer (SQLite and PostgreSQL).

A writer opens a write unit of work, changes a profile and holds the transaction open (on
SQLite that is the database's write lock, which an upload used to hold while a reader waited
30.8 s for a 503). Meanwhile every kind of read answers 200 from the committed data; once the
writer commits, the next read sees its change.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

import api.deps
from api.deps import Runtime
from profiles import repository
from tests.api.conftest import AUTH, fixture_text
from tests.profiles.held import assert_sqlite_write_locked, held_write

PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}
ESTIMATE: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "layout": {"pipeline": 1, "tensor": 8, "data": 1},
    "training": {"global_batch_size": 8},
    "cluster": {"profile": "lab", "utilization": 0.5},
}
BANDWIDTH = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": 1 << 20}


def reads(client: TestClient) -> dict[str, Any]:
    """Every kind of read of the profile and around it; each must answer 200."""
    answers = {
        "profile": client.get("/v1/profiles/lab"),
        "profiles": client.get("/v1/profiles"),
        "runs": client.get("/v1/profiles/lab/runs"),
        "bandwidth": client.get("/v1/profiles/lab/bandwidth", params=BANDWIDTH),
        "curves": client.get("/v1/profiles/lab/curves"),
        "calibrations": client.get("/v1/profiles/lab/calibrations"),
        "estimate": client.post("/v1/estimates", json=ESTIMATE),
        "baseline": client.get("/v1/baselines/lab-base"),
        "check": client.post("/v1/checks", json={**ESTIMATE, "baseline": "lab-base"}),
    }
    for kind, response in answers.items():
        assert response.status_code == 200, (kind, response.text)
    return {kind: response.json() for kind, response in answers.items()}


def test_every_read_answers_while_a_writer_holds_the_write_lock(
    client: TestClient, db_url: str
) -> None:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    uploaded = client.post(
        "/v1/profiles/lab/runs",
        content=fixture_text("nccl_all_reduce_8gpu.txt"),
        headers={**AUTH, "Content-Type": "text/plain"},
    )
    assert uploaded.status_code == 201, uploaded.text
    stored = client.put("/v1/baselines/lab-base", json=ESTIMATE, headers=AUTH)
    assert stored.status_code == 201, stored.text
    before = reads(client)  # caches warm, as on a busy server

    assert isinstance(client.app, FastAPI)
    runtime: Runtime = client.app.state.runtime

    def write(session: Session) -> None:
        changes: repository.ProfileChanges = {"description": "written", "peak_tflops": 500}
        repository.update_profile(session=session, name="lab", changes=changes)

    with held_write(runtime.transaction, write):
        if db_url.startswith("sqlite"):
            assert_sqlite_write_locked(runtime.engine.url.database or "")
        during = reads(client)
        assert during["profile"]["description"] == ""  # uncommitted: not visible
        assert during["estimate"]["cluster"]["peak_tflops"] == 989
        assert during["bandwidth"] == before["bandwidth"]
    after = reads(client)
    assert after["profile"]["description"] == "written"
    assert after["estimate"]["cluster"]["peak_tflops"] == 500


def test_on_sqlite_writers_of_one_process_queue_and_give_up_with_503_after_the_busy_timeout(
    client: TestClient, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL writers run side by side (row locks)")
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    assert isinstance(client.app, FastAPI)
    runtime: Runtime = client.app.state.runtime
    monkeypatch.setattr(api.deps, "SQLITE_BUSY_TIMEOUT_S", 0.0)  # no wait: fail at once

    def write(session: Session) -> None:
        repository.update_profile(session=session, name="lab", changes={"description": "1st"})

    with held_write(runtime.transaction, write):
        refused = client.patch("/v1/profiles/lab", json={"description": "2nd"}, headers=AUTH)
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"]
        assert "busy" in refused.json()["detail"]
        assert client.get("/v1/profiles/lab").status_code == 200  # readers never queue
    assert client.get("/v1/profiles/lab").json()["description"] == "1st"
    second = client.patch("/v1/profiles/lab", json={"description": "2nd"}, headers=AUTH)
    assert second.status_code == 200, second.text
