"""``estimator.sweep``: memory headroom, context-parallel enumeration and tie groups."""

from dataclasses import replace

import numpy as np
import pytest

from estimator import ClusterSpec, ModelSpec, TrainingSpec, enumerate_layouts, evaluate_layouts
from estimator.errors import ValidationError
from estimator.sweep import COMMUNICATION_TERMS, plan, rank


def test_headroom_shrinks_what_fits(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    layouts = enumerate_layouts(gpt3, training, 1536)
    none = evaluate_layouts(gpt3, training, cluster, layouts)
    some = evaluate_layouts(gpt3, training, cluster, layouts, memory_headroom=0.1)
    assert cluster.gpu_memory_bytes is not None
    usable = 0.9 * cluster.gpu_memory_bytes
    assert np.array_equal(some.fits, none.memory_bytes <= usable)
    assert some.fits.sum() < none.fits.sum()
    with pytest.raises(ValidationError):
        evaluate_layouts(gpt3, training, cluster, layouts, memory_headroom=1.0)


def test_context_parallel_layouts_multiply_to_the_gpu_count(
    gpt3: ModelSpec, training: TrainingSpec
) -> None:
    long = replace(gpt3, seq_length=32768)
    layouts = enumerate_layouts(long, training, 1536, context_parallel=(1, 2, 4))
    c = layouts.columns
    assert set(np.unique(c["cp"])) == {1.0, 2.0, 4.0}
    assert np.all(c["p"] * c["t"] * c["d"] * c["cp"] == 1536)
    sp = c["sp"] == 1.0
    assert np.all(np.mod(32768, c["t"][sp] * c["cp"][sp]) == 0)
    only_one = enumerate_layouts(long, training, 1536)
    assert len(only_one) == int((c["cp"] == 1.0).sum())
    with pytest.raises(ValidationError):
        enumerate_layouts(long, training, 1536, context_parallel=(5,))


def test_tensor_within_node_keeps_t_dividing_the_node(
    gpt3: ModelSpec, training: TrainingSpec
) -> None:
    layouts = enumerate_layouts(gpt3, training, 1536, tensor_within_node=8)
    assert np.all(np.mod(8, layouts.columns["t"]) == 0)


def test_groups_hold_times_within_the_tolerance_ordered_by_node_then_communication(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    found = plan(gpt3, training, cluster, 1536, tie_tolerance=0.05, ranked=500)
    res, order, group = found.result, found.order, found.group
    assert len(group) == 500 and group[0] == 0
    assert np.all(np.diff(group) >= 0)
    comm = np.sum([res.terms[name] for name in COMMUNICATION_TERMS], axis=0)
    for g in np.unique(group):
        members = order[:500][group == g]
        times = res.iteration_s[members]
        assert times.max() <= times.min() * 1.05
        assert len(set(res.fits[members])) == 1
        across = np.mod(8.0, res.layouts.columns["t"][members]) != 0
        keys = list(zip(across, comm[members], times, strict=True))
        assert keys == sorted(keys)
    # the order is a permutation of every layout, ties or not
    assert np.array_equal(np.sort(order), np.arange(found.evaluated))


def test_rank_forms_only_the_groups_it_is_asked_for(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    found = plan(gpt3, training, cluster, 1536)
    order, group = rank(found.result, gpus_per_node=8, tie_tolerance=0.0, ranked=3)
    assert len(group) == 3
    times = found.result.iteration_s[order]
    feasible = int(found.result.fits.sum())
    assert np.all(np.diff(times[:feasible]) >= 0)
    with pytest.raises(ValidationError):
        rank(found.result, gpus_per_node=8, tie_tolerance=-0.1)
