"""The numeric kernel: every term of the iteration time, for one layout or a million.

``evaluate`` runs the same arithmetic on Python floats (one estimate) and on numpy arrays (a
sweep), so both paths agree to the last bit. Branches that depend on the layout are written
as arithmetic on 0/1 flags (``_where``/``_max`` dispatch on the type), never as Python ``if``
on a layout value.

Sources: the seed's formulation (Li et al., "Understanding Communication Characteristics of
Distributed Training", APNet 2024; docs/design.md §4.2); Megatron-LM SC21
(Narayanan et al. 2021) §2-3 and eqs. 2-3; Korthikanti et al. 2022 (sequence parallelism,
selective recompute, activation memory, Table 2).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from estimator.bandwidth import (
    BandwidthProvider,
    Collective,
    FloatArray,
    Num,
    TrafficKind,
    bus_factor,
)
from estimator.compute import (
    ATTENTION_WIDTH_SBH,
    FFN_WIDTH_SBH,
    FP8_BYTES,
    LOGITS_PEAK_BYTES,
    Roofline,
    attention_efficiencies,
    ffn_width_sbh,
    layer_times,
    logits_s,
    logits_wgrad_s,
    op_sac_sbh,
)
from estimator.flops import (
    attention_core_forward_flops,
    embedding_parameters,
    last_gemm_forward_flops,
    layer_forward_flops,
    layer_parameters,
    layer_tensor_sizes,
    logit_forward_flops,
    megatron_parameters,
    model_forward_flops,
    model_parameters,
)
from estimator.frameworks import (
    BF16_OPTIMIZER_ACCUMULATION_BYTES,
    BF16_OPTIMIZER_SHARD_EXCLUDED_BYTES,
    BF16_OPTIMIZER_WHOLE_BYTES,
    EAGER_OP_HOST_S,
    EP_OVERLAP_HIDDEN_SHARE,
    FP8_CURRENT_SCALING_QUANTIZE_KERNELS,
    FP8_EXPERT_TENSORS_BACKWARD,
    FP8_EXPERT_TENSORS_FORWARD,
    FP16_UNSCALE_BYTES,
    HOST_FORWARD_SHARE,
    KERNEL_LAUNCH_S,
    ZERO3_LIST_VIEW_COPIES,
    ZERO3_LIST_ZERO_FILL,
)
from estimator.specs import (
    BYTES_PER_ELEMENT,
    Fidelity,
    ModelSpec,
    MoeDispatcher,
    Precision,
    TrainingSpec,
    parse_rank_order,
)

# Enum members as module constants: ``TrafficKind.TP`` is a class-attribute lookup through
# the Enum metaclass (~100 ns in CPython 3.11), and one estimate makes ~80 of them.
_ALLTOALL = Collective.ALLTOALL
_ALL_GATHER = Collective.ALL_GATHER
_ALL_REDUCE = Collective.ALL_REDUCE
_REDUCE_SCATTER = Collective.REDUCE_SCATTER
_SENDRECV = Collective.SENDRECV
_PAPER = Fidelity.PAPER
_BF16 = Precision.BF16
_FP16 = Precision.FP16
_FP32 = Precision.FP32
_FP8 = Precision.FP8
_TF32 = Precision.TF32
_CP = TrafficKind.CP
_DP = TrafficKind.DP
_EMBEDDING_SYNC = TrafficKind.EMBEDDING_SYNC
_EXPERT = TrafficKind.EXPERT
_PP = TrafficKind.PP
_TP = TrafficKind.TP

# The breakdown's named terms (a contract: terms are added, never renamed).
TERMS = (
    "compute",
    "tp",
    "cp",
    "pp",
    "dp",
    "bubble",
    "embedding_sync",
    "expert",
    "optimizer",
    "host",
)


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


def _ge(a: Num, b: Num) -> Num:
    """1.0 where a >= b else 0.0."""
    if type(a) is _ARRAY or type(b) is _ARRAY:
        flags: Num = (np.asarray(a) >= b).astype(np.float64)
        return flags
    return 1.0 if a >= b else 0.0


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
    # 1: the experts run whole (expert tensor parallelism 1 under t > 1), their EP group
    # spanning the stage's TP ranks (Megatron-Core's parallel folding); 0: at the layer's TP.
    ef: Num = 0.0
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
    term: str  # the breakdown term it is charged to
    busbw_gbps: Num
    time_per_call_s: Num
    # Which members of its group exchange bytes (estimator.traffic.SCOPES): all of them, or
    # (a flex MoE dispatch's two legs) those on other nodes at the same node position, or
    # those on the same node.
    scope: str = "group"


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
    dense_gpu_parameters: Num = 0.0
    expert_gpu_parameters: Num = 0.0
    memory: dict[str, Num] = field(default_factory=dict)
    # Per micro-batch seconds of the first, middle and last pipeline stage ("compute", "tp",
    # "cp", "pp", "expert", "dp", "total"), the pipeline's share of the iteration
    # (m·T + bubble) and the weights that split a stage's compute and exposed TP time into
    # (forward, recompute, backward): what the timeline (estimator.timeline) draws.
    stages: dict[str, dict[str, Num]] = field(default_factory=dict)
    pipeline_s: Num = 0.0
    compute_split: tuple[Num, Num, Num] = (1.0, 0.0, 2.0)
    tp_split: tuple[Num, Num, Num] = (1.0, 0.0, 1.0)

    @property
    def iteration_s(self) -> Num:
        total: Num = 0.0
        for name in TERMS:
            total = total + self.terms[name]
        return total


def block_share(replayed: float, chunk: Num) -> Num:
    """The share of a chunk's layers that block recompute replays: min(N, L)/L (Megatron's
    --recompute-method block replays the first N layers of each chunk; none of an empty one)."""
    held = _gt(chunk, 0.0)
    return held * _min(replayed, chunk) / _where(held, chunk, 1.0)


def nodes_spanned(ranks: Num, stride: Num, gpus_per_node: float) -> Num:
    """Nodes spanned by ranks 0, σ, ..., (n-1)σ: min(n, ⌊(n-1)σ/g⌋ + 1)."""
    span = (ranks - 1.0) * stride
    if type(span) is _ARRAY:
        # Integer-valued floats: floor(x/g) is x // g exactly, and numpy's float floor_divide
        # is several times slower.
        return np.minimum(ranks, np.floor(span / gpus_per_node) + 1.0)
    return _min(ranks, span // gpus_per_node + 1.0)


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
    gemm_traffic_factor: float = 0.0,
    fp8_utilization: float | None = None,
    flash2_efficiency: float = 1.0,
    gemm_half_size_elements: float = 0.0,
    cuda_core_peak_flops: float | None = None,
    fp8_expert_utilization: float | None = None,
) -> KernelResult:
    """All terms of the iteration time for the layouts in ``lay`` (scalars or arrays).

    ``paper`` fidelity is the seed's formulation exactly (docs/design.md §4.2); ``detailed`` prices
    every operation and collective of the pipeline's stages (see :func:`_detailed`).
    """
    ctx = _Context.make(model, training, lay, gpus_per_node, rank_order)
    if fidelity is _PAPER:
        result = _paper(ctx, peak_flops, utilization, bandwidth)
    else:
        attention_fwd_eff, attention_bwd_eff = attention_efficiencies(
            training.software.attention_kernel, flash2_efficiency
        )
        # The framework's compute speed relative to the fitted roofline (1 for most; the
        # DeepSpeed presets' fitted shortfall, estimator.frameworks): every operation scales.
        speed = training.software.compute_efficiency
        # Positional, in field order (keywords cost as much as the record itself).
        roof = Roofline(
            peak_flops * speed,  # peak_flops
            utilization,
            fp8_utilization,
            training.precision is _FP8,  # fp8
            (memory_bandwidth_gbps or 0.0) * 1e9 * speed,  # hbm_bytes_per_s
            gemm_traffic_factor,
            memory_traffic_factor,  # elementwise_factor
            attention_fwd_eff,  # attention_efficiency
            attention_bwd_eff,  # attention_backward_efficiency
            training.software.fused_elementwise,
            gemm_half_size_elements,
            (cuda_core_peak_flops or 0.0) * speed,  # cuda_core_peak_flops
            training.software.attention_kernel,
            fp8_expert_utilization,
        )
        result = _detailed(ctx, roof, bandwidth)
    if fidelity is _PAPER:
        # The seed's own count, which its time divides by u·F (docs/design.md §4.2): 6·N per
        # token, 8·N with full recompute. The model's own FLOPs would put a MoE model, which the
        # seed prices as dense, above 100 % MFU.
        tokens = ctx.gb * ctx.s
        result.model_flops = 6.0 * result.parameters * tokens
        result.hardware_flops = (6.0 + 2.0 * ctx.full) * result.parameters * tokens
    else:
        forward, logits, core, last_gemm = _iteration_flops(model, ctx.gb * ctx.s)
        model_flops = 3.0 * forward
        if training.software.selective_recompute == "op-sac":
            fp8 = training.precision is _FP8
            selective_replay = _op_sac_replay_flops(model, ctx.gb * ctx.s, fp8)
        else:
            selective_replay = ctx.l * core
        replayed = forward - logits
        if training.software.recompute_early_stop:
            replayed = replayed - last_gemm
        replay_total = ctx.full * replayed + ctx.selective * selective_replay
        result.model_flops = float(model_flops)
        result.hardware_flops = model_flops + replay_total
    result.memory = _memory(
        model,
        training,
        lay,
        ctx.m,
        result.dense_gpu_parameters,
        result.expert_gpu_parameters,
        gpu_memory_bytes,
        ctx.first_layers,
        ctx.last_layers,
        ctx.expert_shard,
    )
    return result


@functools.lru_cache(maxsize=256)
def _iteration_flops(model: ModelSpec, tokens: float) -> tuple[float, float, float, float]:
    """Forward FLOPs of the model, of its logit layer, of one layer's attention core and of
    every dense layer's FC2 (what an early-stopping replay leaves out) over ``tokens`` tokens
    (a per-model constant: computed once per model and batch)."""
    return (
        float(model_forward_flops(model, tokens)),
        float(logit_forward_flops(model, tokens)),
        float(attention_core_forward_flops(model, tokens, float(model.seq_length))),
        float(last_gemm_forward_flops(model, tokens)),
    )


def _op_sac_replay_flops(model: ModelSpec, tokens: float, fp8: bool) -> float:
    """Forward FLOPs torch's op-level SAC replays (docs/design.md §4.4): per layer wk, wo and
    w3 (or w2) of the block's GEMMs, every linear GEMM in FP8; never the attention core."""
    h, kv, s = float(model.hidden_size), float(model.kv_hidden), float(model.seq_length)
    hq = float(model.attention_width)
    total = 0.0
    moe_layers = float(model.num_moe_layers)
    for moe, count in ((False, float(model.num_layers) - moe_layers), (True, moe_layers)):
        if not count:
            continue
        if fp8:
            core = attention_core_forward_flops(model, tokens, s)
            per_layer = float(layer_forward_flops(model, tokens, s, moe=moe)) - float(core)
        else:
            f = float(model.expert_ffn if moe else model.ffn)
            copies = float(model.moe_top_k) if moe else 1.0
            per_layer = 2.0 * tokens * h * (kv + hq + copies * f)
        total += count * per_layer
    return total


@functools.lru_cache(maxsize=256)
def _parameter_counts(model: ModelSpec) -> tuple[float, float, float, float, float]:
    """(total, embedding, dense layer, MoE layer's attention+norms+router, its experts)."""
    total = model_parameters(model)
    emb = embedding_parameters(model)
    dense = layer_parameters(model, moe=False)
    if not model.is_moe:
        return total, emb, dense, 0.0, 0.0
    shared = _attention_ln_parameters(model) + float(model.hidden_size) * model.moe_num_experts
    return total, emb, dense, shared, layer_parameters(model, moe=True) - shared


@dataclass(slots=True)
class _Context:
    """What both fidelities derive from the inputs: sizes, flags, placement, stage layers."""

    model: ModelSpec
    training: TrainingSpec
    lay: LayoutVars
    full: Num
    selective: Num
    sp: Num
    l: float
    h: float
    s: float
    beta: float
    beta_g: float
    gb: float
    m: Num
    has_pp: Num
    nodes_tp: Num
    nodes_cp: Num
    nodes_dp: Num  # the DP·CP group's (dense gradients are reduced over both)
    nodes_d: Num  # the d DP ranks' alone (one cp coordinate)
    nodes_ep: Num
    expert_shard: Num  # ranks sharing each expert's parameters (its DP group)
    nodes_edp: Num  # nodes that group spans
    nodes_pp: Num
    first_layers: Num
    mid_layers: Num
    last_layers: Num
    middle_stages: Num

    @classmethod
    def make(
        cls,
        model: ModelSpec,
        training: TrainingSpec,
        lay: LayoutVars,
        gpus_per_node: int,
        rank_order: str,
    ) -> _Context:
        p, t, d, b, cp = lay.p, lay.t, lay.d, lay.b, lay.cp
        g = float(gpus_per_node)
        l = float(model.num_layers)
        order = parse_rank_order(rank_order)
        stride = _strides(order, {"tp": t, "cp": cp, "dp": d, "pp": p})
        nodes_cp = nodes_spanned(cp, stride["cp"], g)
        nodes_d = nodes_spanned(d, stride["dp"], g)
        nodes_dp = _min(d * cp, nodes_d * nodes_cp)
        # Expert groups (Megatron-Core's expert grid tp-ep-dp-pp, initialize_model_parallel):
        # ep consecutive ranks of a stage's cp·dp ranks with one tp coordinate, each expert's
        # parameters shared by d·cp/ep ranks; folded over TP (ef), ep consecutive ranks of the
        # stage's tp·cp·dp ranks, each expert shared by the t·d·cp/ep ranks ep apart.
        expert_shard = d * cp / lay.ep
        nodes_ep = nodes_spanned(lay.ep, stride["dp"], g)
        multi_cp = _gt(cp, 1.0)
        if _any(multi_cp):
            # The group fills the faster of cp and dp first, then steps along the slower.
            cp_first = _gt(stride["dp"], stride["cp"])
            n_in = _where(cp_first, cp, d)
            s_in = _where(cp_first, stride["cp"], stride["dp"])
            s_out = _where(cp_first, stride["dp"], stride["cp"])
            spread = _min(
                lay.ep,
                nodes_spanned(n_in, s_in, g) * nodes_spanned(lay.ep / n_in, s_out, g),
            )
            nodes_ep = _where(
                multi_cp,
                _where(_gt(lay.ep, n_in), spread, nodes_spanned(lay.ep, s_in, g)),
                nodes_ep,
            )
        nodes_edp = _min(expert_shard, nodes_dp)
        if _any(lay.ef):
            inner = _min(_min(stride["tp"], stride["cp"]), stride["dp"])
            folded_shard = t * d * cp / lay.ep
            expert_shard = _where(lay.ef, folded_shard, expert_shard)
            nodes_ep = _where(lay.ef, nodes_spanned(lay.ep, inner, g), nodes_ep)
            nodes_edp = _where(lay.ef, nodes_spanned(folded_shard, lay.ep * inner, g), nodes_edp)
        # Layers per stage: an even split, or Megatron's uneven first/last stages
        # (--decoder-first/last-pipeline-num-layers) with the rest spread evenly in between.
        has_first, has_last = _gt(lay.first_layers, 0.0), _gt(lay.last_layers, 0.0)
        middle_stages = p - has_first - has_last
        mid_layers = (l - lay.first_layers - lay.last_layers) / _max(middle_stages, 1.0)
        first_layers = _where(has_first, lay.first_layers, mid_layers)
        last_layers = _where(has_last, lay.last_layers, mid_layers)
        full = _eq(lay.recompute, 2.0)
        if training.recompute_num_layers is not None:
            # Block recompute: the share of a stage's layers whose forward is replayed, that of
            # the stage with the most layers (its chunks of L/v hold N of them).
            chunk = _max(_max(first_layers, mid_layers), last_layers) / lay.v
            full = full * block_share(float(training.recompute_num_layers), chunk)
        # Positional, in field order: 26 keywords cost three times the record itself.
        return cls(
            model,
            training,
            lay,
            full,
            _eq(lay.recompute, 1.0),  # selective
            lay.sp * _gt(t, 1.0),  # sp
            l,
            float(model.hidden_size),  # h
            float(model.seq_length),  # s
            float(training.activation_bytes),  # beta
            float(training.grad_bytes),  # beta_g
            float(training.global_batch_size),  # gb
            float(training.global_batch_size) / (b * d),  # m: docs/design.md §3
            _gt(p, 1.0),  # has_pp
            nodes_spanned(t, stride["tp"], g),  # nodes_tp
            nodes_cp,
            nodes_dp,
            nodes_d,
            nodes_ep,
            expert_shard,
            nodes_edp,
            1.0 + _gt((p - 1.0) * stride["pp"], g - 1.0),  # nodes_pp: a stage boundary off-node
            first_layers,
            mid_layers,
            last_layers,
            middle_stages,
        )


class _Pricer:
    """Asks the bandwidth provider once per distinct collective and remembers the calls."""

    def __init__(self, bandwidth: BandwidthProvider) -> None:
        self.bandwidth = bandwidth
        self.calls: list[Call] = []

    def time(
        self,
        kind: TrafficKind,
        op: Collective,
        ranks: Num,
        nodes: Num,
        size: Num,
        needed: Num = 1.0,
    ) -> tuple[Num, Num]:
        """(busbw, seconds per call); (0, 0) where the call never happens in any layout."""
        # A call that never happens (nothing needs it, no bytes, or a group of one) costs
        # exactly 0: no question to the provider, on one layout or on all of a sweep's.
        if type(ranks) is float and type(size) is float and type(needed) is float:
            if needed == 0.0 or size == 0.0 or ranks <= 1.0:
                return _NEVER
            busbw = self.bandwidth.busbw_gbps(kind, op, ranks, nodes, size)
            return busbw, bus_factor(op, ranks) * size / (busbw * 1e9)
        asked = (np.asarray(needed) != 0.0) & (np.asarray(size) != 0.0) & (np.asarray(ranks) > 1.0)
        if not asked.any():
            return _NEVER
        if asked.all() or asked.mean() > _SUBSET_QUERY_BELOW:
            busbw = self.bandwidth.busbw_gbps(kind, op, _max(ranks, 2.0), nodes, size)
        else:
            # Ask only about the layouts that run this collective; the others get a placeholder
            # bandwidth (their count is 0, so it never reaches a term).
            shape = asked.shape
            where = np.flatnonzero(asked)
            answer = self.bandwidth.busbw_gbps(
                kind,
                op,
                np.broadcast_to(_max(ranks, 2.0), shape)[where],
                np.broadcast_to(nodes, shape)[where],
                np.broadcast_to(size, shape)[where],
            )
            full_answer = np.ones(shape)
            full_answer[where] = answer
            busbw = full_answer
        seconds = bus_factor(op, ranks) * size / (busbw * 1e9)
        return busbw, seconds

    def record(
        self,
        kind: TrafficKind,
        op: Collective,
        ranks: Num,
        nodes: Num,
        size: Num,
        priced: tuple[Num, Num],
        count: Num,
        per_mb: bool,
        term: str = "",
        scope: str = "group",
    ) -> None:
        """A collective of the critical stage for the report (skipped when it never runs)."""
        if priced is _NEVER or not _any(count):
            return
        # The term defaults to the kind's value (a StrEnum; ``.value`` is slower).
        self.calls.append(
            Call(kind, op, ranks, nodes, size, count, per_mb, term or str(kind), *priced, scope)
        )


_NEVER: tuple[Num, Num] = (0.0, 0.0)  # a collective no layout runs


def _miss(experts: float, held: Num, top_k: int) -> Num:
    """The chance that none of a token's ``top_k`` distinct experts, drawn uniformly (balanced
    routing) from ``experts``, is among the ``held`` ones: C(E − m, k) / C(E, k)."""
    out: Num = 1.0
    for i in range(top_k):
        out = out * _max(experts - held - i, 0.0) / (experts - i)
    return out


def _flex_dispatch_sizes(
    model: ModelSpec, a2a_bytes: Num, ep: Num, nodes: Num
) -> tuple[Num, Num, Num]:
    """One flex (DeepEP / HybridEP) dispatch as two all-to-alls: (the RDMA leg's size on the
    expert group's placement, the group's ranks per node, the NVLink leg's size on one node).

    DeepEP (README, "normal kernels"): a token goes once over RDMA to each remote node that
    holds one of its k experts, to the rank at the same position there, and once over NVLink
    to each rank that holds one (its own node's, and those the remote peer forwards to). Per
    rank and token of B bytes: RDMA B·(N − 1)·(1 − miss_node), NVLink B·(1 − miss_rank)·(ep − N)
    (by symmetry each rank forwards as much as it receives). Each is sized as an all-to-all
    whose off-node (RDMA) or on-node (NVLink) share is those bytes, so the profile's curves
    price them. ``a2a_bytes``: the all-to-all's k routed copies of this rank's tokens.
    """
    experts = float(model.moe_num_experts)
    top_k = int(model.moe_top_k)
    token_bytes = a2a_bytes / float(top_k)
    per_node = ep / nodes
    rdma = token_bytes * nodes * (1.0 - _miss(experts, experts / nodes, top_k))
    nvlink = token_bytes * (1.0 - _miss(experts, experts / ep, top_k)) * (ep - nodes)
    return rdma * _gt(nodes, 1.0), per_node, nvlink * per_node / _max(per_node - 1.0, 1.0)


# A sweep asks the provider only about the layouts that run a collective when fewer than this
# fraction do (the gather and scatter cost less than the provider's work on the others).
_SUBSET_QUERY_BELOW = 0.75


def _any(x: Num) -> bool:
    if type(x) is _ARRAY:
        return bool(x.any())
    return x != 0.0


def _paper(
    ctx: _Context, peak_flops: float, utilization: Num, bandwidth: BandwidthProvider
) -> KernelResult:
    """The seed's formulation (docs/design.md §4), unchanged: scalar u, one C per kind."""
    model, lay = ctx.model, ctx.lay
    p, t, d, b, v = lay.p, lay.t, lay.d, lay.b, lay.v
    n_params = (
        megatron_parameters(model) if model.num_parameters is None else float(model.num_parameters)
    )
    pricer = _Pricer(bandwidth)
    # The seed: FLOP_mb = 8·N/(p·t)·b·s (6 without full recompute).
    flops_mb = (6.0 + 2.0 * ctx.full) * n_params / (p * t) * b * ctx.s
    s_act = ctx.beta * b * ctx.s * ctx.h
    tp_count = ctx.l / p * 4.0
    tp = pricer.time(_TP, _ALL_REDUCE, t, ctx.nodes_tp, s_act)
    pricer.record(_TP, _ALL_REDUCE, t, ctx.nodes_tp, s_act, tp, tp_count, True)
    pp_count = 2.0 * v * ctx.has_pp
    pp_ranks = 2.0 + 0.0 * p
    pp = pricer.time(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, s_act, needed=pp_count)
    pricer.record(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, s_act, pp, pp_count, True)
    dp_size = ctx.beta_g * n_params / (p * t)
    # The seed has no context parallelism: the all-reduce runs over the d DP ranks alone.
    dp = pricer.time(_DP, _ALL_REDUCE, d, ctx.nodes_d, dp_size)
    pricer.record(_DP, _ALL_REDUCE, d, ctx.nodes_d, dp_size, dp, 1.0 + 0.0 * p, False)
    compute_mb = flops_mb / (utilization * peak_flops)
    tp_mb = tp[1] * tp_count
    pp_mb = pp[1] * pp_count
    dp_link = dp[1] * 1.0
    m = ctx.m
    zero: Num = 0.0 * p
    terms: dict[str, Num] = {
        "compute": m * compute_mb,
        "tp": m * tp_mb,
        "cp": m * zero,
        "pp": m * pp_mb,
        "dp": dp_link,
        # (p-1)/v · (T_comp + T_TP + T_PP) per micro-batch
        "bubble": (p - 1.0) / v * (compute_mb + tp_mb + pp_mb),
        "embedding_sync": 0.0 * p,
        "expert": m * zero,
        "optimizer": zero,
        "host": zero,
    }
    link_s: dict[str, Num] = {
        "tp": m * tp_mb,
        "cp": m * zero,
        "pp": m * pp_mb,
        "dp": dp_link,
        "embedding_sync": 0.0 * p,
        "expert": m * zero,
    }
    gpu_params = n_params / (p * t)
    uniform: dict[str, Num] = {
        "compute": compute_mb,
        "tp": tp_mb,
        "cp": zero,
        "pp": pp_mb,
        "expert": zero,
        "dp": zero,
        "host": zero,
        "total": compute_mb + tp_mb + pp_mb,
    }
    return KernelResult(
        terms=terms,
        link_s=link_s,
        micro_batches=m,
        compute_mb_s=compute_mb,
        tp_mb_s=tp_mb,
        pp_mb_s=pp_mb,
        calls=pricer.calls,
        parameters=n_params,
        gpu_parameters=gpu_params,
        model_flops=0.0,
        hardware_flops=0.0,
        dense_gpu_parameters=gpu_params,
        expert_gpu_parameters=0.0 * p,
        stages={"first": uniform, "mid": uniform, "last": uniform},
        pipeline_s=m * uniform["total"] + terms["bubble"],
        # FLOPs forward 2, replay 2 (full recompute), backward 4 (SC21 eq. 3); the seed's 4
        # TP all-reduces per layer: 2 forward, 2 backward (SC21 §2.3)
        compute_split=(2.0, 2.0 * ctx.full, 4.0),
        tp_split=(2.0, 0.0 * p, 2.0),
    )


def _avg(dense: Num, moe: Num, frac: float) -> Num:
    """Per-layer average over the stage's dense and MoE layers (MoE layers spread evenly)."""
    if frac == 0.0:
        return dense
    return (1.0 - frac) * dense + frac * moe


def _times(a: Num, b: Num) -> Num:
    """a·b, and exactly 0.0 without an array operation when b is the scalar 0."""
    if type(b) is not _ARRAY and b == 0.0:
        return 0.0
    return a * b


def _hide(comm: Num, budget: Num, on: bool) -> Num:
    """Exposed time of a collective overlapped with ``budget`` seconds of compute."""
    return _max(comm - budget, 0.0) if on else comm


def _detailed(ctx: _Context, roof: Roofline, bandwidth: BandwidthProvider) -> KernelResult:
    """Every operation and collective of the pipeline's stages, with the framework's overlaps.

    Per micro-batch each stage costs T_stage = compute + exposed TP + CP + EP + PP (+ ZeRO-3
    gathers); the pipeline runs at the slowest stage T and fills and drains through all of them:
    T_iter = m·T + (W − T)/v + DP + optimizer + embedding sync, W = Σ T_stage. With equal
    stages (W = p·T) the fill-and-drain is the usual (p−1)/v·T (SC21 §2.2); with one
    micro-batch it is the whole chain W.
    """
    model, training, lay = ctx.model, ctx.training, ctx.lay
    fw = training.software
    p, t, d, b, v, cp, ep = lay.p, lay.t, lay.d, lay.b, lay.v, lay.cp, lay.ep
    full, selective, sp, m, has_pp = ctx.full, ctx.selective, ctx.sp, ctx.m, ctx.has_pp
    l, h, s, beta, beta_g = ctx.l, ctx.h, ctx.s, ctx.beta, ctx.beta_g
    vocab = float(model.vocab_size)
    moe_frac = float(model.num_moe_layers) / l
    pricer = _Pricer(bandwidth)
    folded = moe_frac != 0.0 and _any(lay.ef)
    # MoE layers that all-gather their routed tokens over TP (not folded, under SP), and the
    # experts' own TP: t, or 1 where folded
    tp_dispatch = ctx.sp * (1.0 - lay.ef) if folded else ctx.sp
    expert_tp: Num = _where(lay.ef, 1.0, t) if folded else t

    # --- compute per layer and micro-batch (estimator.compute) -----------------------------
    flash = training.flash_attention
    imbalance = training.moe_capacity_factor or 1.0
    op_sac = fw.selective_recompute == "op-sac"
    # torchao float8 TP: the layers' sequence-parallel all-gathers move FP8 elements.
    fp8_gather = fw.tp_fp8_all_gather and roof.fp8
    dense = layer_times(
        model,
        roof,
        b=b,
        t=t,
        cp=cp,
        sp=sp,
        beta=beta,
        flash=flash,
        moe=False,
        imbalance=1.0,
        ep=ep,
        fp8_gather=fp8_gather,
        op_sac=op_sac,
    )
    moe = (
        layer_times(
            model,
            roof,
            b=b,
            t=t,
            cp=cp,
            sp=sp,
            beta=beta,
            flash=flash,
            moe=True,
            imbalance=imbalance,
            ep=ep,
            fp8_gather=fp8_gather,
            expert_tp=expert_tp if folded else None,
            op_sac=op_sac,
        )
        if moe_frac
        else dense
    )
    stop = fw.recompute_early_stop
    # The FC2 output all-reduce (SP: reduce-scatter) a replay that stops early does not run,
    # per dense layer; MoE layers replay their experts whole. Under SP the MoE branch below
    # takes the dense MLP's collectives out of a MoE layer; without SP every layer keeps the
    # dense rule, so the count is averaged over the layers.
    skipped_ar: Num = full * (1.0 - moe_frac * (1.0 - sp)) if stop else 0.0
    skipped_avg: Num = full * (1.0 - moe_frac) if stop else 0.0
    # A MoE layer's own compute per micro-batch (forward, backward, replay): the eager host
    # floor below compares it with the host's time.
    moe_fwd: Num = 0.0
    moe_bwd: Num = 0.0
    moe_replay: Num = 0.0
    if moe_frac:
        moe_fwd, moe_bwd = moe.forward(), moe.backward()
        moe_replay = moe.replay(full, selective, op_sac, stop)
        layer_fwd = _avg(dense.forward(), moe_fwd, moe_frac)
        layer_bwd = _avg(dense.backward(), moe_bwd, moe_frac)
        layer_replay = _avg(dense.replay(full, selective, op_sac, stop), moe_replay, moe_frac)
        layer_gemm = _avg(
            dense.gemm(full, selective, op_sac, stop),
            moe.gemm(full, selective, op_sac, stop),
            moe_frac,
        )
    else:  # a dense model: what _avg returns, each sum computed once
        layer_fwd = dense.forward()
        layer_bwd = dense.backward()
        layer_replay = dense.replay(full, selective, op_sac, stop)
        layer_gemm = dense.gemm(full, selective, op_sac, stop)
    layer_comp = layer_fwd + layer_bwd + layer_replay
    layer_fwd_gemm = _avg(dense.linear_fwd, moe.linear_fwd, moe_frac)
    attention_replays = full + (0.0 if op_sac else selective)
    layer_attention = (
        (2.0 + attention_replays) * dense.attention_fwd + dense.attention_bwd - dense.attention_fwd
    )  # forward, backward and replayed attention: the CP ring's budget
    qkv = dense.qkv_fwd
    fc1 = _avg(dense.fc1_fwd, moe.fc1_fwd, moe_frac)
    logits = logits_s(model, roof, b=b, t=t, cp=cp, beta=beta)
    logits_wgrad = logits_wgrad_s(model, roof, b=b, t=t, cp=cp, beta=beta)

    # --- parameters per GPU of each stage --------------------------------------------------
    total_params, emb, dense_layer, moe_shared, experts = _parameter_counts(model)
    layer_params = dense_layer / t
    expert_layer: Num = 0.0 * p
    if moe_frac:
        layer_params = (1.0 - moe_frac) * layer_params + moe_frac * moe_shared / t
        expert_layer = moe_frac * experts / (ep * expert_tp)
    output_params = vocab * h / t  # the logit layer's weights (or the tied copy) on the last stage
    first_dense = (
        ctx.first_layers * layer_params
        + emb / t
        + (1.0 - has_pp) * (0.0 if model.tied_embeddings else output_params)
    )
    mid_dense = ctx.mid_layers * layer_params
    last_dense = ctx.last_layers * layer_params + output_params
    # The DP reduction and optimizer step that end the iteration: the stage with the most
    # parameters (the first, which finishes its backward pass last, or a fuller middle one).
    dense_gpu = _max(first_dense, mid_dense)
    expert_gpu = _max(ctx.first_layers, ctx.mid_layers) * expert_layer

    zero = lay.zero
    z0, z1, z2, z3 = _eq(zero, 0.0), _eq(zero, 1.0), _eq(zero, 2.0), _eq(zero, 3.0)
    dense_shard = d * cp
    expert_shard = ctx.expert_shard
    per_mb = 1.0 if fw.grad_reduce_per_microbatch else 0.0
    # Gradient accumulation through HBM, every micro-batch (sharded first when ZeRO-2/3
    # reduce-scatters every micro-batch).
    acc_scale = 1.0 - (z2 + z3) * per_mb * (1.0 - 1.0 / dense_shard)
    # DeepSpeed's BF16_Optimizer (ZeRO-1 with bf16): the bf16 gradient cast to an fp32
    # temporary, then added to the fp32 gradient, every micro-batch; at the end the whole
    # gradient all-reduced, the owned shard stepped and the weights all-gathered (frameworks.py,
    # ``bf16_optimizer``).
    bf16_opt = 1.0 if fw.bf16_optimizer and training.precision is _BF16 else 0.0
    acc_per_param: Num = fw.accumulation_bytes_per_parameter
    if bf16_opt:
        acc_per_param = acc_per_param + z1 * (BF16_OPTIMIZER_ACCUMULATION_BYTES - acc_per_param)
    acc_bytes = acc_per_param * acc_scale

    def accumulate(dense_params: Num, layers: Num) -> Num:
        return roof.stream_s(acc_bytes * (dense_params + layers * expert_layer))

    # --- collectives: one question each ------------------------------------------------------
    s_act = beta * b * (s / cp) * h
    no_sp = 1.0 - sp
    tp_ar = pricer.time(_TP, _ALL_REDUCE, t, ctx.nodes_tp, s_act, no_sp)
    tp_rs = pricer.time(_TP, _REDUCE_SCATTER, t, ctx.nodes_tp, s_act, sp)
    split = _max(lay.sg * _gt(t, 1.0) * (1.0 if fw.pp_scatter_gather else 0.0), sp)
    # Transfers per micro-batch and chunk: a send paired with a receive twice (1F1B), or four
    # blocking ones (DeepSpeed's pipeline engine).
    pp_count = (4.0 if fw.pp_blocking_p2p else 2.0) * v * has_pp
    # DeepSpeed's pipeline engine: gradients sent whole before v0.5.4 (``pp_scatter_gather_
    # grads``), and the partitioned output re-gathered over TP for its backward pass
    # (``pp_regather_output``).
    whole_grads = not fw.pp_scatter_gather_grads
    split_g = sp if whole_grads else split
    if whole_grads or fw.pp_regather_output:
        # One all-gather per received activation and gradient (when scattered), and one to
        # restore the stage's own output before its backward pass.
        out_regather = 1.0 if fw.pp_regather_output else 0.0
        pp_gather = v * has_pp * (split * (1.0 + out_regather) + split_g) * no_sp
    else:
        pp_gather = pp_count * split * no_sp
    tp_ag = pricer.time(_TP, _ALL_GATHER, t, ctx.nodes_tp, s_act, sp + pp_gather)
    ar, rs, ag = tp_ar[1], tp_rs[1], tp_ag[1]
    # The transformer layers' all-gathers: 1-byte elements under float8 TP (a block's input
    # and a row-parallel layer's output gradient are cast on the shard, then gathered); the
    # logit layer, the embedding and the pipeline's gathers stay 16-bit.
    tp_ag_layer = (
        pricer.time(_TP, _ALL_GATHER, t, ctx.nodes_tp, s_act / beta, sp) if fp8_gather else tp_ag
    )
    agl = tp_ag_layer[1]

    # TP per layer (SC21 §2.3; Korthikanti et al. 2022 §4.2.2). Without SP: 2 all-reduces
    # forward, 2 backward (under the QKV and FC1 weight-gradient GEMMs when the framework
    # overlaps them), 2 more in a full replay. With SP each becomes an all-gather before and a
    # reduce-scatter after the block; the backward also re-gathers the saved input shard of
    # QKV and FC1 (under their input-gradient GEMMs when overlapped).
    wg = fw.tp_overlap_wgrad
    sg_on = fw.sp_gather_overlap
    # torch op-level SAC replays the sequence-parallel all-gathers in front of the attention
    # and FFN blocks (only reduce-scatter outputs are on its save list).
    sac_gathers = 2.0 * selective if op_sac else 0.0
    # Megatron saves the input shard and re-gathers it for the weight gradient; DTensor TP
    # saves the gathered input (no re-gather).
    sp_regather = 1.0 if fw.sp_regather_saved_shard else 0.0
    # A replay that stops before FC2 (recompute_early_stop) skips the all-reduce (SP: the
    # reduce-scatter) of FC2's output too: one of its two, in the dense layers.
    replay_ar = 2.0 * full - skipped_ar
    ar_layer = (4.0 + replay_ar) * no_sp
    rs_layer = (4.0 + replay_ar) * sp
    ag_layer = (4.0 + 2.0 * sp_regather + 2.0 * full + sac_gathers) * sp
    tp_link_layer = ar_layer * ar + rs_layer * rs + ag_layer * agl
    tp_plain_layer = no_sp * ((2.0 + replay_ar) * ar + _hide(ar, qkv, wg) + _hide(ar, fc1, wg)) + (
        sp
        * (
            (4.0 + 2.0 * full + sac_gathers) * agl
            + (2.0 + replay_ar) * rs
            + _hide(rs, qkv, wg)
            + _hide(rs, fc1, wg)
            + sp_regather * (_hide(agl, qkv, sg_on) + _hide(agl, fc1, sg_on))
        )
    )
    # The forward pass's TP collectives: 2 all-reduces (SP: 2 all-gathers and 2 reduce-scatters).
    fwd_link = no_sp * 2.0 * ar + sp * 2.0 * (agl + rs)
    # TP communication overlap (userbuffers): every TP collective of a layer runs under its
    # GEMMs; only what exceeds them is exposed.
    tp_overlapped = _max(tp_link_layer - layer_gemm, 0.0)
    if fw.tp_comm_overlap and not fw.tp_comm_overlap_backward:
        # Forward pass only (async TP): its collectives under the forward GEMMs; the backward
        # and the replays as without.
        tp_overlapped = tp_plain_layer - fwd_link + _max(fwd_link - layer_fwd_gemm, 0.0)
    tp_exposed_layer = (
        tp_overlapped
        if fw.tp_comm_overlap
        else _where(lay.overlap_tp, tp_overlapped, tp_plain_layer)
    )
    # MoE layers under SP (Megatron-Core's all-to-all token dispatcher): the MLP block has no
    # SP gather/scatter of its own; after the all-to-all the routed tokens (top-k copies) are
    # all-gathered over the TP group and reduce-scattered before the way back, as plain
    # collectives on the compute stream (no userbuffers): one of each forward, backward and in
    # a full replay. ``moe_tp`` holds the per-layer (link, exposed) change for a MoE layer.
    moe_ag = moe_rs = _NEVER
    mlp_ag_count: Num = 0.0
    # A MoE layer's forward TP collectives when not overlapped (the dense rule without SP).
    moe_tp_fwd: Num = fwd_link
    if moe_frac and _any(sp):
        routed = float(model.moe_top_k) * s_act
        # Experts folded over TP take their tokens from the sequence shard: no TP gather.
        moe_ag = pricer.time(_TP, _ALL_GATHER, t, ctx.nodes_tp, routed, tp_dispatch)
        moe_rs = pricer.time(_TP, _REDUCE_SCATTER, t, ctx.nodes_tp, routed, tp_dispatch)
        dispatch = tp_dispatch * (2.0 + full) * (moe_ag[1] + moe_rs[1])
        moe_tp_fwd = no_sp * 2.0 * ar + sp * (agl + rs) + tp_dispatch * (moe_ag[1] + moe_rs[1])
        mlp_ag_count = sp * (2.0 + sp_regather + full + 0.5 * sac_gathers)
        mlp_link = mlp_ag_count * agl + sp * (2.0 + full - skipped_ar) * rs
        mlp_plain = sp * (
            (2.0 + full + 0.5 * sac_gathers) * agl
            + (1.0 + full - skipped_ar) * rs
            + _hide(rs, fc1, wg)
            + sp_regather * _hide(agl, fc1, sg_on)
        )
        moe_plain = tp_plain_layer - mlp_plain
        if fw.tp_comm_overlap and not fw.tp_comm_overlap_backward:
            attn_fwd_link = no_sp * 2.0 * ar + sp * (agl + rs)
            moe_overlapped = moe_plain - attn_fwd_link + _max(attn_fwd_link - dense.linear_fwd, 0.0)
        else:
            # Userbuffers overlap each collective with the GEMM that consumes or produces it
            # (QKV and projection forward, their input and weight gradients); the experts' linears
            # have it switched off (Megatron-Core core_r0.10.0 extensions/transformer_engine.py
            # TELinear: "Disable ub overlap for experts") and run between the dispatcher's plain
            # gather and scatter. So the attention block's collectives hide under its own GEMMs
            # only, not under the experts'. (Without SP this branch is only reached by a sweep's
            # SP-off rows, which keep the dense rule.)
            attention_gemm = (3.0 + full) * moe.attention_linear_fwd
            budget = sp * attention_gemm + no_sp * layer_gemm
            moe_overlapped = _max(tp_link_layer - mlp_link - budget, 0.0)
        moe_exposed = (
            moe_overlapped
            if fw.tp_comm_overlap
            else _where(lay.overlap_tp, moe_overlapped, moe_plain)
        )
        tp_exposed_layer = _avg(tp_exposed_layer, moe_exposed + dispatch, moe_frac)
        tp_link_layer = _avg(tp_link_layer, tp_link_layer - mlp_link + dispatch, moe_frac)
    # The logit layer (last stage): input-gradient all-reduce (SP: gather forward,
    # reduce-scatter and re-gather backward); the embedding (first stage): its output
    # all-reduce (SP: reduce-scatter forward, all-gather backward).
    logits_tp_link = no_sp * ar + sp * ((1.0 + sp_regather) * ag + rs)
    logits_tp = no_sp * _hide(ar, logits_wgrad, wg) + sp * (
        ag + _hide(rs, logits_wgrad, wg) + sp_regather * _hide(ag, logits_wgrad, sg_on)
    )
    emb_tp = no_sp * ar + sp * (rs + ag)

    # CP: all-gather K and V forward (and in a replay and the backward), reduce-scatter their
    # gradients; under the attention kernels when the framework's ring attention overlaps.
    # PyTorch's ring (Framework.cp_torch_ring): K/V at the query head count, and the backward
    # passes this rank's float32 dK/dV shard to the next rank at each of its cp steps.
    cp_ag = cp_rs = _NEVER
    kv_bytes: Num = 0.0
    cp_back: tuple[Collective, Num, Num] = (_REDUCE_SCATTER, 0.0, 0.0)
    cp_link_layer: Num = 0.0
    cp_exposed_layer: Num = 0.0
    if _any(cp - 1.0):
        torch_ring = fw.cp_torch_ring
        kv_width = float(model.attention_width) if torch_ring else float(model.kv_hidden)
        kv_bytes = 2.0 * beta * b * s * kv_width / t
        # The backward's K/V gradients: (collective, bytes, calls per layer).
        cp_back = (
            (_SENDRECV, 2.0 * 4.0 * b * (s / cp) * kv_width / t, cp * _min(cp - 1.0, 1.0))
            if torch_ring  # whole cp passes (a sweep's cp = 1 layouts pass nothing)
            else (_REDUCE_SCATTER, kv_bytes, 1.0)
        )
        cp_ag = pricer.time(_CP, _ALL_GATHER, cp, ctx.nodes_cp, kv_bytes)
        cp_rs = pricer.time(_CP, cp_back[0], cp, ctx.nodes_cp, cp_back[1])
        cp_link_layer = (2.0 + full) * cp_ag[1] + cp_back[2] * cp_rs[1]
        cp_exposed_layer = (
            _max(cp_link_layer - layer_attention, 0.0) if fw.cp_overlap else cp_link_layer
        )

    # EP: dispatch and combine all-to-alls, 2 forward, 2 backward, 2 more in a full replay.
    a2a_bytes: Num = 0.0
    ep_a2a = ep_nvlink = _NEVER
    flex = training.moe_token_dispatcher is MoeDispatcher.FLEX
    ep_per_node: Num = 1.0
    nvlink_bytes: Num = 0.0
    ep_call: Num = 0.0  # one dispatch or combine, per MoE layer of the stage
    ep_layer: Num = 0.0
    ep_link_layer: Num = 0.0
    if moe_frac:
        a2a_bytes = beta * b * (s / cp) * h * float(model.moe_top_k) / _where(sp, t, 1.0)
        if flex:
            a2a_bytes, ep_per_node, nvlink_bytes = _flex_dispatch_sizes(
                model, a2a_bytes, ep, ctx.nodes_ep
            )
            ep_nvlink = pricer.time(_EXPERT, _ALLTOALL, ep_per_node, 1.0, nvlink_bytes, moe_frac)
        ep_a2a = pricer.time(_EXPERT, _ALLTOALL, ep, ctx.nodes_ep, a2a_bytes, moe_frac)
        # flex: the RDMA and NVLink legs run at once, the slower one sets the pace
        ep_call = moe_frac * _max(ep_a2a[1], ep_nvlink[1])
        ep_layer = (4.0 + 2.0 * full) * ep_call
        ep_link_layer = ep_layer
        if fw.ep_comm_overlap:
            # Megatron-Core's EP overlap: one micro-batch's all-to-alls under another's compute,
            # NVIDIA's measured share hidden (frameworks.EP_OVERLAP_HIDDEN_SHARE); one
            # micro-batch has nothing to hide them under.
            keep = 1.0 - EP_OVERLAP_HIDDEN_SHARE * _gt(ctx.m, 1.0)
            ep_call = ep_call * keep
            ep_layer = ep_layer * keep

    # PP: activation forward, gradient backward, per chunk; 1/t of it with scatter/gather or
    # SP, then an all-gather over the TP group (charged to pp: the pipeline waits on it).
    send_bytes = s_act / _where(split, t, 1.0)
    pp_ranks = 2.0 + 0.0 * p
    pp_send = pricer.time(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, send_bytes, pp_count)
    pp_sends = pp_count * pp_send[1]
    grad_bytes = send_bytes
    pp_send_g = pp_send
    if whole_grads:
        # Half the transfers carry activations, half gradients (sent whole).
        grad_bytes = s_act / _where(split_g, t, 1.0)
        pp_send_g = pricer.time(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, grad_bytes, pp_count)
        pp_sends = 0.5 * pp_count * (pp_send[1] + pp_send_g[1])
    pp_link = pp_sends + pp_gather * ag

    # --- data parallel ---------------------------------------------------------------------
    # Once per iteration: ZeRO-1, and ZeRO-2/3 when the trainer accumulates before reducing.
    # Every micro-batch: ZeRO-2 as one whole-stage reduce-scatter; ZeRO-3 layer by layer
    # (``z3_rs`` below), so it is not charged here a second time.
    ar_once = z0 + z1 * bf16_opt
    # FSDP's SHARD_GRAD_OP (``zero2_per_layer``) gathers and reduce-scatters layer by layer
    # like ZeRO-3 (below), without the backward re-gather; other ZeRO-2 works on the stage.
    z2_layer = z2 * (1.0 if fw.zero2_per_layer else 0.0)
    z2_stage = z2 - z2_layer
    per_layer = z3 + z2_layer
    rs_once = z1 * (1.0 - bf16_opt) + (z2 + z3) * (1.0 - per_mb)
    rs_each = z2_stage * per_mb
    # (parameters, group, nodes spanned) of the dense and the expert parameters
    dp_groups = (
        (dense_gpu, dense_shard, _min(dense_shard, ctx.nodes_dp)),
        (expert_gpu, expert_shard, ctx.nodes_edp),
    )

    def dp_time(op: Collective, per_param: float, needed: Num) -> list[tuple[Num, Num]]:
        """(busbw, seconds) of one DP collective over each group; a model without MoE layers
        has no expert bytes, so its expert group is never priced (as ``time`` would say)."""
        (dense_n, dense_grp, dense_nodes), (expert_n, expert_grp, expert_nodes) = dp_groups
        dense_priced = pricer.time(_DP, op, dense_grp, dense_nodes, per_param * dense_n, needed)
        if not moe_frac:
            return [dense_priced, _NEVER]
        expert_priced = pricer.time(_DP, op, expert_grp, expert_nodes, per_param * expert_n, needed)
        return [dense_priced, expert_priced]

    # FP8 parameters (Framework.fp8_param_gather) are gathered as 1-byte elements.
    beta_p = FP8_BYTES if fw.fp8_param_gather and roof.fp8 else beta
    dp_ar = dp_time(_ALL_REDUCE, beta_g, ar_once)
    dp_rs = dp_time(_REDUCE_SCATTER, beta_g, rs_once + rs_each)
    dp_ag = dp_time(_ALL_GATHER, beta_p, z1 + z2_stage)
    reduce_link = ar_once * (dp_ar[0][1] + dp_ar[1][1]) + rs_once * (dp_rs[0][1] + dp_rs[1][1])
    reduce_each = rs_each * (dp_rs[0][1] + dp_rs[1][1])  # ZeRO-2/3, every micro-batch
    gather_link = (z1 + z2_stage) * (dp_ag[0][1] + dp_ag[1][1])
    # ZeRO-3 / FSDP: each layer's parameters gathered before its forward and its backward (and
    # its replay where the framework re-gathers), its gradients reduce-scattered after.
    gathers = float(fw.zero3_gathers_per_layer)

    def z3_units(element_bytes: Num) -> list[tuple[Num, Num, Num]]:
        return [
            (layer_params * element_bytes / gathers, dense_shard, dp_groups[0][2]),
            (expert_layer * element_bytes / gathers, expert_shard, dp_groups[1][2]),
        ]

    # ... the parameters' bytes, and the gradients' bytes of the same tensors, reduce-scattered
    # one by one.
    z3_unit, z3_rs_unit = z3_units(beta_p), z3_units(beta_g)
    # Gradients are reduce-scattered tensor by tensor (``gathers`` per layer, ``z3_rs_unit``); with
    # a persistence threshold (DeepSpeed's ``stage3_param_persistence_threshold``) the small
    # tensors stay gathered, so a dense layer's pass all-gathers only its larger tensors:
    # ``n_ag`` of them, ``z3_ag_unit`` bytes each on average (MoE layers: every tensor).
    n_ag: Num = gathers
    z3_ag_unit = z3_unit
    threshold = float(fw.zero3_persistence_threshold)
    if threshold > 0.0 and not moe_frac:
        sizes = layer_tensor_sizes(model, t)
        kept = [_ge(n, threshold) for n in sizes]
        n_ag = _max(sum(kept, start=0.0 * t), 1.0)
        gathered = sum((k * n for k, n in zip(kept, sizes, strict=True)), start=0.0 * t)
        z3_ag_unit = [(gathered * beta_p / n_ag, dense_shard, dp_groups[0][2]), z3_unit[1]]
    z3_ag = [_NEVER, _NEVER]
    z3_rs = [_NEVER, _NEVER]
    z3_gather_layer: Num = 0.0  # before the forward pass (ZeRO-3 and FSDP's ZeRO-2)
    z3_regather_layer: Num = 0.0  # before the backward pass (ZeRO-3 only)
    z3_reduce_layer: Num = 0.0
    regather = full * (1.0 if fw.zero3_regather_for_recompute else 0.0)
    z3_bwd_layer: Num = 0.0
    any_z3 = _any(per_layer)
    if any_z3:
        z3_ag = [
            pricer.time(_DP, _ALL_GATHER, grp, nodes, n, per_layer) for n, grp, nodes in z3_ag_unit
        ]
        z3_rs = [
            pricer.time(_DP, _REDUCE_SCATTER, grp, nodes, n, per_layer * per_mb)
            for n, grp, nodes in z3_rs_unit
        ]
        one_gather = n_ag * (z3_ag[0][1] + z3_ag[1][1])
        z3_gather_layer = per_layer * one_gather
        z3_regather_layer = z3 * (1.0 + regather) * one_gather
        z3_reduce_layer = per_layer * per_mb * gathers * (z3_rs[0][1] + z3_rs[1][1])
        z3_bwd_layer = z3_regather_layer + z3_reduce_layer
    # What the compute stream waits for: the collectives, and per gather and reduce-scatter
    # the work around them: with ZeRO-3's list-based collectives (``zero3_list_collectives``)
    # PyTorch's copies through a flat buffer, with ``zero3_rank_loop`` DeepSpeed 2021's Python
    # loop over the group's ranks before each gather, the GPU idle after a synchronize (one
    # eager op per rank; Framework docstring).
    zg, zrg, zr, zb = z3_gather_layer, z3_regather_layer, z3_reduce_layer, z3_bwd_layer
    around_g: Num = 0.0  # per gather
    around_r: Num = 0.0  # per reduce-scatter
    if any_z3 and fw.zero3_list_collectives:

        def view_copies(nbytes: Num, ranks: Num) -> Num:
            """One copy kernel per rank's view (each at least a kernel launch): the longer of
            the ranks' launches and the bytes; nothing where a unit holds no bytes."""
            launches = ranks * KERNEL_LAUNCH_S
            return _ge(nbytes, 1.0) * _max(launches, roof.stream_s(ZERO3_LIST_VIEW_COPIES * nbytes))

        # A gather also zero-fills its destination first.
        around_g = sum(
            roof.stream_s(ZERO3_LIST_ZERO_FILL * n) + view_copies(n, grp)
            for n, grp, _ in z3_ag_unit
        )
        around_r = sum(view_copies(n, grp) for n, grp, _ in z3_rs_unit)
    if any_z3 and fw.zero3_rank_loop:
        ranks = dense_shard + expert_shard if moe_frac else dense_shard
        around_g = around_g + ranks * EAGER_OP_HOST_S
    if any_z3 and (fw.zero3_list_collectives or fw.zero3_rank_loop):
        zg = z3_gather_layer + z3 * n_ag * around_g
        zrg = z3_regather_layer + z3 * (1.0 + regather) * n_ag * around_g
        zr = z3_reduce_layer + z3 * per_mb * gathers * around_r
        zb = zrg + zr
    ogr = fw.overlap_grad_reduce
    # A layer's exposed TP, CP and EP time stalls the compute stream, not the data-parallel
    # one: DP collectives keep running through those stalls, which lengthen the window they
    # hide in (else a faster GPU could expose more DP time than it saves). The forward pass
    # holds the collectives it runs in full (not overlapped: TP's forward gathers and
    # scatters or all-reduces, CP's K/V gather, EP's dispatch and combine) and, of what an
    # overlap pools over the layer's passes, the share of the compute it hides under that the
    # forward pass runs; the rest stalls the backward pass.
    cp_fwd = cp_exposed_layer * dense.attention_fwd / layer_attention if fw.cp_overlap else cp_ag[1]
    stall_fwd = 2.0 * ep_call + cp_fwd
    tp_pooled_fwd = tp_exposed_layer * layer_fwd_gemm / layer_gemm
    if fw.tp_comm_overlap:
        stall_fwd = stall_fwd + tp_pooled_fwd
    else:
        tp_fwd = _avg(fwd_link, moe_tp_fwd, moe_frac)
        stall_fwd = stall_fwd + _where(lay.overlap_tp, tp_pooled_fwd, tp_fwd)
    stall_bwd = tp_exposed_layer + cp_exposed_layer + ep_layer - stall_fwd
    # An eager MoE layer takes at least the host's time to issue it (Framework.moe_layer_host_s;
    # a full replay issues the forward again): the GPU waits out what the layer's own work,
    # compute and exposed collectives, leaves of it. Per layer of the stage, averaged over its
    # dense and MoE layers (the MoE layer's collectives as the stage's average, its all-to-alls
    # its own).
    host_layer: Num = 0.0
    host_floor = bool(moe_frac and fw.moe_layer_host_s and not fw.cuda_graphs)
    if host_floor:
        moe_comp = moe_fwd + moe_bwd + moe_replay
        moe_busy = moe_comp + tp_exposed_layer + cp_exposed_layer + ep_layer / moe_frac
        host_s = fw.moe_layer_host_s * (1.0 + full * HOST_FORWARD_SHARE)
        if fw.fp8_current_scaling and training.precision is _FP8:
            # Each local expert's GEMM inputs (again in a replay) and output gradients quantized
            # by kernels of their own (Framework.fp8_current_scaling; TE GroupedLinear).
            tensors = FP8_EXPERT_TENSORS_FORWARD * (1.0 + full) + FP8_EXPERT_TENSORS_BACKWARD
            launches = FP8_CURRENT_SCALING_QUANTIZE_KERNELS * tensors * model.moe_num_experts / ep
            host_s = host_s + launches * KERNEL_LAUNCH_S
        host_layer = moe_frac * _max(host_s - moe_busy, 0.0)
        # The data-parallel stream keeps running while the GPU waits.
        stall_fwd = stall_fwd + HOST_FORWARD_SHARE * host_layer
        stall_bwd = stall_bwd + (1.0 - HOST_FORWARD_SHARE) * host_layer
    # Host time every layer adds per micro-batch (Framework.layer_host_s: the GPU waits on the
    # host; a full replay issues the forward again). Not in the DP windows below.
    layer_host: Num = (
        fw.layer_host_s * (1.0 + full * HOST_FORWARD_SHARE) if fw.layer_host_s else 0.0
    )
    host_priced = host_floor or bool(fw.layer_host_s)
    window_fwd = layer_fwd + stall_fwd
    window_bwd = layer_bwd + stall_bwd
    window_bwd_replay = window_bwd + layer_replay
    # What is left of those windows for the gradient reduction and the parameter all-gather
    # once ZeRO-3's own gathers and reduce-scatters, on the same DP stream, have run in them.
    free_fwd = _max(window_fwd - z3_gather_layer, 0.0)
    free_bwd = _max(window_bwd - z3_bwd_layer, 0.0)

    def zero3_exposed(layers: Num) -> Num:
        """Gathers and reduce-scatters on the critical path of one micro-batch."""
        if not any_z3:
            return 0.0
        if not fw.fsdp_prefetch:
            return layers * (zg + zb)
        # The first layer's gather cannot be prefetched; later ones hide under the previous
        # layer's compute.
        rest = _max(layers - 1.0, 0.0)
        fwd = zg + rest * _max(zg - window_fwd, 0.0)
        if fw.fsdp_backward_prefetch == "post":
            # FSDP BACKWARD_POST: the next layer's gather is issued after this layer's gradient
            # computation and only its reduce-scatter overlaps the next one (PyTorch FSDP
            # BackwardPrefetch documentation): every backward gather is exposed.
            bwd = layers * zrg + zr
            bwd = bwd + rest * _max(zr - window_bwd_replay, 0.0)
            return fwd + bwd
        bwd = zb + rest * _max(zb - window_bwd_replay, 0.0)
        return fwd + bwd

    # --- the stages ----------------------------------------------------------------------------
    # Interleaved 1F1B overlaps its sends with compute when the framework does.
    p2p_overlapped = _gt(v, 1.0) if fw.overlap_p2p and _any(pp_count) else None

    def stage(
        layers: Num, dense_params: Num, with_logits: Num, with_embedding: float
    ) -> dict[str, Num]:
        comp = layers * layer_comp + with_logits * logits + accumulate(dense_params, layers)
        tp = layers * tp_exposed_layer + with_logits * logits_tp + with_embedding * emb_tp
        pp_exposed = pp_sends
        if p2p_overlapped is not None:
            pp_exposed = _where(p2p_overlapped, _max(pp_exposed - comp, 0.0), pp_exposed)
        pp = pp_exposed + pp_gather * ag
        dp_mb = zero3_exposed(layers) if any_z3 else 0.0
        if _any(reduce_each):
            dp_mb = dp_mb + _hide(reduce_each, layers * free_bwd, ogr)
        parts = {
            "compute": comp,
            "tp": tp,
            "cp": _times(layers, cp_exposed_layer),
            "pp": pp,
            "expert": _times(layers, ep_layer),
            "dp": dp_mb,
            "host": _times(layers, host_layer + layer_host) if host_priced else 0.0,
        }
        parts["total"] = comp + tp + parts["cp"] + pp + parts["expert"] + dp_mb
        if host_priced:
            parts["total"] = parts["total"] + parts["host"]
        parts["tp_link"] = (
            layers * tp_link_layer + with_logits * logits_tp_link + with_embedding * emb_tp
        )
        parts["layers"] = layers
        return parts

    single = 1.0 - has_pp
    first = stage(ctx.first_layers, first_dense, single, 1.0)
    mid = stage(ctx.mid_layers, mid_dense, 0.0, 0.0)
    last = stage(ctx.last_layers, last_dense, has_pp, 0.0)
    has_mid = _gt(p, 2.0)
    t_first, t_mid, t_last = first["total"], has_mid * mid["total"], has_pp * last["total"]
    first_paces = _ge(t_first, t_mid) * _ge(t_first, t_last)
    mid_paces = (1.0 - first_paces) * has_mid * _ge(t_mid, t_last)

    if type(first_paces) is _ARRAY or type(mid_paces) is _ARRAY:
        # Where the first stage paces, else where a middle one does, else the last (a
        # selection, so each layout gets its pacing stage's value to the bit; np.choose is
        # several times slower).
        first_sets = np.asarray(first_paces) != 0.0
        mid_sets = np.asarray(mid_paces) != 0.0

        def pace(key: str) -> Num:
            a, b_, c = first[key], mid[key], last[key]
            scalars = type(a) is not _ARRAY and type(b_) is not _ARRAY and type(c) is not _ARRAY
            if scalars and a == b_ == c:
                return a
            chosen: FloatArray = np.where(first_sets, a, np.where(mid_sets, b_, c))
            return chosen

    else:

        def pace(key: str) -> Num:
            return first[key] if first_paces else mid[key] if mid_paces else last[key]

    period = pace("total")
    chain = t_first + _max(p - 2.0, 0.0) * mid["total"] + t_last
    compute_mb = pace("compute")
    tp_mb = pace("tp")
    pp_mb = pace("pp")

    # The end of the iteration: gradient reduction (hidden under the last micro-batch's
    # backward pass when the framework overlaps it), the optimizer step over the parameters
    # this GPU owns, the parameter all-gather (under the next forward pass when overlapped).
    layers_pace = pace("layers")
    stage_bwd = layers_pace * free_bwd
    stage_fwd = layers_pace * free_fwd
    reduce_exposed = _hide(reduce_link, stage_bwd, ogr)
    if not ogr:
        reduce_exposed = _where(lay.overlap_dp, _max(reduce_link - stage_bwd, 0.0), reduce_link)
    if fw.pp_grad_reduce_after_schedule:
        reduce_exposed = _where(has_pp, reduce_link, reduce_exposed)
    gather_exposed = _hide(gather_link, stage_fwd, fw.overlap_param_gather)
    sharded = 1.0 - z0
    owned = dense_gpu / _where(sharded, dense_shard, 1.0)
    if moe_frac:
        owned = owned + expert_gpu / _where(sharded, expert_shard, 1.0)
    opt_bytes = fw.optimizer_bytes_per_parameter
    if training.precision is _FP16 and opt_bytes:
        opt_bytes = opt_bytes + FP16_UNSCALE_BYTES
    opt_stream = owned * opt_bytes
    if bf16_opt:
        # BF16_Optimizer: the norm and zeroing run over the whole stage's fp32 gradient, and
        # the all-reduce buckets copy it (frameworks.py, BF16_OPTIMIZER_WHOLE_BYTES).
        whole = dense_gpu + (expert_gpu if moe_frac else 0.0)
        moved = owned * min(opt_bytes, BF16_OPTIMIZER_SHARD_EXCLUDED_BYTES)
        opt_stream = opt_stream + z1 * (whole * BF16_OPTIMIZER_WHOLE_BYTES - moved)
    optimizer = roof.stream_s(opt_stream)

    tied = 1.0 if model.tied_embeddings else 0.0
    # The tied embedding's gradient: fp32 under BF16_Optimizer (it reduces ``weight._hp_grad``).
    emb_size = (4.0 if bf16_opt else beta_g) * vocab * h / t
    emb_sync = pricer.time(
        _EMBEDDING_SYNC, _ALL_REDUCE, pp_ranks, ctx.nodes_pp, emb_size, tied * has_pp
    )
    emb_sync_s = tied * has_pp * emb_sync[1]

    terms: dict[str, Num] = {
        "compute": m * compute_mb,
        "tp": m * tp_mb,
        "cp": m * pace("cp"),
        "pp": m * pp_mb,
        "dp": m * pace("dp") + reduce_exposed + gather_exposed,
        "bubble": (chain - period) / v,
        "embedding_sync": emb_sync_s,
        "expert": m * pace("expert"),
        "optimizer": optimizer,
        "host": m * pace("host") if host_priced else 0.0,
    }
    # On-link time of the critical stage's collectives, exposed or hidden.
    dp_link_mb = layers_pace * (z3_gather_layer + z3_bwd_layer) + reduce_each
    link_s: dict[str, Num] = {
        "tp": m * pace("tp_link"),
        "cp": m * layers_pace * cp_link_layer,
        "pp": m * pp_link,
        "dp": m * dp_link_mb + reduce_link + gather_link,
        "embedding_sync": emb_sync_s,
        "expert": m * layers_pace * ep_link_layer,
    }

    # The critical stage's collectives, as the provider was asked (counts per micro-batch or
    # per iteration). A collective no layout runs (priced ``_NEVER``) is not recorded, so its
    # count is not even computed.
    with_logits = _where(first_paces, single, _where(mid_paces, 0.0, has_pp))
    with_emb = first_paces
    rec = pricer.record
    tpk, nt = _TP, ctx.nodes_tp
    if tp_ar is not _NEVER:
        rec(
            tpk,
            _ALL_REDUCE,
            t,
            nt,
            s_act,
            tp_ar,
            layers_pace * ar_layer + no_sp * (with_logits + with_emb),
            True,
        )
    if tp_rs is not _NEVER:
        rec(
            tpk,
            _REDUCE_SCATTER,
            t,
            nt,
            s_act,
            tp_rs,
            layers_pace * (rs_layer - moe_frac * _times(sp, 2.0 + full - skipped_ar))
            + sp * (with_logits + with_emb),
            True,
        )
    if tp_ag is not _NEVER or tp_ag_layer is not _NEVER:
        layer_ags = layers_pace * (ag_layer - moe_frac * mlp_ag_count)
        edge_ags = sp * ((1.0 + sp_regather) * with_logits + with_emb)
        if fp8_gather:
            rec(tpk, _ALL_GATHER, t, nt, s_act / beta, tp_ag_layer, layer_ags, True)
            rec(tpk, _ALL_GATHER, t, nt, s_act, tp_ag, edge_ags, True)
        else:
            rec(tpk, _ALL_GATHER, t, nt, s_act, tp_ag, layer_ags + edge_ags, True)
    if moe_ag is not _NEVER or moe_rs is not _NEVER:
        moe_calls = layers_pace * moe_frac * tp_dispatch * (2.0 + full)
        routed_bytes = float(model.moe_top_k) * s_act
        rec(tpk, _ALL_GATHER, t, nt, routed_bytes, moe_ag, moe_calls, True)
        rec(tpk, _REDUCE_SCATTER, t, nt, routed_bytes, moe_rs, moe_calls, True)
    if cp_ag is not _NEVER:
        rec(_CP, _ALL_GATHER, cp, ctx.nodes_cp, kv_bytes, cp_ag, layers_pace * (2.0 + full), True)
    if cp_rs is not _NEVER:
        op, size, calls = cp_back
        rec(_CP, op, cp, ctx.nodes_cp, size, cp_rs, layers_pace * calls, True)
    if whole_grads:
        for size, priced in ((send_bytes, pp_send), (grad_bytes, pp_send_g)):
            if priced is not _NEVER:
                rec(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, size, priced, 0.5 * pp_count, True)
    elif pp_send is not _NEVER:
        rec(_PP, _SENDRECV, pp_ranks, ctx.nodes_pp, send_bytes, pp_send, pp_count, True)
    if tp_ag is not _NEVER:
        rec(tpk, _ALL_GATHER, t, nt, s_act, tp_ag, pp_gather, True, term="pp")
    for (n, grp, nodes), ar_, rs_, ag_ in zip(dp_groups, dp_ar, dp_rs, dp_ag, strict=True):
        if ar_ is not _NEVER:
            rec(_DP, _ALL_REDUCE, grp, nodes, beta_g * n, ar_, ar_once, False)
        if rs_ is not _NEVER:
            rec(_DP, _REDUCE_SCATTER, grp, nodes, beta_g * n, rs_, rs_once + rs_each * m, False)
        if ag_ is not _NEVER:
            rec(_DP, _ALL_GATHER, grp, nodes, beta_p * n, ag_, z1 + z2_stage, False)
    if any_z3:
        for (n, grp, nodes), (n_g, _, _), ag_, rs_ in zip(
            z3_rs_unit, z3_ag_unit, z3_ag, z3_rs, strict=True
        ):
            if ag_ is not _NEVER:
                calls = n_ag * layers_pace * (per_layer + z3 * (1.0 + regather))
                rec(_DP, _ALL_GATHER, grp, nodes, n_g, ag_, calls, True)
            if rs_ is not _NEVER:
                calls = per_layer * per_mb * gathers * layers_pace
                rec(_DP, _REDUCE_SCATTER, grp, nodes, n, rs_, calls, True)
    if emb_sync is not _NEVER:
        rec(
            _EMBEDDING_SYNC,
            _ALL_REDUCE,
            pp_ranks,
            ctx.nodes_pp,
            emb_size,
            emb_sync,
            tied * has_pp,
            False,
        )
    if ep_a2a is not _NEVER or ep_nvlink is not _NEVER:
        calls = layers_pace * moe_frac * (4.0 + 2.0 * full)
        scope = "across_nodes" if flex else "group"  # flex: the RDMA leg, then the NVLink one
        rec(_EXPERT, _ALLTOALL, ep, ctx.nodes_ep, a2a_bytes, ep_a2a, calls, True, scope=scope)
        rec(
            _EXPERT, _ALLTOALL, ep_per_node, 1.0, nvlink_bytes, ep_nvlink, calls, True,
            scope="within_node",
        )  # fmt: skip

    # Positional, in field order (keywords cost as much as the record itself).
    return KernelResult(
        terms,
        link_s,
        m,  # micro_batches
        compute_mb,  # compute_mb_s
        tp_mb,  # tp_mb_s
        pp_mb,  # pp_mb_s
        pricer.calls,
        total_params,  # parameters
        dense_gpu + expert_gpu,  # gpu_parameters
        0.0,  # model_flops (evaluate's)
        0.0,  # hardware_flops (evaluate's)
        dense_gpu,  # dense_gpu_parameters
        expert_gpu,  # expert_gpu_parameters
        {},  # memory (evaluate's)
        {"first": first, "mid": mid, "last": last},  # stages
        m * period + terms["bubble"],  # pipeline_s
        (layer_fwd, layer_replay, layer_bwd),  # compute_split
        # tp_split: 2 TP collectives forward, 2 more in a full replay (1 if it stops before
        # FC2), 2 backward (SC21 §2.3)
        (2.0 + 0.0 * p, 2.0 * full - skipped_avg, 2.0 + 0.0 * p),
    )


def _attention_ln_parameters(model: ModelSpec) -> float:
    h, hq, kv = float(model.hidden_size), float(model.attention_width), float(model.kv_hidden)
    return h * (hq + 2.0 * kv) + (hq + 2.0 * kv) + hq * h + h + 4.0 * h


def _memory(
    model: ModelSpec,
    training: TrainingSpec,
    lay: LayoutVars,
    m: Num,
    dense_params: Num,
    expert_params: Num,
    capacity: float | None,
    first_layers: Num,
    last_layers: Num,
    expert_shard: Num,
) -> dict[str, Num]:
    """Bytes per GPU on the most loaded stage (Korthikanti et al. 2022 §4, Table 2).

    Mixed-precision Adam: weights β, fp32 main gradients 4, fp32 master + m + v 12 bytes per
    parameter (fp32 training: 4 + 4 + 8). ZeRO 1 shards the optimizer over the DP group,
    2 also the gradients, 3 also the weights (expert parameters over ``expert_shard`` ranks).
    Activations: the first stage's micro-batches in flight, or the last stage's one with the
    loss's logits (``LOGITS_PEAK_BYTES``, vocabulary-parallel over t), whichever holds more;
    under full recompute the layer being replayed holds its whole activations on top.
    """
    fp32 = training.precision in (_FP32, _TF32)
    w_bytes = float(BYTES_PER_ELEMENT[training.precision])
    g_bytes, o_bytes = 4.0, 8.0 if fp32 else 12.0
    p, t, d, b, v, cp = lay.p, lay.t, lay.d, lay.b, lay.v, lay.cp
    zero = lay.zero
    dense_shard = d * cp
    z1, z2, z3 = _gt(zero, 0.0), _gt(zero, 1.0), _gt(zero, 2.0)

    def sharded(count: Num, per: float, on: Num) -> Num:
        return per * (count * (1.0 - on) + count / dense_shard * on)

    def sharded_e(count: Num, per: float, on: Num) -> Num:
        return per * (count * (1.0 - on) + count / expert_shard * on)

    weights = sharded(dense_params, w_bytes, z3)
    grads = sharded(dense_params, g_bytes, z2)
    optim = sharded(dense_params, o_bytes, z1)
    if type(expert_params) is _ARRAY or expert_params != 0.0:
        weights = weights + sharded_e(expert_params, w_bytes, z3)
        grads = grads + sharded_e(expert_params, g_bytes, z2)
        optim = optim + sharded_e(expert_params, o_bytes, z1)

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
    # Q, K, V and the projection's input at the heads' width (kv_channels; 0 when it is h).
    # Q, K, V and the projection's input at the heads' width; the FFN-width tensors at the
    # MLP's (or the experts' routed copies'), averaged over the stage's dense and MoE layers.
    moe_frac = float(model.num_moe_layers) / float(model.num_layers)
    ffn: Num = ffn_width_sbh(model, False)
    if moe_frac:
        ffn = _avg(ffn, ffn_width_sbh(model, True), moe_frac)
    wide = (float(model.attention_width) / h - 1.0) * ATTENTION_WIDTH_SBH + ffn - FFN_WIDTH_SBH

    def table2(stored_attn: Num) -> Num:
        """A layer's activations per Table 2, with the s² term it stores."""
        no_sp = sbh * (10.0 + (24.0 + wide) / t + stored_attn / t)
        with_sp = sbh / t * (34.0 + wide + stored_attn)
        return _where(sp, with_sp, no_sp)

    per_layer = table2((1.0 - selective) * attn)
    if training.software.selective_recompute == "op-sac":
        dense_wide, dense_sharded = op_sac_sbh(model, False)
        moe_wide, moe_sharded = op_sac_sbh(model, True)
        kept = sbh * (
            _avg(dense_wide, moe_wide, moe_frac) / _where(sp, t, 1.0)
            + _avg(dense_sharded, moe_sharded, moe_frac) / t
        )
        per_layer = _where(selective, kept, per_layer)
    # Full recompute keeps each layer's input; the layer being replayed, one at a time, holds
    # all of its activations (Table 2 without recompute) until its backward pass is done.
    kept_input = 2.0 * sbh / _where(sp, t, 1.0)
    replayed = training.recompute_num_layers
    if replayed is None:
        replaying = full * table2(attn)
        per_first = per_last = _where(full, kept_input, per_layer)
    else:
        # Block recompute: each stage's replayed share keeps its inputs, the rest everything.
        n = float(replayed)
        replaying = full * _gt(n, 0.0) * table2(attn)
        share_first = full * block_share(n, first_layers / v)
        share_last = full * block_share(n, last_layers / v)
        per_first = share_first * kept_input + (1.0 - share_first) * per_layer
        per_last = share_last * kept_input + (1.0 - share_last) * per_layer
    in_flight = _min(p, m) * (1.0 + (p - 1.0) / (p * v) * _gt(v, 1.0))
    logits = LOGITS_PEAK_BYTES * s * b * float(model.vocab_size) / t
    first = per_first * first_layers * in_flight + replaying
    last = per_last * last_layers + replaying + logits
    activations = _where(_gt(p, 1.0), _max(first, last), first + logits)
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
