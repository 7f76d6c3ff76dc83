from dataclasses import dataclass

import numpy as np
import pytest

from estimator import ClusterSpec, FixedBandwidth, ModelSpec, TrainingSpec
from estimator.bandwidth import BandwidthAnswer, Collective, Num, TrafficKind

GPT3_175B = ModelSpec(
    num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200
)


@pytest.fixture
def gpt3() -> ModelSpec:
    return GPT3_175B


@pytest.fixture
def training() -> TrainingSpec:
    return TrainingSpec(global_batch_size=1536, micro_batch_size=1)


@pytest.fixture
def cluster() -> ClusterSpec:
    return ClusterSpec(
        gpus_per_node=8,
        peak_flops=312e12,
        utilization=0.5,
        bandwidth=FixedBandwidth(tp_gbps=200.0, pp_gbps=20.0, dp_gbps=20.0),
        gpu_memory_bytes=80e9,
    )


@dataclass(frozen=True, slots=True)
class PlacementBandwidth:
    """A provider whose answer depends on the placement, as a profile's does: NVLink inside a
    node; across nodes an all-to-all's off-node share at one NIC per GPU, other collectives at
    the NIC rate (a DGX H100's links, no profile needed)."""

    nvlink_gbps: float = 340.0
    nic_gbps: float = 45.0

    def busbw_gbps(
        self, kind: TrafficKind, op: Collective, ranks: Num, nodes: Num, size_bytes: Num
    ) -> Num:
        ranks_a, nodes_a = np.asarray(ranks, dtype=float), np.asarray(nodes, dtype=float)
        across = self.nic_gbps * np.ones_like(ranks_a)
        if op is Collective.ALLTOALL:
            share = (ranks_a - 1) / ranks_a * nodes_a / np.maximum(nodes_a - 1, 1)
            across = np.minimum(self.nvlink_gbps, self.nic_gbps * share)
        answer = np.where(nodes_a > 1, across, self.nvlink_gbps) * np.ones_like(
            np.asarray(size_bytes, dtype=float)
        )
        return answer if isinstance(size_bytes, np.ndarray) else float(answer)

    def explain(
        self, kind: TrafficKind, op: Collective, ranks: int, nodes: int, size_bytes: float
    ) -> BandwidthAnswer:
        value = self.busbw_gbps(kind, op, ranks, nodes, size_bytes)
        return BandwidthAnswer(float(value), "fixed", "test placement bandwidth")
