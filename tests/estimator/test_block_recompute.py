"""Partial (block) recompute: ``training.recompute_num_layers`` replays the first N layers of
each pipeline chunk (Megatron's --recompute-method block) and keeps the others' activations."""

from __future__ import annotations

import dataclasses

import pytest

from estimator import (
    ClusterSpec,
    Estimate,
    Fidelity,
    LayoutSpec,
    ModelSpec,
    Recompute,
    Scenario,
    TrainingSpec,
    estimate,
)
from estimator.errors import ValidationError
from profiles.nominal import nominal_bandwidth

#: What an interpolation between two estimates may lose to floating point.
REL_TOL = 1e-9

CLUSTER = ClusterSpec(
    gpus_per_node=8,
    peak_flops=312e12,
    utilization=0.74,
    bandwidth=nominal_bandwidth("dgx-a100-nominal"),
    gpu_memory_bytes=80e9,
    memory_bandwidth_gbps=2039.0,
    memory_traffic_factor=2.67,
    gemm_half_size_elements=670.0,
)
LAYOUT = LayoutSpec(pipeline=8, tensor=8, data=24)  # 96 layers: chunks of 12


def _run(
    model: ModelSpec,
    recompute: Recompute | str,
    n: int | None,
    layout: LayoutSpec = LAYOUT,
    fidelity: Fidelity = Fidelity.DETAILED,
) -> Estimate:
    training = TrainingSpec(
        global_batch_size=1536, recompute=Recompute(recompute), recompute_num_layers=n
    )
    return estimate(Scenario(model, training, layout, CLUSTER, fidelity=fidelity))


@pytest.mark.parametrize("fidelity", [Fidelity.PAPER, Fidelity.DETAILED])
def test_every_layer_of_a_chunk_replayed_is_full_recompute(
    gpt3: ModelSpec, fidelity: Fidelity
) -> None:
    whole = _run(gpt3, "full", None, fidelity=fidelity)
    for n in (12, 40):  # a chunk's 12 layers, or more than it holds
        block = _run(gpt3, "full", n, fidelity=fidelity)
        assert block.breakdown.as_dict() == whole.breakdown.as_dict()
        assert block.memory.total_bytes == whole.memory.total_bytes
        assert block.hardware_flops == whole.hardware_flops


@pytest.mark.parametrize("fidelity", [Fidelity.PAPER, Fidelity.DETAILED])
def test_no_layer_replayed_is_no_recompute(gpt3: ModelSpec, fidelity: Fidelity) -> None:
    none = _run(gpt3, "none", None, fidelity=fidelity)
    block = _run(gpt3, "full", 0, fidelity=fidelity)
    assert block.breakdown.as_dict() == pytest.approx(none.breakdown.as_dict(), rel=REL_TOL)
    assert block.memory.total_bytes == pytest.approx(none.memory.total_bytes, rel=REL_TOL)
    assert block.hardware_flops == pytest.approx(none.hardware_flops, rel=REL_TOL)


def test_a_quarter_of_each_chunk_replayed_costs_a_quarter_of_the_replay(gpt3: ModelSpec) -> None:
    # 3 of 12 layers per chunk: compute, replayed FLOPs and stored activations a quarter of the
    # way from no recompute to full recompute (the kernel is linear in the replayed share).
    none, full = _run(gpt3, "none", None), _run(gpt3, "full", None)
    block = _run(gpt3, "full", 3)

    def quarter(a: float, b: float) -> float:
        return a + 0.25 * (b - a)

    assert block.breakdown.compute_s == pytest.approx(
        quarter(none.breakdown.compute_s, full.breakdown.compute_s), rel=REL_TOL
    )
    assert block.hardware_flops == pytest.approx(
        quarter(none.hardware_flops, full.hardware_flops), rel=REL_TOL
    )
    # Activations: the stored share interpolates; the layer being replayed adds its whole
    # activations on top, as under full recompute.
    stored = block.memory.activations_bytes
    assert none.memory.activations_bytes > stored > full.memory.activations_bytes
    assert block.model_flops == full.model_flops


def test_each_stage_keeps_the_activations_its_own_chunk_size_gives(gpt3: ModelSpec) -> None:
    # First and last stage 6 layers, the 6 middle ones 14 (p 8): with N = 6 the first stage
    # replays every layer, so its activations (p micro-batches in flight, the peak) are full
    # recompute's, though the middle stages replay 6 of 14.
    uneven = dataclasses.replace(LAYOUT, first_stage_layers=6, last_stage_layers=6)
    full = _run(gpt3, "full", None, uneven)
    block = _run(gpt3, "full", 6, uneven)
    none = _run(gpt3, "none", None, uneven)
    assert block.memory.activations_bytes == full.memory.activations_bytes
    assert none.memory.activations_bytes > full.memory.activations_bytes
    # Time is priced at the share of the stage with the most layers (6 of 14).
    assert full.breakdown.compute_s > block.breakdown.compute_s > none.breakdown.compute_s
    assert any("6 of 14" in line for line in block.assumptions)


def test_the_estimate_says_how_much_is_replayed(gpt3: ModelSpec) -> None:
    lines = _run(gpt3, "full", 3).assumptions
    assert any("recompute_num_layers=3" in line and "25.0%" in line for line in lines)
    assert any("every layer is replayed" in line for line in _run(gpt3, "full", 12).assumptions)
    assert any("priced as recompute none" in line for line in _run(gpt3, "full", 0).assumptions)
    assert not any("recompute_num_layers" in line for line in _run(gpt3, "full", None).assumptions)


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.SELECTIVE])
def test_a_layer_count_without_full_recompute_is_refused(recompute: Recompute) -> None:
    with pytest.raises(ValidationError, match="applies to recompute: full only") as err:
        TrainingSpec(global_batch_size=8, recompute=recompute, recompute_num_layers=2)
    assert err.value.field == "training.recompute_num_layers"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_layer_count_must_be_a_whole_number(bad: object) -> None:
    with pytest.raises(ValidationError, match="whole number >= 0"):
        TrainingSpec(global_batch_size=8, recompute_num_layers=bad)  # type: ignore[arg-type]
