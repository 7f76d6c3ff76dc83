"""Ring latency of the nominal profiles' all-gather / reduce-scatter across nodes (NCCL's cost
model, ``ncclTopoTuneModel``: ring, Simple protocol, base 8.4 µs + 3.4 µs per NVLink step +
9.6 µs per network step)."""

from __future__ import annotations

import pytest

from estimator.bandwidth import Collective, TrafficKind, bus_factor
from profiles.nominal import LATENCY_US, nominal_bandwidth, ring_latency_us


def test_ring_latency_counts_nvlink_and_network_steps() -> None:
    # 1,536 ranks on 192 nodes: 1,535 steps, 191 of them across the network.
    assert ring_latency_us(1536, 192) == pytest.approx(8.4 + 1344 * 3.4 + 191 * 9.6, rel=1e-12)
    # Two nodes of 8: 15 steps, 1 across the network.
    assert ring_latency_us(16, 2) == pytest.approx(8.4 + 14 * 3.4 + 9.6, rel=1e-12)


def _call_ms(op: Collective, ranks: int, nodes: int, size: float) -> float:
    bw = nominal_bandwidth("dgx-a100-nominal")
    busbw = float(bw.busbw_gbps(TrafficKind.DP, op, ranks, nodes, size))
    return size * float(bus_factor(op, float(ranks))) / (busbw * 1e9) * 1e3


@pytest.mark.parametrize("op", [Collective.ALL_GATHER, Collective.REDUCE_SCATTER])
def test_gathers_at_hundreds_of_ranks_are_latency_bound(op: Collective) -> None:
    """A 302 MB ZeRO-3 gather (one sub-module of GPT-3 175B, fp16) over 1,536 A100s: the ring's
    bandwidth term is 1.6 ms, its latency 6.4 ms; the nominal curve charges both."""
    size = 302e6
    assert _call_ms(op, 1536, 192, size) > ring_latency_us(1536, 192) / 1e3 + 1.6
    # Within a node the small-message latency is unchanged.
    small = _call_ms(op, 8, 1, 8.0)
    assert small == pytest.approx(LATENCY_US[op][0] / 1e3, rel=0.05)


def test_all_reduce_keeps_its_latency() -> None:
    """NCCL's all-reduce runs as a tree across nodes at scale: no per-rank ring latency."""
    small = _call_ms(Collective.ALL_REDUCE, 1536, 192, 8.0)
    assert small < 0.1


def test_bloom_runs_are_priced_on_the_network_their_source_states() -> None:
    """BLOOM's README: 4 Omni-Path 100 Gb/s links per node of 8 A100s (not DGX A100's 8 HDR
    200 Gb/s): the cross-node ring busbw is 8 x 6.25 GB/s x the attainable fraction."""
    from profiles.nominal import IB_FRACTION, NOMINAL_SPECS, PUBLISHED_CLUSTERS
    from profiles.validation.report import SOURCE_CLUSTER, _bandwidth

    assert SOURCE_CLUSTER["bigscience_bloom"] in PUBLISHED_CLUSTERS
    assert not set(PUBLISHED_CLUSTERS) & set(NOMINAL_SPECS)  # never stored as a profile
    bw = _bandwidth("a100-sxm4-80gb", "bigscience_bloom")
    busbw = float(bw.busbw_gbps(TrafficKind.DP, Collective.ALL_GATHER, 64, 8, 2.0**33))
    assert busbw == pytest.approx(8 * 6.25 * IB_FRACTION, rel=0.02)
