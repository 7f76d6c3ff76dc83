"""POST /v1/traffic-matrices."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.plots import PNG_SIGNATURE
from api.services.matrices import binned_matrix
from api.settings import Settings
from estimator import SparseTraffic
from tests.api.conftest import SCALAR_C, assert_problem, make_client, request

SMALL = request(
    SCALAR_C,
    model={"preset": "gpt3-1.3b"},
    layout={"pipeline": 2, "tensor": 4, "data": 4},
    training={"global_batch_size": 64},
    fidelity="detailed",
)


def test_json_rows_sum_to_each_gpus_traffic(client: TestClient) -> None:
    response = client.post("/v1/traffic-matrices", json={**SMALL, "format": "json"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["gpus"] == 32 and body["level"] == "gpu" and body["size"] == 32
    rows = body["rows"]
    assert rows and set(rows[0]) == {"src", "dst", "bytes", "kind"}
    assert sum(r["bytes"] for r in rows) == pytest.approx(body["totals"]["bytes"])
    estimate = client.post("/v1/estimates", json=SMALL).json()
    for kind in ("tp", "dp"):  # every GPU sends its group's share (PP ends differ by stage)
        sent: dict[int, float] = {}
        for r in rows:
            if r["kind"] == kind:
                sent[r["src"]] = sent.get(r["src"], 0.0) + r["bytes"]
        assert len(sent) == 32
        expected = estimate["traffic_bytes_per_gpu"][kind]
        assert all(v == pytest.approx(expected, rel=1e-9) for v in sent.values())
    assert {r["kind"] for r in rows} >= {"tp", "dp", "pp"}


def test_node_level_aggregates_gpus(client: TestClient) -> None:
    gpu = client.post("/v1/traffic-matrices", json={**SMALL, "level": "gpu"}).json()
    node = client.post("/v1/traffic-matrices", json={**SMALL, "level": "node"}).json()
    assert node["level"] == "node" and node["size"] == 4  # 32 GPUs / 8 per node
    assert node["totals"]["bytes"] == pytest.approx(gpu["totals"]["bytes"])
    assert max(r["src"] for r in node["rows"]) == 3


def test_csv_has_the_exact_header_and_one_line_per_entry(client: TestClient) -> None:
    response = client.post("/v1/traffic-matrices", json={**SMALL, "format": "csv"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    text = response.text
    assert text.splitlines()[0] == "src,dst,bytes,kind"
    rows = list(csv.DictReader(io.StringIO(text)))
    body = client.post("/v1/traffic-matrices", json=SMALL).json()
    assert len(rows) == body["totals"]["entries"]
    assert sum(float(r["bytes"]) for r in rows) == pytest.approx(body["totals"]["bytes"])


@pytest.mark.parametrize("level", ["gpu", "node"])
def test_png_heatmap_is_a_png(client: TestClient, level: str) -> None:
    response = client.post("/v1/traffic-matrices", json={**SMALL, "format": "png", "level": level})
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"
    assert response.content.startswith(PNG_SIGNATURE)
    assert len(response.content) > 5000


def test_direct_algorithm_spreads_over_more_pairs(client: TestClient) -> None:
    ring = client.post("/v1/traffic-matrices", json={**SMALL, "algorithm": "ring"}).json()
    direct = client.post("/v1/traffic-matrices", json={**SMALL, "algorithm": "direct"}).json()
    assert direct["totals"]["entries"] > ring["totals"]["entries"]
    assert direct["totals"]["bytes"] == pytest.approx(ring["totals"]["bytes"])


def test_unknown_format_is_422(client: TestClient) -> None:
    assert_problem(
        client.post("/v1/traffic-matrices", json={**SMALL, "format": "xlsx"}), 422, field="format"
    )


class Caps(TypedDict, total=False):
    max_dense_gpus: int
    max_matrix_gpus: int


def _capped(tmp_path: Path, db_url: str, **caps: Unpack[Caps]) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path, api_token=SecretStr("t"), **caps)


def test_gpu_level_png_over_the_dense_cap_is_413(tmp_path: Path, db_url: str) -> None:
    with make_client(_capped(tmp_path, db_url, max_dense_gpus=16)) as client:
        png = {**SMALL, "format": "png", "level": "gpu"}
        body = assert_problem(client.post("/v1/traffic-matrices", json=png), 413)
        assert "16" in body["detail"]
        # the same matrix aggregated to 4 nodes is within the cap
        node = client.post("/v1/traffic-matrices", json={**png, "level": "node"})
        assert node.status_code == 200


def test_matrix_over_max_matrix_gpus_is_413_before_any_work(tmp_path: Path, db_url: str) -> None:
    with make_client(_capped(tmp_path, db_url, max_matrix_gpus=16)) as client:
        assert_problem(client.post("/v1/traffic-matrices", json=SMALL), 413)


def test_binned_matrix_keeps_every_byte_and_equals_dense_when_small() -> None:
    rng = np.random.default_rng(7)
    size, n = 1000, 5000
    traffic = SparseTraffic(
        size,
        rng.integers(0, size, n),
        rng.integers(0, size, n),
        rng.random(n) * 1e9,
        np.zeros(n, dtype=np.int8),
    )
    binned, block = binned_matrix(traffic=traffic, max_cells=256)
    assert block == 4 and binned.shape == (250, 250)
    assert binned.sum() == pytest.approx(traffic.total_bytes)
    assert binned[0, 0] == pytest.approx(traffic.to_dense(size)[:4, :4].sum())
    exact, one = binned_matrix(traffic=traffic, max_cells=size)
    assert one == 1
    np.testing.assert_array_equal(exact, traffic.to_dense(size))


# A MoE layout whose EP 4 divides data·cp = 4 but not data = 2 (Megatron-Core forms expert
# groups on its own grid, across the CP and DP coordinates), on the nominal H100 profile.
MOE_UNDER_CP = {
    "model": {
        "num_layers": 2,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "seq_length": 2048,
        "vocab_size": 32000,
        "moe_num_experts": 8,
        "moe_top_k": 2,
    },
    "layout": {"pipeline": 1, "tensor": 8, "data": 2, "context_parallel": 2, "expert_parallel": 4},
    "training": {"global_batch_size": 4},
    "cluster": {"profile": "dgx-h100-nominal"},
}


@pytest.mark.parametrize("fidelity", ["detailed", "paper"])
def test_every_layout_the_estimate_takes_has_a_matrix_and_a_timeline(
    client: TestClient, fidelity: str
) -> None:
    """Found by fuzzing: the matrix refused EP that divides data·cp but not data (422 where the
    estimate answered), and paper fidelity under CP asked the profile for the DP all-reduce of
    2 ranks on 4 nodes (a 422 naming no request field)."""
    body = {**MOE_UNDER_CP, "fidelity": fidelity}
    estimate = client.post("/v1/estimates", json=body)
    assert estimate.status_code == 200, estimate.text
    matrix = client.post("/v1/traffic-matrices", json={**body, "format": "json"})
    assert matrix.status_code == 200, matrix.text
    assert matrix.json()["totals"]["bytes"] > 0
    timeline = client.post("/v1/timelines", json=body)
    assert timeline.status_code == 200, timeline.text
    if fidelity == "detailed":  # the all-to-all spans 4 nodes: ranks 0, 8, 16, 24 of 32
        expert = [c for c in estimate.json()["collectives"] if c["kind"] == "expert"]
        assert expert and {c["nodes"] for c in expert} == {4}
