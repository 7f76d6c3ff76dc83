"""Issue 9 §5: two real server processes over one database agree on every acknowledged write.

Two uvicorn processes (``tests/api/servers.Server``) serve the same database, SQLite file and
PostgreSQL, as two workers or two replicas would. For every kind of write (upload, PATCH,
DELETE, baseline PUT) the second server first answers from warm caches, then the write goes
through the first one, and the very next request to the second one must see it: no sleep,
no retry, no TTL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import fixture_text
from tests.api.servers import Server
from tests.api.test_caches import FIXTURE_BUSBW_GBPS, half_bandwidth

pytestmark = pytest.mark.slow

TOKEN = "workers-token"
PROFILE = {
    "name": "lab",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "peak_tflops": 989,
    "utilization": 0.5,
}
TEXT = fixture_text("nccl_all_reduce_8gpu.txt")
ALL_GATHER = fixture_text("nccl_all_gather_8gpu.txt")
ESTIMATE: dict[str, Any] = {
    "model": {"preset": "gpt3-1.3b"},
    "layout": {"pipeline": 1, "tensor": 8, "data": 1},
    "training": {"global_batch_size": 8},
    "cluster": {"profile": "lab"},
}
BIG = {"ranks": 8, "nodes": 1, "bytes": 134217728}


@pytest.fixture
def pair(db_url: str, tmp_path: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Clients of two servers over the same (emptied) database: (writer, reader)."""
    with (
        Server(db_url, tmp_path / "a", token=TOKEN) as first,
        Server(db_url, tmp_path / "b", token=TOKEN) as second,
        httpx.Client(base_url=first.base_url, headers=first.auth, timeout=60) as writer,
        httpx.Client(base_url=second.base_url, timeout=60) as reader,
    ):
        yield writer, reader


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def bandwidth(client: httpx.Client, op: str) -> httpx.Response:
    return client.get("/v1/profiles/lab/bandwidth", params={"op": op, **BIG})


def upload(client: httpx.Client, text: str) -> None:
    ok(client.post("/v1/profiles/lab/runs", content=text), 201)


def test_every_acknowledged_write_of_one_server_is_seen_by_the_next_request_to_the_other(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    writer, reader = pair
    ok(writer.post("/v1/profiles", json=PROFILE), 201)
    upload(writer, TEXT)
    assert ok(bandwidth(reader, "all_reduce"))["busbw_gbps"] == pytest.approx(FIXTURE_BUSBW_GBPS)
    warm = ok(reader.post("/v1/estimates", json=ESTIMATE))

    # upload: a collective the profile had no run of becomes measured at once
    before = bandwidth(reader, "all_gather")
    assert before.status_code == 404 or before.json()["method"] != "measured"
    upload(writer, ALL_GATHER)
    assert ok(bandwidth(reader, "all_gather"))["method"] == "measured"

    # PATCH: the estimate of the other server uses the new figures at once
    ok(writer.patch("/v1/profiles/lab", json={"utilization": 0.25}))
    patched = ok(reader.post("/v1/estimates", json=ESTIMATE))
    assert patched["cluster"]["utilization"] == pytest.approx(0.25)
    assert patched["iteration_time_s"] != pytest.approx(warm["iteration_time_s"])
    ok(writer.patch("/v1/profiles/lab", json={"peak_tflops": 500}))
    assert ok(reader.post("/v1/estimates", json=ESTIMATE))["cluster"]["peak_tflops"] == 500

    # DELETE: gone for the other server at once
    ok(writer.delete("/v1/profiles/lab"), 204)
    assert reader.post("/v1/estimates", json=ESTIMATE).status_code == 404
    assert bandwidth(reader, "all_reduce").status_code == 404

    # created again with half the bandwidth (issue 10), through the first server
    ok(writer.post("/v1/profiles", json=PROFILE), 201)
    upload(writer, half_bandwidth(TEXT))
    half = ok(bandwidth(reader, "all_reduce"))["busbw_gbps"]
    assert half == pytest.approx(FIXTURE_BUSBW_GBPS / 2, rel=1e-3)


def test_a_baseline_put_through_one_server_is_checked_against_by_the_other(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    writer, reader = pair
    nominal = {**ESTIMATE, "cluster": {"profile": "dgx-a100-nominal"}}
    check = {**nominal, "baseline": "nightly"}
    assert reader.get("/v1/baselines/nightly").status_code == 404
    assert reader.post("/v1/checks", json=check).status_code == 404

    created = ok(writer.put("/v1/baselines/nightly", json=nominal), 201)
    seen = ok(reader.get("/v1/baselines/nightly"))
    assert seen["iteration_time_s"] == pytest.approx(created["iteration_time_s"])
    assert ok(reader.post("/v1/checks", json=check))["passed"] is True

    bigger = {**nominal, "training": {"global_batch_size": 64}}
    replaced = ok(writer.put("/v1/baselines/nightly", json=bigger))
    assert replaced["iteration_time_s"] > created["iteration_time_s"]
    seen = ok(reader.get("/v1/baselines/nightly"))
    assert seen["iteration_time_s"] == pytest.approx(replaced["iteration_time_s"])
    ok(writer.delete("/v1/baselines/nightly"), 204)
    assert reader.get("/v1/baselines/nightly").status_code == 404
