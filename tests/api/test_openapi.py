"""OpenAPI at /openapi.json and /docs, with the request examples."""

from __future__ import annotations

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
