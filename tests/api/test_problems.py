"""RFC 9457 problem details for every kind of error, never a 500 for bad input."""

from __future__ import annotations

from tests.api.conftest import ESTIMATE, assert_problem


def test_unknown_route_is_a_404_problem(client) -> None:
    body = assert_problem(client.get("/v1/nothing-here"), 404)
    assert body["instance"] == "/v1/nothing-here"


def test_wrong_method_is_a_405_problem(client) -> None:
    response = client.delete("/v1/estimates")
    assert_problem(response, 405)
    assert "POST" in response.headers["allow"]


def test_domain_errors_carry_type_title_and_instance(client) -> None:
    bad = {**ESTIMATE, "layout": {**ESTIMATE["layout"], "data": 25}}
    body = assert_problem(client.post("/v1/estimates", json=bad), 422)
    assert body["type"] == "urn:commest:problem:layout"
    assert body["title"] == "Invalid layout"
    assert body["instance"] == "/v1/estimates"
    assert body["field"] == "training.global_batch_size"
    assert body["value"] == 1536 and "divisible" in body["rule"]


def test_a_body_that_is_not_an_object_is_422(client) -> None:
    assert_problem(client.post("/v1/estimates", json=[1, 2, 3]), 422)
    assert_problem(client.post("/v1/plans", json="gpt3"), 422)


def test_huge_values_in_errors_are_truncated(client) -> None:
    bad = {**ESTIMATE, "fidelity": "x" * 5000}
    body = assert_problem(client.post("/v1/estimates", json=bad), 422, field="fidelity")
    assert len(body["value"]) < 300
