"""OpenAPI at /openapi.json and /docs, with the request examples."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.schemas import EXAMPLE_ESTIMATE


def test_openapi_lists_every_resource_with_examples(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    paths = set(spec["paths"])
    assert {
        "/v1/estimates",
        "/v1/traffic-matrices",
        "/v1/plans",
        "/v1/checks",
        "/v1/baselines/{name}",
        "/v1/profiles",
        "/v1/profiles/{name}",
        "/v1/profiles/{name}/runs",
        "/v1/profiles/{name}/bandwidth",
        "/v1/profiles/{name}/curves",
        "/v1/profiles/{name}/tuning-table",
        "/v1/profiles/{name}/calibrations",
        "/v1/presets/models",
        "/v1/presets/gpus",
        "/healthz",
        "/readyz",
    } <= paths
    schemas = spec["components"]["schemas"]
    assert EXAMPLE_ESTIMATE in schemas["EstimateRequest"]["examples"]
    upload = spec["paths"]["/v1/profiles/{name}/runs"]["post"]["requestBody"]["content"]
    assert {"text/plain", "multipart/form-data"} <= set(upload)
    security = spec["paths"]["/v1/profiles"]["post"].get("security")
    assert security, "writes declare the bearer scheme"
    assert "security" not in spec["paths"]["/v1/estimates"]["post"]


def test_docs_page_is_served(client: TestClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200
    assert "swagger" in response.text.lower()


def _local_assets(html: str) -> list[str]:
    """The src/href URLs of a page, after checking that none leaves the server."""
    assert not re.search(r"(https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}/", html), "an external URL"
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls and all(url.startswith("/") for url in urls), urls
    return urls


@pytest.mark.parametrize(("page", "asset"), [("/docs", "swagger-ui"), ("/redoc", "redoc")])
def test_docs_pages_load_only_assets_the_server_has(
    client: TestClient, page: str, asset: str
) -> None:
    response = client.get(page)
    assert response.status_code == 200
    urls = _local_assets(response.text)
    assert any(asset in url for url in urls), urls
    for url in urls:
        got = client.get(url)
        assert got.status_code == 200 and len(got.content) > 1000, url


def test_plan_request_schema_names_the_grouped_constraints(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    plan = schemas["PlanRequest"]["properties"]
    grouped = schemas["PlanConstraints"]["properties"]
    assert "constraints" in plan
    assert set(grouped) == {
        "max_tensor",
        "micro_batch_sizes",
        "zero_stages",
        "recompute",
        "recompute_num_layers",
        "sequence_parallel",
        "max_virtual_stages",
        "drop_infeasible",
        "memory_headroom",
        "tensor_within_node",
        "precision",
        "context_parallel",
        "expert_parallel",
        "experts_folded",
    }
    assert set(grouped) <= set(plan)  # or at the top level
    assert "tie_tolerance" in plan
    for name in ("memory_headroom", "tensor_within_node", "recompute", "precision"):
        assert grouped[name].get("description"), name  # the workbench's filters are documented


def _enum(spec: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The enum a parameter schema allows (through $ref and anyOf with null)."""
    for option in schema.get("anyOf", [schema]):
        if "$ref" in option:
            option = spec["components"]["schemas"][option["$ref"].rsplit("/", 1)[1]]
        if "enum" in option:
            return list(option["enum"])
    return []


def test_query_parameters_with_a_fixed_vocabulary_are_enums(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    found = {}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["in"] == "query" and param["name"] in ("op", "format"):
                    found[(method, path, param["name"])] = _enum(spec, param["schema"])
    assert len(found) == 6  # op of upload, list, bandwidth, curves, tuning; curves' format
    for where, values in found.items():
        assert values, f"{where} is a free string"
    assert "all_reduce" in found[("get", "/v1/profiles/{name}/bandwidth", "op")]
    assert found[("get", "/v1/profiles/{name}/curves", "format")] == ["json", "png"]
