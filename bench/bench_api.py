"""REST API latency: POST /v1/estimates against GET /healthz, one POST /v1/plans, and
GET /v1/validation.

Starts the real server (uvicorn in a subprocess on a free loopback port, temporary SQLite or
``--database-url``, e.g. a PostgreSQL database, where every estimate reads its profile row),
then with one keep-alive httpx client sends ~500 sequential requests of each kind (alternating,
so that machine noise hits both alike) and prints the medians and their ratio (target:
estimate <= 2x healthz), and the end-to-end time of a
plan for GPT-3 175B on 1,536 GPUs over the full layout space (target < 1 s).

    python3 bench/bench_api.py [--requests 500] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ESTIMATE: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "layout": {"pipeline": 8, "tensor": 8, "data": 24},
    "training": {"global_batch_size": 1536, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {"profile": "dgx-a100-nominal"},
    "fidelity": "detailed",
}
PLAN: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "training": {"global_batch_size": 1536},
    "cluster": {"profile": "dgx-a100-nominal"},
    "gpus": 1536,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: Path, database_url: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "COMMEST_DATABASE_URL": database_url or f"sqlite:///{data_dir / 'bench.sqlite3'}",
        "COMMEST_DATA_DIR": str(data_dir),
        "COMMEST_API_TOKEN": "bench",
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "api.app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
    ]
    process = subprocess.Popen(command, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    with httpx.Client(base_url=base, timeout=1.0) as client:
        while time.monotonic() < deadline:
            try:
                if client.get("/readyz").status_code == 200:
                    return process, base
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    process.terminate()
    process.wait()
    raise SystemExit("the server did not start")


def timed_s(client: httpx.Client, method: str, path: str, **kwargs: Any) -> float:
    start = time.perf_counter()
    response = client.request(method, path, **kwargs)
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed


def interleaved_medians_ms(client: httpx.Client, n: int) -> tuple[float, float]:
    """Medians of healthz and estimate, sampled alternately so drift hits both alike."""
    health, est = [], []
    for _ in range(n):
        health.append(timed_s(client, "GET", "/healthz"))
        est.append(timed_s(client, "POST", "/v1/estimates", json=ESTIMATE))
    return statistics.median(health) * 1e3, statistics.median(est) * 1e3


QWEN = {"model": "qwen3-30b-a3b", "sort": "error"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process, base = start_server(Path(tmp), args.database_url)
        try:
            with httpx.Client(base_url=base, timeout=30.0) as client:
                for _ in range(50):  # warm up: connection, caches, numpy paths
                    client.get("/healthz")
                    client.post("/v1/estimates", json=ESTIMATE)
                health, est = interleaved_medians_ms(client, args.requests)
                plans = [timed_s(client, "POST", "/v1/plans", json=PLAN) for _ in range(5)]
                evaluated = client.post("/v1/plans", json=PLAN).json()["evaluated"]
                plan_s = max(plans)
                # the published runs (results.json, parsed once per process, then served)
                first_validation = timed_s(client, "GET", "/v1/validation")
                validation = [timed_s(client, "GET", "/v1/validation") for _ in range(50)]
                one_model = [
                    timed_s(client, "GET", "/v1/validation", params=QWEN) for _ in range(50)
                ]
        finally:
            process.terminate()
            process.wait()
    ratio = est / health
    print(f"database: {(args.database_url or 'sqlite').split(':')[0]}")
    print(f"GET  /healthz       median {health:7.3f} ms over {args.requests} requests")
    print(f"POST /v1/estimates  median {est:7.3f} ms over {args.requests} requests")
    print(f"ratio estimate/healthz: {ratio:.2f}  (target <= 2)  {'OK' if ratio <= 2 else 'MISS'}")
    print(
        f"POST /v1/plans GPT-3 175B on 1536 GPUs: worst of 5 {plan_s * 1e3:.1f} ms end to end "
        f"(median {statistics.median(plans) * 1e3:.1f} ms), {evaluated} layouts  "
        f"(target < 1000 ms)  {'OK' if plan_s < 1 else 'MISS'}"
    )
    print(
        f"GET  /v1/validation: every run median {statistics.median(validation) * 1e3:.1f} ms, "
        f"one model's worst first {statistics.median(one_model) * 1e3:.1f} ms "
        f"(first call {first_validation * 1e3:.1f} ms: the file parsed)"
    )


if __name__ == "__main__":
    main()
