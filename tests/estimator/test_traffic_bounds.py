"""The entry count of a traffic matrix, known before building it, and the node-level build
that makes no GPU pairs for all-pairs groups (docs/design.md §5.2)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.bandwidth import Collective, TrafficKind
from estimator.traffic import (
    Algorithm,
    CollectiveLoad,
    Placement,
    node_traffic_matrix,
    traffic_entry_count,
    traffic_matrix,
)
from tests.estimator.test_traffic import layouts_and_loads

Case = tuple[Placement, list[CollectiveLoad]]


@settings(max_examples=150, deadline=None)
@given(layouts_and_loads(), st.sampled_from(list(Algorithm)))
def test_gpu_level_count_is_the_number_of_built_entries(case: Case, algorithm: Algorithm) -> None:
    pl, loads = case
    assert traffic_entry_count(pl, loads, algorithm) == len(traffic_matrix(pl, loads, algorithm))


@settings(max_examples=150, deadline=None)
@given(layouts_and_loads(), st.sampled_from(list(Algorithm)))
def test_node_level_build_equals_aggregating_the_gpu_matrix(
    case: Case, algorithm: Algorithm
) -> None:
    pl, loads = case
    expected = traffic_matrix(pl, loads, algorithm).by_node(pl.gpus_per_node)
    got = node_traffic_matrix(pl, loads, algorithm)
    assert got.size == expected.size
    np.testing.assert_array_equal(got.src, expected.src)
    np.testing.assert_array_equal(got.dst, expected.dst)
    np.testing.assert_array_equal(got.kind, expected.kind)
    np.testing.assert_allclose(got.bytes, expected.bytes, rtol=1e-12, atol=1e-6)
    # the node-level count is the work of the aggregated build: never below what it returns
    assert traffic_entry_count(pl, loads, algorithm, "node") >= len(got)


def test_counts_of_a_large_direct_data_parallel_group_need_no_pairs() -> None:
    # t=1, d=65,536: 65,536 · 65,535 GPU pairs (32 GiB of indices) are counted, not built
    pl = Placement(pipeline=1, tensor=1, data=65_536, gpus_per_node=8)
    loads = [CollectiveLoad(TrafficKind.DP, Collective.ALL_REDUCE, 1e9, 1)]
    assert traffic_entry_count(pl, loads, Algorithm.DIRECT) == 65_536 * 65_535
    assert traffic_entry_count(pl, loads, Algorithm.RING) == 65_536
    assert traffic_entry_count(pl, loads, Algorithm.DIRECT, "node") == 8192**2


def test_node_level_direct_of_many_gpus_is_cheap_when_nodes_are_few() -> None:
    # 4,096 GPUs in one dp group on 512 nodes: 16.8 M GPU pairs, 262,144 node pairs
    pl = Placement(pipeline=1, tensor=1, data=4096, gpus_per_node=8)
    loads = [CollectiveLoad(TrafficKind.DP, Collective.ALL_REDUCE, 1e9, 1)]
    nodes = node_traffic_matrix(pl, loads, Algorithm.DIRECT)
    assert len(nodes) == 512 * 512 == traffic_entry_count(pl, loads, Algorithm.DIRECT, "node")
    # all-reduce direct: each GPU sends 2(n-1)/n · S in total
    assert nodes.total_bytes == pytest.approx(4096 * 2 * 4095 / 4096 * 1e9, rel=1e-12)
