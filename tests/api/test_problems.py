"""RFC 9457 problem details for every kind of error, never a 500 for bad input."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.schemas import ThroughputOut
from api.settings import Settings
from tests.api.conftest import AUTH, ESTIMATE, assert_problem


def test_unknown_route_is_a_404_problem(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/nothing-here"), 404)
    assert body["instance"] == "/v1/nothing-here"


def test_domain_errors_carry_type_title_and_instance(client: TestClient) -> None:
    bad = {**ESTIMATE, "layout": {**ESTIMATE["layout"], "data": 25}}
    body = assert_problem(client.post("/v1/estimates", json=bad), 422)
    assert body["type"] == "urn:commest:problem:layout"
    assert body["title"] == "Invalid layout"
    assert body["instance"] == "/v1/estimates"
    assert body["field"] == "training.global_batch_size"
    assert body["value"] == 1536 and "divisible" in body["rule"]


def test_a_body_that_is_not_an_object_is_422(client: TestClient) -> None:
    assert_problem(client.post("/v1/estimates", json=[1, 2, 3]), 422)
    assert_problem(client.post("/v1/plans", json="gpt3"), 422)


@pytest.mark.parametrize("path", ["/v1/estimates", "/v1/plans", "/v1/checks", "/v1/timelines"])
def test_a_body_that_is_not_json_is_named_as_the_body_with_how_to_send_it(
    client: TestClient, path: str
) -> None:
    # was field "[9]", value {}, rule "JSON decode error"
    broken = client.post(path, content=b'{"model": ', headers={"Content-Type": "application/json"})
    body = assert_problem(broken, 422, field="body")
    assert body.get("value") is None
    assert "not valid JSON" in body["rule"] and "at character 10" in body["rule"]
    assert "content-type: application/json" in body["rule"]
    # was "Input should be a valid dictionary", value "<N bytes>": the content type is the cause
    plain = client.post(path, content=b"{}", headers={"Content-Type": "text/plain"})
    body = assert_problem(plain, 422, field="body")
    assert "content type" in body["rule"] and "application/json" in body["rule"]


def test_huge_values_in_errors_are_truncated(client: TestClient) -> None:
    bad = {**ESTIMATE, "fidelity": "x" * 5000}
    body = assert_problem(client.post("/v1/estimates", json=bad), 422, field="fidelity")
    assert len(body["value"]) < 300


def test_infinity_and_huge_numbers_are_422_not_500(client: TestClient) -> None:
    raw = (
        b'{"model": {"preset": "gpt3-175b"}, "layout": {"pipeline": 8, "tensor": 8, "data": 24},'
        b' "training": {"global_batch_size": 1536}, "cluster": {"profile": "dgx-a100-nominal",'
        b' "peak_tflops": Infinity}}'
    )
    response = client.post(
        "/v1/estimates", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 422, field="cluster.peak_tflops")
    huge = {**ESTIMATE, "layout": {**ESTIMATE["layout"], "data": 10**30}}
    assert_problem(client.post("/v1/estimates", json=huge), 422, field="layout.data")
    assert_problem(client.get("/v1/profiles", params={"offset": 10**30}), 422, field="offset")


def test_a_vanishing_peak_is_422_not_a_non_finite_answer(client: TestClient) -> None:
    tiny = {**ESTIMATE, "cluster": {"profile": "dgx-a100-nominal", "peak_tflops": 1e-320}}
    assert_problem(client.post("/v1/estimates", json=tiny), 422)


@pytest.mark.parametrize("path", ["/v1/estimates", "/v1/checks", "/v1/timelines"])
def test_a_peak_and_utilization_whose_product_underflows_name_the_utilization(
    client: TestClient, path: str
) -> None:
    # 1e-300 TFLOP/s × 1e-300 is 0 FLOP/s: was "a value is outside the range commest computes
    # with (float division by zero)", naming nothing
    profile = {"name": "tiny", "gpu_model": "A100", "gpus_per_node": 8, "peak_tflops": 1e-300}
    assert client.post("/v1/profiles", json=profile, headers=AUTH).status_code == 201
    body = {**ESTIMATE, "cluster": {"profile": "tiny", "utilization": 1e-300}}
    if path == "/v1/checks":
        body["max_iteration_time_s"] = 30.0
    problem = assert_problem(client.post(path, json=body), 422, field="cluster.utilization")
    assert "underflows to 0 FLOP/s" in problem["detail"]
    assert "peak_tflops" in problem["detail"]


def test_a_405_lists_every_method_of_the_path(client: TestClient) -> None:
    response = client.options("/v1/profiles")  # GET and POST are two routes
    assert_problem(response, 405)
    assert response.headers["allow"] == "GET, HEAD, POST"
    assert client.post("/v1/profiles/lab").headers["allow"] == "DELETE, GET, HEAD, PATCH"
    assert client.delete("/v1/estimates").headers["allow"] == "POST"


TINY_U = {"profile": "dgx-a100-nominal", "utilization": 5e-324}  # valid (> 0), time overflows


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/estimates", {**ESTIMATE, "cluster": TINY_U}),
        ("POST", "/v1/traffic-matrices", {**ESTIMATE, "cluster": TINY_U, "level": "node"}),
        ("POST", "/v1/checks", {**ESTIMATE, "cluster": TINY_U, "max_iteration_time_s": 1.0}),
        (
            "POST",
            "/v1/plans",
            {
                "model": {"preset": "gpt3-1.3b"},
                "training": {"global_batch_size": 64},
                "cluster": TINY_U,
                "gpus": 16,
            },
        ),
        ("PUT", "/v1/baselines/tiny", {**ESTIMATE, "cluster": TINY_U}),
    ],
)
def test_an_answer_that_is_not_finite_is_a_422_naming_the_figures(
    client: TestClient, method: str, path: str, body: dict[str, Any]
) -> None:
    response = client.request(method, path, json=body, headers=AUTH)
    problem = assert_problem(response, 422, field="cluster.peak_tflops, cluster.utilization")
    assert problem["value"]["cluster.utilization"] == 5e-324
    assert "non-finite" in problem["rule"]
    assert client.get("/v1/baselines/tiny").status_code == 404  # the failed write left nothing


def test_a_response_built_outside_finite_answer_is_still_no_500(
    app_settings: Settings,
) -> None:
    def non_finite() -> ThroughputOut:
        return ThroughputOut(
            tokens_per_s=math.inf, model_tflops_per_gpu=1, hardware_tflops_per_gpu=1, mfu=1, hfu=1
        )

    def broken() -> ThroughputOut:
        return ThroughputOut.model_validate({"tokens_per_s": 1.0})  # a bug: members missing

    app = create_app(app_settings)
    app.add_api_route("/non-finite", non_finite)
    app.add_api_route("/broken", broken)
    with TestClient(app, raise_server_exceptions=False) as client:
        body = assert_problem(client.get("/non-finite"), 422)
        assert "tokens_per_s" in body["detail"]
        assert_problem(client.get("/broken"), 500)


@pytest.mark.parametrize("size", ["5e-324", "0.5"])
def test_a_bandwidth_for_less_than_one_byte_is_422(client: TestClient, size: str) -> None:
    # bytes=5e-324 answered 200 with time_us 1.7e-322: no message is smaller than a byte
    query = {"op": "all_reduce", "ranks": 8, "nodes": 1, "bytes": size}
    response = client.get("/v1/profiles/dgx-a100-nominal/bandwidth", params=query)
    problem = assert_problem(response, 422, field="bytes")
    assert "greater than or equal to 1" in problem["rule"]
    query["bytes"] = "1"
    assert client.get("/v1/profiles/dgx-a100-nominal/bandwidth", params=query).status_code == 200


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests arrays or objects deeper"),
        (b'{"model": {"num_layers": ' + b"9" * 5000 + b"}}", "integer too long"),
    ],
)
def test_a_body_the_json_parser_gives_up_on_says_why(
    client: TestClient, body: bytes, why: str
) -> None:
    # was a 400 "There was an error parsing the body", naming no cause
    response = client.post(
        "/v1/estimates", content=body, headers={"Content-Type": "application/json"}
    )
    problem = assert_problem(response, 400)
    assert why in problem["detail"] and "application/json" in problem["detail"]


@pytest.mark.parametrize(
    "path", ["/v1/profiles/dgx-a100-nominal/runs", "/v1/profiles/dgx-a100-nominal/training-logs"]
)
def test_an_upload_that_is_not_utf8_names_the_byte_and_its_offset(
    client: TestClient, path: str
) -> None:
    # said "must be UTF-8 text (byte 3 is not)": byte 3, or the byte at offset 3?
    body = b"abc\xff rest"
    response = client.post(path, content=body, headers={"Content-Type": "text/plain", **AUTH})
    problem = assert_problem(response, 422, field="body")
    assert "byte 0xff at offset 3 is not" in problem["rule"]
