"""Speed of the sparse traffic matrix and its node aggregation at 16,384 GPUs.

A plain script (not a test): ``python3 bench/bench_traffic.py``. Prints the median of a few
repeats per case. Target (on a 2-core machine): build < 1 s and by_node < 1 s for the
ring algorithm.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from estimator.bandwidth import Collective, TrafficKind
from estimator.traffic import (
    Algorithm,
    CollectiveLoad,
    Placement,
    SparseTraffic,
    traffic_matrix,
)

# GPT-3 175B-like: l=96, h=12288, s=2048, V=51200, b=1, fp16 activations and gradients.
L, H, S, V, B = 96, 12288, 2048, 51200, 1
BETA = 2
N = 175e9


def gpt3_loads(p: int, t: int, d: int, m: int, moe: bool = False) -> list[CollectiveLoad]:
    act = BETA * B * S * H
    loads = [
        # 4 all-reduces per layer (2 fwd, 2 bwd) + 2 for the recomputed forward, per micro-batch
        CollectiveLoad(TrafficKind.TP, Collective.ALL_REDUCE, act, m * (L / p) * 6),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, act / t, m, "forward"),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, act / t, m, "backward"),
        CollectiveLoad(TrafficKind.DP, Collective.ALL_REDUCE, BETA * N / (p * t), 1),
        CollectiveLoad(TrafficKind.EMBEDDING_SYNC, Collective.ALL_REDUCE, BETA * V * H / t, 1),
    ]
    if moe:
        # every other layer MoE, top-2: 2 all-to-alls forward, 2 backward per MoE layer
        loads.append(
            CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, act * 2, m * (L / p / 2) * 4)
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
    print(
        f"{name:<44} G={placement.gpus:>6} entries={len(matrix):>9,} "
        f"build={t_build * 1e3:8.1f} ms  by_node={t_node * 1e3:8.1f} ms "
        f"(node entries={len(nodes):,})"
    )


def main() -> None:
    dense = Placement(pipeline=8, tensor=8, data=256, gpus_per_node=8)
    moe = Placement(pipeline=8, tensor=8, data=256, expert_parallel=8, gpus_per_node=8)
    m = 1536 // 256
    run("GPT-3 175B p8 t8 d256 ring", dense, gpt3_loads(8, 8, 256, m), Algorithm.RING)
    run("GPT-3 MoE p8 t8 d256 ep8 ring", moe, gpt3_loads(8, 8, 256, m, True), Algorithm.RING)
    run("GPT-3 175B p8 t8 d256 direct", dense, gpt3_loads(8, 8, 256, m), Algorithm.DIRECT)
    run("GPT-3 MoE p8 t8 d256 ep8 direct", moe, gpt3_loads(8, 8, 256, m, True), Algorithm.DIRECT)


if __name__ == "__main__":
    main()
