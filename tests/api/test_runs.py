"""/v1/profiles/{name}/runs (uploads) and what is read from them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine
from starlette.requests import Request

from api.plots import PNG_SIGNATURE
from api.routes.runs import read_upload
from api.settings import Settings
from estimator.errors import LimitError
from tests.api.conftest import AUTH, assert_problem, fixture_text, make_client, row_counts

PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}
TEXT_HEADERS = {**AUTH, "Content-Type": "text/plain"}


@pytest.fixture
def lab(client: TestClient) -> TestClient:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    return client


def test_upload_text_stores_runs_with_points(lab: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    response = lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS)
    assert response.status_code == 201, response.text
    body = response.json()
    assert len(body["runs"]) == 1
    run = body["runs"][0]
    assert (run["collective"], run["ranks"], run["nodes"]) == ("all_reduce", 8, 1)
    assert run["already_stored"] is False and run["backend"] == "nccl"
    point = run["points"][0]
    assert set(point) == {"size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "in_place"}
    listed = lab.get("/v1/profiles/lab/runs").json()
    assert listed["count"] == 1 and listed["runs"][0]["id"] == run["id"]


def test_upload_same_text_twice_stores_once(lab: TestClient, db_engine: Engine) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    first = lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS)
    counts = row_counts(db_engine)
    second = lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS)
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["runs"][0]["already_stored"] is True
    assert second.json()["runs"][0]["id"] == first.json()["runs"][0]["id"]
    assert row_counts(db_engine) == counts
    assert counts["uploads"] == 1


def test_multipart_with_several_files(lab: TestClient) -> None:
    files = [
        ("files", ("ar.txt", fixture_text("nccl_all_reduce_8gpu.txt"), "text/plain")),
        ("files", ("ag.txt", fixture_text("nccl_all_gather_8gpu.txt"), "text/plain")),
    ]
    response = lab.post("/v1/profiles/lab/runs", files=files, headers=AUTH)
    assert response.status_code == 201, response.text
    ops = sorted(r["collective"] for r in response.json()["runs"])
    assert ops == ["all_gather", "all_reduce"]


def test_text_lacking_ranks_is_422_naming_the_query_parameter(
    lab: TestClient, db_engine: Engine
) -> None:
    text = fixture_text("nccl_table_only.txt")
    before = row_counts(db_engine)
    body = assert_problem(
        lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS), 422, field="ranks"
    )
    assert "ranks=" in body["rule"]
    assert row_counts(db_engine) == before
    fixed = lab.post(
        "/v1/profiles/lab/runs",
        params={"ranks": 8, "nodes": 1},
        content=text,
        headers=TEXT_HEADERS,
    )
    assert fixed.status_code == 201, fixed.text


def test_failed_upload_leaves_row_counts_unchanged(lab: TestClient, db_engine: Engine) -> None:
    before = row_counts(db_engine)
    files = [
        ("files", ("good.txt", fixture_text("nccl_all_reduce_8gpu.txt"), "text/plain")),
        ("files", ("bad.txt", "this is not a benchmark\n", "text/plain")),
    ]
    assert_problem(lab.post("/v1/profiles/lab/runs", files=files, headers=AUTH), 422)
    assert row_counts(db_engine) == before


def test_unreadable_text_is_422_quoting_lines(lab: TestClient) -> None:
    response = lab.post("/v1/profiles/lab/runs", content="hello\nworld\n", headers=TEXT_HEADERS)
    body = assert_problem(response, 422)
    assert body["lines"][0]["text"] == "hello"


def test_non_utf8_body_is_422(lab: TestClient) -> None:
    response = lab.post("/v1/profiles/lab/runs", content=b"\xff\xfe\x00x", headers=TEXT_HEADERS)
    assert_problem(response, 422, field="body")


def test_upload_to_unknown_profile_is_404(client: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    assert_problem(client.post("/v1/profiles/nope/runs", content=text, headers=TEXT_HEADERS), 404)


def test_upload_without_token_is_401(lab: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    response = lab.post("/v1/profiles/lab/runs", content=text)
    assert_problem(response, 401)


def _small_caps(tmp_path: Path, db_url: str) -> Settings:
    return Settings(
        database_url=db_url,
        data_dir=tmp_path,
        api_token=SecretStr("test-token"),
        max_upload_bytes=4096,
        max_upload_files=2,
    )


def test_body_over_the_cap_is_413_from_content_length(tmp_path: Path, db_url: str) -> None:
    with make_client(_small_caps(tmp_path, db_url)) as client:
        client.post("/v1/profiles", json=PROFILE, headers=AUTH)
        big = fixture_text("nccl_all_reduce_8gpu.txt")
        assert len(big.encode()) > 4096
        body = assert_problem(
            client.post("/v1/profiles/lab/runs", content=big, headers=TEXT_HEADERS), 413
        )
        assert "4096" in body["detail"]


def test_streamed_body_over_the_cap_is_413_without_content_length(
    tmp_path: Path, db_url: str
) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"x" * 1024

    with make_client(_small_caps(tmp_path, db_url)) as client:
        client.post("/v1/profiles", json=PROFILE, headers=AUTH)
        response = client.post("/v1/profiles/lab/runs", content=chunks(), headers=TEXT_HEADERS)
        assert_problem(response, 413)
    assert "content-length" not in {k.lower() for k in response.request.headers}


def _endless_request(received: list[int], headers: list[tuple[bytes, bytes]]) -> Request:
    async def receive() -> dict[str, object]:
        received.append(1)
        return {"type": "http.request", "body": b"y" * 1024, "more_body": True}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    return Request(scope, receive)


def test_reading_stops_at_the_cap_instead_of_reading_the_whole_body() -> None:
    received: list[int] = []
    request = _endless_request(received, [(b"content-type", b"text/plain")])
    with pytest.raises(LimitError):
        asyncio.run(read_upload(request, max_bytes=10 * 1024, max_files=2))
    assert len(received) == 11  # one chunk past the cap, then stop


def test_multipart_parts_are_counted_while_streaming() -> None:
    received: list[int] = []
    part = b"--B\r\nContent-Disposition: form-data; name=f; filename=a\r\n\r\nx\r\n"

    async def receive() -> dict[str, object]:
        received.append(1)
        return {"type": "http.request", "body": part, "more_body": True}

    headers = [(b"content-type", b"multipart/form-data; boundary=B")]
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)
    with pytest.raises(LimitError, match="more than 2 files"):
        asyncio.run(read_upload(request, max_bytes=1 << 20, max_files=2))
    assert len(received) == 3  # refused at the 3rd part's headers, the endless rest unread


def test_streamed_multipart_over_the_cap_is_413_not_a_parse_error(
    tmp_path: Path, db_url: str
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'--B\r\nContent-Disposition: form-data; name="files"; filename="a"\r\n\r\n'
        for _ in range(10):
            yield b"x" * 1024

    headers = {**AUTH, "Content-Type": "multipart/form-data; boundary=B"}
    with make_client(_small_caps(tmp_path, db_url)) as client:
        client.post("/v1/profiles", json=PROFILE, headers=AUTH)
        response = client.post("/v1/profiles/lab/runs", content=chunks(), headers=headers)
        body = assert_problem(response, 413)
    assert "COMMEST_MAX_UPLOAD_BYTES" in body["detail"]


def test_too_many_files_is_413(tmp_path: Path, db_url: str) -> None:
    with make_client(_small_caps(tmp_path, db_url)) as client:
        client.post("/v1/profiles", json=PROFILE, headers=AUTH)
        files = [("files", (f"f{i}.txt", "x\n", "text/plain")) for i in range(3)]
        body = assert_problem(client.post("/v1/profiles/lab/runs", files=files, headers=AUTH), 413)
        assert "2 files" in body["detail"]


def test_bandwidth_answers_with_method_and_source(lab: TestClient) -> None:
    lab.post(
        "/v1/profiles/lab/runs",
        content=fixture_text("nccl_all_reduce_8gpu.txt"),
        headers=TEXT_HEADERS,
    )
    params = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": 1 << 20}
    response = lab.get("/v1/profiles/lab/bandwidth", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["method"] == "measured" and "run" in body["source"]
    assert body["time_us"] == pytest.approx(
        2 * 7 / 8 * (1 << 20) / (body["busbw_gbps"] * 1e3), rel=1e-9
    )
    between = lab.get("/v1/profiles/lab/bandwidth", params={**params, "bytes": 3 << 20}).json()
    assert between["method"] == "interpolated"


@pytest.fixture
def measured(lab: TestClient) -> TestClient:
    """Profile ``lab`` with one all_reduce run (8 ranks, 1 node) uploaded."""
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    assert lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS).is_success
    return lab


def test_op_takes_the_common_spellings_and_refuses_others_naming_the_choices(
    measured: TestClient,
) -> None:
    lab = measured
    params = {"ranks": 8, "nodes": 1, "bytes": 1 << 20}
    for spelling in ("all_reduce", "allreduce", "All-Reduce"):
        response = lab.get("/v1/profiles/lab/bandwidth", params={**params, "op": spelling})
        assert response.status_code == 200 and response.json()["op"] == "all_reduce", spelling
    assert len(lab.get("/v1/profiles/lab/runs", params={"op": "allreduce"}).json()["runs"]) == 1
    bad = lab.get("/v1/profiles/lab/tuning-table", params={"op": "teleport", "ranks": 8})
    assert "all_gather" in assert_problem(bad, 422, field="op")["rule"]


def test_bandwidth_of_a_reduction_over_one_rank_is_422_not_a_null(measured: TestClient) -> None:
    params = {"op": "all_reduce", "ranks": 1, "nodes": 1, "bytes": 1 << 20}
    response = measured.get("/v1/profiles/lab/bandwidth", params=params)
    body = assert_problem(response, 422, field="op, ranks, nodes, bytes")
    assert body["value"]["ranks"] == 1 and "algbw_gbps" in body["rule"]


def test_bandwidth_without_a_run_falls_back_to_the_gpu_familys_nominal_curves(
    lab: TestClient,
) -> None:
    params = {"op": "alltoall", "ranks": 16, "nodes": 2, "bytes": 1 << 20}
    response = lab.get("/v1/profiles/lab/bandwidth", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["method"] == "nominal" and "dgx-h100-nominal" in body["source"]


def test_bandwidth_without_a_run_or_a_known_gpu_family_is_404(lab: TestClient) -> None:
    profile = {**PROFILE, "name": "odd", "gpu_model": "Gaudi2"}
    assert lab.post("/v1/profiles", json=profile, headers=AUTH).status_code == 201
    params = {"op": "alltoall", "ranks": 16, "nodes": 2, "bytes": 1 << 20}
    body = assert_problem(lab.get("/v1/profiles/odd/bandwidth", params=params), 404)
    assert "upload" in body["detail"] and "Gaudi2" in body["detail"]


def test_bandwidth_with_bad_parameters_is_422(lab: TestClient) -> None:
    params = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": -1}
    assert_problem(lab.get("/v1/profiles/lab/bandwidth", params=params), 422, field="bytes")
    params = {"op": "teleport", "ranks": 8, "nodes": 1, "bytes": 10}
    assert_problem(lab.get("/v1/profiles/lab/bandwidth", params=params), 422, field="op")


def test_curves_json_and_png(lab: TestClient) -> None:
    lab.post(
        "/v1/profiles/lab/runs",
        content=fixture_text("nccl_all_reduce_8gpu.txt"),
        headers=TEXT_HEADERS,
    )
    curves = lab.get("/v1/profiles/lab/curves").json()["curves"]
    assert len(curves) == 1 and curves[0]["op"] == "all_reduce"
    assert curves[0]["sizes_bytes"] == sorted(curves[0]["sizes_bytes"])
    png = lab.get("/v1/profiles/lab/curves", params={"format": "png"})
    assert png.status_code == 200 and png.content.startswith(PNG_SIGNATURE)
    nominal = lab.get("/v1/profiles/dgx-h100-nominal/curves", params={"op": "all_reduce"})
    assert nominal.json()["curves"] and all(c["nominal"] for c in nominal.json()["curves"])


def test_tuning_table_picks_the_best_backend(lab: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    lab.post("/v1/profiles/lab/runs", content=text, headers=TEXT_HEADERS)
    slower = text.replace("  12.00 ", "  24.00 ")
    lab.post(
        "/v1/profiles/lab/runs",
        params={"backend": "mpi"},
        content=slower.replace("nccl-tests version", "nccl-tests  version"),
        headers=TEXT_HEADERS,
    )
    response = lab.get("/v1/profiles/lab/tuning-table", params={"op": "all_reduce", "ranks": 8})
    assert response.status_code == 200, response.text
    rows = response.json()["rows"]
    assert rows and all(r["best_backend"] in ("nccl", "mpi") for r in rows)
    assert [r["size_bytes"] for r in rows] == sorted(r["size_bytes"] for r in rows)
    assert_problem(
        lab.get("/v1/profiles/lab/tuning-table", params={"op": "alltoall", "ranks": 8}), 404
    )


def test_estimate_with_an_uploaded_profile_uses_measured_bandwidth(lab: TestClient) -> None:
    lab.patch("/v1/profiles/lab", json={"utilization": 0.5}, headers=AUTH)
    lab.post(
        "/v1/profiles/lab/runs",
        content=fixture_text("nccl_all_reduce_8gpu.txt"),
        headers=TEXT_HEADERS,
    )
    req = {
        "model": {"preset": "gpt3-1.3b"},
        "layout": {"pipeline": 1, "tensor": 8, "data": 1},
        "training": {"global_batch_size": 8},
        "cluster": {"profile": "lab"},
    }
    response = lab.post("/v1/estimates", json=req)
    assert response.status_code == 200, response.text
    tp = [c for c in response.json()["collectives"] if c["kind"] == "tp"]
    assert tp and {c["method"] for c in tp} <= {"measured", "interpolated", "extrapolated"}
