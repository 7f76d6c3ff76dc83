"""ProfileBandwidth: each method where it applies, with exact numbers on hand-built runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from estimator.bandwidth import BandwidthProvider, Collective, TrafficKind, weak_answer_warning
from estimator.errors import NotFoundError, ValidationError
from profiles import bandwidth
from profiles.bandwidth import (
    AlphaBetaFit,
    Envelope,
    ProfileBandwidth,
    RunCurve,
    fit_alpha_beta,
)
from profiles.nominal import nominal_bandwidth, nominal_curves
from profiles.parsers import apply_hints, parse_benchmark_text

K = TrafficKind.DP
AR = Collective.ALL_REDUCE
ALPHA_US = 10.0
BETA_GBPS = 50.0
SIZES = [1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0]


def _time_us(size: float, alpha: float = ALPHA_US, beta: float = BETA_GBPS) -> float:
    return alpha + size / (beta * 1e3)


def _busbw(op: Collective, ranks: int, size: float, time_us: float) -> float:
    factor = {Collective.ALL_REDUCE: 2 * (ranks - 1) / ranks}.get(op, 1.0)
    if op in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALLTOALL):
        factor = (ranks - 1) / ranks
    return factor * size / (time_us * 1e3)


def _curve(
    op: Collective = AR,
    ranks: int = 16,
    nodes: int = 2,
    *,
    backend: str = "nccl",
    sizes: list[float] = SIZES,
    alpha: float = ALPHA_US,
    beta: float = BETA_GBPS,
    in_place_times: float | None = None,
    out_of_place: bool = True,
    run_id: int = 1,
) -> RunCurve:
    rows: list[tuple[float, float, bool]] = []
    for s in sizes:
        t = _time_us(s, alpha, beta)
        if out_of_place:
            rows.append((s, t, False))
        rows.append((s, t * (in_place_times or 1.0), True))
    curve = RunCurve.from_points(
        op=op,
        ranks=ranks,
        nodes=nodes,
        points=rows,
        label=f"run {run_id}",
        backend=backend,
        run_id=run_id,
    )
    assert curve is not None
    return curve


def _provider(*curves: RunCurve, nominal: tuple[RunCurve, ...] = ()) -> ProfileBandwidth:
    return ProfileBandwidth("test", curves, nominal)


def test_profile_bandwidth_satisfies_the_protocol() -> None:
    assert isinstance(_provider(_curve()), BandwidthProvider)


def test_point_at_a_measured_size_is_measured_and_exact() -> None:
    answer = _provider(_curve()).explain(K, AR, 16, 2, 4096)
    assert answer.method == "measured"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0))
    assert "run 1" in answer.source


def test_between_sizes_is_linear_in_log_size() -> None:
    answer = _provider(_curve()).explain(K, AR, 16, 2, 2048)
    low, high = _busbw(AR, 16, 1024.0, _time_us(1024.0)), _busbw(AR, 16, 4096.0, _time_us(4096.0))
    assert answer.method == "interpolated"
    assert answer.busbw_gbps == pytest.approx((low + high) / 2, rel=1e-12)


def test_beyond_the_largest_size_follows_the_alpha_beta_fit() -> None:
    size = 64.0 * 2**20
    answer = _provider(_curve()).explain(K, AR, 16, 2, size)
    assert answer.method == "extrapolated"
    # Exact α-β data: the anchored extrapolation is the model itself.
    assert answer.busbw_gbps == pytest.approx(_busbw(AR, 16, size, _time_us(size)), rel=1e-9)
    assert "α=10" in answer.source and "β=50" in answer.source


def test_below_the_smallest_size_follows_the_alpha_beta_fit() -> None:
    answer = _provider(_curve()).explain(K, AR, 16, 2, 8)
    assert answer.method == "extrapolated"
    assert answer.busbw_gbps == pytest.approx(_busbw(AR, 16, 8.0, _time_us(8.0)), rel=1e-9)


def test_one_rank_per_node_gets_the_per_gpu_share_of_full_node_bandwidth() -> None:
    provider = _provider(_curve(ranks=16, nodes=2))
    answer = provider.explain(K, AR, 4, 4, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0)) / 8
    assert "per-GPU share" in answer.source and "run 1" in answer.source


def test_same_ranks_per_node_on_more_nodes_keeps_busbw() -> None:
    answer = _provider(_curve(ranks=16, nodes=2)).explain(K, AR, 64, 8, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0))


def test_other_rank_count_within_a_node_keeps_busbw() -> None:
    answer = _provider(_curve(ranks=8, nodes=1)).explain(K, AR, 4, 1, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 8, 4096.0, _time_us(4096.0))
    assert "single-node" in answer.source


def test_all_gather_without_runs_uses_all_reduce_busbw() -> None:
    answer = _provider(_curve()).explain(K, Collective.ALL_GATHER, 16, 2, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0))
    assert "all_reduce busbw stands in for all_gather" in answer.source


def test_sendrecv_across_nodes_uses_one_gpus_share_of_all_reduce() -> None:
    answer = _provider(_curve()).explain(K, Collective.SENDRECV, 2, 2, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0)) / 8


def test_intra_node_query_with_only_inter_node_runs_is_a_lower_bound() -> None:
    answer = _provider(_curve(ranks=16, nodes=2)).explain(K, AR, 8, 1, 4096)
    assert answer.method == "derived"
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0))
    assert "lower bound" in answer.source


def test_inter_node_query_with_only_single_node_runs_asks_for_an_upload() -> None:
    with pytest.raises(NotFoundError, match=r"all_reduce_perf.*16 ranks on 2 node") as info:
        _provider(_curve(ranks=8, nodes=1)).busbw_gbps(K, AR, 16, 2, 4096)
    assert "single-node" in str(info.value)


def test_alltoall_has_no_stand_in_and_asks_for_alltoall_perf() -> None:
    with pytest.raises(NotFoundError, match="alltoall_perf"):
        _provider(_curve()).explain(K, Collective.ALLTOALL, 16, 2, 4096)


def test_nominal_curves_answer_only_what_runs_cannot() -> None:
    provider = _provider(_curve(), nominal=nominal_curves("dgx-a100-nominal"))
    assert provider.explain(K, AR, 16, 2, 4096).method == "measured"
    answer = provider.explain(K, Collective.ALLTOALL, 16, 2, 2**20)
    assert answer.method == "nominal"
    assert "nominal" in answer.source


def test_nominal_a100_intra_node_all_reduce_tends_to_77_percent_of_nvlink() -> None:
    value = nominal_bandwidth("dgx-a100-nominal").busbw_gbps(K, AR, 8, 1, 2.0**40)
    assert value == pytest.approx(300.0 * 0.77, rel=1e-4)


def test_nominal_h100_inter_node_one_rank_per_node_is_an_eighth_of_the_node() -> None:
    answer = nominal_bandwidth("dgx-h100-nominal").explain(K, AR, 4, 4, 2.0**40)
    # A full node's ring is capped by NVLink (450 · 0.77) below its 8 NICs (8 · 50 · 0.92).
    node_gbps = min(450.0 * 0.77, 8 * 50.0 * 0.92)
    assert answer.method == "nominal"
    assert answer.busbw_gbps == pytest.approx(node_gbps / 8, rel=1e-4)


def test_out_of_place_points_are_preferred_over_in_place() -> None:
    answer = _provider(_curve(in_place_times=2.0)).explain(K, AR, 16, 2, 4096)
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, _time_us(4096.0))


def test_in_place_points_are_used_when_no_out_of_place_row_exists() -> None:
    curve = _curve(in_place_times=2.0, out_of_place=False)
    answer = _provider(curve).explain(K, AR, 16, 2, 4096)
    assert curve.in_place
    assert answer.busbw_gbps == _busbw(AR, 16, 4096.0, 2.0 * _time_us(4096.0))


def test_busbw_comes_from_time_not_from_the_printed_zero() -> None:
    curve = RunCurve.from_points(
        op=AR, ranks=8, nodes=1, points=[(8.0, 20.0, False), (16.0, 20.5, False)], label="r"
    )
    assert curve is not None
    assert curve.busbw_gbps[0] == pytest.approx(2 * 7 / 8 * 8 / 20e3, rel=1e-12)


def test_best_backend_wins_at_each_size_and_is_named() -> None:
    slow = _curve(backend="mpi", beta=10.0, alpha=2.0, run_id=2)
    fast = _curve(backend="nccl", beta=50.0, alpha=10.0, run_id=1)
    provider = _provider(slow, fast)
    small, large = provider.explain(K, AR, 16, 2, 1024), provider.explain(K, AR, 16, 2, 2**20)
    assert small.busbw_gbps == _busbw(AR, 16, 1024.0, _time_us(1024.0, 2.0, 10.0))
    assert "run 2" in small.source
    assert large.busbw_gbps == _busbw(AR, 16, 2.0**20, _time_us(2.0**20))
    assert "run 1" in large.source


def test_tuning_table_picks_the_fastest_backend_per_size() -> None:
    provider = _provider(
        _curve(backend="mpi", beta=10.0, alpha=2.0), _curve(backend="nccl", beta=50.0)
    )
    table = provider.tuning_table(op=AR, ranks=16)
    assert [row.size_bytes for row in table] == [int(s) for s in SIZES]
    assert table[0].best_backend == "mpi" and table[-1].best_backend == "nccl"
    assert table[-1].busbw_gbps == _busbw(AR, 16, SIZES[-1], _time_us(SIZES[-1]))


def test_tuning_table_needs_nodes_when_runs_span_several() -> None:
    provider = _provider(_curve(ranks=16, nodes=2), _curve(ranks=16, nodes=4))
    with pytest.raises(ValidationError, match="nodes"):
        provider.tuning_table(op=AR, ranks=16)
    assert len(provider.tuning_table(op=AR, ranks=16, nodes=4)) == len(SIZES)
    with pytest.raises(NotFoundError):
        provider.tuning_table(op=AR, ranks=32)


def test_explain_equals_busbw_for_every_query_of_an_array() -> None:
    provider = _provider(
        _curve(),
        _curve(ranks=8, nodes=1, beta=200.0, run_id=3),
        nominal=nominal_curves("dgx-h100-nominal"),
    )
    rng = np.random.default_rng(1)
    ranks = rng.choice([2, 4, 8, 16, 32, 64], size=400).astype(float)
    nodes = np.array([rng.choice([n for n in (1, 2, 4, 8) if n <= r]) for r in ranks], float)
    sizes = np.exp(rng.uniform(0, math.log(2.0**36), size=400))
    sizes[:6] = SIZES  # exact measured sizes too
    for op in (AR, Collective.SENDRECV, Collective.ALLTOALL):
        values = provider.busbw_gbps(K, op, ranks, nodes, sizes)
        assert isinstance(values, np.ndarray)
        for i in range(ranks.size):
            answer = provider.explain(K, op, int(ranks[i]), int(nodes[i]), float(sizes[i]))
            assert answer.busbw_gbps == values[i], (op, ranks[i], nodes[i], sizes[i])


def test_arrays_keep_their_shape_and_scalars_give_floats() -> None:
    provider = _provider(_curve())
    grid = np.full((3, 4), 4096.0)
    values = provider.busbw_gbps(K, AR, np.full((3, 4), 16.0), np.full((3, 4), 2.0), grid)
    assert isinstance(values, np.ndarray) and values.shape == (3, 4)
    scalar = provider.busbw_gbps(K, AR, 16, 2, 4096)
    assert type(scalar) is float and scalar == values[0, 0]


@pytest.mark.parametrize(
    ("ranks", "nodes", "size", "field"),
    [
        (16, 32, 1024.0, "nodes"),
        (0, 1, 1024.0, "ranks"),
        (2.5, 1, 1024.0, "ranks"),
        (16, 2, -1.0, "size_bytes"),
        (16, 2, math.nan, "size_bytes"),
    ],
)
def test_impossible_queries_are_refused(
    ranks: float, nodes: float, size: float, field: str
) -> None:
    with pytest.raises(ValidationError) as info:
        _provider(_curve()).busbw_gbps(K, AR, ranks, nodes, size)
    assert info.value.field == field


def test_alpha_beta_fit_recovers_known_values() -> None:
    sizes = np.array([2.0**e for e in range(3, 31)])
    fit = fit_alpha_beta(sizes, 7.5 + sizes / (123.0 * 1e3))
    assert fit is not None
    assert fit.alpha_us == pytest.approx(7.5, rel=1e-9)
    assert fit.beta_gbps == pytest.approx(123.0, rel=1e-9)


def test_alpha_beta_fit_keeps_latency_non_negative() -> None:
    sizes = np.array([1e6, 2e6, 4e6])
    fit = fit_alpha_beta(sizes, sizes / 1e4 - 5.0)  # a free fit would give α = -5
    assert fit is not None
    assert fit.alpha_us == 0.0 and fit.beta_gbps > 0


def test_alpha_beta_fit_refuses_flat_times_and_single_sizes() -> None:
    assert fit_alpha_beta([1e3, 1e4, 1e5], [5.0, 5.0, 5.0]) is None
    assert fit_alpha_beta([1e3, 1e3], [5.0, 6.0]) is None


def test_extrapolation_without_a_fit_holds_the_edge_value() -> None:
    curve = RunCurve.from_points(
        op=AR, ranks=16, nodes=2, points=[(1e3, 5.0, False), (1e4, 5.0, False)], label="flat"
    )
    assert curve is not None and curve.fit is None
    answer = _provider(curve).explain(K, AR, 16, 2, 1e6)
    assert answer.method == "extrapolated" and "held" in answer.source
    assert answer.busbw_gbps == curve.busbw_gbps[-1]


def test_curves_expose_points_and_fits_for_plotting() -> None:
    (data,) = _provider(_curve()).curves()
    assert data.sizes_bytes == [int(s) for s in SIZES]
    assert data.alpha_us == pytest.approx(ALPHA_US) and data.beta_gbps == pytest.approx(BETA_GBPS)
    assert data.op == "all_reduce" and data.ranks == 16 and data.nodes == 2


def test_alpha_beta_fit_model_matches_its_definition() -> None:
    fit = AlphaBetaFit(alpha_us=4.0, beta_gbps=100.0)
    assert fit.time_us(1e6) == 4.0 + 10.0
    assert fit.algbw_gbps(1e6) == pytest.approx(1e6 / 14e3, rel=1e-12)


# --- issue 10 §1: answers follow the measurements -------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"
# oracle-quickstart/oci-hpc-oke README, all_reduce_perf on 16 A100 over 2 nodes: printed busbw.
OKE_BUSBW_8K, OKE_BUSBW_1M, OKE_BUSBW_8G = 0.32, 22.97, 237.94
WITHIN_8K = 2.0  # issue 10 "done when": within 2x of the measured busbw at 8 KB ...
WITHIN_1M = 0.30  # ... and within 30% at 1 MB


def _parsed_curves(name: str, **hints: Any) -> list[RunCurve]:
    result = parse_benchmark_text((FIXTURES / name).read_text())
    curves = []
    for run in result.runs:
        run = apply_hints(run, **hints)
        assert run.collective is not None and run.ranks is not None and run.nodes is not None
        curve = RunCurve.from_points(
            op=Collective(run.collective),
            ranks=run.ranks,
            nodes=run.nodes,
            points=[(p.size_bytes, p.time_us, p.in_place) for p in run.points],
            label=name,
            backend=run.backend,
        )
        assert curve is not None
        curves.append(curve)
    return curves


def _issue_10_provider() -> ProfileBandwidth:
    nccl = _parsed_curves("nccl_all_reduce_16gpu_2node_a100_oke.txt")
    osu = _parsed_curves("osu_xccl_allreduce_1gib.txt", ranks=16, nodes=2)
    return _provider(*nccl, *osu)


def test_the_reported_profile_answers_small_sizes_from_the_full_curve() -> None:
    provider = _issue_10_provider()
    small = provider.explain(K, AR, 16, 2, 8192)
    medium = provider.explain(K, AR, 16, 2, 2**20)
    assert OKE_BUSBW_8K / WITHIN_8K <= small.busbw_gbps <= OKE_BUSBW_8K * WITHIN_8K
    assert medium.busbw_gbps == pytest.approx(OKE_BUSBW_1M, rel=WITHIN_1M)
    for answer in (small, medium):
        assert answer.method == "measured" and "oke" in answer.source
        assert answer.distance_octaves == 0.0 and not answer.weak
    assert provider.busbw_gbps(K, AR, 16, 2, 8192) == small.busbw_gbps


def test_best_of_compares_runs_only_where_both_measured() -> None:
    provider = _issue_10_provider()
    at_1g = provider.explain(K, AR, 16, 2, 2**30)
    # both runs measured 1 GiB: the nccl-tests run (219 GB/s) beats the OSU one (149 GB/s)
    assert at_1g.busbw_gbps == pytest.approx(219.12, abs=0.01)
    assert "best of 2 runs" in at_1g.source
    sweep = provider.busbw_gbps(
        K, AR, np.full(3, 16.0), np.full(3, 2.0), np.array([8192.0, 2.0**20, 2.0**33])
    )
    assert isinstance(sweep, np.ndarray) and sweep[2] == pytest.approx(OKE_BUSBW_8G, abs=0.01)


def test_a_one_point_run_is_held_at_most_one_octave_then_the_nominal_curves_answer() -> None:
    (osu,) = _parsed_curves("osu_xccl_allreduce_1gib.txt", ranks=16, nodes=2)
    provider = _provider(osu, nominal=nominal_curves("dgx-a100-nominal"))
    near = provider.explain(K, AR, 16, 2, 2**31)  # one octave above the point
    far = provider.explain(K, AR, 16, 2, 8192)
    assert near.method == "extrapolated" and near.busbw_gbps == osu.busbw_gbps[0]
    assert near.distance_octaves == pytest.approx(1.0) and not near.weak
    assert far.method == "nominal" and far.weak
    assert far.advice is not None and "all_reduce_perf" in far.advice


def test_without_nominal_curves_a_far_answer_is_the_last_resort_and_weak() -> None:
    (osu,) = _parsed_curves("osu_xccl_allreduce_1gib.txt", ranks=16, nodes=2)
    answer = _provider(osu).explain(K, AR, 16, 2, 8192)
    assert answer.busbw_gbps == osu.busbw_gbps[0]
    assert answer.weak and answer.distance_octaves == pytest.approx(17.0)
    assert "beyond that bound" in answer.source


def test_a_far_size_comes_from_a_related_measurement_before_nominal() -> None:
    (osu,) = _parsed_curves("osu_xccl_allreduce_1gib.txt", ranks=16, nodes=2)
    other = _curve(ranks=32, nodes=4, sizes=[2.0**e for e in range(3, 34)])
    provider = _provider(osu, other, nominal=nominal_curves("dgx-a100-nominal"))
    answer = provider.explain(K, AR, 16, 2, 8192)
    assert answer.method == "derived" and answer.derived_placement
    assert answer.busbw_gbps == _busbw(AR, 32, 8192.0, _time_us(8192.0))


def test_fit_extrapolation_is_bounded_to_two_octaves_unless_the_data_pin_it_down() -> None:
    # Sizes 1 KiB..1 MiB of α = 10 us, β = 50 GB/s: at 1 MiB S/β is 67% of T (bandwidth regime
    # seen), at 1 KiB α is 83% (latency regime seen): the fit may go on either way.
    pinned = _provider(_curve()).explain(K, AR, 16, 2, 2.0**30)
    assert pinned.method == "extrapolated" and pinned.distance_octaves == pytest.approx(10.0)
    assert pinned.weak  # far from data, even if the fit is well determined
    # The bandwidth regime unseen (sizes up to 1 KiB only, S/β ≈ 2% of T): stops at 2 octaves.
    small = _curve(sizes=[8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
    provider = _provider(small, nominal=nominal_curves("dgx-a100-nominal"))
    assert provider.explain(K, AR, 16, 2, 4096).method == "extrapolated"
    assert provider.explain(K, AR, 16, 2, 8192).method == "nominal"


def test_a_gap_between_runs_is_answered_from_the_nearer_run_within_its_bound() -> None:
    low = _curve(sizes=[2.0**e for e in range(3, 11)], run_id=1)
    high = _curve(sizes=[2.0**e for e in range(30, 34)], run_id=2)
    provider = _provider(low, high, nominal=nominal_curves("dgx-a100-nominal"))
    near_low = provider.explain(K, AR, 16, 2, 2.0**11)
    assert near_low.method == "extrapolated" and "run 1" in near_low.source
    # α-β data: the anchored fit is the truth
    assert near_low.busbw_gbps == pytest.approx(_busbw(AR, 16, 2.0**11, _time_us(2.0**11)))
    near_high = provider.explain(K, AR, 16, 2, 2.0**29)
    assert near_high.method == "extrapolated" and "run 2" in near_high.source
    mid = provider.explain(K, AR, 16, 2, 2.0**20)
    # 10 octaves from either run: run 1's fit never saw the bandwidth regime, run 2's fit never
    # saw the latency regime, so the nominal curves answer
    assert mid.method == "nominal" and mid.weak


def test_missing_op_falls_back_to_nominal_curves_with_a_weak_answer() -> None:
    provider = _provider(_curve(), nominal=nominal_curves("dgx-a100-nominal"))
    answer = provider.explain(K, Collective.ALLTOALL, 16, 2, 2**20)
    assert answer.method == "nominal" and answer.weak
    assert answer.advice is not None and "alltoall_perf" in answer.advice
    warning = weak_answer_warning(Collective.ALLTOALL, 16, 2, 2**20, answer)
    assert warning is not None and "alltoall" in warning and "alltoall_perf" in warning


def test_strong_answers_give_no_warning() -> None:
    answer = _provider(_curve()).explain(K, AR, 16, 2, 4096)
    assert weak_answer_warning(AR, 16, 2, 4096, answer) is None


def test_intra_node_lower_bound_is_weak() -> None:
    answer = _provider(_curve(ranks=16, nodes=2)).explain(K, AR, 8, 1, 4096)
    assert answer.weak and answer.derived_placement


def test_envelope_merge_is_the_pointwise_max_and_order_free() -> None:
    a = _curve(backend="mpi", beta=10.0, alpha=2.0, run_id=2)
    b = _curve(backend="nccl", beta=50.0, alpha=10.0, run_id=1)
    ab = Envelope.of_curve(a).merge(Envelope.of_curve(b))
    ba = Envelope.of_curve(b).merge(Envelope.of_curve(a))
    grid = np.log(np.geomspace(SIZES[0], SIZES[-1], 200))
    expected = np.maximum(
        np.interp(grid, a.log_sizes, a.busbw_gbps), np.interp(grid, b.log_sizes, b.busbw_gbps)
    )
    sizes = np.exp(grid)
    assert np.allclose(ab.evaluate(sizes, grid), expected, rtol=1e-12)
    assert np.allclose(ba.evaluate(sizes, grid), expected, rtol=1e-12)
    assert ab.run_count == 2 and ab.log_knots.size > len(SIZES)  # a crossing was added


def test_envelope_round_trips_through_json() -> None:
    env = Envelope.of_curves([_curve(run_id=1), _curve(beta=10.0, alpha=2.0, run_id=2)])
    back = Envelope.from_json(env.to_json())
    grid = np.log(np.geomspace(1.0, 2.0**40, 300))
    assert np.array_equal(back.evaluate(np.exp(grid), grid), env.evaluate(np.exp(grid), grid))
    assert [s.label for s in back.sources] == [s.label for s in env.sources]


def test_fitted_beta_is_reported_as_busbw_and_algbw() -> None:
    (data,) = _provider(_curve()).curves()
    assert data.beta_algbw_gbps == pytest.approx(BETA_GBPS)
    assert data.beta_busbw_gbps == pytest.approx(BETA_GBPS * 2 * 15 / 16)


def test_explain_equals_busbw_with_gaps_single_points_and_merged_runs() -> None:
    provider = _mixed_provider()
    rng = np.random.default_rng(7)
    ranks = rng.choice([8, 16, 32, 64], size=300).astype(float)
    nodes = np.array([rng.choice([n for n in (1, 2, 4, 8) if n <= r]) for r in ranks], float)
    sizes = np.exp(rng.uniform(0, math.log(2.0**36), size=300))
    for op in (AR, Collective.ALL_GATHER, Collective.SENDRECV):
        values = provider.busbw_gbps(K, op, ranks, nodes, sizes)
        assert isinstance(values, np.ndarray)
        for i in range(ranks.size):
            args = (int(ranks[i]), int(nodes[i]), float(sizes[i]))
            assert provider.explain(K, op, *args).busbw_gbps == values[i], (op, args)
            assert provider.busbw_gbps(K, op, *args) == values[i]


def test_many_runs_at_one_grid_merge_to_the_exact_upper_envelope() -> None:
    rng = np.random.default_rng(3)
    curves = [
        _curve(
            sizes=[2.0**e for e in range(3, 34, 2)],
            alpha=float(rng.uniform(2, 40)),
            beta=float(rng.uniform(5, 300)),
            run_id=i,
        )
        for i in range(60)
    ]
    batched = Envelope.of_curves(curves)
    pairwise = Envelope.of_curve(curves[0])
    for curve in curves[1:]:
        pairwise = pairwise.merge(Envelope.of_curve(curve))
    grid = np.log(np.geomspace(8.0, 2.0**33, 5000))
    sizes = np.exp(grid)
    truth = np.max([np.interp(grid, c.log_sizes, c.busbw_gbps) for c in curves], axis=0)
    assert np.allclose(batched.evaluate(sizes, grid), truth, rtol=1e-12, atol=0)
    assert np.allclose(pairwise.evaluate(sizes, grid), truth, rtol=1e-12, atol=0)
    assert batched.run_count == 60 and len(batched.sources) < 60


# --- array queries grouped by hashing: each distinct query answered once --------------------


def _mixed_provider() -> ProfileBandwidth:
    """Merged runs, a gap, one-point and single-node runs, derived placements, nominal curves."""
    (osu,) = _parsed_curves("osu_xccl_allreduce_1gib.txt", ranks=16, nodes=2)
    return _provider(
        *_parsed_curves("nccl_all_reduce_16gpu_2node_a100_oke.txt"),
        osu,
        _curve(ranks=32, nodes=4, sizes=[2.0**e for e in range(3, 11)], run_id=5),
        _curve(ranks=32, nodes=4, sizes=[2.0**e for e in range(24, 31)], run_id=6),
        _curve(ranks=8, nodes=1, beta=200.0, backend="mpi", run_id=7),
        _curve(ranks=8, nodes=1, beta=150.0, alpha=3.0, run_id=8),
        nominal=nominal_curves("dgx-a100-nominal"),
    )


def _repeated_queries(
    seed: int, distinct: int, size: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``size`` queries drawn from ``distinct`` (ranks, nodes, size): a sweep block's shape."""
    rng = np.random.default_rng(seed)
    ranks = rng.choice([2, 8, 16, 24, 32, 64, 128], size=distinct).astype(float)
    nodes = np.array([rng.choice([n for n in (1, 2, 3, 4, 8, 16) if n <= r]) for r in ranks])
    sizes = np.exp(rng.uniform(0, math.log(2.0**42), size=distinct))
    sizes[:8] = [*SIZES[:4], 2.0**30, 0.0, 0.5, 1.0]  # measured sizes, below 1 B, at 1 B
    pick = rng.integers(0, distinct, size=size)
    return ranks[pick], nodes[pick].astype(float), sizes[pick]


def _bits(values: object) -> np.ndarray[Any, Any]:
    array = np.asarray(values, dtype=np.float64)
    return array.view(np.int64)


@pytest.mark.parametrize("op", [AR, Collective.ALL_GATHER, Collective.SENDRECV, Collective.REDUCE])
def test_grouped_array_answers_are_the_per_placement_answers_bit_for_bit(op: Collective) -> None:
    provider = _mixed_provider()
    ranks, nodes, sizes = _repeated_queries(seed=11, distinct=150, size=3000)
    assert ranks.size >= bandwidth._GROUP_MIN
    expected = provider._evaluate_placements(op, ranks, nodes, sizes)
    grouped = provider._evaluate_grouped(op, ranks, nodes, sizes, 0)
    assert grouped is not None  # the grouped path answered, not the fallback
    assert np.array_equal(_bits(grouped), _bits(expected))
    again = provider.busbw_gbps(K, op, ranks, nodes, sizes)  # from the memo this time
    assert isinstance(again, np.ndarray)
    assert np.array_equal(_bits(again), _bits(expected))
    for i in range(300):
        args = (int(ranks[i]), int(nodes[i]), float(sizes[i]))
        assert provider.explain(K, op, *args).busbw_gbps == again[i], (op, args)


def test_grouped_answers_for_one_placement_shapes_and_strided_arrays() -> None:
    provider = nominal_bandwidth("dgx-a100-nominal")
    rng = np.random.default_rng(5)
    sizes = np.exp(rng.uniform(0, math.log(2.0**40), size=40))[rng.integers(0, 40, 4096)]
    one = provider.busbw_gbps(K, AR, 64.0, 8.0, sizes)  # scalars broadcast: one placement
    assert isinstance(one, np.ndarray)
    expected = provider._evaluate_placements(AR, np.full(4096, 64.0), np.full(4096, 8.0), sizes)
    assert np.array_equal(_bits(one), _bits(expected))
    grid = provider.busbw_gbps(K, AR, 64.0, 8.0, sizes.reshape(64, 64))
    assert isinstance(grid, np.ndarray) and grid.shape == (64, 64)
    assert np.array_equal(_bits(grid.ravel()), _bits(expected))
    strided = provider.busbw_gbps(K, AR, np.full(8192, 64.0)[::2], 8.0, sizes)
    assert np.array_equal(_bits(strided), _bits(expected))


def test_grouping_flags_collisions_and_later_rounds_resolve_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranks, nodes, sizes = _repeated_queries(seed=3, distinct=60, size=2000)
    monkeypatch.setattr(bandwidth, "_GROUP_BITS", 3)  # 8 slots for 60 queries: collisions
    slots, first = bandwidth._group(ranks, nodes, sizes, bandwidth._GROUP_MULTIPLIERS[0])
    winner = first[slots]
    same = bandwidth._same_as_first(ranks, nodes, sizes, winner)
    assert not same.all() and same.any()
    assert np.array_equal(slots[winner], slots)  # each slot's winner hashed there
    differs = (ranks[winner] != ranks) | (nodes[winner] != nodes) | (sizes[winner] != sizes)
    assert np.array_equal(differs, ~same)  # exactly the queries unlike their slot's winner
    provider = _mixed_provider()
    expected = provider._evaluate_placements(AR, ranks, nodes, sizes)
    assert provider._evaluate_grouped(AR, ranks, nodes, sizes, 0) is None  # slots too full
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, ranks, nodes, sizes)), _bits(expected))

    monkeypatch.setattr(bandwidth, "_GROUP_BITS", 7)  # 128 slots for 12 distinct queries
    for seed in range(200):  # a query set that collides in the first round
        few = _repeated_queries(seed=seed, distinct=12, size=2000)
        slots, first = bandwidth._group(*few, bandwidth._GROUP_MULTIPLIERS[0])
        if not bandwidth._same_as_first(*few, first[slots]).all():
            break
    else:
        pytest.fail("no colliding query set")
    expected = provider._evaluate_placements(AR, *few)
    rounds: list[int] = []
    grouped = ProfileBandwidth._evaluate_grouped

    def spy(self: ProfileBandwidth, *args: Any) -> Any:
        rounds.append(args[-1])
        return grouped(self, *args)

    monkeypatch.setattr(ProfileBandwidth, "_evaluate_grouped", spy)
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, *few)), _bits(expected))
    assert rounds[0] == 0 and max(rounds) >= 1  # a later round regrouped the collisions
    # with one round only, the collisions leave the answer to the per-placement pass
    monkeypatch.setattr(bandwidth, "_GROUP_MULTIPLIERS", bandwidth._GROUP_MULTIPLIERS[:1])
    assert grouped(provider, AR, *few, 0) is None
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, *few)), _bits(expected))


def test_a_long_array_is_grouped_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bandwidth, "_GROUP_CHUNK", 1024)
    provider = _mixed_provider()
    ranks, nodes, sizes = _repeated_queries(seed=9, distinct=40, size=5000)  # five chunks
    expected = provider._evaluate_placements(AR, ranks, nodes, sizes)
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, ranks, nodes, sizes)), _bits(expected))
    # a chunk of distinct queries after grouped ones: the whole array per placement
    sizes[3000:4000] = np.geomspace(1.0, 2.0**40, 1000)
    expected = provider._evaluate_placements(AR, ranks, nodes, sizes)
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, ranks, nodes, sizes)), _bits(expected))
    # invalid queries in two chunks: the error names the one the whole array's check finds
    ranks[4500], sizes[100] = 2.5, -1.0
    with pytest.raises(ValidationError) as info:
        provider.busbw_gbps(K, AR, ranks, nodes, sizes)
    assert info.value.field == "ranks"


def test_mostly_distinct_queries_are_answered_per_placement() -> None:
    provider = _mixed_provider()
    ranks, nodes, sizes = _repeated_queries(seed=8, distinct=3000, size=3000)
    assert provider._evaluate_grouped(AR, ranks, nodes, sizes, 0) is None
    expected = provider._evaluate_placements(AR, ranks, nodes, sizes)
    assert np.array_equal(_bits(provider.busbw_gbps(K, AR, ranks, nodes, sizes)), _bits(expected))


def test_a_full_array_memo_starts_over_with_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bandwidth, "_ARRAY_MEMO_SIZE", 100)
    provider = _mixed_provider()
    for seed in range(4):
        queries = _repeated_queries(seed=seed, distinct=80, size=1000)
        for op in (AR, Collective.SENDRECV):  # one memo for every collective
            answer = provider.busbw_gbps(K, op, *queries)
            assert len(provider._array_memo) <= 100
            expected = provider._evaluate_placements(op, *queries)
            assert np.array_equal(_bits(answer), _bits(expected))


@pytest.mark.parametrize(
    ("column", "index", "value", "field"),
    [
        ("sizes", 1500, math.nan, "size_bytes"),
        ("sizes", 10, -1.0, "size_bytes"),
        ("sizes", 999, math.inf, "size_bytes"),
        ("ranks", 700, 2.5, "ranks"),
        ("ranks", 3, math.inf, "ranks"),
        ("nodes", 1999, 0.0, "nodes"),
        ("nodes", 5, 256.0, "nodes"),  # more nodes than ranks
    ],
)
def test_an_invalid_query_in_a_large_array_is_refused_as_before(
    column: str, index: int, value: float, field: str
) -> None:
    provider = _mixed_provider()
    ranks, nodes, sizes = _repeated_queries(seed=2, distinct=50, size=2000)
    {"ranks": ranks, "nodes": nodes, "sizes": sizes}[column][index] = value
    with pytest.raises(ValidationError) as before:
        provider._evaluate_placements(AR, ranks, nodes, sizes)
    with pytest.raises(ValidationError) as info:
        provider.busbw_gbps(K, AR, ranks, nodes, sizes)
    assert info.value.field == before.value.field == field
    assert str(info.value) == str(before.value)


def test_an_unanswerable_placement_in_a_large_array_asks_for_the_same_upload() -> None:
    provider = _provider(_curve(ranks=8, nodes=1))  # single-node runs only, no nominal curves
    ranks, nodes, sizes = _repeated_queries(seed=6, distinct=40, size=2000)
    with pytest.raises(NotFoundError) as before:
        provider._evaluate_placements(AR, ranks, nodes, sizes)
    with pytest.raises(NotFoundError) as info:
        provider.busbw_gbps(K, AR, ranks, nodes, sizes)
    assert str(info.value) == str(before.value)
