"""End to end: the real server (uvicorn in a subprocess on a free loopback port).

Upload a benchmark file to a new profile, estimate with it and run a check, over HTTP; and
refuse an oversized upload from its Content-Length without reading the body.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import FIXTURES
from tests.api.servers import Server

pytestmark = pytest.mark.slow

TOKEN = "e2e-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[str]:
    """Base URL of a running ``uvicorn api.app:app`` over ``db_url``."""
    with Server(
        db_url, tmp_path / "data", token=TOKEN, env={"COMMEST_MAX_UPLOAD_BYTES": str(1 << 20)}
    ) as running:
        yield running.base_url


def test_upload_estimate_and_check_over_http(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30.0) as client:
        created = client.post(
            "/v1/profiles",
            json={
                "name": "e2e-lab",
                "gpu_model": "H100",
                "gpus_per_node": 8,
                "peak_tflops": 989,
                "utilization": 0.5,
                "gpu_memory_gb": 80,
            },
            headers=AUTH,
        )
        assert created.status_code == 201, created.text
        text = (FIXTURES / "nccl_all_reduce_8gpu.txt").read_bytes()
        uploaded = client.post(
            "/v1/profiles/e2e-lab/runs",
            files=[("files", ("all_reduce.txt", text, "text/plain"))],
            headers=AUTH,
        )
        assert uploaded.status_code == 201, uploaded.text
        request = {
            "model": {"preset": "gpt3-1.3b"},
            "layout": {"pipeline": 1, "tensor": 8, "data": 1},
            "training": {"global_batch_size": 8, "micro_batch_size": 1},
            "cluster": {"profile": "e2e-lab"},
        }
        estimate = client.post("/v1/estimates", json=request)
        assert estimate.status_code == 200, estimate.text
        predicted = estimate.json()["iteration_time_s"]
        tp = [c for c in estimate.json()["collectives"] if c["kind"] == "tp"]
        run_id = uploaded.json()["runs"][0]["id"]
        assert tp and all(f"run {run_id}" in c["source"] for c in tp)
        passed = client.post("/v1/checks", json={**request, "max_iteration_time_s": 2 * predicted})
        failed = client.post(
            "/v1/checks", json={**request, "max_iteration_time_s": 0.5 * predicted}
        )
        assert passed.json()["passed"] is True
        assert failed.json()["passed"] is False


def test_oversized_upload_is_refused_from_its_content_length(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    head = (
        "POST /v1/profiles/dgx-a100-nominal/runs HTTP/1.1\r\n"
        f"Host: {host}\r\n"
        f"Authorization: Bearer {TOKEN}\r\n"
        "Content-Type: text/plain\r\n"
        f"Content-Length: {10 * (1 << 30)}\r\n"
        "\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5.0) as sock:
        sock.sendall(head.encode() + b"x" * 1024)  # 10 GiB announced, 1 KiB sent
        reply = sock.recv(65536).decode(errors="replace")
    status_line = reply.split("\r\n", 1)[0]
    assert " 413 " in status_line, reply[:500]
    assert "application/problem+json" in reply
