"""One estimate: the kernel on scalars, wrapped in typed results with provenance."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Literal

from estimator.bandwidth import (
    BandwidthAnswer,
    BandwidthProvider,
    Collective,
    TrafficKind,
    bus_factor,
)
from estimator.calibrated import (
    FINE_GRAINED_MOE_ACCURACY,
    VALIDATED_ACCURACY,
    VALIDATED_ACCURACY_FINE_GRAINED_MOE,
    VALIDATED_BY_MODEL,
    ModelAccuracy,
    ValidatedAccuracy,
    runs_fitted_compute,
)
from estimator.compute import (
    LOGITS_PEAK_BYTES,
    TRITON_FLASH_BACKWARD_SLOWDOWN,
    TRITON_FLASH_FORWARD_SLOWDOWN,
    flash_head_dim,
    tensor_core_aligned,
)
from estimator.frameworks import (
    EAGER_OP_HOST_S,
    EP_OVERLAP_HIDDEN_SHARE,
    FRAMEWORK_PRESETS,
    KERNEL_LAUNCH_S,
    trainer_kind,
)
from estimator.kernel import TERMS, Call, KernelResult, LayoutVars, block_share, evaluate
from estimator.specs import (
    RECOMPUTE_CODE,
    ClusterSpec,
    Fidelity,
    ModelSpec,
    MoeDispatcher,
    Precision,
    Recompute,
    Scenario,
    TrainingSpec,
)
from estimator.traffic import (
    Algorithm,
    CollectiveLoad,
    Placement,
    SparseTraffic,
    traffic_matrix,
)

# The estimate's records are plain (not frozen) slotted dataclasses: an estimate builds five
# of them and one per collective, and a frozen dataclass's ``__init__`` sets every field through
# ``object.__setattr__`` (about a twentieth of a single estimate for these 35 fields).


@dataclass(slots=True)
class Breakdown:
    """Exposed seconds per named term; the iteration time is their sum (docs/design.md §4)."""

    compute_s: float
    tp_s: float
    cp_s: float
    pp_s: float
    dp_s: float
    bubble_s: float
    embedding_sync_s: float
    expert_s: float
    optimizer_s: float = 0.0  # the optimizer step (detailed fidelity)
    # The GPU waiting on the host to issue eager MoE layers (Framework.moe_layer_host_s).
    host_s: float = 0.0

    @property
    def iteration_s(self) -> float:
        return (
            self.compute_s
            + self.tp_s
            + self.cp_s
            + self.pp_s
            + self.dp_s
            + self.bubble_s
            + self.embedding_sync_s
            + self.expert_s
            + self.optimizer_s
            + self.host_s
        )

    @property
    def communication_s(self) -> float:
        return self.tp_s + self.cp_s + self.pp_s + self.dp_s + self.embedding_sync_s + self.expert_s

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, field) for name, field in _TERM_FIELDS}


_TERM_FIELDS = tuple((name, f"{name}_s") for name in TERMS)
_KIND_VALUES = tuple(kind.value for kind in TrafficKind)


@dataclass(slots=True)
class CollectiveUse:
    """One collective of the iteration: what the bandwidth provider was asked and answered.

    ``method`` and ``source`` (the answer's provenance) are asked of the provider when first
    read, not while estimating: most callers of the engine (sweeps, fits, checks) never read
    them, and the explanation costs more than the number.
    """

    kind: TrafficKind  # the group it runs over (and whose bandwidth it gets)
    term: str  # the breakdown term its time is charged to
    op: Collective
    ranks: int
    nodes: int
    size_bytes: float
    calls_per_iteration: float
    busbw_gbps: float
    time_per_call_s: float
    link_time_s: float
    provider: BandwidthProvider = field(repr=False, compare=False)
    _answer: list[BandwidthAnswer] = field(default_factory=list, repr=False, compare=False)
    # Which of its group's members exchange bytes (``estimator.traffic.SCOPES``): "group";
    # a flex MoE dispatch's RDMA leg, "across_nodes" (priced on the whole group's placement,
    # sized so its off-node share is what crosses), and its NVLink leg, "within_node".
    scope: str = "group"

    @property
    def members(self) -> int:
        """Ranks that exchange its bytes: the nodes for an across-nodes leg, else its ranks."""
        return self.nodes if self.scope == "across_nodes" else self.ranks

    def explain(self) -> BandwidthAnswer:
        """The provider's answer for this collective, with its provenance (asked once)."""
        if not self._answer:
            self._answer.append(
                self.provider.explain(self.kind, self.op, self.ranks, self.nodes, self.size_bytes)
            )
        return self._answer[0]

    @property
    def method(self) -> str:
        """How the bandwidth was obtained (fixed, measured, interpolated, ..., nominal)."""
        return self.explain().method

    @property
    def quality(self) -> BandwidthAnswer:
        """The provider's answer, read for how far it is from data (distance to measured
        sizes, derived placement or collective, weak, advice)."""
        return self.explain()

    @property
    def source(self) -> str:
        """Which run or figure the bandwidth came from."""
        return self.explain().source

    @property
    def bytes_per_iteration(self) -> float:
        """Bytes this GPU sends for it per iteration (bus factor · S · calls)."""
        return (
            float(bus_factor(self.op, float(self.members)))
            * self.size_bytes
            * (self.calls_per_iteration)
        )


@dataclass(slots=True)
class Throughput:
    tokens_per_s: float
    model_tflops_per_gpu: float  # no recompute counted (MFU's convention, PaLM)
    hardware_tflops_per_gpu: float  # recomputed FLOPs counted too
    mfu: float
    hfu: float


@dataclass(slots=True)
class Memory:
    """Bytes per GPU on the most loaded stage (Korthikanti et al. 2022 accounting)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    total_bytes: float
    capacity_bytes: float | None

    @property
    def fits(self) -> bool | None:
        return None if self.capacity_bytes is None else self.total_bytes <= self.capacity_bytes


@dataclass(slots=True)
class Estimate:
    """Everything one estimate says."""

    scenario: Scenario
    micro_batches: int
    breakdown: Breakdown
    link_s: dict[str, float]
    throughput: Throughput
    memory: Memory
    parameters: float
    gpu_parameters: float
    model_flops: float
    hardware_flops: float
    # How the detailed model did on published runs of this kind of trainer, out of sample
    # (estimator.calibrated); None where the estimate is not that model (``validated_for``).
    validated: ValidatedAccuracy | None = None
    # The kernel's collectives of the critical stage, from which ``collectives`` and
    # ``traffic_bytes`` are built when first read.
    calls: list[Call] = field(default_factory=list, repr=False)
    # What is built when first read: the per-collective records and traffic (``collectives``,
    # ``traffic_bytes``) and the words (``assumptions``, ``warnings``). Each follows from the
    # fields above, and most callers in process (fits, checks, loops of estimates) read only
    # the time and its terms: together they cost about a sixth of an estimate.
    _records: list[tuple[list[CollectiveUse], dict[str, float]]] = field(
        default_factory=list, repr=False, compare=False
    )
    _text: list[tuple[list[str], list[str]]] = field(
        default_factory=list, repr=False, compare=False
    )

    @property
    def collectives(self) -> list[CollectiveUse]:
        """Every collective of the critical stage: what the bandwidth provider was asked and
        answered, how often it runs and its time on the link."""
        return self._recorded()[0]

    @property
    def traffic_bytes(self) -> dict[str, float]:
        """Bytes this GPU sends per iteration, per kind of traffic (critical stage)."""
        return self._recorded()[1]

    def _recorded(self) -> tuple[list[CollectiveUse], dict[str, float]]:
        if not self._records:
            self._records.append(
                _collective_uses(self.calls, float(self.micro_batches), self.scenario)
            )
        return self._records[0]

    @property
    def assumptions(self) -> list[str]:
        """Every modelling choice behind this estimate, in words a user can check."""
        return self._written()[0]

    @property
    def warnings(self) -> list[str]:
        """What the user should know before trusting this estimate (layout, host-bound MoE
        layers, a kind of trainer whose published runs missed the accuracy target)."""
        return self._written()[1]

    def _written(self) -> tuple[list[str], list[str]]:
        if not self._text:
            self._text.append(
                (
                    assumptions(self.scenario, self.validated),
                    _warnings(self.scenario, self.validated, self.breakdown),
                )
            )
        return self._text[0]

    @property
    def iteration_time_range_s(self) -> tuple[float, float] | None:
        """Where the measured iteration time would fall if this estimate erred as the middle
        80 % of published runs of its kind of trainer did (``validated``), widened for MoE
        with experts narrower than the model to the span of such runs' errors; None without
        ``validated``."""
        if self.validated is None:
            return None
        low, high = self.validated.measured_range_s(self.iteration_time_s)
        fine = self.validated.fine_grained_moe
        if fine is not None:
            fine_low, fine_high = fine.measured_range_s(self.iteration_time_s)
            low, high = min(low, fine_low), max(high, fine_high)
        return low, high

    @property
    def iteration_time_s(self) -> float:
        return self.breakdown.iteration_s

    @property
    def communication_ratio(self) -> float:
        return self.breakdown.communication_s / self.iteration_time_s

    @property
    def bubble_ratio(self) -> float:
        return self.breakdown.bubble_s / self.iteration_time_s


def layout_vars(scenario: Scenario) -> LayoutVars:
    """The scenario's layout as the kernel's scalar inputs."""
    lay, tr = scenario.layout, scenario.training
    # Positional, in field order (keywords cost as much as the record itself).
    return LayoutVars(
        float(lay.pipeline),  # p
        float(lay.tensor),  # t
        float(lay.data),  # d
        float(tr.micro_batch_size),  # b
        float(lay.virtual_stages),  # v
        float(lay.context_parallel),  # cp
        float(lay.expert_parallel),  # ep
        1.0 if lay.experts_folded else 0.0,  # ef
        float(RECOMPUTE_CODE[tr.recompute]),  # recompute
        1.0 if lay.sequence_parallel else 0.0,  # sp
        float(lay.zero_stage),  # zero
        1.0 if lay.scatter_gather else 0.0,  # sg
        1.0 if lay.overlap_dp else 0.0,  # overlap_dp
        1.0 if lay.overlap_tp else 0.0,  # overlap_tp
        float(lay.first_stage_layers or 0),  # first_layers
        float(lay.last_stage_layers or 0),  # last_layers
    )


def run_kernel(scenario: Scenario) -> KernelResult:
    """The kernel on one scenario (scalars in, scalars out)."""
    c = scenario.cluster
    return evaluate(
        scenario.model,
        scenario.training,
        layout_vars(scenario),
        gpus_per_node=c.gpus_per_node,
        peak_flops=c.peak_flops,
        utilization=c.utilization,
        bandwidth=c.bandwidth,
        fidelity=scenario.fidelity,
        rank_order=scenario.layout.rank_order,
        gpu_memory_bytes=c.gpu_memory_bytes,
        memory_bandwidth_gbps=c.memory_bandwidth_gbps,
        memory_traffic_factor=c.memory_traffic_factor,
        gemm_traffic_factor=c.gemm_traffic_factor,
        fp8_utilization=c.fp8_utilization,
        flash2_efficiency=c.flash2_efficiency,
        gemm_half_size_elements=c.gemm_half_size_elements,
        cuda_core_peak_flops=c.cuda_core_peak_flops,
        fp8_expert_utilization=c.fp8_expert_utilization,
    )


def _collective_uses(
    calls: list[Call], m: float, scenario: Scenario
) -> tuple[list[CollectiveUse], dict[str, float]]:
    """The kernel's collectives as records, and the bytes this GPU sends per kind of traffic."""
    uses: list[CollectiveUse] = []
    traffic: dict[str, float] = dict.fromkeys(_KIND_VALUES, 0.0)
    provider = scenario.cluster.bandwidth
    for call in calls:
        count = float(call.count) * (m if call.per_microbatch else 1.0)
        ranks = int(call.ranks)
        size = float(call.size_bytes)
        if count == 0.0 or ranks <= 1 or size == 0.0:
            continue
        per_call = float(call.time_per_call_s)
        # Positional, in field order (keywords cost as much as the record itself).
        use = CollectiveUse(
            call.kind,
            call.term,
            call.op,
            ranks,
            int(call.nodes),  # nodes
            size,  # size_bytes
            count,  # calls_per_iteration
            float(call.busbw_gbps),
            per_call,  # time_per_call_s
            per_call * count,  # link_time_s
            provider,
            [],  # _answer
            call.scope,
        )
        uses.append(use)
        # A StrEnum member hashes and compares as its value (``.value`` is a slow property).
        traffic[call.kind] += use.bytes_per_iteration
    return uses, traffic


def estimate(scenario: Scenario) -> Estimate:
    """Iteration time, its named terms, traffic, memory and throughput for one scenario."""
    k = run_kernel(scenario)
    terms = k.terms
    breakdown = Breakdown(
        float(terms["compute"]),
        float(terms["tp"]),
        float(terms["cp"]),
        float(terms["pp"]),
        float(terms["dp"]),
        float(terms["bubble"]),
        float(terms["embedding_sync"]),
        float(terms["expert"]),
        float(terms["optimizer"]),
        float(terms["host"]),
    )
    t_iter = breakdown.iteration_s
    gpus = scenario.layout.gpus
    peak = scenario.cluster.peak_flops
    model_tflops = k.model_flops / (t_iter * gpus) / 1e12
    hardware_tflops = float(k.hardware_flops) / (t_iter * gpus) / 1e12
    throughput = Throughput(
        tokens_per_s=scenario.training.global_batch_size * scenario.model.seq_length / t_iter,
        model_tflops_per_gpu=model_tflops,
        hardware_tflops_per_gpu=hardware_tflops,
        mfu=model_tflops * 1e12 / peak,
        hfu=hardware_tflops * 1e12 / peak,
    )
    mem = k.memory
    memory = Memory(
        weights_bytes=float(mem["weights"]),
        gradients_bytes=float(mem["gradients"]),
        optimizer_bytes=float(mem["optimizer"]),
        activations_bytes=float(mem["activations"]),
        total_bytes=float(mem["total"]),
        capacity_bytes=float(mem["capacity"]) if "capacity" in mem else None,
    )
    return Estimate(
        scenario=scenario,
        micro_batches=scenario.micro_batches,
        breakdown=breakdown,
        link_s={key: float(value) for key, value in k.link_s.items()},
        throughput=throughput,
        memory=memory,
        parameters=k.parameters,
        gpu_parameters=float(k.gpu_parameters),
        model_flops=k.model_flops,
        hardware_flops=float(k.hardware_flops),
        validated=validated_for(scenario),
        calls=k.calls,
    )


def validated_for(scenario: Scenario) -> ValidatedAccuracy | None:
    """The out-of-sample accuracy of published runs of the scenario's kind of trainer, when the
    scenario runs the model `commest validate` scores: detailed fidelity, a framework preset at
    its own compute speed and host times (``compute_efficiency``; ``layer_host_s`` and
    ``moe_layer_host_s``: fitted constants of the DeepSpeed and Megatron-Core presets) and a
    GPU family's fitted compute constants (estimator.calibrated); else None. A model whose
    experts are narrower than itself carries those runs' figures too (``fine_grained_moe``), and
    a model commest was validated on under this kind of trainer its own runs' (``same_model``)."""
    if scenario.fidelity is not Fidelity.DETAILED:
        return None
    fw = scenario.training.software
    kind = trainer_kind(fw.name)
    c = scenario.cluster
    if kind is None:
        return None
    preset = FRAMEWORK_PRESETS[fw.name]
    if (fw.compute_efficiency, fw.layer_host_s, fw.moe_layer_host_s) != (
        preset.compute_efficiency,
        preset.layer_host_s,
        preset.moe_layer_host_s,
    ):
        return None
    if not runs_fitted_compute(
        c.utilization,
        c.memory_traffic_factor,
        c.gemm_traffic_factor,
        c.gemm_half_size_elements,
        c.fp8_utilization,
        fp8=scenario.training.precision is Precision.FP8,
        fp8_expert_utilization=c.fp8_expert_utilization,
        moe=scenario.model.is_moe,
    ):
        return None
    model = scenario.model
    acc = (VALIDATED_ACCURACY_FINE_GRAINED_MOE if model.fine_grained_moe else VALIDATED_ACCURACY)[
        kind
    ]
    same = VALIDATED_BY_MODEL.get((kind, model.architecture))
    return acc if same is None else _with_same_model(acc, same)


@functools.cache
def _with_same_model(acc: ValidatedAccuracy, same: ModelAccuracy) -> ValidatedAccuracy:
    """A kind's accuracy with its runs of one model beside it (one object per pair)."""
    return replace(acc, same_model=same)


# Share of the iteration the GPU may wait on the host before the estimate says so.
HOST_BOUND_WARNING_SHARE = 0.05


def _warnings(
    scenario: Scenario, acc: ValidatedAccuracy | None, breakdown: Breakdown | None = None
) -> list[str]:
    """The scenario's layout warnings, a host-bound MoE layer, and how far published runs of
    its kind of trainer were off when that is beyond the validation target."""
    out = list(scenario.warnings)
    fw = scenario.training.software
    if (
        breakdown is not None
        and breakdown.host_s > HOST_BOUND_WARNING_SHARE * breakdown.iteration_s
    ):
        waits = (
            f"the GPU waits {breakdown.host_s:.3g} s of the {breakdown.iteration_s:.3g} s "
            "iteration on the host"
        )
        if fw.layer_host_s:
            out.append(
                f"host time: {waits} ({fw.layer_host_s * 1e3:g} ms per layer and micro-batch, "
                "layer_host_s); fewer, larger micro-batches spread it over more tokens"
            )
        if fw.moe_layer_host_s and not fw.cuda_graphs and scenario.model.is_moe:
            out.append(
                f"host-bound: {waits} issuing eager MoE layers "
                f"({fw.moe_layer_host_s * 1e3:g} ms per layer and micro-batch, "
                "moe_layer_host_s); with the MoE router and preprocessing captured in CUDA "
                "graphs (framework override cuda_graphs) none is priced"
            )
    if acc is not None and acc.misses_target:
        out.append(_accuracy_warning(scenario.training.software.name, acc))
    if scenario.model.fine_grained_moe:
        out.append(_FINE_GRAINED_MOE_WARNING)
    elif acc is not None and acc.same_model is not None and acc.same_model.misses_target:
        out.append(_same_model_warning(acc.same_model))
    return out


@functools.lru_cache(maxsize=64)
def _same_model_warning(same: ModelAccuracy) -> str:
    """The warning of a model whose own published runs missed the target."""
    return (
        f"this model ({same.model}): its {same.runs} published {same.trainer_kind} run(s) were "
        f"predicted {same.min_error_pct:+.1f} % to {same.max_error_pct:+.1f} % off (mean |error| "
        f"{same.mean_abs_error_pct:.1f} %, out of sample; commest validate --model "
        f"{same.model.split(' / ')[0]} --kind {same.trainer_kind}): read this estimate with that "
        "margin"
    )


_FINE_GRAINED_MOE_WARNING = (
    "experts narrower than the model (moe_ffn_hidden_size < hidden_size: many small expert "
    f"GEMMs): the {FINE_GRAINED_MOE_ACCURACY.runs} such published runs commest is validated on "
    f"were predicted {FINE_GRAINED_MOE_ACCURACY.min_error_pct:+.0f} % to "
    f"{FINE_GRAINED_MOE_ACCURACY.max_error_pct:+.0f} % off (mean |error| "
    f'{FINE_GRAINED_MOE_ACCURACY.mean_abs_error_pct:.0f} %, out of sample; README "Accuracy"); '
    "an eager layer's host time is a floor fitted on one such model's eager runs (Qwen3-30B-A3B, "
    "BF16 and FP8); the FP8 experts' per-expert "
    "casts' host work around each launch and the host time a partial CUDA-graph capture leaves "
    "are not modelled, and an overlapped all-to-all hides one measured share of its time "
    f"({EP_OVERLAP_HIDDEN_SHARE * 100:.2f} %), which the published runs do not pin down"
)


_MEMORY_ASSUMPTION = (
    "memory: mixed-precision Adam (2+4+12 bytes/parameter), activations per "
    "Korthikanti et al. 2022 Table 2 on the first stage with min(p, m) micro-batches "
    f"in flight, or on the last with one and the loss's logits ({LOGITS_PEAK_BYTES:g} B per "
    "logit: the 16-bit logits, their fp32 log-softmax and its gradient), whichever holds "
    "more; full recompute adds the layer being replayed; allocator reserve, communication "
    "buffers and FSDP's gathered layers not counted"
)


@functools.lru_cache(maxsize=128)
def _accuracy_line(acc: ValidatedAccuracy | None) -> str:
    """The ``assumptions`` line: the accuracy the estimate can claim, or why it claims none."""
    if acc is None:
        return (
            "not validated: commest validate scores the detailed model with a framework preset "
            "at its own compute speed and a GPU family's fitted compute constants (u, γ, c, x0, "
            "and u8 for FP8); this estimate's differ, so no published accuracy applies to it"
        )
    line = (
        f"validated: {acc.runs} published {acc.trainer_kind} runs predicted "
        f"{acc.mean_abs_error_pct:.1f} % off on average (mean signed error "
        f"{acc.mean_error_pct:+.1f} %), out of sample (commest validate)"
    )
    fine = acc.fine_grained_moe
    if fine is not None:
        line = (
            f"{line}; the {fine.runs} published runs whose experts are narrower than the model, "
            f"as here, {fine.mean_abs_error_pct:.1f} % off on average ({fine.min_error_pct:+.1f} "
            f"% to {fine.max_error_pct:+.1f} %)"
        )
    same = acc.same_model
    if same is not None:
        line = (
            f"{line}; the {same.runs} of this model ({same.model}) "
            f"{same.mean_abs_error_pct:.1f} % off on average ({same.min_error_pct:+.1f} % to "
            f"{same.max_error_pct:+.1f} %)"
        )
    return line


@functools.lru_cache(maxsize=32)
def _accuracy_warning(framework_name: str, acc: ValidatedAccuracy) -> str:
    """The warning of a kind that misses the target: the direction of its error only when the
    error has one (the signed mean is more than half of the mean |error|)."""
    where = (
        f"framework {framework_name!r}: the {acc.runs} published {acc.trainer_kind} runs "
        "commest is validated on were predicted "
    )
    tail = f'(mean |error| {acc.mean_abs_error_pct:.1f} %, out of sample; README "Accuracy")'
    if abs(acc.mean_error_pct) > 0.5 * acc.mean_abs_error_pct:
        fast = acc.mean_error_pct < 0
        return (
            f"{where}{abs(acc.mean_error_pct):.1f} % too {'fast' if fast else 'slow'} on "
            f"average {tail}: read this estimate as {'optimistic' if fast else 'pessimistic'}"
        )
    return (
        f"{where}{acc.mean_abs_error_pct:.1f} % off on average, in either direction {tail}: "
        "read this estimate with that margin"
    )


def assumptions(
    scenario: Scenario, validated: ValidatedAccuracy | Literal[False] | None = False
) -> list[str]:
    """Every modelling choice behind this estimate, in words a user can check (``validated``:
    ``validated_for(scenario)`` when the caller has it already)."""
    lay, tr, model = scenario.layout, scenario.training, scenario.model
    out: list[str] = []
    if scenario.fidelity is Fidelity.PAPER:
        out += [
            "fidelity=paper: the seed's formulation (Li et al., APNet 2024; docs/design.md "
            "§4.2) with scalar u and C: "
            "FLOP_mb = 8·N·b·s/(p·t) with full recompute, 6 otherwise",
            "N from Megatron-LM eq. 2" if model.num_parameters is None else "N as given",
            "TP: 4 all-reduces of β·b·s·h per layer and micro-batch; PP: 2 sends of β·b·s·h "
            "per micro-batch; DP: one ring all-reduce of β_g·N/(p·t) per iteration",
            "paper fidelity leaves out the embedding sync, context parallel and expert "
            "all-to-all terms",
            "MFU and HFU from the seed's own count: 6·N FLOPs per token, 8·N with full recompute",
        ]
        if tr.recompute is Recompute.SELECTIVE:
            out.append("paper fidelity counts selective recompute as no recompute (6·N·b·s)")
        if model.is_moe:
            out.append("paper fidelity treats the MoE model as dense")
    else:
        acc = validated_for(scenario) if validated is False else validated
        out += _detailed_assumptions(scenario, acc)
    if lay.first_stage_layers or lay.last_stage_layers:
        out.append(
            f"uneven pipeline: first stage {lay.first_stage_layers or 'even'}, last stage "
            f"{lay.last_stage_layers or 'even'} layers; the slowest stage sets the pace"
            + (
                " (paper fidelity ignores the split: N/(p·t) per GPU)"
                if scenario.fidelity is Fidelity.PAPER
                else ""
            )
        )
    block = _block_recompute_line(scenario)
    if block is not None:
        out.append(block)
    if lay.virtual_stages == 1 and lay.pipeline > 1:
        out.append(
            "1F1B schedule: bubble = (p−1)·(T_comp + T_TP + T_PP) per micro-batch"
            if scenario.fidelity is Fidelity.PAPER
            else "1F1B schedule: the slowest stage sets the period T; filling and draining "
            "the pipeline costs W − T, W the sum of every stage's micro-batch time "
            "((p−1)·T with equal stages; the whole chain W with one micro-batch)"
        )
    return out


def _block_recompute_line(scenario: Scenario) -> str | None:
    """How partial (block) recompute is priced; None without ``recompute_num_layers``."""
    lay, tr = scenario.layout, scenario.training
    n = tr.recompute_num_layers
    if n is None:
        return None
    first, last = lay.first_stage_layers or 0, lay.last_stage_layers or 0
    middle = lay.pipeline - (first > 0) - (last > 0)
    mid = (scenario.model.num_layers - first - last) / max(middle, 1)
    chunk = max(first, mid, last) / lay.virtual_stages
    share = float(block_share(float(n), chunk))  # as the kernel prices it
    head = (
        f"recompute_num_layers={n} (Megatron's block method): the first {n} layers of each "
        "pipeline chunk replay their forward pass, the others keep their activations; "
    )
    if share >= 1.0:
        return head + f"a chunk holds {chunk:g} layers, so every layer is replayed (full)"
    if share == 0.0:
        return head + "no layer is replayed, so it is priced as recompute none"
    return head + (
        f"{n} of {chunk:g} on the stage with the most layers: {share:.1%} of its layers priced "
        "as full recompute, the rest as none (a stage with fewer layers is timed at that "
        "share, its memory at its own)"
    )


def attention_on_cuda_cores(
    model: ModelSpec, training: TrainingSpec, cluster: ClusterSpec, fidelity: Fidelity
) -> bool:
    """Whether the detailed model runs attention's batched GEMMs on the CUDA cores (no
    FlashAttention, head rows not 16-byte aligned, and the cluster names the CUDA cores' rate):
    then ``cluster.cuda_core_peak_flops`` is one of the figures the answer scales with."""
    return (
        fidelity is Fidelity.DETAILED
        and not training.flash_attention
        and cluster.cuda_core_peak_flops is not None
        and not tensor_core_aligned(float(model.head_dim), float(training.activation_bytes))
    )


def _misaligned_attention_line(scenario: Scenario) -> str | None:
    """How attention's batched GEMMs (no FlashAttention) are priced when their head rows are
    not 16-byte aligned for tensor cores; None when they are."""
    model, c = scenario.model, scenario.cluster
    head_dim = float(model.head_dim)
    element_bytes = float(scenario.training.activation_bytes)
    row_bytes = head_dim * element_bytes
    if tensor_core_aligned(head_dim, element_bytes):
        return None
    if c.cuda_core_peak_flops is None:
        return (
            f"attention head rows of {row_bytes:g} B (head dim {head_dim:g}) are not 16-byte "
            "aligned, so its batched GEMMs cannot use tensor cores; not priced: the cluster "
            "names no CUDA-core FP32 rate (give cluster.cuda_core_peak_tflops or a GPU preset)"
        )
    return (
        f"attention head rows of {row_bytes:g} B (head dim {head_dim:g}) are not 16-byte "
        "aligned: the score and context batched GEMMs run on the CUDA cores at u x "
        f"{c.cuda_core_peak_flops / 1e12:g} TFLOP/s FP32 (tensor-core kernels need 128-bit "
        "aligned loads: NVIDIA/cutlass#75, cuBLAS 'Tensor Core Usage'; PyTorch accumulates "
        "16-bit GEMMs in fp32)"
    )


@functools.lru_cache(maxsize=64)
def _compute_lines(
    utilization: float,
    gemm_traffic_factor: float,
    memory_traffic_factor: float,
    memory_bandwidth_gbps: float | None,
    gemm_half_size_elements: float,
    optimizer_bytes_per_parameter: float,
    accumulation_bytes_per_parameter: float,
) -> tuple[str, ...]:
    """The compute model's ``assumptions`` lines, with the cluster's fitted constants and the
    framework's bytes per parameter (formatted once per distinct set: most estimates share a
    GPU preset's constants, and formatting the floats costs more than the lookup)."""
    out: list[str] = []
    if memory_bandwidth_gbps:
        out.append(
            "compute = Σ GEMM FLOPs/(u·F) + c·GEMM operand bytes/HBM + attention + "
            f"γ·element-wise bytes/HBM (u={utilization:g}, c={gemm_traffic_factor:g}, "
            f"γ={memory_traffic_factor:g}, HBM {memory_bandwidth_gbps:g} GB/s; element-wise "
            "bytes per Korthikanti et al. 2022 Table 2)"
        )
    if gemm_half_size_elements:
        out.append(
            "linear-layer GEMMs at u·x/(x + x0), x = 2nk/(n + k) for a per-GPU weight n x k "
            f"(x0={gemm_half_size_elements:g}; size-dependent efficiency, docs/design.md §4.4)"
        )
    if memory_bandwidth_gbps:
        out.append(
            "optimizer step: the parameters this GPU owns (sharded by ZeRO ≥ 1) stream "
            f"{optimizer_bytes_per_parameter:g} B each (+8 B for the FP16 loss-scale "
            "check) through HBM at 85 % of its bandwidth; gradient accumulation "
            f"{accumulation_bytes_per_parameter:g} B/parameter per micro-batch; fp32 cross "
            "entropy 32 B per logit"
        )
    else:
        out.append(
            "compute = FLOPs/(u·F): no HBM bandwidth given, so the memory-bound work "
            "(element-wise, optimizer step, gradient accumulation, cross entropy) is not priced"
        )
    return tuple(out)


def _detailed_assumptions(scenario: Scenario, validated: ValidatedAccuracy | None) -> list[str]:
    """The detailed fidelity's modelling choices (estimator.kernel, estimator.compute)."""
    lay, tr, model, c = scenario.layout, scenario.training, scenario.model, scenario.cluster
    fw = tr.software
    out = [
        "fidelity=detailed: every stage priced operation by operation; the logit layer runs "
        "on the last stage, the embedding on the first; the slowest stage paces the pipeline",
        fw.describe(),
        _accuracy_line(validated),
        f"recompute={tr.recompute.value}: "
        + {
            Recompute.FULL: (
                "every dense layer's forward is replayed up to its last GEMM (PyTorch's "
                "checkpoint stops once the backward pass has every tensor it needs: FC2 and the "
                "TP collective of its output are not rerun), with its other TP collectives; "
                "MoE layers replay whole"
                if fw.recompute_early_stop
                else "every layer's forward is replayed, with its TP collectives"
            ),
            Recompute.SELECTIVE: (
                "torch's op-level SAC: every other GEMM of a block (all linears in FP8), the "
                "element-wise ops and the SP all-gathers feeding them are replayed, attention is "
                "saved"
                if fw.selective_recompute == "op-sac"
                else "the attention core (Q·Kᵀ, softmax, attention·V) is replayed "
                "(Korthikanti et al. 2022)"
            ),
            Recompute.NONE: "nothing is replayed",
        }[tr.recompute],
        "FlashAttention: fused attention, causal (half the score blocks), backward 2.5x the "
        "forward FLOPs; the s² scores are neither stored nor streamed"
        if tr.flash_attention
        else "no FlashAttention: Q·Kᵀ and attention·V as batched GEMMs with the s² scores "
        "materialised (activation memory and HBM traffic)",
        "bandwidth per collective from the provider at its actual message size, rank count "
        "and nodes spanned (rank order " + lay.rank_order + "); reduce-scatter, all-gather and "
        "all-reduce each priced on their own curve",
        "TP per layer: 2 all-reduces forward, 2 backward (input gradients of QKV and FC1); "
        "the output layer adds its input-gradient all-reduce on the last stage and the "
        "embedding its output all-reduce on the first",
        _MEMORY_ASSUMPTION,
    ]
    if tr.recompute is Recompute.SELECTIVE and tr.software.selective_recompute == "op-sac":
        out.append(
            "memory under op-level SAC: per layer the input, wq's, wv's, the SDPA's, w1's and "
            "(gated) w2's outputs are kept, every other matmul's replayed (torchtitan)"
        )
    out += _compute_lines(
        c.utilization,
        c.gemm_traffic_factor,
        c.memory_traffic_factor,
        c.memory_bandwidth_gbps,
        c.gemm_half_size_elements,
        fw.optimizer_bytes_per_parameter,
        fw.accumulation_bytes_per_parameter,
    )
    if tr.precision.value == "fp8":
        u8 = c.fp8_utilization if c.fp8_utilization is not None else c.utilization
        out.append(
            f"FP8: linear-layer GEMMs at the FP8 peak with efficiency u8={u8:g}, 1-byte operands"
            "; casts in the pass that runs them (forward: 3 B per linear input element; "
            "backward: 4 B per output-gradient element cast and transposed, 2 B per saved "
            "input transposed); attention, logits and router in 16-bit at half the FP8 peak; "
            "amax bookkeeping is inside the casts' bytes"
        )
        if model.is_moe and c.fp8_expert_utilization is not None:
            out.append(
                f"FP8 experts: the MoE layers' expert GEMMs at u8e={c.fp8_expert_utilization:g} "
                "of the FP8 peak (cluster.fp8_expert_utilization), the other linears at u8"
            )
    if (
        tr.precision.value == "fp8"
        and fw.tp_fp8_all_gather
        and lay.sequence_parallel
        and lay.tensor > 1
    ):
        out.append(
            "float8 TP: each block's input and each row-parallel layer's output gradient are "
            "cast to FP8 on the sequence shard and all-gathered as 1-byte elements (their "
            "transposed copy made after the gather); the reduce-scatters stay 16-bit"
        )
    misaligned = None if tr.flash_attention else _misaligned_attention_line(scenario)
    if misaligned:
        out.append(misaligned)
    if tr.flash_attention and fw.attention_kernel == "flash2":
        out.append(
            f"attention kernel FlashAttention-2: {c.flash2_efficiency:g} x the GEMM efficiency "
            "on this GPU (Shah et al. 2024: FA2 reaches about half of FA3/cuDNN on Hopper)"
        )
    if tr.flash_attention and fw.attention_kernel == "triton":
        out.append(
            f"attention kernel FlashAttention in Triton: FlashAttention-2's {c.flash2_efficiency:g}"
            f" x the GEMM efficiency on this GPU, divided by {TRITON_FLASH_FORWARD_SLOWDOWN:g} "
            f"forward and {TRITON_FLASH_BACKWARD_SLOWDOWN:g} backward (Dao 2023, "
            "FlashAttention-2 §4.1: FA2 1.3-1.5x faster forward, ~2x backward)"
        )
    if tr.flash_attention:
        head_dim = float(model.head_dim)
        tile = flash_head_dim(fw.attention_kernel, head_dim)
        if tile != head_dim:
            out.append(
                f"FlashAttention computes head dim {head_dim:g} as {tile:g} ("
                + (
                    "FlashAttention-2's kernels: multiples of 32 up to 192, then 256"
                    if fw.attention_kernel == "flash2"
                    else "the Triton kernel's tile: the next power of two"
                )
                + f"): {tile / head_dim:.3g}x the attention FLOPs"
            )
    if lay.sequence_parallel and lay.tensor > 1 and fw.sp_regather_saved_shard:
        out.append(
            "sequence parallel: each TP all-reduce is a reduce-scatter + all-gather, and the "
            "backward pass re-gathers the saved input shard of QKV and FC1 "
            + (
                "under their input-gradient GEMMs"
                if fw.sp_gather_overlap
                else "(exposed: the framework does not overlap it)"
            )
        )
    elif lay.sequence_parallel and lay.tensor > 1:
        out.append(
            "sequence parallel: each TP all-reduce is a reduce-scatter + all-gather; the "
            "gathered input is saved for the weight gradient (DTensor TP), so the backward pass "
            "gathers again only what recomputation replays"
        )
    if lay.scatter_gather and fw.pp_scatter_gather and lay.tensor > 1 and lay.pipeline > 1:
        if fw.pp_regather_output or not fw.pp_scatter_gather_grads:
            out.append(
                "PP sends partitioned (DeepSpeed's pipeline engine): 1/t of the activation "
                + ("and of the gradient " if fw.pp_scatter_gather_grads else "(gradients whole) ")
                + "per send, all-gathered over the TP group on receipt"
                + (
                    "; the sent output all-gathered again before its backward pass"
                    if fw.pp_regather_output
                    else ""
                )
            )
        else:
            out.append(
                "PP sends use Megatron's scatter/gather: 1/t of the activation per send, then an "
                "all-gather over the TP group"
            )
    if fw.pp_blocking_p2p and lay.pipeline > 1:
        out.append(
            "PP sends block one at a time (receive activation, send activation, receive "
            "gradient, send gradient): four transfers per micro-batch on each stage"
        )
    if fw.pp_grad_reduce_after_schedule and lay.pipeline > 1 and lay.data > 1:
        out.append(
            "gradients are reduced after the pipeline's last micro-batch: none of the "
            "reduction hides under the backward pass"
        )
    if lay.virtual_stages > 1:
        out.append(
            f"interleaved schedule: fill and drain / {lay.virtual_stages}, PP sends × "
            f"{lay.virtual_stages}"
        )
    bf16_opt = fw.bf16_optimizer and tr.precision is Precision.BF16 and lay.zero_stage == 1
    if bf16_opt:
        out.append(
            "DeepSpeed BF16_Optimizer (its own ZeRO-1): the whole stage's fp32 gradient "
            "all-reduced over DP in bf16, Adam on the 1/d shard, bf16 weights all-gathered; "
            "gradient norm, zeroing and the all-reduce buckets' copies stream the whole "
            "gradient through HBM; every micro-batch's bf16 gradient added to the fp32 one "
            "through an fp32 temporary (18 B/parameter); the tied embedding's gradient "
            "all-reduced in fp32"
        )
    elif lay.zero_stage:
        per_mb = "every micro-batch" if fw.grad_reduce_per_microbatch else "once per iteration"
        out.append(
            {
                1: "ZeRO-1 / distributed optimizer: gradient reduce-scatter + parameter "
                "all-gather once per iteration",
                2: (
                    "ZeRO-2 as FSDP SHARD_GRAD_OP: each layer's parameters all-gathered before "
                    f"its forward, its gradients reduce-scattered after its backward, {per_mb}"
                    if fw.zero2_per_layer
                    else f"ZeRO-2: gradient reduce-scatter {per_mb}, parameter all-gather once "
                    "per iteration"
                ),
                3: f"ZeRO-3: each layer's parameters all-gathered before its forward and its "
                f"backward ({fw.zero3_gathers_per_layer} collective(s) per layer"
                + (", again for a replay" if fw.zero3_regather_for_recompute else "")
                + "), "
                + ("prefetched under the previous layer" if fw.fsdp_prefetch else "not prefetched")
                + (
                    ", each through PyTorch's flat copy buffer (list collectives: a zero fill, "
                    "then one copy per rank, the longer of 2 passes of the tensor through HBM "
                    f"and d kernel launches at {KERNEL_LAUNCH_S * 1e6:g} µs)"
                    if fw.zero3_list_collectives
                    else ""
                )
                + (
                    ", each after a Python loop over the group's ranks with the GPU idle (one "
                    f"eager op per rank, {EAGER_OP_HOST_S * 1e6:g} µs)"
                    if fw.zero3_rank_loop
                    else ""
                )
                + f"; gradient reduce-scatter {per_mb}",
            }[lay.zero_stage]
            + (
                "; the parameters gathered as FP8, 1 B each (fp8_param_gather)"
                if fw.fp8_param_gather and tr.precision is Precision.FP8
                else ""
            )
        )
    if model.tied_embeddings and lay.pipeline > 1:
        out.append(
            "tied embeddings: all-reduce of the word-embedding gradient between the first and "
            "last stage once per iteration"
        )
    if model.is_moe:
        load = tr.moe_capacity_factor or 1.0
        out.append(
            "MoE: router GEMM, token permutation through HBM, the FFN-width activations' "
            "element-wise bytes per routed copy at the expert width, expert GEMMs of "
            f"ep·b·s·top_k/E tokens per local expert scaled by the load factor {load:g} "
            + ("(given)" if tr.moe_capacity_factor else "(balanced routing assumed)")
            + "; 2 all-to-alls forward, 2 backward (+2 replayed) per MoE layer, "
            + (
                f"{EP_OVERLAP_HIDDEN_SHARE * 100:.2f} % of them hidden under another "
                "micro-batch's compute (ep_comm_overlap)"
                if tr.software.ep_comm_overlap and scenario.micro_batches > 1
                else "exposed"
            )
            + (
                "; flex dispatcher (DeepEP, HybridEP): a token crosses to each remote node "
                "holding one of its experts once (RDMA, to the rank at the same position) and "
                "reaches each rank holding one once over NVLink, experts drawn uniformly "
                "(balanced routing); the two legs run at once, the slower sets the pace"
                if tr.moe_token_dispatcher is MoeDispatcher.FLEX
                else ""
            )
            + (
                f"; experts folded over TP (expert_tensor_parallel 1): each expert whole, "
                f"expert-parallel groups of {lay.expert_parallel} consecutive ranks of a "
                f"stage's tensor·data·cp, tokens routed from the sequence shard (no TP gather "
                f"of routed tokens), expert gradients reduced over "
                f"{lay.tensor * lay.data * lay.context_parallel // lay.expert_parallel} ranks"
                if lay.experts_folded
                else ""
            )
            + (
                "; TP overlap hides a MoE layer's attention collectives under the attention "
                "GEMMs only (none for the experts)"
                if (lay.overlap_tp or (fw.tp_comm_overlap and fw.tp_comm_overlap_backward))
                and lay.sequence_parallel
                and lay.tensor > 1
                else ""
            )
        )
    after_schedule = fw.pp_grad_reduce_after_schedule and lay.pipeline > 1
    if (lay.overlap_dp or fw.overlap_grad_reduce) and not after_schedule:
        out.append(
            "DP overlap: gradient reduction hidden behind the last micro-batch's backward "
            "pass; only the rest is exposed"
        )
    if lay.overlap_tp or fw.tp_comm_overlap:
        out.append(
            "TP overlap: a layer's TP collectives run under its GEMMs; exposed = "
            "max(0, T_TP − T_GEMM)"
        )
    out.append(
        "not modelled: kernel-launch and host (Python) overheads, GPU clock throttling beyond "
        "the fitted u, NCCL's use of SMs while overlapping, network congestion"
    )
    return out


def traffic_loads(result: Estimate) -> list[CollectiveLoad]:
    """The estimate's collectives as loads for the traffic matrix (docs/design.md §5).

    Every GPU is given the critical stage's loads; PP sends are split into the two
    directions (activations forward, gradients backward); CP's ring passes go to the next rank
    of the ring.
    """
    loads: list[CollectiveLoad] = []
    for use in result.collectives:
        if use.op is Collective.SENDRECV and use.kind is TrafficKind.PP:
            loads.append(
                CollectiveLoad(
                    use.kind,
                    use.op,
                    use.size_bytes,
                    use.calls_per_iteration / 2.0,
                    direction="both",
                )
            )
        else:
            loads.append(
                CollectiveLoad(
                    use.kind, use.op, use.size_bytes, use.calls_per_iteration, scope=use.scope
                )
            )
    return loads


def estimate_traffic(result: Estimate, algorithm: Algorithm = Algorithm.RING) -> SparseTraffic:
    """GPU-to-GPU bytes per iteration for an estimate's layout and rank order."""
    sc = result.scenario
    placement = Placement.from_layout(sc.layout, sc.cluster.gpus_per_node)
    return traffic_matrix(placement, traffic_loads(result), algorithm)
