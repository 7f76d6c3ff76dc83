"""RFC 9457 problem details for every kind of error, never a 500 for bad input."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.conftest import ESTIMATE, assert_problem


def test_unknown_route_is_a_404_problem(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/nothing-here"), 404)
    assert body["instance"] == "/v1/nothing-here"


def test_wrong_method_is_a_405_problem(client: TestClient) -> None:
    response = client.delete("/v1/estimates")
    assert_problem(response, 405)
    assert "POST" in response.headers["allow"]


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
