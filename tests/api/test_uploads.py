"""Issue 10 through the API: answers that follow the measurements, say how sure they are, and
uploads users can manage (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH, assert_problem, fixture_text

A100 = {
    "name": "a100",
    "gpu_model": "A100-SXM4-40GB",
    "gpus_per_node": 8,
    "peak_tflops": 312,
    "utilization": 0.5,
}
TEXT_HEADERS = {**AUTH, "Content-Type": "text/plain"}
OKE = fixture_text("nccl_all_reduce_16gpu_2node_a100_oke.txt")
OSU_1GIB = fixture_text("osu_xccl_allreduce_1gib.txt")
MI300X = fixture_text("rccl_all_reduce_mi300x.txt")
# oracle-quickstart/oci-hpc-oke README (the fixture): printed busbw at 8 KB and 1 MB
OKE_8K, OKE_1M = 0.32, 22.97


@pytest.fixture
def a100(client: TestClient) -> TestClient:
    assert client.post("/v1/profiles", json=A100, headers=AUTH).status_code == 201
    return client


def _upload(client: TestClient, text: str, **params: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/profiles/a100/runs", content=text, headers=TEXT_HEADERS, params=params
    )
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


def _bandwidth(client: TestClient, size: float, ranks: int = 16, nodes: int = 2) -> dict[str, Any]:
    params = {"op": "all_reduce", "ranks": ranks, "nodes": nodes, "bytes": size}
    response = client.get("/v1/profiles/a100/bandwidth", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_reported_profile_answers_within_2x_at_8k_and_30_percent_at_1m(
    a100: TestClient,
) -> None:
    _upload(a100, OKE, filename="oke.txt")
    _upload(a100, OSU_1GIB, ranks=16, nodes=2, filename="osu.txt")
    small, medium = _bandwidth(a100, 8192), _bandwidth(a100, 2**20)
    assert OKE_8K / 2 <= small["busbw_gbps"] <= OKE_8K * 2
    assert medium["busbw_gbps"] == pytest.approx(OKE_1M, rel=0.30)
    for body in (small, medium):
        assert body["method"] == "measured" and "'oke.txt'" in body["source"]
        assert body["quality"]["distance_octaves"] == 0.0 and body["quality"]["weak"] is False
        assert body["warnings"] == []


def test_a_far_answer_says_it_is_weak_and_what_to_upload(a100: TestClient) -> None:
    _upload(a100, OSU_1GIB, ranks=16, nodes=2)
    body = _bandwidth(a100, 8192)
    assert body["method"] == "nominal" and body["quality"]["weak"] is True
    assert "all_reduce_perf" in body["quality"]["advice"]
    (warning,) = body["warnings"]
    assert "weak" in warning and "16 ranks on 2 node(s)" in warning


def _moe_estimate(client: TestClient, profile: str) -> dict[str, Any]:
    request = {
        "model": {"preset": "mixtral-8x7b"},
        "layout": {"pipeline": 1, "tensor": 8, "data": 2, "expert_parallel": 2},
        "training": {"global_batch_size": 16, "micro_batch_size": 1},
        "cluster": {"profile": profile},
    }
    response = client.post("/v1/estimates", json=request)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_an_estimate_without_alltoall_runs_uses_nominal_curves_and_warns(
    a100: TestClient,
) -> None:
    _upload(a100, OKE)
    body = _moe_estimate(a100, "a100")
    alltoall = [c for c in body["collectives"] if c["op"] == "alltoall"]
    assert alltoall and all(c["method"] == "nominal" for c in alltoall)
    assert all(c["quality"]["weak"] for c in alltoall)
    assert any("alltoall" in w and "alltoall_perf" in w for w in body["warnings"])
    measured = [c for c in body["collectives"] if c["method"] != "nominal"]
    assert all({"distance_octaves", "weak"} <= set(c["quality"]) for c in measured)


def test_an_upload_of_another_gpu_is_flagged_and_its_answers_are_weak(a100: TestClient) -> None:
    response = a100.post(
        "/v1/profiles/a100/runs",
        content=MI300X,
        headers=TEXT_HEADERS,
        params={"filename": "mi300x.txt"},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert [f["code"] for f in body["flags"]] == ["gpu_mismatch"]
    assert body["uploads"][0]["flags"][0]["code"] == "gpu_mismatch"
    assert any("flagged (gpu_mismatch)" in w and "MI300X" in w for w in body["warnings"])
    answer = _bandwidth(a100, 2**27, ranks=8, nodes=1)
    assert answer["quality"]["weak"] and "flagged: gpu_mismatch" in answer["source"]
    (listed,) = a100.get("/v1/profiles/a100/uploads").json()["uploads"]
    assert listed["flags"][0]["code"] == "gpu_mismatch" and listed["filename"] == "mi300x.txt"


def test_the_same_table_with_crlf_in_a_fence_is_the_same_upload(a100: TestClient) -> None:
    first = _upload(a100, OKE)
    again = a100.post(
        "/v1/profiles/a100/runs",
        content="```\r\n" + OKE.replace("\n", "\r\n") + "```\r\n",
        headers=TEXT_HEADERS,
    )
    assert again.status_code == 200, again.text
    assert again.json()["uploads"][0]["already_stored"] is True
    assert again.json()["uploads"][0]["id"] == first["uploads"][0]["id"]


def test_multipart_files_keep_their_names_label_and_per_file_hints(a100: TestClient) -> None:
    files = [
        ("files", ("oke.txt", OKE, "text/plain")),
        ("files", ("osu.txt", OSU_1GIB, "text/plain")),
    ]
    hints = {"osu.txt": {"ranks": 16, "nodes": 2, "label": "osu 1 GiB"}}
    response = a100.post(
        "/v1/profiles/a100/runs",
        files=files,
        data={"hints": json.dumps(hints)},
        params={"label": "week 47"},
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    uploads = response.json()["uploads"]
    assert [(u["filename"], u["label"]) for u in uploads] == [
        ("oke.txt", "week 47"),
        ("osu.txt", "osu 1 GiB"),
    ]
    assert [r["ranks"] for r in response.json()["runs"]] == [16, 16]


def test_multipart_errors_name_the_file(a100: TestClient) -> None:
    files = [
        ("files", ("oke.txt", OKE, "text/plain")),
        ("files", ("osu.txt", OSU_1GIB, "text/plain")),
    ]
    response = a100.post("/v1/profiles/a100/runs", files=files, headers=AUTH)
    assert_problem(response, 422, field="files[osu.txt].ranks")
    hints = {"other.txt": {"ranks": 16}}
    response = a100.post(
        "/v1/profiles/a100/runs", files=files, data={"hints": json.dumps(hints)}, headers=AUTH
    )
    assert "other.txt" in assert_problem(response, 422, field="hints")["detail"]
    response = a100.post(
        "/v1/profiles/a100/runs", files=files, data={"hints": "[1, 2]"}, headers=AUTH
    )
    assert_problem(response, 422)


def test_a_log_that_failed_says_so_and_quotes_the_failure(a100: TestClient) -> None:
    text = fixture_text("failures/nccl_failure_remote_peer.txt")  # nccl-tests issue #15
    files = [("files", ("run.log", text, "text/plain"))]
    response = a100.post("/v1/profiles/a100/runs", files=files, headers=AUTH)
    body = assert_problem(response, 422)
    assert "run.log" in body["detail"]
    assert "NCCL failure common.cu:921 'unhandled system error'" in body["detail"]


def test_uploads_page_and_runs_page_give_totals(a100: TestClient) -> None:
    for i in range(3):
        _upload(a100, OSU_1GIB.replace("13482.01", f"{13482.01 + i:.2f}"), ranks=16, nodes=2)
    page = a100.get("/v1/profiles/a100/uploads", params={"limit": 2}).json()
    assert (page["count"], page["total"], page["next_offset"]) == (2, 3, 2)
    rest = a100.get("/v1/profiles/a100/uploads", params={"limit": 2, "offset": 2}).json()
    assert (rest["count"], rest["next_offset"]) == (1, None)
    runs = a100.get("/v1/profiles/a100/runs", params={"limit": 1, "points": False}).json()
    assert (runs["count"], runs["total"], runs["limit"], runs["offset"]) == (1, 3, 1, 0)
    assert runs["next_offset"] == 1 and runs["runs"][0]["points"] is None
    assert_problem(a100.get("/v1/profiles/a100/uploads", params={"limit": 0}), 422)
    assert_problem(a100.get("/v1/profiles/a100/runs", params={"limit": 5000}), 422)


def test_disabling_an_upload_changes_answers_and_enabling_brings_them_back(
    a100: TestClient,
) -> None:
    oke = _upload(a100, OKE)["uploads"][0]["id"]
    _upload(a100, OSU_1GIB, ranks=16, nodes=2)
    before = _bandwidth(a100, 8192)
    path = f"/v1/profiles/a100/uploads/{oke}"
    assert_problem(a100.patch(path, json={"disabled": True}), 401)
    response = a100.patch(path, json={"disabled": True}, headers=AUTH)
    assert response.status_code == 200 and response.json()["disabled"] is True
    during = _bandwidth(a100, 8192)
    assert during["method"] == "nominal" and during["busbw_gbps"] != before["busbw_gbps"]
    curves = a100.get("/v1/profiles/a100/curves").json()["curves"]
    assert [c["label"] for c in curves if "oke" in c["label"]] == []
    assert a100.patch(path, json={"disabled": False}, headers=AUTH).json()["disabled"] is False
    assert _bandwidth(a100, 8192) == before


def test_removing_an_upload_deletes_its_runs(a100: TestClient) -> None:
    oke = _upload(a100, OKE)["uploads"][0]["id"]
    _upload(a100, OSU_1GIB, ranks=16, nodes=2)
    path = f"/v1/profiles/a100/uploads/{oke}"
    assert_problem(a100.delete(path), 401)
    assert a100.delete(path, headers=AUTH).status_code == 204
    assert a100.get("/v1/profiles/a100/runs").json()["total"] == 1
    assert _bandwidth(a100, 2**30)["busbw_gbps"] == pytest.approx(149.33, abs=0.01)
    assert_problem(a100.delete(path, headers=AUTH), 404)
    assert_problem(a100.patch(path, json={"disabled": True}, headers=AUTH), 404)


def test_bad_upload_changes_are_problems(a100: TestClient) -> None:
    oke = _upload(a100, OKE)["uploads"][0]["id"]
    path = f"/v1/profiles/a100/uploads/{oke}"
    assert_problem(a100.patch(path, json={"disabled": "maybe"}, headers=AUTH), 422)
    assert_problem(a100.patch(path, json={"disabled": True, "x": 1}, headers=AUTH), 422)
    assert_problem(a100.patch("/v1/profiles/a100/uploads/0", json={}, headers=AUTH), 422)
    assert_problem(a100.delete("/v1/profiles/nope/uploads/1", headers=AUTH), 404)


def test_fitted_beta_is_given_as_busbw_and_algbw(a100: TestClient) -> None:
    (run,) = _upload(a100, OKE)["runs"]
    assert run["beta_gbps"] == run["beta_algbw_gbps"]
    assert run["beta_busbw_gbps"] == pytest.approx(run["beta_algbw_gbps"] * 2 * 15 / 16)
    (curve,) = a100.get("/v1/profiles/a100/curves").json()["curves"]
    assert curve["beta_busbw_gbps"] == pytest.approx(run["beta_busbw_gbps"])
