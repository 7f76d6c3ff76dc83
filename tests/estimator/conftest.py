import pytest

from estimator import ClusterSpec, FixedBandwidth, ModelSpec, TrainingSpec

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
