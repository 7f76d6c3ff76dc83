"""POST /v1/traffic-matrices is bounded by the entries it would build
(COMMEST_MAX_MATRIX_ENTRIES, docs/design.md §5.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.settings import Settings
from tests.api.conftest import SCALAR_C, assert_problem, make_client, request


def _layout(p: int, t: int, d: int) -> dict[str, Any]:
    return request(
        SCALAR_C,
        model={"preset": "gpt3-1.3b"},
        layout={"pipeline": p, "tensor": t, "data": d},
        training={"global_batch_size": 65_536},
        fidelity="detailed",
        algorithm="direct",
        format="json",
    )


# The three requests that once cost 18 s and 3.7 GB, a MemoryError (500), and a 32 GiB
# allocation: each is a 413 now, answered before any pair is made.
@pytest.mark.parametrize(
    ("p", "t", "d", "entries"),
    [
        # t groups of d data-parallel peers, d groups of t tensor-parallel peers, all pairs
        (1, 8, 2048, 8 * 2048 * 2047 + 2048 * 8 * 7),
        (1, 8, 4096, 8 * 4096 * 4095 + 4096 * 8 * 7),
        (1, 1, 65_536, 65_536 * 65_535),
    ],
)
def test_large_direct_matrices_are_refused_with_413(
    client: TestClient, p: int, t: int, d: int, entries: int
) -> None:
    response = client.post("/v1/traffic-matrices", json=_layout(p, t, d))
    body = assert_problem(response, 413)
    detail = body["detail"]
    assert f"{entries:,}" in detail and "1,000,000" in detail
    assert "COMMEST_MAX_MATRIX_ENTRIES" in detail
    assert "level=node" in detail and "algorithm=ring" in detail
    assert body["entries"] == entries and body["max_matrix_entries"] == 1_000_000


def test_the_ring_of_the_same_layout_answers(client: TestClient) -> None:
    ring = {**_layout(1, 8, 2048), "algorithm": "ring", "format": "csv"}
    response = client.post("/v1/traffic-matrices", json=ring)
    assert response.status_code == 200, response.text


def _capped(tmp_path: Path, db_url: str, entries: int) -> Settings:
    return Settings(
        database_url=db_url,
        data_dir=tmp_path,
        api_token=SecretStr("t"),
        max_matrix_entries=entries,
    )


def test_a_matrix_at_the_cap_answers_and_one_entry_more_is_refused(
    tmp_path: Path, db_url: str
) -> None:
    small = _layout(2, 4, 4)
    with make_client(_capped(tmp_path, db_url, 10**6)) as client:
        entries = client.post("/v1/traffic-matrices", json=small).json()["totals"]["entries"]
    with make_client(_capped(tmp_path, db_url, entries)) as client:
        ok = client.post("/v1/traffic-matrices", json=small)
        assert ok.status_code == 200, ok.text
        assert ok.json()["totals"]["entries"] == entries
    with make_client(_capped(tmp_path, db_url, entries - 1)) as client:
        body = assert_problem(client.post("/v1/traffic-matrices", json=small), 413)
        assert body["entries"] == entries


def test_node_level_direct_is_bounded_by_node_pairs(client: TestClient) -> None:
    # 4,096 GPUs, direct: 16.8 M GPU pairs refused, but only 512 nodes (at most 262,144 pairs
    # per kind) at node level
    gpu = client.post("/v1/traffic-matrices", json=_layout(1, 1, 4096))
    assert_problem(gpu, 413)
    node = client.post("/v1/traffic-matrices", json={**_layout(1, 1, 4096), "level": "node"})
    assert node.status_code == 200, node.text
    assert node.json()["size"] == 512


# --- view=network: only the traffic between different nodes ------------------------------

SMALL = request(
    SCALAR_C,
    model={"preset": "gpt3-1.3b"},
    layout={"pipeline": 2, "tensor": 4, "data": 4},
    training={"global_batch_size": 64},
    fidelity="detailed",
)


def test_network_view_drops_the_intra_node_gpu_pairs(client: TestClient) -> None:
    every = client.post("/v1/traffic-matrices", json=SMALL).json()
    network = client.post("/v1/traffic-matrices", json={**SMALL, "view": "network"}).json()
    assert every["view"] == "all" and network["view"] == "network"
    g = network["gpus_per_node"]
    assert network["rows"] and all(r["src"] // g != r["dst"] // g for r in network["rows"])
    crossing = [r for r in every["rows"] if r["src"] // g != r["dst"] // g]
    assert network["rows"] == crossing
    assert network["totals"]["entries"] == len(crossing) < every["totals"]["entries"]
    assert "tp" not in network["totals"]["by_kind"]  # t=4 fits in a node of 8


def test_network_view_at_node_level_drops_the_diagonal(client: TestClient) -> None:
    body = {**SMALL, "level": "node"}
    every = client.post("/v1/traffic-matrices", json=body).json()
    network = client.post("/v1/traffic-matrices", json={**body, "view": "network"}).json()
    assert any(r["src"] == r["dst"] for r in every["rows"])
    assert network["rows"] == [r for r in every["rows"] if r["src"] != r["dst"]]


def test_network_view_applies_to_csv_and_png(client: TestClient) -> None:
    csv_text = client.post(
        "/v1/traffic-matrices", json={**SMALL, "view": "network", "format": "csv"}
    ).text
    lines = csv_text.splitlines()[1:]
    assert lines and all(int(x.split(",")[0]) // 8 != int(x.split(",")[1]) // 8 for x in lines)
    png = client.post("/v1/traffic-matrices", json={**SMALL, "view": "network", "format": "png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_a_view_with_no_traffic_still_draws(client: TestClient) -> None:
    one_node = request(SMALL, layout={"pipeline": 1, "tensor": 4, "data": 2})
    body = {**one_node, "view": "network", "format": "png"}
    png = client.post("/v1/traffic-matrices", json=body)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    rows = client.post("/v1/traffic-matrices", json={**one_node, "view": "network"}).json()
    assert rows["rows"] == [] and rows["totals"]["bytes"] == 0


def test_an_unknown_view_is_422(client: TestClient) -> None:
    body = {**SMALL, "view": "inter-node"}
    assert_problem(client.post("/v1/traffic-matrices", json=body), 422, field="view")
