"""Unknown query parameters are refused on every route (docs/design.md §15), never ignored."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.api.conftest import AUTH, assert_problem, fixture_text

PROFILE = {"name": "lab", "gpu_model": "H100", "gpus_per_node": 8, "peak_tflops": 989}
TEXT_HEADERS = {**AUTH, "Content-Type": "text/plain"}


@pytest.fixture
def lab(client: TestClient) -> TestClient:
    assert client.post("/v1/profiles", json=PROFILE, headers=AUTH).status_code == 201
    return client


def test_a_typo_of_ranks_on_an_upload_is_422_suggesting_ranks(lab: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    response = lab.post("/v1/profiles/lab/runs?rank=16", content=text, headers=TEXT_HEADERS)
    body = assert_problem(response, 422, field="rank")
    assert body["in"] == "query"
    assert body.get("suggestion") == "ranks"
    assert "did you mean 'ranks'" in body["detail"]
    # every hint the upload documents stays accepted
    assert set(body["accepted"]) == {
        "op",
        "ranks",
        "nodes",
        "backend",
        "dtype",
        "label",
        "filename",
    }
    assert lab.get("/v1/profiles/lab/runs").json()["runs"] == []  # nothing was stored


def test_every_documented_upload_hint_is_still_accepted(lab: TestClient) -> None:
    text = fixture_text("nccl_all_reduce_8gpu.txt")
    query = "op=all_reduce&ranks=8&nodes=1&backend=nccl&dtype=float&label=x&filename=a.txt"
    response = lab.post(f"/v1/profiles/lab/runs?{query}", content=text, headers=TEXT_HEADERS)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    "path",
    [
        "/v1/profiles/lab/bandwidth?op=all_reduce&ranks=8&nodes=1&bytes=1024&bogus=1",
        "/v1/profiles/lab/curves?bogus=1",
        "/v1/profiles/lab?bogus=1",
        "/v1/presets/models?bogus=1",
        "/healthz?bogus=1",
    ],
)
def test_an_unknown_parameter_of_a_read_is_422_listing_the_accepted_ones(
    lab: TestClient, path: str
) -> None:
    body = assert_problem(lab.get(path), 422, field="bogus")
    assert "suggestion" not in body  # nothing close to "bogus"
    assert isinstance(body["accepted"], list)
    assert "is not a query parameter" in body["detail"]


def test_declared_parameters_and_aliases_still_answer(lab: TestClient) -> None:
    ok = lab.get("/v1/profiles/lab/bandwidth?op=all_reduce&ranks=8&nodes=1&bytes=1024")
    assert ok.status_code == 200, ok.text
    assert lab.get("/v1/profiles/lab/curves?op=all_reduce&include_nominal=false").status_code == 200


def test_a_body_route_refuses_a_query_parameter_it_does_not_take(
    client: TestClient, settings: Settings
) -> None:
    estimate: dict[str, Any] = create_app(settings).openapi()["paths"]["/v1/estimates"]
    assert "post" in estimate
    body = assert_problem(client.post("/v1/estimates?fidelity=paper", json={}), 422)
    assert body["field"] == "fidelity" and body["in"] == "query"
