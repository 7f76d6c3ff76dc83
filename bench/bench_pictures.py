"""CPU time of the pictures: GET /v1/profiles/{name}/curves?format=png on a profile holding
5,000 runs (all_reduce, all_gather, reduce_scatter and alltoall at 1..256 nodes, 48 points
each), and the 4,096-GPU traffic heatmap.

A plain script (not a test): ``python3 bench/bench_pictures.py``. Runs the app in process
(TestClient, temporary SQLite) and prints the median CPU time of every thread of the process
per request against the target: no picture over 1 s, whatever the profile holds.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

from bench_traffic import cpu_s  # the same measure as the traffic bench (bench/ is on the path)
from pydantic import SecretStr

from api.app import create_app
from api.settings import Settings
from profiles.db import make_engine, session_factory, transaction
from profiles.parsed import ParsedPoint, ParsedRun
from profiles.repository import create_profile, store_parsed_runs

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

RUNS = 5000
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
SIZES = [2**k for k in range(3, 27)]  # 8 B .. 64 MiB: 24 sizes, out- and in-place
TARGET_S = 1.0
TRAFFIC_PNG: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "layout": {"pipeline": 8, "tensor": 8, "data": 64},
    "training": {"global_batch_size": 1536, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {"profile": "dgx-a100-nominal"},
    "fidelity": "detailed",
    "format": "png",
}


def synthetic_run(index: int) -> ParsedRun:
    nodes = 2 ** (index % 9)
    op = OPS[index % len(OPS)]
    beta = 180.0 / (1.0 + 0.05 * (index % 9)) * (0.9 + 0.2 * ((index * 7919) % 100) / 100)
    points = []
    for size in SIZES:
        time_us = 8.0 + 2.0 * (index % 9) + size / (beta * 1e3)
        bw = size / (time_us * 1e3)
        for in_place in (False, True):
            points.append(ParsedPoint(size, size // 4, time_us, bw, bw, in_place))
    return ParsedRun(
        collective=op,
        tool="nccl-tests",
        backend="nccl",
        ranks=8 * nodes,
        nodes=nodes,
        ranks_per_node=8,
        gpu_model="NVIDIA A100-SXM4-80GB",
        dtype="float",
        redop="sum",
        tool_version=None,
        points=points,
    )


def fill(url: str, name: str) -> None:
    factory = session_factory(make_engine(url))
    with transaction(factory) as session:
        create_profile(session=session, name=name, gpu_model="A100-SXM4-80GB", gpus_per_node=8)
    per_upload = 500
    for start in range(0, RUNS, per_upload):
        runs = [synthetic_run(i) for i in range(start, start + per_upload)]
        with transaction(factory) as session:
            store_parsed_runs(
                session=session,
                profile_name=name,
                text=f"synthetic runs {start}..{start + per_upload}",
                runs=runs,
                filename=f"bench-{start}.txt",
            )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
        settings = Settings(database_url=url, data_dir=Path(tmp), api_token=SecretStr("bench"))
        with TestClient(create_app(settings)) as client:
            client.get("/v1/profiles")  # migrated, nominal profiles in
            fill(url, "big")
            cases = [
                (f"curves PNG, profile of {RUNS:,} runs", "GET", "/v1/profiles/big/curves"),
                (f"curves PNG, {RUNS:,} runs, op=all_reduce", "GET", "/v1/profiles/big/curves"),
                ("curves PNG, dgx-a100-nominal", "GET", "/v1/profiles/dgx-a100-nominal/curves"),
                ("traffic PNG, 4,096 GPUs, gpu level", "POST", "/v1/traffic-matrices"),
            ]
            for name, method, path in cases:
                status: list[int] = []
                params = {"format": "png"}
                if "op=" in name:
                    params["op"] = "all_reduce"

                def call(
                    method: str = method,
                    path: str = path,
                    params: dict[str, str] = params,
                    status: list[int] = status,
                ) -> None:
                    if method == "GET":
                        response = client.get(path, params=params)
                    else:
                        response = client.post(path, json=TRAFFIC_PNG)
                    status[:] = [response.status_code]

                took = cpu_s(call)
                verdict = "ok" if took < TARGET_S else "OVER"
                print(
                    f"{name:<44} status={status[0]} cpu={took * 1e3:8.1f} ms "
                    f"(target < {TARGET_S:.0f} s: {verdict})"
                )


if __name__ == "__main__":
    main()
