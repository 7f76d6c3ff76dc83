"""Speed of the sparse traffic matrix and its node aggregation at 16,384 GPUs, and of the
pictures and refusals of POST /v1/traffic-matrices.

A plain script (not a test): ``python3 bench/bench_traffic.py``. Prints the median of a few
repeats per case. Targets (on a 2-core machine): build < 1 s and by_node < 1 s for the
ring algorithm; the 4,096-GPU heatmap PNG < 1 s of CPU; a matrix over
COMMEST_MAX_MATRIX_ENTRIES refused (413) in well under a second.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from estimator.bandwidth import Collective, TrafficKind
from estimator.traffic import (
    Algorithm,
    CollectiveLoad,
    Placement,
    SparseTraffic,
    node_traffic_matrix,
    traffic_matrix,
)

# GPT-3 175B-like: l=96, h=12288, s=2048, V=51200, b=1, fp16 activations and gradients.
L, H, S, V, B = 96, 12288, 2048, 51200, 1
BETA = 2
N = 175e9


def gpt3_loads(
    p: int, t: int, d: int, m: int, moe: bool = False, flex: bool = False
) -> list[CollectiveLoad]:
    act = BETA * B * S * H
    loads = [
        # 4 all-reduces per layer (2 fwd, 2 bwd) + 2 for the recomputed forward, per micro-batch
        CollectiveLoad(TrafficKind.TP, Collective.ALL_REDUCE, act, m * (L / p) * 6),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, act / t, m, "forward"),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, act / t, m, "backward"),
        CollectiveLoad(TrafficKind.DP, Collective.ALL_REDUCE, BETA * N / (p * t), 1),
        CollectiveLoad(TrafficKind.EMBEDDING_SYNC, Collective.ALL_REDUCE, BETA * V * H / t, 1),
    ]
    calls = m * (L / p / 2) * 4
    if moe and not flex:
        # every other layer MoE, top-2: 2 all-to-alls forward, 2 backward per MoE layer
        loads.append(CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, act * 2, calls))
    elif moe:
        # the same dispatches by the flex dispatcher (DeepEP, HybridEP): its RDMA leg over one
        # rank per node, its NVLink leg over a node's ranks (the engine's sizes are alike)
        for scope in ("across_nodes", "within_node"):
            loads.append(
                CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, act, calls, scope=scope)
            )
    return loads


def median_s(fn: Callable[[], object], repeats: int = 5) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(
    name: str, placement: Placement, loads: Sequence[CollectiveLoad], algorithm: Algorithm
) -> None:
    result: list[SparseTraffic] = []

    def build() -> None:
        result[:] = [traffic_matrix(placement, loads, algorithm)]

    t_build = median_s(build)
    matrix = result[0]
    t_node = median_s(lambda: matrix.by_node(placement.gpus_per_node))
    nodes = matrix.by_node(placement.gpus_per_node)
    t_direct_node = median_s(lambda: node_traffic_matrix(placement, loads, algorithm))
    print(
        f"{name:<44} G={placement.gpus:>6} entries={len(matrix):>9,} "
        f"build={t_build * 1e3:8.1f} ms  by_node={t_node * 1e3:8.1f} ms "
        f"node build={t_direct_node * 1e3:8.1f} ms (node entries={len(nodes):,})"
    )


PNG_4096: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "layout": {"pipeline": 8, "tensor": 8, "data": 64},
    "training": {"global_batch_size": 1536, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {"profile": "dgx-a100-nominal"},
    "fidelity": "detailed",
    "format": "png",
}


def cpu_s(fn: Callable[[], object], repeats: int = 3) -> float:
    """Median CPU time (every thread of the process) of ``fn``, after a warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def requests() -> None:
    """POST /v1/traffic-matrices in process: the 4,096-GPU PNG and the refused matrices."""
    from pydantic import SecretStr

    from api.app import create_app
    from api.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'bench.sqlite3'}",
            data_dir=Path(tmp),
            api_token=SecretStr("bench"),
        )
        with TestClient(create_app(settings)) as client:
            cases: list[tuple[str, dict[str, Any], float]] = [
                ("PNG p8 t8 d64 gpu level, view all", PNG_4096, 1.0),
                ("PNG p8 t8 d64 gpu level, direct", {**PNG_4096, "algorithm": "direct"}, 1.0),
                ("PNG p8 t8 d64 node level", {**PNG_4096, "level": "node"}, 1.0),
            ]
            for p, t, d in ((1, 8, 2048), (1, 8, 4096), (1, 1, 65536)):
                body = {
                    **PNG_4096,
                    "model": {"preset": "gpt3-1.3b"},
                    "layout": {"pipeline": p, "tensor": t, "data": d},
                    "training": {"global_batch_size": 65536},
                    "format": "json",
                    "algorithm": "direct",
                }
                cases.append((f"refused direct p{p} t{t} d{d} (413)", body, 1.0))
            for name, body, target in cases:
                status: list[int] = []

                def post(body: dict[str, Any] = body, status: list[int] = status) -> None:
                    status[:] = [client.post("/v1/traffic-matrices", json=body).status_code]

                took = cpu_s(post)
                verdict = "ok" if took < target else "OVER"
                print(
                    f"{name:<44} status={status[0]} cpu={took * 1e3:8.1f} ms "
                    f"(target < {target:.0f} s: {verdict})"
                )


def main() -> None:
    dense = Placement(pipeline=8, tensor=8, data=256, gpus_per_node=8)
    moe = Placement(pipeline=8, tensor=8, data=256, expert_parallel=8, gpus_per_node=8)
    m = 1536 // 256
    run("GPT-3 175B p8 t8 d256 ring", dense, gpt3_loads(8, 8, 256, m), Algorithm.RING)
    run("GPT-3 MoE p8 t8 d256 ep8 ring", moe, gpt3_loads(8, 8, 256, m, True), Algorithm.RING)
    run("GPT-3 175B p8 t8 d256 direct", dense, gpt3_loads(8, 8, 256, m), Algorithm.DIRECT)
    run("GPT-3 MoE p8 t8 d256 ep8 direct", moe, gpt3_loads(8, 8, 256, m, True), Algorithm.DIRECT)
    # EP 16 over two nodes (t 1): the flex legs pair one rank a node and a node's ranks
    wide = Placement(pipeline=8, tensor=1, data=2048, expert_parallel=16, gpus_per_node=8)
    plain = gpt3_loads(8, 1, 2048, m, True)
    run("GPT-3 MoE p8 t1 d2048 ep16 ring", wide, plain, Algorithm.RING)
    flex = gpt3_loads(8, 1, 2048, m, True, flex=True)
    run("GPT-3 MoE p8 t1 d2048 ep16 flex ring", wide, flex, Algorithm.RING)
    requests()


if __name__ == "__main__":
    main()
