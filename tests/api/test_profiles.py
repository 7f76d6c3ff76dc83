"""/v1/profiles: create, list, get, patch, delete."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import AUTH, assert_problem, fixture_text

NEW = {
    "name": "lab-a100",
    "gpu_model": "A100-SXM4-80GB",
    "gpus_per_node": 8,
    "peak_tflops": 312,
    "utilization": 0.45,
    "gpu_memory_gb": 80,
    "description": "our cluster",
}


def test_create_then_get(client: TestClient) -> None:
    response = client.post("/v1/profiles", json=NEW, headers=AUTH)
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/v1/profiles/lab-a100"
    body = response.json()
    assert body["utilization"] == 0.45 and body["utilization_source"] == "given"
    assert body["gpu_memory_bytes"] == 80_000_000_000 and body["nominal"] is False
    got = client.get("/v1/profiles/lab-a100").json()
    assert got["description"] == "our cluster" and got["peak_tflops"] == 312


def test_list_includes_the_nominal_profiles(client: TestClient) -> None:
    client.post("/v1/profiles", json=NEW, headers=AUTH)
    body = client.get("/v1/profiles").json()
    names = [p["name"] for p in body["profiles"]]
    assert names == sorted(names)
    assert {"dgx-a100-nominal", "dgx-h100-nominal", "lab-a100"} <= set(names)
    assert body["count"] == len(names)
    page = client.get("/v1/profiles", params={"limit": 1, "offset": 1}).json()
    assert [p["name"] for p in page["profiles"]] == names[1:2]


def test_duplicate_name_is_409(client: TestClient) -> None:
    assert client.post("/v1/profiles", json=NEW, headers=AUTH).status_code == 201
    body = assert_problem(client.post("/v1/profiles", json=NEW, headers=AUTH), 409)
    assert "lab-a100" in body["detail"]


def test_invalid_profile_is_422(client: TestClient) -> None:
    bad = {**NEW, "utilization": 1.5}
    assert_problem(client.post("/v1/profiles", json=bad, headers=AUTH), 422, field="utilization")
    bad_name = {**NEW, "name": "no spaces allowed"}
    assert_problem(client.post("/v1/profiles", json=bad_name, headers=AUTH), 422, field="name")


@pytest.mark.parametrize("name", [".", ".."])
def test_names_that_urls_normalise_away_are_refused(client: TestClient, name: str) -> None:
    body = assert_problem(
        client.post("/v1/profiles", json={**NEW, "name": name}, headers=AUTH), 422, field="name"
    )
    assert "'..'" in body["rule"]
    renamed = client.patch("/v1/profiles/dgx-a100-nominal", json={"name": name}, headers=AUTH)
    assert_problem(renamed, 422, field="name")
    for fine in ("a.b", ".x", "x.", "..."):
        assert (
            client.post("/v1/profiles", json={**NEW, "name": fine}, headers=AUTH).status_code == 201
        )


def test_unknown_profile_is_404(client: TestClient) -> None:
    assert_problem(client.get("/v1/profiles/nope"), 404)
    assert_problem(client.patch("/v1/profiles/nope", json={"utilization": 0.4}, headers=AUTH), 404)
    assert_problem(client.delete("/v1/profiles/nope", headers=AUTH), 404)


def test_patch_changes_only_given_fields_and_estimates_follow(client: TestClient) -> None:
    client.post("/v1/profiles", json=NEW, headers=AUTH)
    client.post(
        "/v1/profiles/lab-a100/runs",
        content=fixture_text("nccl_all_reduce_8gpu.txt"),
        headers={**AUTH, "Content-Type": "text/plain"},
    )
    req = {
        "model": {"preset": "gpt3-1.3b"},
        "layout": {"pipeline": 1, "tensor": 8, "data": 1},
        "training": {"global_batch_size": 8},
        "cluster": {"profile": "lab-a100"},
    }
    before = client.post("/v1/estimates", json=req).json()["iteration_time_s"]
    patched = client.patch("/v1/profiles/lab-a100", json={"utilization": 0.3}, headers=AUTH)
    assert patched.status_code == 200
    assert patched.json()["utilization"] == 0.3
    assert patched.json()["description"] == "our cluster"
    after = client.post("/v1/estimates", json=req).json()["iteration_time_s"]
    assert after > before


def test_patch_null_clears_a_nullable_field_and_rejects_required_ones(client: TestClient) -> None:
    client.post("/v1/profiles", json=NEW, headers=AUTH)
    cleared = client.patch("/v1/profiles/lab-a100", json={"gpu_memory_gb": None}, headers=AUTH)
    assert cleared.json()["gpu_memory_bytes"] is None
    bad = client.patch("/v1/profiles/lab-a100", json={"gpu_model": None}, headers=AUTH)
    assert_problem(bad, 422, field="gpu_model")


def test_rename_to_a_taken_name_is_409(client: TestClient) -> None:
    client.post("/v1/profiles", json=NEW, headers=AUTH)
    client.post("/v1/profiles", json={**NEW, "name": "other"}, headers=AUTH)
    response = client.patch("/v1/profiles/other", json={"name": "lab-a100"}, headers=AUTH)
    assert_problem(response, 409)


def test_delete_then_404(client: TestClient) -> None:
    client.post("/v1/profiles", json=NEW, headers=AUTH)
    assert client.delete("/v1/profiles/lab-a100", headers=AUTH).status_code == 204
    assert_problem(client.get("/v1/profiles/lab-a100"), 404)


def test_nominal_profiles_cannot_be_deleted(client: TestClient) -> None:
    assert_problem(client.delete("/v1/profiles/dgx-a100-nominal", headers=AUTH), 409)
    assert client.get("/v1/profiles/dgx-a100-nominal").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/profiles"),
        ("patch", "/v1/profiles/lab-a100"),
        ("delete", "/v1/profiles/lab-a100"),
    ],
)
def test_profile_writes_need_a_token(client: TestClient, method: str, path: str) -> None:
    kwargs = {"json": NEW} if method != "delete" else {}
    response = getattr(client, method)(path, **kwargs)
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")
