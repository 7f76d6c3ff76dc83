"""Engine speed: one estimate in process, and layouts per second of the vectorised sweep,
with fixed bandwidths and with a profile-backed bandwidth provider (the nominal DGX A100).

Targets (issue 11, this 2-core machine, one core): a single estimate under 100 µs with fixed
bandwidths and under 150 µs with a profile; the sweep at least 1,000,000 layouts/s with either.
An estimate builds its per-collective records, traffic and words when first read; the second
line of each single estimate reads them all too.
Both the wall-clock median and the CPU time of this process are printed: on a machine shared
with other jobs the wall clock measures the neighbours too, the CPU time (min of the rounds)
measures the engine. Run: python3 bench/bench_engine.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says

import numpy as np

from estimator import (
    ClusterSpec,
    FixedBandwidth,
    LayoutArrays,
    LayoutSpec,
    ModelSpec,
    Scenario,
    TrainingSpec,
    enumerate_layouts,
    estimate,
    evaluate_layouts,
    plan,
)
from estimator.bandwidth import BandwidthProvider
from profiles.nominal import nominal_bandwidth

GPT3 = ModelSpec(
    num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200
)
TRAINING = TrainingSpec(global_batch_size=1536)
PROVIDERS: dict[str, Callable[[], BandwidthProvider]] = {
    "fixed bandwidths": lambda: FixedBandwidth(200.0, 25.0, 25.0),
    "nominal DGX A100 profile": lambda: nominal_bandwidth("dgx-a100-nominal"),
}
SINGLE_TARGET_S = {"fixed bandwidths": 100e-6, "nominal DGX A100 profile": 150e-6}
SWEEP_TARGET = 1_000_000


def cluster(bandwidth: BandwidthProvider) -> ClusterSpec:
    return ClusterSpec(
        gpus_per_node=8,
        peak_flops=312e12,
        utilization=0.74,
        bandwidth=bandwidth,
        gpu_memory_bytes=80e9,
        memory_bandwidth_gbps=2039.0,
        memory_traffic_factor=2.67,
    )


def timed(fn: Callable[[], object], rounds: int, per_round: int) -> tuple[float, float]:
    """(median wall seconds, min CPU seconds) per call over ``rounds`` rounds."""
    walls, cpus = [], []
    for _ in range(rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(per_round):
            fn()
        walls.append((time.perf_counter() - w0) / per_round)
        cpus.append((time.process_time() - c0) / per_round)
    return statistics.median(walls), min(cpus)


def bench_single(bandwidth: BandwidthProvider, read_all: bool = False) -> tuple[float, float]:
    """One estimate; with ``read_all`` also what it builds when first read (its per-collective
    records and traffic, its assumptions and warnings)."""
    sc = Scenario(GPT3, TRAINING, LayoutSpec(pipeline=8, tensor=8, data=24), cluster(bandwidth))

    def everything() -> object:
        est = estimate(sc)
        return est.collectives, est.traffic_bytes, est.assumptions, est.warnings

    fn: Callable[[], object] = everything if read_all else (lambda: estimate(sc))
    for _ in range(500):
        fn()
    return timed(fn, rounds=20, per_round=500)


def sweep_layouts(n: int) -> LayoutArrays:
    """n layouts of GPT-3 175B on 1,536 GPUs: the enumerated space, with random flags."""
    base = enumerate_layouts(GPT3, TRAINING, 1536, zero_stages=(0, 1, 2, 3))
    rng = np.random.default_rng(0)
    index = rng.integers(0, len(base), n)
    cols = {k: v[index] for k, v in base.columns.items()}
    cols["sg"] = rng.integers(0, 2, n).astype(np.float64)
    cols["overlap_dp"] = rng.integers(0, 2, n).astype(np.float64)
    return LayoutArrays(cols)


def bench_sweep(bandwidth: BandwidthProvider, layouts: LayoutArrays) -> tuple[float, float]:
    cl = cluster(bandwidth)
    evaluate_layouts(GPT3, TRAINING, cl, layouts)  # warm the allocator and the provider
    wall, cpu = timed(lambda: evaluate_layouts(GPT3, TRAINING, cl, layouts), 5, 1)
    return len(layouts) / wall, len(layouts) / cpu


def bench_plan() -> tuple[float, int]:
    cl = cluster(PROVIDERS["fixed bandwidths"]())
    result = plan(GPT3, TRAINING, cl, 1536)
    wall, _ = timed(lambda: plan(GPT3, TRAINING, cl, 1536), 5, 1)
    return wall, result.evaluated


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    layouts = sweep_layouts(1_000_000)
    for name, make in PROVIDERS.items():
        provider = make()
        wall, cpu = bench_single(provider)
        target = SINGLE_TARGET_S[name]
        print(
            f"single estimate, GPT-3 175B detailed, {name}: median {wall * 1e6:.1f} µs wall, "
            f"{cpu * 1e6:.1f} µs CPU (target < {target * 1e6:.0f} µs: "
            f"{target / wall:.2f}x wall, {target / cpu:.2f}x CPU)"
        )
        wall_all, cpu_all = bench_single(provider, read_all=True)
        print(
            f"  ... with its collectives, traffic, assumptions and warnings read: median "
            f"{wall_all * 1e6:.1f} µs wall, {cpu_all * 1e6:.1f} µs CPU "
            f"({target / cpu_all:.2f}x the target in CPU)"
        )
        rate_wall, rate_cpu = bench_sweep(provider, layouts)
        print(
            f"vectorised sweep, 1,000,000 layouts, {name}: {rate_wall:,.0f} layouts/s wall, "
            f"{rate_cpu:,.0f}/s CPU (target >= {SWEEP_TARGET:,}: {rate_wall / SWEEP_TARGET:.2f}x "
            f"wall, {rate_cpu / SWEEP_TARGET:.2f}x CPU)"
        )
    plan_s, evaluated = bench_plan()
    print(
        f"plan GPT-3 175B on 1,536 GPUs: {evaluated:,} layouts enumerated, evaluated and "
        f"ranked in {plan_s * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
