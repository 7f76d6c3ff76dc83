"""api.service pieces that the routes rely on (the caches: tests/api/test_caches.py)."""

from __future__ import annotations

import numpy as np
import pytest

from api.service import binned_matrix
from estimator import SparseTraffic


def test_binned_matrix_keeps_every_byte_and_equals_dense_when_small() -> None:
    rng = np.random.default_rng(7)
    size, n = 1000, 5000
    traffic = SparseTraffic(
        size,
        rng.integers(0, size, n),
        rng.integers(0, size, n),
        rng.random(n) * 1e9,
        np.zeros(n, dtype=np.int8),
    )
    binned, block = binned_matrix(traffic=traffic, max_cells=256)
    assert block == 4 and binned.shape == (250, 250)
    assert binned.sum() == pytest.approx(traffic.total_bytes)
    assert binned[0, 0] == pytest.approx(traffic.to_dense(size)[:4, :4].sum())
    exact, one = binned_matrix(traffic=traffic, max_cells=size)
    assert one == 1
    np.testing.assert_array_equal(exact, traffic.to_dense(size))
