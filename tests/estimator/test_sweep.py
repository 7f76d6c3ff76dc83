"""The vectorised path equals the single-estimate path exactly; plans rank and filter."""

import dataclasses

import numpy as np
import pytest

from estimator import (
    TERMS,
    ClusterSpec,
    Fidelity,
    LayoutArrays,
    LayoutSpec,
    ModelSpec,
    MoeDispatcher,
    Recompute,
    Scenario,
    TrainingSpec,
    enumerate_layouts,
    estimate,
    evaluate_layouts,
    plan,
)
from estimator import sweep as sweep_module
from estimator.errors import LimitError, ValidationError
from estimator.frameworks import framework_preset
from estimator.presets import model_preset
from tests.estimator.conftest import PlacementBandwidth

RECOMPUTE = {0.0: Recompute.NONE, 1.0: Recompute.SELECTIVE, 2.0: Recompute.FULL}


def _scenario(
    model: ModelSpec,
    cluster: ClusterSpec,
    gb: int,
    row: dict[str, float],
    fidelity: Fidelity,
    framework: str = "megatron-lm",
) -> Scenario:
    return Scenario(
        model,
        TrainingSpec(
            global_batch_size=gb,
            micro_batch_size=int(row["b"]),
            recompute=RECOMPUTE[row["recompute"]],
            framework=framework,
        ),
        LayoutSpec(
            pipeline=int(row["p"]),
            tensor=int(row["t"]),
            data=int(row["d"]),
            virtual_stages=int(row["v"]),
            sequence_parallel=bool(row["sp"]),
            zero_stage=int(row["zero"]),
            scatter_gather=bool(row["sg"]),
            overlap_dp=bool(row["overlap_dp"]),
            overlap_tp=bool(row["overlap_tp"]),
        ),
        cluster,
        fidelity=fidelity,
    )


@pytest.mark.parametrize(
    ("fidelity", "framework"),
    [
        (Fidelity.PAPER, "megatron-lm"),
        (Fidelity.DETAILED, "megatron-lm"),
        # the host time every layer adds (layer_host_s), a third more where recompute is full
        (Fidelity.DETAILED, "deepspeed"),
    ],
)
def test_vectorised_sweep_equals_single_estimates_bit_for_bit(
    gpt3: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    fidelity: Fidelity,
    framework: str,
) -> None:
    training = dataclasses.replace(training, framework=framework)
    layouts = enumerate_layouts(gpt3, training, 1536, zero_stages=(0, 1, 2, 3))
    rng = np.random.default_rng(7)
    cols = dict(layouts.columns)
    cols["sg"] = rng.integers(0, 2, len(layouts)).astype(float)
    cols["overlap_dp"] = rng.integers(0, 2, len(layouts)).astype(float)
    cols["overlap_tp"] = rng.integers(0, 2, len(layouts)).astype(float)
    layouts = LayoutArrays(cols)
    sweep = evaluate_layouts(gpt3, training, cluster, layouts, fidelity=fidelity)
    for i in rng.choice(len(layouts), 300, replace=False):
        row = {k: v[i] for k, v in layouts.columns.items()}
        single = estimate(_scenario(gpt3, cluster, 1536, row, fidelity, framework))
        for name in TERMS:
            assert single.breakdown.as_dict()[name] == sweep.terms[name][i], (name, row)
        assert single.iteration_time_s == sweep.iteration_s[i]
        assert single.memory.total_bytes == sweep.memory_bytes[i]
        assert bool(single.memory.fits) == bool(sweep.fits[i])


def test_a_sweep_in_blocks_equals_one_pass_bit_for_bit(
    gpt3: ModelSpec,
    training: TrainingSpec,
    cluster: ClusterSpec,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layouts = enumerate_layouts(gpt3, training, 1536, zero_stages=(0, 1, 2, 3))
    one_pass = evaluate_layouts(gpt3, training, cluster, layouts)
    monkeypatch.setattr(sweep_module, "_BLOCK", 7)  # many blocks, the last one short
    blocks = evaluate_layouts(gpt3, training, cluster, layouts)
    assert len(layouts) % 7 != 0
    for name in TERMS:
        np.testing.assert_array_equal(blocks.terms[name], one_pass.terms[name], err_msg=name)
    np.testing.assert_array_equal(blocks.iteration_s, one_pass.iteration_s)
    np.testing.assert_array_equal(blocks.memory_bytes, one_pass.memory_bytes)
    np.testing.assert_array_equal(blocks.fits, one_pass.fits)


def test_enumerated_layouts_all_pass_validation(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    layouts = enumerate_layouts(gpt3, training, 1536)
    assert len(layouts) > 1000
    c = layouts.columns
    assert np.all(c["p"] * c["t"] * c["d"] == 1536)
    assert np.all(1536 % (c["b"] * c["d"]) == 0)
    assert np.all(96 % (c["p"] * c["v"]) == 0)
    m = 1536 / (c["b"] * c["d"])
    assert np.all((c["v"] == 1) | (m % c["p"] == 0))
    assert np.all(96 % c["t"] == 0)


def test_plan_ranks_feasible_layouts_first_by_iteration_time(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    result = plan(gpt3, training, cluster, 1536)
    times = result.result.iteration_s[result.order]
    fits = result.result.fits[result.order]
    assert result.evaluated == len(result.result.layouts)
    assert result.feasible == int(fits.sum())
    assert 0 < result.feasible < result.evaluated
    assert np.all(fits[: result.feasible]) and not np.any(fits[result.feasible :])
    assert np.all(np.diff(times[: result.feasible]) >= 0)


def test_plan_can_drop_layouts_that_do_not_fit(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    result = plan(gpt3, training, cluster, 1536, drop_infeasible=True)
    assert len(result.order) == result.feasible
    assert np.all(result.result.fits[result.order])


def test_layout_space_beyond_the_cap_is_refused_before_evaluating(
    gpt3: ModelSpec, training: TrainingSpec
) -> None:
    with pytest.raises(LimitError, match="cap"):
        enumerate_layouts(gpt3, training, 1536, max_layouts=10)


def test_gpu_count_must_be_positive(gpt3: ModelSpec, training: TrainingSpec) -> None:
    from estimator.errors import ValidationError

    with pytest.raises(ValidationError, match="gpus"):
        enumerate_layouts(gpt3, training, 0)


def test_uneven_stages_agree_between_sweep_and_single_estimate(
    gpt3: ModelSpec, training: TrainingSpec, cluster: ClusterSpec
) -> None:
    layouts = LayoutArrays.from_columns(
        p=[8, 8], t=[8, 8], d=[24, 24], b=[1, 1], first_layers=[6, 9], last_layers=[18, 15]
    )
    sweep = evaluate_layouts(gpt3, training, cluster, layouts)
    for i, (first, last) in enumerate([(6, 18), (9, 15)]):
        single = estimate(
            Scenario(
                gpt3,
                training,
                LayoutSpec(
                    pipeline=8, tensor=8, data=24, first_stage_layers=first, last_stage_layers=last
                ),
                cluster,
            )
        )
        assert single.iteration_time_s == sweep.iteration_s[i]
        assert single.memory.total_bytes == sweep.memory_bytes[i]


@pytest.mark.parametrize("fidelity", [Fidelity.PAPER, Fidelity.DETAILED])
def test_block_recompute_agrees_between_sweep_and_single_estimate(
    gpt3: ModelSpec, cluster: ClusterSpec, fidelity: Fidelity
) -> None:
    # The replayed share depends on each layout's layers per chunk (96/(p·v)), an array here.
    training = TrainingSpec(global_batch_size=1536, recompute_num_layers=2)
    layouts = enumerate_layouts(gpt3, training, 1536, recompute=(Recompute.FULL,))
    sweep = evaluate_layouts(gpt3, training, cluster, layouts, fidelity=fidelity)
    rng = np.random.default_rng(11)
    for i in rng.choice(len(layouts), 60, replace=False):
        row = {k: v[i] for k, v in layouts.columns.items()}
        sc = _scenario(gpt3, cluster, 1536, row, fidelity)
        single = estimate(
            dataclasses.replace(
                sc, training=dataclasses.replace(sc.training, recompute_num_layers=2)
            )
        )
        assert single.iteration_time_s == sweep.iteration_s[i], row
        assert single.memory.total_bytes == sweep.memory_bytes[i], row


def test_heads_wider_than_the_model_agree_between_sweep_and_single_estimate(
    training: TrainingSpec, cluster: ClusterSpec
) -> None:
    """A Qwen3-style model (kv_channels 128 on h = 2048, GQA, MoE): the vectorised path prices
    the wider Q and attention output exactly as the single estimate does."""
    qwen = dataclasses.replace(
        model_preset("qwen3-30b-a3b"), num_layers=8, moe_num_experts=16, moe_top_k=4
    )
    tr = TrainingSpec(global_batch_size=64)
    layouts = enumerate_layouts(qwen, tr, 16, zero_stages=(0, 1))
    sweep = evaluate_layouts(qwen, tr, cluster, layouts, fidelity=Fidelity.DETAILED)
    assert len(layouts) > 20
    for i in range(len(layouts)):
        row = {k: v[i] for k, v in layouts.columns.items()}
        row |= {"sg": 1.0, "overlap_dp": 0.0, "overlap_tp": 0.0}
        single = estimate(_scenario(qwen, cluster, 64, row, Fidelity.DETAILED))
        assert single.iteration_time_s == sweep.iteration_s[i], row
        assert single.memory.total_bytes == sweep.memory_bytes[i], row


def test_expert_parallel_sizes_are_swept_where_they_divide_d_cp_and_agree_bit_for_bit(
    cluster: ClusterSpec,
) -> None:
    """Each layout once per EP size dividing its d·cp; the vectorised pass prices EP (its
    all-to-alls, expert shards, expert data-parallel group) exactly as the single estimate."""
    moe = dataclasses.replace(model_preset("mixtral-8x7b"), num_layers=8)
    tr = TrainingSpec(global_batch_size=64)
    plain = enumerate_layouts(moe, tr, 16)
    layouts = enumerate_layouts(moe, tr, 16, expert_parallel=(1, 2, 4, 8))
    ep, d = layouts.columns["ep"], layouts.columns["d"]
    assert set(ep) == {1.0, 2.0, 4.0, 8.0}
    assert np.all(np.mod(d, ep) == 0.0)
    assert int(np.sum(ep == 1.0)) == len(plain)
    assert int(np.sum(ep == 8.0)) == int(np.sum(np.mod(plain.columns["d"], 8.0) == 0.0))
    sweep = evaluate_layouts(moe, tr, cluster, layouts)
    for i in np.flatnonzero(ep > 1.0)[::5]:
        row = {k: v[i] for k, v in layouts.columns.items()}
        row |= {"sg": 1.0, "overlap_dp": 0.0, "overlap_tp": 0.0}
        scenario = _scenario(moe, cluster, 64, row, Fidelity.DETAILED)
        scenario = dataclasses.replace(
            scenario,
            layout=dataclasses.replace(scenario.layout, expert_parallel=int(row["ep"])),
        )
        single = estimate(scenario)
        assert single.iteration_time_s == sweep.iteration_s[i], row
        assert single.memory.total_bytes == sweep.memory_bytes[i], row
    with pytest.raises(ValidationError, match="moe_num_experts"):
        enumerate_layouts(moe, tr, 16, expert_parallel=(3,))
    with pytest.raises(ValidationError, match="MoE"):
        enumerate_layouts(model_preset("llama3-8b"), tr, 16, expert_parallel=(2,))


def test_the_ep_overlap_agrees_between_sweep_and_single_estimate(cluster: ClusterSpec) -> None:
    """Megatron-Core's EP all-to-all overlap (a measured share hidden where there are two or
    more micro-batches) prices the same in both paths, bit for bit, one micro-batch included."""
    moe = dataclasses.replace(model_preset("mixtral-8x7b"), num_layers=8)
    overlapped = framework_preset("megatron-lm").replace(ep_comm_overlap=True)
    tr = TrainingSpec(global_batch_size=16, framework=overlapped)
    layouts = enumerate_layouts(moe, tr, 16, expert_parallel=(2, 4, 8))
    sweep = evaluate_layouts(moe, tr, cluster, layouts)
    b, d = layouts.columns["b"], layouts.columns["d"]
    single_mb = np.flatnonzero(b * d == 16.0)
    assert len(single_mb) > 0 and len(single_mb) < len(layouts)
    picked = sorted(set(np.flatnonzero(layouts.columns["ep"] > 1.0)[::7]) | set(single_mb[:3]))
    for i in picked:
        row = {k: v[i] for k, v in layouts.columns.items()}
        row |= {"sg": 1.0, "overlap_dp": 0.0, "overlap_tp": 0.0}
        scenario = _scenario(moe, cluster, 16, row, Fidelity.DETAILED)
        scenario = dataclasses.replace(
            scenario,
            training=dataclasses.replace(scenario.training, framework=overlapped),
            layout=dataclasses.replace(scenario.layout, expert_parallel=int(row["ep"])),
        )
        single = estimate(scenario)
        assert single.iteration_time_s == sweep.iteration_s[i], row
        assert single.breakdown.expert_s == sweep.terms["expert"][i], row


@pytest.mark.parametrize(
    ("dispatcher", "profile"), [("alltoall", None), ("flex", None), ("flex", "by placement")]
)
def test_experts_folded_over_tp_agree_between_sweep_and_single_estimate(
    cluster: ClusterSpec, dispatcher: str, profile: str | None
) -> None:
    """Layouts with and without the experts folded over TP (``ef`` = expert TP 1) in one
    vectorised pass, with either token dispatcher: each priced exactly as the single estimate
    prices it (flex: its RDMA and NVLink legs sized per layout, on one node or two)."""
    if profile is not None:
        cluster = dataclasses.replace(cluster, bandwidth=PlacementBandwidth())
    qwen = dataclasses.replace(model_preset("qwen3-30b-a3b"), num_layers=8)
    tr = TrainingSpec(global_batch_size=64, moe_token_dispatcher=MoeDispatcher(dispatcher))
    rows = [
        # (t, d, ep, ef, zero)
        (2, 8, 8, 0.0, 1),
        (2, 8, 16, 1.0, 1),
        (2, 8, 8, 1.0, 0),
        (4, 4, 16, 1.0, 1),
        (4, 4, 4, 0.0, 0),
        (1, 16, 16, 0.0, 1),
        (1, 16, 8, 0.0, 1),
        (1, 16, 2, 0.0, 0),
    ]
    layouts = LayoutArrays.from_columns(
        p=[1.0] * len(rows),
        t=[r[0] for r in rows],
        d=[r[1] for r in rows],
        b=[1.0] * len(rows),
        ep=[r[2] for r in rows],
        ef=[r[3] for r in rows],
        zero=[r[4] for r in rows],
        sp=[1.0 if r[0] > 1 else 0.0 for r in rows],
        recompute=[0.0] * len(rows),
    )
    sweep = evaluate_layouts(qwen, tr, cluster, layouts)
    for i, (t, d, ep, ef, zero) in enumerate(rows):
        layout = LayoutSpec(
            pipeline=1,
            tensor=t,
            data=d,
            sequence_parallel=t > 1,
            zero_stage=zero,
            expert_parallel=ep,
            expert_tensor_parallel=1 if ef else None,
        )
        training = TrainingSpec(
            global_batch_size=64,
            recompute=Recompute.NONE,
            moe_token_dispatcher=MoeDispatcher(dispatcher),
        )
        single = estimate(Scenario(qwen, training, layout, cluster))
        assert single.iteration_time_s == sweep.iteration_s[i], rows[i]
        assert single.memory.total_bytes == sweep.memory_bytes[i], rows[i]


def test_folded_expert_layouts_are_enumerated_where_megatron_allows_them(
    cluster: ClusterSpec,
) -> None:
    """experts_folded=(False, True): each MoE layout with t > 1 under SP once more per EP size
    dividing its t·d·cp, column ef = 1; those agree with the single estimate bit for bit."""
    qwen = dataclasses.replace(model_preset("qwen3-30b-a3b"), num_layers=8)
    tr = TrainingSpec(global_batch_size=64)
    layouts = enumerate_layouts(
        qwen, tr, 16, expert_parallel=(1, 8, 16), experts_folded=(False, True)
    )
    cols = layouts.columns
    folded = np.flatnonzero(cols["ef"] == 1.0)
    assert len(folded) > 0
    assert np.all(cols["t"][folded] > 1.0) and np.all(cols["sp"][folded] == 1.0)
    assert np.all(np.mod(cols["t"][folded] * cols["d"][folded], cols["ep"][folded]) == 0.0)
    assert np.any(cols["ep"][folded] == 16.0)  # t 2 x d 8: only folded
    assert not np.any((cols["ef"] == 0.0) & (cols["ep"] == 16.0) & (cols["d"] < 16.0))
    sweep = evaluate_layouts(qwen, tr, cluster, layouts)
    for i in folded[::7]:
        row = {k: v[i] for k, v in cols.items()}
        row |= {"sg": 1.0, "overlap_dp": 0.0, "overlap_tp": 0.0}
        scenario = _scenario(qwen, cluster, 64, row, Fidelity.DETAILED)
        layout = dataclasses.replace(
            scenario.layout, expert_parallel=int(row["ep"]), expert_tensor_parallel=1
        )
        single = estimate(dataclasses.replace(scenario, layout=layout))
        assert single.iteration_time_s == sweep.iteration_s[i], row
        assert single.memory.total_bytes == sweep.memory_bytes[i], row
    with pytest.raises(ValidationError, match="MoE"):
        enumerate_layouts(model_preset("llama3-8b"), tr, 16, experts_folded=(True,))
