"""The caches the routes rely on (api.caches): they must never go stale."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi import FastAPI

from api.caches import MemoBandwidth, ProfileSnapshot, SnapshotCache
from api.settings import Settings
from estimator.bandwidth import Collective, TrafficKind
from profiles.nominal import nominal_bandwidth
from tests.api.conftest import AUTH, ESTIMATE, make_client, request


def test_memo_bandwidth_agrees_with_the_provider_it_wraps() -> None:
    provider = nominal_bandwidth("dgx-h100-nominal")
    memo = MemoBandwidth(provider)
    query = (TrafficKind.DP, Collective.ALL_REDUCE, 64, 8, 3.5e8)
    for _ in range(2):  # miss, then hit
        assert memo.busbw_gbps(*query) == provider.busbw_gbps(*query)
        assert memo.explain(*query) == provider.explain(*query)
    sizes = np.array([1e3, 1e6, 1e9])
    ranks, nodes = np.full(3, 16.0), np.full(3, 2.0)
    arrays = memo.busbw_gbps(TrafficKind.TP, Collective.ALL_GATHER, ranks, nodes, sizes)
    expected = provider.busbw_gbps(TrafficKind.TP, Collective.ALL_GATHER, ranks, nodes, sizes)
    np.testing.assert_array_equal(arrays, expected)


def _snapshot() -> ProfileSnapshot:
    return ProfileSnapshot(
        name="p",
        gpus_per_node=8,
        peak_tflops=None,
        peak_tflops_by_dtype={},
        gpu_memory_bytes=None,
        utilization=None,
        utilization_source=None,
        nominal=True,
        bandwidth=MemoBandwidth(nominal_bandwidth("dgx-h100-nominal")),
    )


def test_snapshot_cache_forgets_on_write_and_after_its_ttl() -> None:
    cache = SnapshotCache(ttl_s=0.05)
    snapshot = _snapshot()
    cache.put("p", snapshot, generation=cache.generation, at=time.monotonic())
    assert cache.get("p") is snapshot
    cache.bump()
    assert cache.get("p") is None
    cache.put("p", snapshot, generation=cache.generation, at=time.monotonic())
    time.sleep(0.06)
    assert cache.get("p") is None


def test_a_snapshot_read_before_a_write_is_not_kept_as_fresh() -> None:
    cache = SnapshotCache()
    generation = cache.generation
    cache.bump()  # a write commits while the read is in flight
    cache.put("p", _snapshot(), generation=generation, at=time.monotonic())
    assert cache.get("p") is None


def test_writes_of_another_server_process_are_seen_within_the_ttl(app_settings: Settings) -> None:
    req = request(ESTIMATE)
    req["cluster"] = {"profile": "dgx-a100-nominal"}
    with make_client(app_settings) as first, make_client(app_settings) as second:
        assert isinstance(first.app, FastAPI)
        first.app.state.runtime.snapshots.ttl_s = 0.2
        before = first.post("/v1/estimates", json=req).json()["cluster"]["utilization"]
        patched = second.patch(
            "/v1/profiles/dgx-a100-nominal", json={"utilization": 0.3}, headers=AUTH
        )
        assert patched.status_code == 200
        time.sleep(0.25)
        after = first.post("/v1/estimates", json=req).json()["cluster"]["utilization"]
    assert before != pytest.approx(0.3) and after == pytest.approx(0.3)
