"""The numeric kernel: every term of the iteration time, for one layout or a million.

``evaluate`` runs the same arithmetic on Python floats (one estimate) and on numpy arrays (a
sweep), so both paths agree to the last bit. Branches that depend on the layout are written
as arithmetic on 0/1 flags (``_where``/``_max`` dispatch on the type), never as Python ``if``
on a layout value.

Sources: the seed's formulation (004_23e0e749fadb8d68.txt), DESIGN.md §4; Megatron-LM SC21
(Narayanan et al. 2021) §2-3 and eqs. 2-3; Korthikanti et al. 2022 (sequence parallelism,
selective recompute, activation memory, Table 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from estimator.bandwidth import (
    BandwidthProvider,
    Collective,
    Num,
    TrafficKind,
    bus_factor,
)
from estimator.flops import (
    attention_core_forward_flops,
    embedding_parameters,
    layer_forward_flops,
    layer_parameters,
    logit_forward_flops,
    megatron_parameters,
    model_forward_flops,
    model_parameters,
)
from estimator.specs import (
    BYTES_PER_ELEMENT,
    Fidelity,
    ModelSpec,
    Precision,
    TrainingSpec,
    parse_rank_order,
)

TERMS = ("compute", "tp", "cp", "pp", "dp", "bubble", "embedding_sync", "expert")


_ARRAY = np.ndarray


def _where(cond: Num, a: Num, b: Num) -> Num:
    if type(cond) is _ARRAY or type(a) is _ARRAY or type(b) is _ARRAY:
        return np.where(cond, a, b)
    return a if cond else b


def _max(a: Num, b: Num) -> Num:
    if type(a) is _ARRAY or type(b) is _ARRAY:
        return np.maximum(a, b)
    return a if a >= b else b


def _min(a: Num, b: Num) -> Num:
    if type(a) is _ARRAY or type(b) is _ARRAY:
        return np.minimum(a, b)
    return a if a <= b else b


def _eq(a: Num, b: float) -> Num:
    """1.0 where a == b else 0.0."""
    if isinstance(a, np.ndarray):
        flags: Num = (a == b).astype(np.float64)
        return flags
    return 1.0 if a == b else 0.0


def _gt(a: Num, b: Num) -> Num:
    """1.0 where a > b else 0.0."""
    if type(a) is _ARRAY or type(b) is _ARRAY:
        flags: Num = (np.asarray(a) > b).astype(np.float64)
        return flags
    return 1.0 if a > b else 0.0


@dataclass(slots=True)
class LayoutVars:
    """Per-layout inputs, each a float or a float64 array of one shape (0/1 for flags)."""

    p: Num
    t: Num
    d: Num
    b: Num
    v: Num = 1.0
    cp: Num = 1.0
    ep: Num = 1.0
    recompute: Num = 2.0  # 0 none, 1 selective, 2 full
    sp: Num = 0.0
    zero: Num = 0.0
    sg: Num = 1.0
    overlap_dp: Num = 0.0
    overlap_tp: Num = 0.0
    first_layers: Num = 0.0  # layers on the first stage; 0: an even split
    last_layers: Num = 0.0  # layers on the last stage; 0: an even split


@dataclass(slots=True)
class Call:
    """One collective as issued on the critical (last) pipeline stage.

    ``count`` is per micro-batch when ``per_microbatch`` else per iteration.
    """

    kind: TrafficKind
    op: Collective
    ranks: Num
    nodes: Num
    size_bytes: Num
    count: Num
    per_microbatch: bool
    term: str = ""  # the breakdown term it is charged to; default: its kind
    busbw_gbps: Num = 0.0
    time_per_call_s: Num = 0.0

    def __post_init__(self) -> None:
        self.term = self.term or self.kind.value


@dataclass(slots=True)
class KernelResult:
    """Terms in seconds (exposed, as on the critical path) and what produced them."""

    terms: dict[str, Num]
    link_s: dict[str, Num]
    micro_batches: Num
    compute_mb_s: Num
    tp_mb_s: Num
    pp_mb_s: Num
    calls: list[Call]
    parameters: float
    gpu_parameters: Num
    model_flops: float
    hardware_flops: Num
    memory: dict[str, Num] = field(default_factory=dict)

    @property
    def iteration_s(self) -> Num:
        total: Num = 0.0
        for name in TERMS:
            total = total + self.terms[name]
        return total


def nodes_spanned(ranks: Num, stride: Num, gpus_per_node: float) -> Num:
    """Nodes spanned by ranks 0, σ, ..., (n-1)σ: min(n, ⌊(n-1)σ/g⌋ + 1)."""
    return _min(ranks, (ranks - 1.0) * stride // gpus_per_node + 1.0)


def _strides(order: tuple[str, ...], sizes: dict[str, Num]) -> dict[str, Num]:
    strides: dict[str, Num] = {}
    acc: Num = 1.0
    for dim in order:
        strides[dim] = acc
        acc = acc * sizes[dim]
    return strides


def evaluate(
    model: ModelSpec,
    training: TrainingSpec,
    lay: LayoutVars,
    *,
    gpus_per_node: int,
    peak_flops: float,
    utilization: Num,
    bandwidth: BandwidthProvider,
    fidelity: Fidelity,
    rank_order: str = "tp-dp-pp",
    gpu_memory_bytes: float | None = None,
    memory_bandwidth_gbps: float | None = None,
    memory_traffic_factor: float = 0.0,
) -> KernelResult:
    """All terms of DESIGN.md §4 for the layouts in ``lay`` (scalars or arrays)."""
    paper = fidelity is Fidelity.PAPER
    p, t, d, b, v, cp, ep = lay.p, lay.t, lay.d, lay.b, lay.v, lay.cp, lay.ep
    full = _eq(lay.recompute, 2.0)
    selective = _eq(lay.recompute, 1.0)
    sp = lay.sp * _gt(t, 1.0)
    g = float(gpus_per_node)
    l, h, s = float(model.num_layers), float(model.hidden_size), float(model.seq_length)
    vocab = float(model.vocab_size)
    beta = float(training.activation_bytes)
    beta_g = float(training.grad_bytes)
    gb = float(training.global_batch_size)
    m = gb / (b * d)  # micro-batches per pipeline per iteration (DESIGN.md §2)
    has_pp = _gt(p, 1.0)

    order = parse_rank_order(rank_order)
    stride = _strides(order, {"tp": t, "cp": cp, "dp": d, "pp": p})
    nodes_tp = nodes_spanned(t, stride["tp"], g)
    nodes_cp = nodes_spanned(cp, stride["cp"], g)
    nodes_dp = _min(d * cp, nodes_spanned(d, stride["dp"], g) * nodes_cp)
    nodes_ep = nodes_spanned(ep, stride["dp"], g)
    nodes_pp = 1.0 + _gt((p - 1.0) * stride["pp"], g - 1.0)  # any stage boundary off-node

    calls: list[Call] = []

    def add(
        kind: TrafficKind,
        op: Collective,
        ranks: Num,
        nodes: Num,
        size: Num,
        count: Num,
        per_mb: bool,
        term: str = "",
    ) -> None:
        # A call that never happens (no count, no bytes, or a group of one) adds exactly 0
        # to every term: skip it, on one layout or on all of a sweep's.
        if type(count) is _ARRAY:
            if not count.any():
                return
        elif count == 0.0:
            return
        if type(size) is _ARRAY:
            if not size.any():
                return
        elif size == 0.0:
            return
        if type(ranks) is _ARRAY:
            if not (ranks > 1.0).any():
                return
        elif ranks <= 1.0:
            return
        calls.append(Call(kind, op, ranks, nodes, size, count, per_mb, term))

    n_params = (
        megatron_parameters(model) if model.num_parameters is None else float(model.num_parameters)
    )
    moe_layers = float(model.num_moe_layers)
    dense_layers = l - moe_layers
    # Layers per stage: an even split, or Megatron's uneven first/last stages
    # (--decoder-first/last-pipeline-num-layers) with the rest spread evenly in between.
    has_first, has_last = _gt(lay.first_layers, 0.0), _gt(lay.last_layers, 0.0)
    middle_stages = p - has_first - has_last
    mid_layers = (l - lay.first_layers - lay.last_layers) / _max(middle_stages, 1.0)
    first_layers = _where(has_first, lay.first_layers, mid_layers)
    last_layers = _where(has_last, lay.last_layers, mid_layers)

    if paper:
        # The seed: FLOP_mb = 8·N/(p·t)·b·s (6 without full recompute).
        flops_mb = (6.0 + 2.0 * full) * n_params / (p * t) * b * s
        s_act = beta * b * s * h
        add(TrafficKind.TP, Collective.ALL_REDUCE, t, nodes_tp, s_act, l / p * 4.0, True)
        add(
            TrafficKind.PP,
            Collective.SENDRECV,
            2.0 + 0.0 * p,
            nodes_pp,
            s_act,
            2.0 * v * has_pp,
            True,
        )
        add(
            TrafficKind.DP,
            Collective.ALL_REDUCE,
            d,
            nodes_dp,
            beta_g * n_params / (p * t),
            1.0 + 0.0 * p,
            False,
        )
        gpu_params: Num = n_params / (p * t)
        dense_gpu_params: Num = gpu_params
        expert_gpu_params: Num = 0.0 * p
        bwd_fraction: Num = 0.0 * p
    else:
        tokens = b * s / cp
        layer_fwd = dense_layers / l * layer_forward_flops(model, tokens, s, moe=False)
        if moe_layers:
            layer_fwd = layer_fwd + moe_layers / l * layer_forward_flops(model, tokens, s, moe=True)
        logit_fwd = logit_forward_flops(model, tokens)
        # The pipeline's pace is its slowest stage: the last (its layers + the logit layer)
        # unless a middle stage has more work (uneven splits give the last stage fewer).
        middle_paces = _gt(middle_stages, 0.0) * _gt(
            mid_layers * layer_fwd, last_layers * layer_fwd + logit_fwd
        )
        stage_layers = _where(middle_paces, mid_layers, last_layers)
        logits_here = 1.0 - middle_paces
        stage_fwd = stage_layers * layer_fwd
        replay = full * stage_fwd + selective * stage_layers * attention_core_forward_flops(
            model, tokens, s
        )
        flops_mb = (3.0 * stage_fwd + replay + logits_here * 3.0 * logit_fwd) / t
        bwd_fraction = (2.0 + full) / (3.0 + full)

        s_act = beta * b * (s / cp) * h
        per_layer = 4.0 + 2.0 * full  # 2 fwd + 2 bwd all-reduces, +2 replayed (SC21 §2.3)
        # + the output layer's input-gradient all-reduce on the stage with the logits
        tp_count = stage_layers * per_layer + logits_here
        add(TrafficKind.TP, Collective.ALL_REDUCE, t, nodes_tp, s_act, tp_count * (1.0 - sp), True)
        add(TrafficKind.TP, Collective.REDUCE_SCATTER, t, nodes_tp, s_act, tp_count * sp, True)
        add(TrafficKind.TP, Collective.ALL_GATHER, t, nodes_tp, s_act, tp_count * sp, True)

        kv_bytes = 2.0 * beta * b * s * float(model.kv_hidden) / t
        add(
            TrafficKind.CP,
            Collective.ALL_GATHER,
            cp,
            nodes_cp,
            kv_bytes,
            stage_layers * (2.0 + full),
            True,
        )
        add(TrafficKind.CP, Collective.REDUCE_SCATTER, cp, nodes_cp, kv_bytes, stage_layers, True)

        split = _max(lay.sg * _gt(t, 1.0), sp)  # scatter/gather or SP: send 1/t of it
        pp_count = 2.0 * v * has_pp
        add(
            TrafficKind.PP,
            Collective.SENDRECV,
            2.0 + 0.0 * p,
            nodes_pp,
            s_act / _where(split, t, 1.0),
            pp_count,
            True,
        )
        # The gather after a scattered send runs over the TP group (its fabric, its
        # traffic) but waits on the pipeline: charged to the pp term.
        add(
            TrafficKind.TP,
            Collective.ALL_GATHER,
            t,
            nodes_tp,
            s_act,
            pp_count * split * (1.0 - sp),
            True,
            term="pp",
        )

        emb = embedding_parameters(model)
        dense_layer_params = layer_parameters(model, moe=False)
        # The stage with the most parameters: the first (it holds the embeddings) or a
        # fuller middle one.
        layer_params = dense_layers / l * dense_layer_params
        expert_stage: Num = 0.0 * p
        if moe_layers:
            attn_ln = _attention_ln_parameters(model)
            router = h * model.moe_num_experts
            experts = layer_parameters(model, moe=True) - attn_ln - router
            layer_params = layer_params + moe_layers / l * (attn_ln + router)
            expert_stage = _max(first_layers, mid_layers) * (moe_layers / l) * experts
        stage_dense = _max(first_layers * layer_params + emb, mid_layers * layer_params)
        dense_gpu_params = stage_dense / t
        expert_gpu_params = expert_stage / (ep * t)
        gpu_params = dense_gpu_params + expert_gpu_params

        zero = lay.zero
        z0, z1, z2, z3 = _eq(zero, 0.0), _eq(zero, 1.0), _eq(zero, 2.0), _eq(zero, 3.0)
        rs_count = z1 + (z2 + z3) * m
        ag_count = z1 + z2 + z3 * m * (2.0 + full)
        for params, group in ((dense_gpu_params, d * cp), (expert_gpu_params, d * cp / ep)):
            nodes = _min(group, nodes_dp)
            add(TrafficKind.DP, Collective.ALL_REDUCE, group, nodes, beta_g * params, z0, False)
            add(
                TrafficKind.DP,
                Collective.REDUCE_SCATTER,
                group,
                nodes,
                beta_g * params,
                rs_count,
                False,
            )
            add(TrafficKind.DP, Collective.ALL_GATHER, group, nodes, beta * params, ag_count, False)

        tied = 1.0 if model.tied_embeddings else 0.0
        add(
            TrafficKind.EMBEDDING_SYNC,
            Collective.ALL_REDUCE,
            2.0 + 0.0 * p,
            nodes_pp,
            beta_g * vocab * h / t,
            tied * has_pp,
            False,
        )

        if moe_layers:
            a2a_bytes = beta * b * (s / cp) * h * model.moe_top_k / _where(sp, t, 1.0)
            add(
                TrafficKind.EXPERT,
                Collective.ALLTOALL,
                ep,
                nodes_ep,
                a2a_bytes,
                stage_layers * (moe_layers / l) * (4.0 + 2.0 * full),
                True,
            )

    u = utilization
    compute_mb = flops_mb / (u * peak_flops)
    if not paper and memory_traffic_factor > 0.0 and memory_bandwidth_gbps:
        # Roofline refinement: element-wise passes move γ · activation bytes through HBM;
        # per layer s·b·h·(10 + 24/t) (SP: 34/t) plus the attention part 5·a·s/h/t
        # (Korthikanti et al. 2022 Table 2), scaled to β bytes; 3 passes (+1 replayed).
        sbh = b * (s / cp) * h
        linear = _where(sp, 34.0 / t, 10.0 + 24.0 / t) * sbh
        # FlashAttention never materialises the s² scores: no attention part.
        flash = 0.0 if training.flash_attention else 1.0
        attention = flash * 5.0 * float(model.num_attention_heads) * s / h / t * sbh
        passes = 3.0 + full
        elementwise_bytes = (
            memory_traffic_factor
            * (beta / 2.0)
            * stage_layers
            * (passes * linear + (passes + selective) * attention)
        )
        compute_mb = compute_mb + elementwise_bytes / (memory_bandwidth_gbps * 1e9)

    # Ask the provider once per call; groups of one rank ask for 2 (their factor is 0).
    per_mb: dict[str, Num] = {k.value: 0.0 for k in TrafficKind}
    per_it: dict[str, Num] = {k.value: 0.0 for k in TrafficKind}
    for c in calls:
        c.busbw_gbps = bandwidth.busbw_gbps(c.kind, c.op, _max(c.ranks, 2.0), c.nodes, c.size_bytes)
        c.time_per_call_s = bus_factor(c.op, c.ranks) * c.size_bytes / (c.busbw_gbps * 1e9)
        target = per_mb if c.per_microbatch else per_it
        target[c.term] = target[c.term] + c.time_per_call_s * c.count

    tp_link_mb = per_mb["tp"]
    tp_mb = tp_link_mb
    if not paper:
        # TP overlap (off by default): collectives hidden behind the layer GEMMs.
        tp_mb = _where(lay.overlap_tp, _max(tp_link_mb - compute_mb, 0.0), tp_link_mb)
    pp_mb = per_mb["pp"]
    cp_mb = per_mb["cp"]
    ep_mb = per_mb["expert"]
    dp_link = per_it["dp"]
    # DP overlap (off by default): hidden behind the backward of the last micro-batch.
    dp = _where(lay.overlap_dp, _max(dp_link - bwd_fraction * compute_mb, 0.0), dp_link)

    bubble_mb = compute_mb + tp_mb + pp_mb
    if not paper:
        bubble_mb = bubble_mb + cp_mb + ep_mb
    terms: dict[str, Num] = {
        "compute": m * compute_mb,
        "tp": m * tp_mb,
        "cp": m * cp_mb,
        "pp": m * pp_mb,
        "dp": dp,
        "bubble": (p - 1.0) / v * bubble_mb,  # (p-1)/v · (T_comp + T_TP + T_PP) per micro-batch
        "embedding_sync": per_it["embedding_sync"],
        "expert": m * ep_mb,
    }
    link_s: dict[str, Num] = {
        "tp": m * tp_link_mb,
        "cp": m * cp_mb,
        "pp": m * pp_mb,
        "dp": dp_link,
        "embedding_sync": per_it["embedding_sync"],
        "expert": m * ep_mb,
    }

    tokens_it = gb * s
    model_flops = 3.0 * model_forward_flops(model, tokens_it)
    replay_total = full * (
        model_forward_flops(model, tokens_it) - logit_forward_flops(model, tokens_it)
    ) + selective * l * attention_core_forward_flops(model, tokens_it, s)
    hardware_flops = model_flops + replay_total

    result = KernelResult(
        terms=terms,
        link_s=link_s,
        micro_batches=m,
        compute_mb_s=compute_mb,
        tp_mb_s=tp_mb,
        pp_mb_s=pp_mb,
        calls=calls,
        parameters=n_params if paper else model_parameters(model),
        gpu_parameters=gpu_params,
        model_flops=float(model_flops),
        hardware_flops=hardware_flops,
    )
    result.memory = _memory(
        model,
        training,
        lay,
        m,
        dense_gpu_params,
        expert_gpu_params,
        gpu_memory_bytes,
        first_layers,
    )
    return result


def _attention_ln_parameters(model: ModelSpec) -> float:
    h, kv = float(model.hidden_size), float(model.kv_hidden)
    return h * (h + 2.0 * kv) + (h + 2.0 * kv) + h * h + h + 4.0 * h


def _memory(
    model: ModelSpec,
    training: TrainingSpec,
    lay: LayoutVars,
    m: Num,
    dense_params: Num,
    expert_params: Num,
    capacity: float | None,
    first_layers: Num,
) -> dict[str, Num]:
    """Bytes per GPU on the first stage (Korthikanti et al. 2022 §4, Table 2).

    Mixed-precision Adam: weights β, fp32 main gradients 4, fp32 master + m + v 12 bytes per
    parameter (fp32 training: 4 + 4 + 8). ZeRO 1 shards the optimizer over the DP group,
    2 also the gradients, 3 also the weights.
    """
    fp32 = training.precision in (Precision.FP32, Precision.TF32)
    w_bytes = float(BYTES_PER_ELEMENT[training.precision])
    g_bytes, o_bytes = 4.0, 8.0 if fp32 else 12.0
    p, t, d, b, v, cp, ep = lay.p, lay.t, lay.d, lay.b, lay.v, lay.cp, lay.ep
    zero = lay.zero
    dense_shard = d * cp
    expert_shard = d * cp / ep
    z1, z2, z3 = _gt(zero, 0.0), _gt(zero, 1.0), _gt(zero, 2.0)

    def sharded(count: Num, per: float, on: Num) -> Num:
        return per * (count * (1.0 - on) + count / dense_shard * on)

    def sharded_e(count: Num, per: float, on: Num) -> Num:
        return per * (count * (1.0 - on) + count / expert_shard * on)

    weights = sharded(dense_params, w_bytes, z3) + sharded_e(expert_params, w_bytes, z3)
    grads = sharded(dense_params, g_bytes, z2) + sharded_e(expert_params, g_bytes, z2)
    optim = sharded(dense_params, o_bytes, z1) + sharded_e(expert_params, o_bytes, z1)

    s, h, a = (
        float(model.seq_length) / cp,
        float(model.hidden_size),
        float(model.num_attention_heads),
    )
    sbh = s * b * h
    sp = lay.sp * _gt(t, 1.0)
    full = _eq(lay.recompute, 2.0)
    selective = _eq(lay.recompute, 1.0)
    # The s² term: dropped by selective recompute, and never stored with FlashAttention.
    attn = 0.0 if training.flash_attention else 5.0 * a * s / h
    no_sp = sbh * (10.0 + 24.0 / t + (1.0 - selective) * attn / t)
    with_sp = sbh / t * (34.0 + (1.0 - selective) * attn)
    per_layer = _where(sp, with_sp, no_sp)
    per_layer = _where(full, 2.0 * sbh / _where(sp, t, 1.0), per_layer)
    in_flight = _min(p, m) * (1.0 + (p - 1.0) / (p * v) * _gt(v, 1.0))
    activations = per_layer * first_layers * in_flight
    total = weights + grads + optim + activations
    memory: dict[str, Num] = {
        "weights": weights,
        "gradients": grads,
        "optimizer": optim,
        "activations": activations,
        "total": total,
    }
    if capacity is not None:
        memory["capacity"] = capacity + 0.0 * total
    return memory
