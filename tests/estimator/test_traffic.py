import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.bandwidth import Collective, TrafficKind
from estimator.errors import LayoutError, LimitError, ValidationError
from estimator.specs import LayoutSpec
from estimator.traffic import (
    KINDS,
    SCOPES,
    Algorithm,
    CollectiveLoad,
    Placement,
    SparseTraffic,
    per_gpu_volume_bytes,
    traffic_entry_count,
    traffic_matrix,
)

AR = Collective.ALL_REDUCE
S = 1000.0


def entries(m: SparseTraffic, kind: TrafficKind | None = None) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for s, d, b, k in m.rows():
        if kind is None or k == kind.value:
            out[(s, d)] = out.get((s, d), 0.0) + b
    return out


def assert_invariant(placement: Placement, loads: list[CollectiveLoad]) -> None:
    volumes = per_gpu_volume_bytes(placement, loads)
    expected = np.sum(list(volumes.values()), axis=0)
    for algorithm in Algorithm:
        m = traffic_matrix(placement, loads, algorithm)
        np.testing.assert_allclose(m.row_sums(), expected, rtol=1e-12, atol=1e-9)
        totals = m.kind_totals()
        for kind, per_gpu in volumes.items():
            assert totals[kind] == pytest.approx(float(per_gpu.sum()), rel=1e-12, abs=1e-9)


# --- hand-computed small cases -------------------------------------------------------------


def test_two_rank_all_reduce_sends_s_to_the_other() -> None:
    m = traffic_matrix(Placement(1, 2, 1), [CollectiveLoad(TrafficKind.TP, AR, S, 1)])
    assert entries(m) == {(0, 1): S, (1, 0): S}
    assert m.src.dtype == np.int64 and m.dst.dtype == np.int64
    assert m.bytes.dtype == np.float64 and m.kind.dtype == np.int8


def test_four_rank_ring_sends_one_and_a_half_s_to_successor() -> None:
    m = traffic_matrix(Placement(1, 4, 1), [CollectiveLoad(TrafficKind.TP, AR, S, 1)])
    assert entries(m) == {(0, 1): 1.5 * S, (1, 2): 1.5 * S, (2, 3): 1.5 * S, (3, 0): 1.5 * S}


def test_four_rank_direct_sends_half_s_to_each_other_member() -> None:
    m = traffic_matrix(
        Placement(1, 4, 1), [CollectiveLoad(TrafficKind.TP, AR, S, 1)], Algorithm.DIRECT
    )
    assert entries(m) == {(i, j): 0.5 * S for i in range(4) for j in range(4) if i != j}


def test_all_gather_and_calls_scale_the_ring_volume() -> None:
    load = CollectiveLoad(TrafficKind.TP, Collective.ALL_GATHER, S, 3)
    m = traffic_matrix(Placement(1, 4, 1), [load])
    assert entries(m)[(0, 1)] == pytest.approx(3 * 0.75 * S)


def test_alltoall_spreads_evenly_even_under_ring() -> None:
    load = CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, S, 1)
    m = traffic_matrix(Placement(1, 1, 4, expert_parallel=4), [load], Algorithm.RING)
    assert entries(m) == {(i, j): S / 4 for i in range(4) for j in range(4) if i != j}


def test_ring_and_alltoall_of_one_kind_merge_into_one_entry_per_pair() -> None:
    loads = [
        CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, S, 1),
        CollectiveLoad(TrafficKind.EXPERT, Collective.ALL_GATHER, S, 1),
    ]
    m = traffic_matrix(Placement(1, 1, 4, expert_parallel=4), loads)
    e = entries(m)
    assert len(e) == len(m) == 12
    assert e[(0, 1)] == pytest.approx(S / 4 + 0.75 * S)
    assert e[(0, 2)] == pytest.approx(S / 4)


def test_pipeline_directions_and_no_wraparound() -> None:
    pl = Placement(3, 1, 1)
    fwd = CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 2, "forward")
    bwd = CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, 10.0, 2, "backward")
    assert entries(traffic_matrix(pl, [fwd, bwd])) == {
        (0, 1): 2 * S,
        (1, 2): 2 * S,
        (1, 0): 20.0,
        (2, 1): 20.0,
    }
    both = CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1)
    assert entries(traffic_matrix(pl, [both])) == {(0, 1): S, (1, 2): S, (1, 0): S, (2, 1): S}


def test_embedding_sync_between_first_and_last_stage_only() -> None:
    pl = Placement(4, 2, 1)  # ranks: tp + 2·pp
    m = traffic_matrix(pl, [CollectiveLoad(TrafficKind.EMBEDDING_SYNC, AR, S, 1)])
    assert entries(m) == {(0, 6): S, (6, 0): S, (1, 7): S, (7, 1): S}
    assert len(traffic_matrix(Placement(1, 2, 2), [m_load(TrafficKind.EMBEDDING_SYNC)])) == 0


def m_load(kind: TrafficKind) -> CollectiveLoad:
    return CollectiveLoad(kind, AR, S, 1)


def test_groups_of_one_carry_nothing() -> None:
    pl = Placement(1, 1, 1)
    loads = [m_load(k) for k in KINDS if k is not TrafficKind.PP]
    loads.append(CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1))
    m = traffic_matrix(pl, loads)
    assert len(m) == 0 and m.total_bytes == 0.0
    assert m.row_sums().tolist() == [0.0]


def test_dp_runs_over_dp_times_cp_when_cp_above_one() -> None:
    pl = Placement(1, 1, 2, context_parallel=2)  # ranks: cp + 2·dp
    m = traffic_matrix(pl, [m_load(TrafficKind.DP)])
    assert entries(m) == {(0, 1): 1.5 * S, (1, 2): 1.5 * S, (2, 3): 1.5 * S, (3, 0): 1.5 * S}
    cp = traffic_matrix(pl, [m_load(TrafficKind.CP)])
    assert entries(cp) == {(0, 1): S, (1, 0): S, (2, 3): S, (3, 2): S}


def test_cp_ring_pass_goes_to_the_next_rank_under_either_algorithm() -> None:
    # PyTorch's ring attention passes dK/dV to the next CP rank (Framework.cp_torch_ring): a
    # sendrecv of the CP kind is a ring pass, not an all-pairs spread, even for DIRECT.
    pl = Placement(1, 1, 1, context_parallel=4)
    load = CollectiveLoad(TrafficKind.CP, Collective.SENDRECV, S, 3)
    ring = {(0, 1): 3 * S, (1, 2): 3 * S, (2, 3): 3 * S, (3, 0): 3 * S}
    for algorithm in (Algorithm.RING, Algorithm.DIRECT):
        m = traffic_matrix(pl, [load], algorithm)
        assert entries(m) == ring
        assert traffic_entry_count(pl, [load], algorithm) == len(m)
    assert per_gpu_volume_bytes(pl, [load])[TrafficKind.CP].tolist() == [3 * S] * 4


def test_expert_groups_are_blocks_of_consecutive_dp_coordinates() -> None:
    pl = Placement(1, 2, 4, expert_parallel=2)  # ranks: tp + 2·dp
    m = traffic_matrix(pl, [CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, S, 1)])
    assert set(entries(m)) == {
        (0, 2), (2, 0), (1, 3), (3, 1), (4, 6), (6, 4), (5, 7), (7, 5),
    }  # fmt: skip


# --- the seed's picture: (p, t, d) = (4, 2, 4) on 32 GPUs ----------------------------------


def test_seed_picture_structure_p4_t2_d4() -> None:
    pl = Placement(4, 2, 4)
    loads = [
        m_load(TrafficKind.TP),
        m_load(TrafficKind.DP),
        m_load(TrafficKind.EMBEDDING_SYNC),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1, "forward"),
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1, "backward"),
    ]
    m = traffic_matrix(pl, loads)
    assert pl.gpus == 32
    src, dst = m.src, m.dst
    code = {k: KINDS.index(k) for k in KINDS}
    tp = m.kind == code[TrafficKind.TP]
    assert np.all(src[tp] // 2 == dst[tp] // 2)  # blocks of t adjacent ranks
    assert tp.sum() == 32
    dp = m.kind == code[TrafficKind.DP]
    assert np.all(src[dp] % 2 == dst[dp] % 2)  # stride-t rings
    assert np.all(src[dp] // 8 == dst[dp] // 8)  # within one stage
    assert np.all((dst[dp] - src[dp]) % 8 == 2)  # ring successor
    pp = m.kind == code[TrafficKind.PP]
    assert np.all(np.abs(dst[pp] - src[pp]) == 8)  # stage k <-> k+1
    assert pp.sum() == 2 * 3 * 8
    emb = m.kind == code[TrafficKind.EMBEDDING_SYNC]
    assert np.all(np.abs(dst[emb] - src[emb]) == 24)  # first <-> last stage
    dense = m.to_dense(64)
    assert dense.shape == (32, 32)
    expected = np.zeros((32, 32), dtype=bool)
    for r in range(32):
        tp_i, dp_i, pp_i = r % 2, (r // 2) % 4, r // 8
        expected[r, (1 - tp_i) + 2 * dp_i + 8 * pp_i] = True
        expected[r, tp_i + 2 * ((dp_i + 1) % 4) + 8 * pp_i] = True
        if pp_i < 3:
            expected[r, r + 8] = True
        if pp_i > 0:
            expected[r, r - 8] = True
        if pp_i in (0, 3):
            expected[r, tp_i + 2 * dp_i + 8 * (3 - pp_i)] = True
    assert np.array_equal(dense > 0, expected)
    assert np.all(np.diag(dense) == 0)


# --- rank order, placement ----------------------------------------------------------------


def test_default_rank_formula_is_megatron() -> None:
    pl = Placement(4, 2, 4, context_parallel=3)
    assert pl.order == ("tp", "cp", "dp", "pp")
    assert pl.strides == {"tp": 1, "cp": 2, "dp": 6, "pp": 24}
    r = np.arange(pl.gpus)
    c = pl.coords(r)
    assert np.array_equal(pl.ranks(c), r)
    assert int(pl.ranks({"tp": 1, "dp": 2, "pp": 3})) == 1 + 2 * 6 + 3 * 24
    grid = pl.rank_grid()
    assert grid.shape == (2, 3, 4, 4)
    assert sorted(grid.ravel().tolist()) == list(range(pl.gpus))


def test_ranks_rejects_unknown_dim_and_out_of_range() -> None:
    pl = Placement(2, 2, 2)
    with pytest.raises(ValidationError):
        pl.ranks({"xx": 0})
    with pytest.raises(ValidationError):
        pl.ranks({"tp": 2})


def test_rank_order_tp_pp_dp_moves_the_groups() -> None:
    pl = Placement(2, 2, 2, rank_order="tp-pp-dp")  # rank = tp + 2·(pp + 2·dp)
    assert pl.strides == {"tp": 1, "cp": 2, "pp": 2, "dp": 4}
    dp = traffic_matrix(pl, [m_load(TrafficKind.DP)])
    assert entries(dp) == {(0, 4): S, (4, 0): S, (1, 5): S, (5, 1): S,
                           (2, 6): S, (6, 2): S, (3, 7): S, (7, 3): S}  # fmt: skip
    pp = traffic_matrix(pl, [CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1, "forward")])
    assert entries(pp) == {(0, 2): S, (1, 3): S, (4, 6): S, (5, 7): S}
    default = traffic_matrix(Placement(2, 2, 2), [m_load(TrafficKind.DP)])
    assert (0, 2) in entries(default) and (0, 4) not in entries(default)


def test_nodes_spanned_per_dim() -> None:
    pl = Placement(8, 8, 16, gpus_per_node=8)
    assert pl.group_nodes_spanned("tp") == 1
    assert pl.group_nodes_spanned("dp") == 16
    assert pl.group_nodes_spanned("pp") == 8
    assert pl.group_nodes_spanned(TrafficKind.EMBEDDING_SYNC) == 2
    assert pl.group_size("dp") == 16
    pl2 = Placement(2, 4, 4, expert_parallel=2, gpus_per_node=8)
    assert pl2.group_nodes_spanned("tp") == 1
    assert pl2.group_nodes_spanned("dp") == 2  # ranks 0, 4, 8, 12
    assert pl2.group_nodes_spanned("expert") == 1  # ranks 0, 4
    assert pl2.group_nodes_spanned("pp") == 2  # ranks 0, 16
    pl3 = Placement(2, 16, 1, gpus_per_node=8)
    assert pl3.group_nodes_spanned("tp") == 2
    swapped = Placement(2, 2, 4, rank_order="tp-pp-dp", gpus_per_node=4)
    assert swapped.group_nodes_spanned("pp") == 1  # ranks 0, 2
    assert swapped.group_nodes_spanned("dp") == 4  # ranks 0, 4, 8, 12
    with pytest.raises(ValidationError):
        pl.group_nodes_spanned("zz")


def test_nodes_spanned_agrees_with_group_ranks() -> None:
    for order in ("tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "pp-cp-dp-tp"):
        pl = Placement(2, 4, 4, context_parallel=2, expert_parallel=2, gpus_per_node=4,
                       rank_order=order)  # fmt: skip
        for dim in ("tp", "cp", "dp", "pp", "expert", "embedding_sync"):
            groups = pl.group_ranks(dim)
            assert groups.shape[1] == pl.group_size(dim)
            assert 0 in groups[0]
            # every rank appears exactly once across groups (embedding: first/last stages)
            assert np.unique(groups).size == groups.size
            nodes = np.unique(groups[0] // pl.gpus_per_node).size
            assert pl.group_nodes_spanned(dim) == nodes


def test_placement_validation() -> None:
    with pytest.raises(LayoutError):
        Placement(0, 1, 1)
    with pytest.raises(LayoutError):
        Placement(1, 1, 6, expert_parallel=4)
    with pytest.raises(LayoutError):
        Placement(1, 1, 1, rank_order="tp-dp")
    layout = LayoutSpec(pipeline=2, tensor=4, data=2, rank_order="tp-pp-dp")
    pl = Placement.from_layout(layout, 8)
    assert (pl.gpus, pl.rank_order, pl.nodes) == (16, "tp-pp-dp", 2)


def test_load_validation() -> None:
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.PP, AR, S, 1)
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.TP, Collective.SENDRECV, S, 1)
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.CP, Collective.ALL_REDUCE, S, 1, "forward")
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.TP, AR, S, 1, "forward")
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1, "sideways")
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.TP, Collective.BROADCAST, S, 1)
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.TP, AR, -1.0, 1)
    with pytest.raises(ValidationError):
        CollectiveLoad(TrafficKind.TP, AR, float("nan"), 1)
    # strings on purpose: the constructor coerces them (what this checks)
    load = CollectiveLoad("tp", "all_reduce", S, 1)  # type: ignore[arg-type]
    assert load.kind is TrafficKind.TP and load.op is Collective.ALL_REDUCE


# --- representations ----------------------------------------------------------------------


def test_to_dense_refuses_above_the_cap_before_allocating() -> None:
    pl = Placement(8, 8, 4096)  # 262,144 GPUs: a dense matrix would need 512 GiB
    m = traffic_matrix(pl, [m_load(TrafficKind.TP)])
    with pytest.raises(LimitError) as err:
        m.to_dense(4096)
    assert err.value.status == 413
    small = traffic_matrix(Placement(1, 4, 1), [m_load(TrafficKind.TP)])
    assert small.to_dense(4).sum() == pytest.approx(small.total_bytes)


def test_by_node_conserves_bytes_and_puts_intra_node_on_diagonal() -> None:
    pl = Placement(4, 2, 4, gpus_per_node=8)
    loads = [m_load(TrafficKind.TP), m_load(TrafficKind.DP),
             CollectiveLoad(TrafficKind.PP, Collective.SENDRECV, S, 1)]  # fmt: skip
    m = traffic_matrix(pl, loads)
    nodes = m.by_node(8)
    assert nodes.size == 4
    assert nodes.total_bytes == pytest.approx(m.total_bytes)
    for kind, total in m.kind_totals().items():
        assert nodes.kind_totals()[kind] == pytest.approx(total)
    # TP and DP stay inside one stage = one node
    intra = nodes.select(TrafficKind.TP)
    assert np.all(intra.src == intra.dst)
    assert np.all(nodes.select(TrafficKind.DP).src == nodes.select(TrafficKind.DP).dst)
    pp = nodes.select(TrafficKind.PP)
    assert np.all(np.abs(pp.src - pp.dst) == 1)
    keys = set(zip(nodes.src.tolist(), nodes.dst.tolist(), nodes.kind.tolist(), strict=True))
    assert len(keys) == len(nodes)
    # partial last node
    assert traffic_matrix(Placement(1, 3, 1), [m_load(TrafficKind.TP)]).by_node(2).size == 2


def test_rows_kind_names_and_col_sums() -> None:
    m = traffic_matrix(Placement(2, 2, 1), [m_load(TrafficKind.TP)])
    assert {k for *_, k in m.rows()} == {"tp"}
    assert np.array_equal(m.row_sums(), m.col_sums())


# --- properties ---------------------------------------------------------------------------

ORDERS = ["-".join(p) for p in itertools.permutations(("tp", "cp", "dp", "pp"))]


@st.composite
def layouts_and_loads(draw: st.DrawFn) -> tuple[Placement, list[CollectiveLoad]]:
    p = draw(st.integers(1, 4))
    t = draw(st.integers(1, 4))
    ep = draw(st.integers(1, 3))
    d = ep * draw(st.integers(1, 3))
    cp = draw(st.integers(1, 2))
    pl = Placement(
        p, t, d, context_parallel=cp, expert_parallel=ep,
        gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
        rank_order=draw(st.sampled_from(ORDERS)),
    )  # fmt: skip
    ops = [Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER,
           Collective.ALLTOALL]  # fmt: skip
    loads: list[CollectiveLoad] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(KINDS))
        size = draw(st.floats(0, 1e9, allow_nan=False))
        calls = draw(st.floats(0, 100, allow_nan=False))
        if kind is TrafficKind.PP:
            direction = draw(st.sampled_from(["both", "forward", "backward"]))
            loads.append(CollectiveLoad(kind, Collective.SENDRECV, size, calls, direction))
        else:
            op = draw(st.sampled_from(ops))
            # an alltoall may run over part of its group (a flex MoE dispatch's legs)
            scope = draw(st.sampled_from(SCOPES)) if op is Collective.ALLTOALL else "group"
            loads.append(CollectiveLoad(kind, op, size, calls, scope=scope))
    return pl, loads


@settings(max_examples=150, deadline=None)
@given(layouts_and_loads())
def test_row_sums_equal_analytic_volume(case: tuple[Placement, list[CollectiveLoad]]) -> None:
    pl, loads = case
    assert_invariant(pl, loads)


@settings(max_examples=100, deadline=None)
@given(layouts_and_loads(), st.sampled_from(list(Algorithm)))
def test_entries_are_well_formed(
    case: tuple[Placement, list[CollectiveLoad]], algorithm: Algorithm
) -> None:
    pl, loads = case
    m = traffic_matrix(pl, loads, algorithm)
    assert np.all(m.bytes >= 0)
    assert np.all(m.src != m.dst)
    assert np.all((m.src >= 0) & (m.src < pl.gpus) & (m.dst >= 0) & (m.dst < pl.gpus))
    key = (m.kind.astype(np.int64) * pl.gpus + m.src) * pl.gpus + m.dst
    assert np.unique(key).size == key.size
    assert np.all(np.diff(key) > 0)  # sorted by (kind, src, dst)
    nodes = m.by_node(pl.gpus_per_node)
    assert nodes.total_bytes == pytest.approx(m.total_bytes, rel=1e-12, abs=1e-6)
    np.testing.assert_allclose(
        nodes.row_sums(),
        np.bincount(np.arange(pl.gpus) // pl.gpus_per_node, m.row_sums(), nodes.size),
        rtol=1e-12,
        atol=1e-6,
    )
    if pl.gpus <= 64:
        dense = m.to_dense(64)
        assert np.all(dense >= 0)
        np.testing.assert_allclose(dense.sum(axis=1), m.row_sums(), rtol=1e-12, atol=1e-6)


def test_folded_expert_groups_are_blocks_of_consecutive_ranks_of_a_stage() -> None:
    """Expert TP 1 under TP 2 (Megatron-Core's parallel folding): EP 16 groups are 16
    consecutive ranks of one stage's tp·dp ranks, spanning 2 nodes of 8."""
    placement = Placement(
        pipeline=2, tensor=2, data=8, expert_parallel=16, expert_tensor_parallel=1
    )
    groups = placement.group_ranks("expert")
    assert groups.tolist() == [list(range(16)), list(range(16, 32))]
    assert placement.group_nodes_spanned("expert") == 2
    with pytest.raises(LayoutError, match="tensor·data·cp"):
        Placement(pipeline=1, tensor=2, data=4, expert_parallel=16, expert_tensor_parallel=1)
    # Not folded, EP 16 does not divide data·cp 8.
    with pytest.raises(LayoutError, match="data·cp = 8"):
        Placement(pipeline=1, tensor=2, data=8, expert_parallel=16)


def test_expert_groups_under_context_parallel_follow_megatron_cores_expert_grid() -> None:
    """Megatron-Core builds expert groups on its own grid tp-ep-dp-pp (no cp axis): with TP 4,
    CP 2, DP 2 an EP 4 group is the ranks 4 apart, across both CP and DP coordinates (EP need
    only divide data·cp), and spans 2 nodes of 8, not 4."""
    placement = Placement(pipeline=1, tensor=4, data=2, context_parallel=2, expert_parallel=4)
    groups = placement.group_ranks("expert")
    assert groups.tolist() == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert placement.group_nodes_spanned("expert") == 2
    loads = [CollectiveLoad(TrafficKind.EXPERT, Collective.ALLTOALL, 4.0, 1)]
    m = traffic_matrix(placement, loads)
    assert np.all(m.row_sums() == 3.0)  # (n-1)/n · S to each of 3 peers
