"""The iteration timeline (estimator.timeline) against the engine and SC21's bubble formula."""

import itertools
from collections import defaultdict

import pytest

from estimator import (
    ClusterSpec,
    Fidelity,
    FixedBandwidth,
    LayoutSpec,
    ModelSpec,
    Recompute,
    Scenario,
    TrainingSpec,
    estimate,
)
from estimator.errors import LimitError, ValidationError
from estimator.frameworks import framework_preset
from estimator.timeline import (
    EXACT_TOLERANCE,
    MAX_SIMULATED_OPS,
    Event,
    Timeline,
    chunk_microbatch,
    lane_order,
    timeline,
)

CLUSTER = ClusterSpec(
    gpus_per_node=8,
    peak_flops=312e12,
    utilization=0.5,
    bandwidth=FixedBandwidth(tp_gbps=200.0, pp_gbps=20.0, dp_gbps=20.0),
    gpu_memory_bytes=80e9,
    memory_bandwidth_gbps=2000.0,
)
# Unequal stages: the engine's m·T + (W − T)/v is an upper bound of the list schedule, and
# their gap shrinks as 1/m; this bounds it for the layouts below (m ≥ 16).
UNEQUAL_TOLERANCE = 0.15


def _scenario(
    model: ModelSpec,
    *,
    p: int,
    v: int = 1,
    gb: int = 64,
    fidelity: Fidelity = Fidelity.PAPER,
    first: int | None = None,
    last: int | None = None,
    recompute: Recompute = Recompute.FULL,
) -> Scenario:
    return Scenario(
        model,
        TrainingSpec(global_batch_size=gb, micro_batch_size=1, recompute=recompute),
        LayoutSpec(
            pipeline=p,
            tensor=8,
            data=1,
            virtual_stages=v,
            first_stage_layers=first,
            last_stage_layers=last,
        ),
        CLUSTER,
        fidelity=fidelity,
    )


def _work(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind != "idle"]


@pytest.mark.parametrize("fidelity", [Fidelity.PAPER, Fidelity.DETAILED])
@pytest.mark.parametrize(
    ("p", "v", "gb"), [(4, 1, 8), (4, 2, 8), (8, 1, 64), (8, 3, 64), (8, 4, 1536), (2, 1, 1)]
)
def test_makespan_is_the_engines_pipeline_time(
    gpt3: ModelSpec, fidelity: Fidelity, p: int, v: int, gb: int
) -> None:
    sc = _scenario(gpt3, p=p, v=v, gb=gb, fidelity=fidelity)
    tl = timeline(sc)
    e = estimate(sc)
    bd = e.breakdown
    pipeline = e.iteration_time_s - bd.optimizer_s - bd.embedding_sync_s
    if fidelity is Fidelity.PAPER:
        pipeline -= bd.dp_s  # paper fidelity: the DP all-reduce ends the iteration
        assert tl.bubble_s == pytest.approx(bd.bubble_s, rel=EXACT_TOLERANCE)
    assert tl.makespan_s == pytest.approx(tl.engine_pipeline_s, rel=EXACT_TOLERANCE)
    assert tl.iteration_time_s == pytest.approx(e.iteration_time_s, rel=EXACT_TOLERANCE)
    if fidelity is Fidelity.PAPER:
        assert tl.makespan_s == pytest.approx(pipeline, rel=EXACT_TOLERANCE)
    assert tl.warnings == []


def test_a_host_bound_moe_pipeline_keeps_the_engines_time() -> None:
    # Eager MoE layers whose host time outlasts their GPU work (Framework.moe_layer_host_s): the
    # GPU's wait is drawn inside the layers' compute, and the schedule still ends when the
    # engine says.
    model = ModelSpec(
        num_layers=8,
        hidden_size=1024,
        num_attention_heads=8,
        seq_length=1024,
        vocab_size=32000,
        moe_num_experts=16,
        moe_top_k=4,
        moe_ffn_hidden_size=256,
    )
    training = TrainingSpec(
        global_batch_size=16, framework=framework_preset("nemo").replace(moe_layer_host_s=0.02)
    )
    layout = LayoutSpec(pipeline=4, tensor=1, data=2, virtual_stages=2, expert_parallel=2)
    sc = Scenario(model, training, layout, CLUSTER)
    e = estimate(sc)
    assert e.breakdown.host_s > 0.5 * e.iteration_time_s
    tl = timeline(sc)
    assert tl.makespan_s == pytest.approx(tl.engine_pipeline_s, rel=EXACT_TOLERANCE)
    assert tl.iteration_time_s == pytest.approx(e.iteration_time_s, rel=EXACT_TOLERANCE)


@pytest.mark.parametrize(("p", "v", "gb"), [(4, 1, 8), (4, 2, 8), (8, 1, 64), (8, 3, 64)])
def test_bubble_fraction_is_sc21s(gpt3: ModelSpec, p: int, v: int, gb: int) -> None:
    """SC21 §2.2: bubble / ideal time = (p−1)/m for 1F1B and (p−1)/(v·m) interleaved."""
    tl = timeline(_scenario(gpt3, p=p, v=v, gb=gb))
    m = tl.microbatches
    assert tl.schedule == ("interleaved" if v > 1 else "1f1b")
    assert tl.bubble_s / (m * tl.period_s) == pytest.approx((p - 1) / (v * m), rel=1e-9)
    assert tl.bubble_ratio == pytest.approx(tl.bubble_s / tl.iteration_time_s)


@pytest.mark.parametrize("v", [1, 2])
def test_unequal_stages_stay_under_the_engines_bound(gpt3: ModelSpec, v: int) -> None:
    sc = _scenario(gpt3, p=8, v=v, gb=64, fidelity=Fidelity.DETAILED, first=20, last=4)
    tl = timeline(sc)
    assert tl.period_s * tl.microbatches < tl.makespan_s <= tl.engine_pipeline_s * (1 + 1e-12)
    assert tl.makespan_s == pytest.approx(tl.engine_pipeline_s, rel=UNEQUAL_TOLERANCE)
    assert tl.warnings and "differs from the engine" in tl.warnings[0]


def _lanes(tl: Timeline) -> dict[int, list[Event]]:
    lanes: dict[int, list[Event]] = defaultdict(list)
    for e in tl.events:
        lanes[e.stage].append(e)
    return lanes


@pytest.mark.parametrize(("p", "v", "gb"), [(4, 1, 16), (8, 2, 256), (8, 1, 1536)])
def test_no_overlap_within_a_lane_and_idle_fills_the_gaps(
    gpt3: ModelSpec, p: int, v: int, gb: int
) -> None:
    tl = timeline(_scenario(gpt3, p=p, v=v, gb=gb, fidelity=Fidelity.DETAILED))
    lanes = _lanes(tl)
    assert sorted(lanes) == list(range(p))
    for lane in lanes.values():
        ordered = sorted(lane, key=lambda e: e.start_s)
        for a, b in itertools.pairwise(ordered):
            assert a.end_s <= b.start_s + 1e-9 * tl.makespan_s
        assert all(e.end_s > e.start_s for e in lane)
        # without elision a lane is busy or idle from 0 to its end
        if not tl.truncated:
            busy = sum(e.end_s - e.start_s for e in lane)
            assert busy == pytest.approx(max(e.end_s for e in lane), rel=1e-9)


@pytest.mark.parametrize(("p", "v"), [(4, 1), (4, 2), (8, 3)])
def test_forward_waits_for_the_previous_stage_and_its_send(gpt3: ModelSpec, p: int, v: int) -> None:
    tl = timeline(_scenario(gpt3, p=p, v=v, gb=32), shown=32)
    ends: dict[tuple[str, int, int | None, int | None], float] = {}
    starts: dict[tuple[str, int, int | None, int | None], float] = {}
    for e in tl.events:
        if e.kind == "forward":
            starts[("f", e.stage, e.microbatch, e.chunk)] = e.start_s
        if e.kind == "backward":
            starts[("b", e.stage, e.microbatch, e.chunk)] = e.start_s
        if e.kind == "pp_comm":
            # each chunk-op ends with its send: the latest one of a key is the backward's
            key = ("b" if ("f", e.stage, e.microbatch, e.chunk) in ends else "f", e.stage)
            ends[(key[0], e.stage, e.microbatch, e.chunk)] = e.end_s
    checked = 0
    for (phase, stage, mb, chunk), start in starts.items():
        if phase == "f" and stage > 0:
            assert start >= ends[("f", stage - 1, mb, chunk)] - 1e-12
            checked += 1
        if phase == "f" and stage == 0 and chunk:
            assert start >= ends[("f", p - 1, mb, chunk - 1)] - 1e-12
            checked += 1
        if phase == "b" and stage < p - 1:
            assert start >= ends[("b", stage + 1, mb, chunk)] - 1e-12
            checked += 1
    assert checked > p * tl.microbatches


def test_elided_timeline_matches_the_full_schedule(gpt3: ModelSpec) -> None:
    """The shown run's second half, moved by whole periods, is the full schedule's end."""
    for v, first, last in ((1, None, None), (2, None, None), (2, 20, 4), (1, 20, 4)):
        sc = _scenario(gpt3, p=8, v=v, gb=64, fidelity=Fidelity.DETAILED, first=first, last=last)
        full = timeline(sc, shown=64)
        short = timeline(sc, shown=16)
        assert not full.truncated and short.truncated
        assert short.elided_microbatches > 0
        assert short.makespan_s == pytest.approx(full.makespan_s, rel=1e-12)
        index: dict[tuple[int, str, int | None, int | None], list[float]] = defaultdict(list)
        for e in _work(full.events):
            index[(e.stage, e.kind, e.microbatch, e.chunk)].append(e.start_s)
        tol = 1e-12 * full.makespan_s
        for e in _work(short.events):
            found = index[(e.stage, e.kind, e.microbatch, e.chunk)]
            assert any(abs(x - e.start_s) <= tol for x in found), e
        shown = {e.microbatch for e in short.events if e.microbatch is not None}
        assert 0 in shown and 63 in shown and len(shown) < 64


def test_events_are_bounded_whatever_m(gpt3: ModelSpec) -> None:
    small = timeline(_scenario(gpt3, p=8, v=2, gb=256))
    huge = timeline(_scenario(gpt3, p=8, v=2, gb=8 * 2**20))
    assert huge.truncated and huge.microbatches == 8 * 2**20
    assert len(huge.events) == len(small.events)
    assert len(huge.events) <= 6 * MAX_SIMULATED_OPS


def test_limits_are_domain_errors(gpt3: ModelSpec) -> None:
    with pytest.raises(ValidationError, match="max_microbatches_shown"):
        timeline(_scenario(gpt3, p=4), shown=0)
    with pytest.raises(ValidationError, match="max_microbatches_shown"):
        timeline(_scenario(gpt3, p=4), shown=65)
    with pytest.raises(LimitError, match="pipeline=96"):
        timeline(_scenario(gpt3, p=96, gb=4096))


def test_recompute_and_iteration_tail_are_drawn(gpt3: ModelSpec) -> None:
    tl = timeline(_scenario(gpt3, p=4, gb=16, fidelity=Fidelity.DETAILED))
    kinds = {e.kind for e in tl.events}
    assert {"forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "idle"} <= kinds
    assert "optimizer" in kinds
    end = max(e.end_s for e in tl.events)
    assert end == pytest.approx(tl.iteration_time_s, rel=1e-9)
    none = timeline(
        _scenario(gpt3, p=4, gb=16, fidelity=Fidelity.DETAILED, recompute=Recompute.NONE)
    )
    assert "recompute" not in {e.kind for e in none.events}


def test_megatron_op_order() -> None:
    # 1F1B, p=4: the first stage warms up with 3 forwards, the last alternates from the start
    assert [f for f, _ in lane_order(4, 0, 8, 1)][:5] == [True, True, True, True, False]
    assert [f for f, _ in lane_order(4, 3, 8, 1)][:4] == [True, False, True, False]
    # interleaved, p=2, v=2: chunk-ops go in groups of p micro-batches per chunk
    assert [chunk_microbatch(k, 2, 2, True) for k in range(6)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (0, 2),
        (0, 3),
    ]
    assert chunk_microbatch(0, 2, 2, False) == (1, 0)
