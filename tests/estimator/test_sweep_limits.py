"""Issue 6: enumerating layouts costs memory in the layouts it returns, never in the candidates.

``enumerate_layouts`` used to build the whole candidate grid (every p, t, b, v, recompute, SP,
ZeRO combination: up to 64x ``max_layouts``, 7 float64 arrays) before filtering it, so one plan
request could ask for gigabytes. It now counts the valid layouts factor by factor first; these
tests pin that it returns exactly what the grid did, in the same order, and refuses a space
over the cap without the grid.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import TypedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.errors import LimitError
from estimator.specs import RECOMPUTE_CODE, ModelSpec, Recompute, TrainingSpec
from estimator.sweep import LayoutArrays, _divisors, enumerate_layouts

COLUMNS = ("p", "t", "d", "b", "v", "recompute", "sp", "zero")


class LayoutOptions(TypedDict, total=False):
    """Keyword options of ``enumerate_layouts`` (any subset: the rest take its defaults)."""

    micro_batch_sizes: list[int]
    max_virtual_stages: int
    recompute: list[Recompute]
    sequence_parallel: list[bool]
    zero_stages: list[int]


class GridOptions(TypedDict):
    """Every option ``grid_reference`` needs spelled out."""

    micro_batch_sizes: list[int]
    max_virtual_stages: int
    recompute: list[Recompute]
    sequence_parallel: list[bool]
    zero_stages: list[int]


def grid_reference(
    model: ModelSpec,
    training: TrainingSpec,
    gpus: int,
    *,
    micro_batch_sizes: list[int],
    max_virtual_stages: int,
    recompute: list[Recompute],
    sequence_parallel: list[bool],
    zero_stages: list[int],
) -> dict[str, np.ndarray]:
    """The candidate grid, filtered (the former implementation, as the oracle)."""
    gb = training.global_batch_size
    heads, groups, layers = model.num_attention_heads, model.query_groups, model.num_layers
    divs = _divisors(gpus)
    ps = [p for p in divs if layers % p == 0]
    ts = [t for t in divs if heads % t == 0 and (groups % t == 0 or t % groups == 0)]
    vs = list(range(1, max_virtual_stages + 1))
    rcs = [float(RECOMPUTE_CODE[r]) for r in recompute]
    sps = [1.0 if s else 0.0 for s in sequence_parallel]
    zs = [float(z) for z in zero_stages]
    grid = np.meshgrid(ps, ts, micro_batch_sizes, vs, rcs, sps, zs, indexing="ij")
    p, t, b, v, rc, sp, zero = (np.asarray(g, dtype=np.float64).ravel() for g in grid)
    d = gpus / (p * t)
    ok = (np.mod(d, 1.0) == 0.0) & (d >= 1.0)
    d = np.where(ok, d, 1.0)
    m = gb / (b * d)
    ok &= np.mod(m, 1.0) == 0.0
    ok &= np.mod(layers / (p * v), 1.0) == 0.0
    ok &= (v == 1.0) | ((p > 1.0) & (np.mod(m, p) == 0.0))
    ok &= (sp == 0.0) | ((t > 1.0) & (np.mod(model.seq_length / t, 1.0) == 0.0))
    idx = np.flatnonzero(ok)
    columns = {"p": p, "t": t, "d": d, "b": b, "v": v, "recompute": rc, "sp": sp, "zero": zero}
    return {name: columns[name][idx] for name in COLUMNS}


def _columns(layouts: LayoutArrays) -> dict[str, np.ndarray]:
    return {name: layouts.columns[name] for name in COLUMNS}


@settings(max_examples=120, deadline=None)
@given(
    gpus=st.sampled_from([1, 2, 6, 8, 12, 16, 24, 48, 64, 96, 128, 360]),
    layers=st.sampled_from([1, 2, 3, 4, 12, 24, 32, 36, 40, 96]),
    heads=st.sampled_from([1, 2, 4, 6, 8, 12, 16, 32]),
    groups_divisor=st.sampled_from([1, 2, 4]),
    seq_length=st.sampled_from([1, 3, 512, 1000, 2048]),
    gb=st.sampled_from([1, 7, 16, 48, 96, 360, 720, 1536]),
    micro_batch_sizes=st.lists(st.integers(1, 16), min_size=1, max_size=5),
    max_virtual_stages=st.integers(1, 6),
    recompute=st.lists(st.sampled_from(list(Recompute)), min_size=1, max_size=3),
    sequence_parallel=st.lists(st.booleans(), min_size=1, max_size=3),
    zero_stages=st.lists(st.sampled_from([0, 1, 2, 3]), min_size=1, max_size=3),
)
def test_enumeration_equals_the_filtered_candidate_grid_in_order(
    gpus: int,
    layers: int,
    heads: int,
    groups_divisor: int,
    seq_length: int,
    gb: int,
    micro_batch_sizes: list[int],
    max_virtual_stages: int,
    recompute: list[Recompute],
    sequence_parallel: list[bool],
    zero_stages: list[int],
) -> None:
    groups = heads // groups_divisor if heads % groups_divisor == 0 else heads
    model = ModelSpec(
        num_layers=layers,
        hidden_size=64 * heads,
        num_attention_heads=heads,
        seq_length=seq_length,
        vocab_size=1000,
        num_query_groups=groups,
    )
    training = TrainingSpec(global_batch_size=gb, micro_batch_size=1)
    options: GridOptions = {
        "micro_batch_sizes": micro_batch_sizes,
        "max_virtual_stages": max_virtual_stages,
        "recompute": recompute,
        "sequence_parallel": sequence_parallel,
        "zero_stages": zero_stages,
    }
    expected = grid_reference(model, training, gpus, **options)
    got = _columns(enumerate_layouts(model, training, gpus, **options))
    for name in COLUMNS:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_gpt3_on_1536_gpus_equals_the_grid() -> None:
    model = ModelSpec(
        num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200
    )
    training = TrainingSpec(global_batch_size=1536, micro_batch_size=1)
    options: GridOptions = {
        "micro_batch_sizes": [1, 2, 4, 8],
        "max_virtual_stages": 8,
        "recompute": list(Recompute),
        "sequence_parallel": [False, True],
        "zero_stages": [0, 1, 2, 3],
    }
    expected = grid_reference(model, training, 1536, **options)
    got = _columns(enumerate_layouts(model, training, 1536, **options))
    assert len(got["p"]) > 1000
    for name in COLUMNS:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


# A model whose layers, heads and batch are all the GPU count (720720, 240 divisors): ~88
# million candidate layouts, under the 64x-the-cap pre-check, of which 1.2 million are valid.
HUGE = 720720
HUGE_MODEL = ModelSpec(
    num_layers=HUGE,
    hidden_size=HUGE,
    num_attention_heads=HUGE,
    seq_length=2048,
    vocab_size=51200,
)
HUGE_TRAINING = TrainingSpec(global_batch_size=HUGE, micro_batch_size=1)
HUGE_OPTIONS: LayoutOptions = {"micro_batch_sizes": list(range(1, 9)), "max_virtual_stages": 8}
#: What the candidate grid of that space alone would take (7 float64 arrays): ~4.9 GB.
HUGE_GRID_BYTES = 240 * 240 * 8 * 8 * 3 * 2 * 2 * 7 * 8


def _peak_bytes(call: Callable[[], None]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_space_over_the_cap_is_refused_without_building_the_candidates() -> None:
    def refuse() -> None:
        with pytest.raises(LimitError, match="1,203,978 valid layouts"):
            enumerate_layouts(
                HUGE_MODEL, HUGE_TRAINING, HUGE, max_layouts=1_000_000, **HUGE_OPTIONS
            )

    peak = _peak_bytes(refuse)
    assert peak < HUGE_GRID_BYTES / 100, f"{peak / 1e6:.0f} MB traced"


def test_memory_follows_the_valid_layouts_not_the_candidates() -> None:
    found: list[int] = []

    def build() -> None:
        found.append(len(enumerate_layouts(HUGE_MODEL, HUGE_TRAINING, HUGE, **HUGE_OPTIONS)))

    peak = _peak_bytes(build)
    assert found == [1_203_978]
    # the answer itself is 8 columns of 1.2 million float64 (~77 MB) plus defaults
    assert peak < 16 * 8 * found[0] * 2, f"{peak / 1e6:.0f} MB traced"
