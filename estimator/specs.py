"""Typed inputs of the engine: model, training, layout, cluster; validated on construction.

Symbols follow docs/design.md §3. Every rule failure raises ``LayoutError``/``ValidationError``
naming the field, the value and the rule; nothing is rounded or fixed silently.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

from estimator.bandwidth import BandwidthProvider
from estimator.errors import LayoutError, NotFoundError, ValidationError
from estimator.frameworks import DEFAULT_FRAMEWORK, Framework, framework_preset

E = TypeVar("E", bound=StrEnum)


class Precision(StrEnum):
    FP32 = "fp32"
    TF32 = "tf32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"


BYTES_PER_ELEMENT: dict[Precision, int] = {
    Precision.FP32: 4,
    Precision.TF32: 4,
    Precision.FP16: 2,
    Precision.BF16: 2,
    Precision.FP8: 1,
}


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"  # Korthikanti et al. 2022: recompute the attention core only
    FULL = "full"  # replay every layer's forward in the backward pass


RECOMPUTE_CODE: dict[Recompute, int] = {
    Recompute.NONE: 0,
    Recompute.SELECTIVE: 1,
    Recompute.FULL: 2,
}


class MoeDispatcher(StrEnum):
    """How a MoE layer's routed tokens reach their experts (Megatron-Core's
    ``--moe-token-dispatcher-type``; detailed fidelity)."""

    # NCCL all-to-all: each of a token's top-k routed copies goes to its expert's rank.
    ALLTOALL = "alltoall"
    # DeepEP / HybridEP (``flex``): a token crosses to each remote node holding one of its
    # experts once (RDMA to the peer of the same node position), then reaches each rank holding
    # one of them once over NVLink; both run at once (DeepEP README, "normal kernels").
    FLEX = "flex"


class Fidelity(StrEnum):
    PAPER = "paper"  # the seed's formulation exactly (scalar C, scalar u)
    DETAILED = "detailed"  # per-stage FLOPs, per-collective bandwidth, every refinement named


def parse_enum(enum: type[E], field_name: str, value: str | E) -> E:
    """Parse ``value`` into ``enum`` or raise a ValidationError listing the choices."""
    if isinstance(value, enum):
        return value
    try:
        return enum(str(value).strip().lower())
    except ValueError:
        choices = ", ".join(e.value for e in enum)
        raise ValidationError(field_name, value, f"must be one of {choices}") from None


def _positive_int(field_name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValidationError(field_name, value, "must be a whole number > 0")


def _positive_float(field_name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValidationError(field_name, value, "must be a finite number > 0")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A GPT-style decoder. ``ffn_hidden_size`` defaults to 4h; MoE when ``moe_num_experts`` > 1."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_length: int
    vocab_size: int
    ffn_hidden_size: int | None = None
    swiglu: bool = False
    num_query_groups: int | None = None
    tied_embeddings: bool = True
    num_parameters: int | None = None  # overrides Megatron eq. 2 when the authors state N
    moe_num_experts: int = 1
    moe_top_k: int = 1
    moe_every_k_layers: int = 1
    moe_ffn_hidden_size: int | None = None
    # Width of one attention head when it is not h / heads (Megatron's --kv-channels, the
    # Hugging Face config's head_dim: Qwen3 runs 32 heads of 128 on h = 2048).
    kv_channels: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "seq_length",
            "vocab_size",
            "moe_num_experts",
            "moe_top_k",
            "moe_every_k_layers",
        ):
            _positive_int(f"model.{name}", getattr(self, name))
        for name in (
            "ffn_hidden_size",
            "num_query_groups",
            "num_parameters",
            "moe_ffn_hidden_size",
            "kv_channels",
        ):
            value = getattr(self, name)
            if value is not None:
                _positive_int(f"model.{name}", value)
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ValidationError(
                "model.hidden_size",
                self.hidden_size,
                f"must be divisible by num_attention_heads={self.num_attention_heads} "
                "(or give kv_channels, the width of one head)",
            )
        groups = self.query_groups
        if self.num_attention_heads % groups:
            raise ValidationError(
                "model.num_query_groups",
                groups,
                f"must divide num_attention_heads={self.num_attention_heads}",
            )
        if self.moe_top_k > self.moe_num_experts:
            raise ValidationError(
                "model.moe_top_k",
                self.moe_top_k,
                f"must be <= moe_num_experts={self.moe_num_experts}",
            )

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Width of one attention head: kv_channels, else h / heads (validation refuses an h the
        heads do not divide)."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def attention_width(self) -> int:
        """Width of Q and of the attention output: heads · head_dim (h unless kv_channels says
        otherwise)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V): groups · head_dim (GQA); the attention width for plain
        multi-head attention."""
        return self.query_groups * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.moe_num_experts > 1

    @property
    def fine_grained_moe(self) -> bool:
        """MoE whose experts are narrower than the model (DeepSeek, Qwen3: many small expert
        GEMMs), as against Mixtral- or Grok-style experts several times h wide."""
        return self.is_moe and self.expert_ffn < self.hidden_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers // self.moe_every_k_layers if self.is_moe else 0

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn

    @property
    def architecture(self) -> tuple[int, int, int, int, int]:
        """What tells one published model from another (``estimator.calibrated``): layers,
        width, attention heads, experts (0: dense) and the MLP's width (an expert's in MoE)."""
        moe = self.is_moe
        return (
            self.num_layers,
            self.hidden_size,
            self.num_attention_heads,
            self.moe_num_experts if moe else 0,
            self.expert_ffn if moe else self.ffn,
        )


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """The batch and the numerics of one iteration."""

    global_batch_size: int
    micro_batch_size: int = 1
    recompute: Recompute = Recompute.FULL
    # Full recompute of part of each stage (Megatron's --recompute-method block
    # --recompute-num-layers N): the first N layers of every (virtual) pipeline chunk replay
    # their forward pass, the others keep their activations. None: every layer is replayed.
    recompute_num_layers: int | None = None
    precision: Precision = Precision.FP16
    grad_reduce_precision: Precision | None = None  # β_g; default: the training precision
    # FlashAttention (Dao et al. 2022): the s² attention scores are never materialised, so
    # they cost neither HBM traffic nor activation memory. Runs before 2023 had it off.
    flash_attention: bool = True
    # The training software: a preset name (estimator.frameworks) or a Framework with
    # overridden flags. It decides what is overlapped, fused and how ZeRO-3 gathers.
    framework: str | Framework = DEFAULT_FRAMEWORK
    # MoE: tokens on the busiest expert-parallel rank over the mean (Megatron's
    # --moe-expert-capacity-factor with padding; for dropless routing, the measured
    # imbalance). None: balanced routing (1.0), an assumption the estimate names.
    moe_capacity_factor: float | None = None
    moe_token_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL

    def __post_init__(self) -> None:
        _positive_int("training.global_batch_size", self.global_batch_size)
        _positive_int("training.micro_batch_size", self.micro_batch_size)
        if isinstance(self.framework, str):
            try:
                resolved = framework_preset(self.framework)
            except NotFoundError as exc:
                raise ValidationError(
                    "training.framework",
                    self.framework,
                    f"unknown preset; known: {exc.context['known']}",
                ) from None
            object.__setattr__(self, "framework", resolved)
        elif not isinstance(self.framework, Framework):
            raise ValidationError(
                "training.framework", self.framework, "must be a preset name or a Framework"
            )
        if self.moe_capacity_factor is not None:
            _positive_float("training.moe_capacity_factor", self.moe_capacity_factor)
            if self.moe_capacity_factor < 1:
                raise ValidationError(
                    "training.moe_capacity_factor",
                    self.moe_capacity_factor,
                    "must be >= 1: the busiest rank's tokens over the mean",
                )
        object.__setattr__(
            self, "recompute", parse_enum(Recompute, "training.recompute", self.recompute)
        )
        if self.recompute_num_layers is not None:
            n = self.recompute_num_layers
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValidationError(
                    "training.recompute_num_layers", n, "must be a whole number >= 0"
                )
            if self.recompute is not Recompute.FULL:
                raise ValidationError(
                    "training.recompute_num_layers",
                    n,
                    "applies to recompute: full only (the layers of each pipeline chunk whose "
                    f"forward pass is replayed); drop it or set recompute: full, not "
                    f"{self.recompute.value}",
                )
        object.__setattr__(
            self, "precision", parse_enum(Precision, "training.precision", self.precision)
        )
        object.__setattr__(
            self,
            "moe_token_dispatcher",
            parse_enum(MoeDispatcher, "training.moe_token_dispatcher", self.moe_token_dispatcher),
        )
        if self.grad_reduce_precision is not None:
            object.__setattr__(
                self,
                "grad_reduce_precision",
                parse_enum(Precision, "training.grad_reduce_precision", self.grad_reduce_precision),
            )

    @property
    def software(self) -> Framework:
        """The resolved framework (a preset name becomes its Framework on construction)."""
        assert isinstance(self.framework, Framework)
        return self.framework

    @property
    def activation_bytes(self) -> int:
        """β: bytes per activation element on the wire (fp8 training still sends bf16)."""
        return max(2, BYTES_PER_ELEMENT[self.precision])

    @property
    def grad_bytes(self) -> int:
        """β_g: bytes per gradient element in the DP reduction: the request's
        ``grad_reduce_precision``, else fp32 where the framework reduces in it
        (``Framework.grad_reduce_fp32``), else the training precision."""
        if self.grad_reduce_precision is not None:
            return BYTES_PER_ELEMENT[self.grad_reduce_precision]
        if self.software.grad_reduce_fp32:
            return BYTES_PER_ELEMENT[Precision.FP32]
        return max(2, BYTES_PER_ELEMENT[self.precision])


RANK_DIMS = ("tp", "cp", "dp", "pp")


@functools.lru_cache(maxsize=64)
def parse_rank_order(order: str) -> tuple[str, ...]:
    """``tp-dp-pp`` -> ("tp", "cp", "dp", "pp"); cp, when not named, sits right after tp."""
    parts = tuple(p.strip().lower() for p in order.replace(",", "-").split("-") if p.strip())
    if "cp" not in parts and "tp" in parts:
        i = parts.index("tp")
        parts = (*parts[: i + 1], "cp", *parts[i + 1 :])
    if sorted(parts) != sorted(RANK_DIMS):
        raise LayoutError(
            "layout.rank_order",
            order,
            "must name tp, dp and pp once each (and cp optionally), e.g. tp-dp-pp",
        )
    return parts


@dataclass(frozen=True, slots=True)
class LayoutSpec:
    """How the job is split: (p, t, d) plus interleaving, SP, CP, ZeRO, EP and rank order."""

    pipeline: int
    tensor: int
    data: int
    virtual_stages: int = 1
    sequence_parallel: bool = False
    context_parallel: int = 1
    zero_stage: int = 0  # 0 plain DP; 1 = distributed optimizer; 2 +grads; 3 +params
    expert_parallel: int = 1
    # The experts' own tensor parallelism (Megatron-Core's --expert-tensor-parallel-size,
    # "parallel folding"): None runs them at the layer's TP (its tensor); 1 runs each expert
    # whole, its expert-parallel group spanning the tensor·cp·data ranks of a stage.
    expert_tensor_parallel: int | None = None
    rank_order: str = "tp-dp-pp"  # Megatron's default, TP fastest
    scatter_gather: bool = True  # Megatron's scatter/gather of PP sends over the TP group
    overlap_dp: bool = False  # DP gradient reduction hidden behind the backward pass
    overlap_tp: bool = False  # TP communication overlapped with the GEMMs
    # Megatron's uneven split (--decoder-first/last-pipeline-num-layers): layers on the first
    # and last stage; the rest spread evenly over the stages in between.
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "pipeline",
            "tensor",
            "data",
            "virtual_stages",
            "context_parallel",
            "expert_parallel",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise LayoutError(f"layout.{name}", value, "must be a whole number > 0")
        for name in ("first_stage_layers", "last_stage_layers", "expert_tensor_parallel"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise LayoutError(f"layout.{name}", value, "must be a whole number > 0")
        if self.zero_stage not in (0, 1, 2, 3):
            raise LayoutError("layout.zero_stage", self.zero_stage, "must be 0, 1, 2 or 3")
        if self.virtual_stages > 1 and self.pipeline == 1:
            raise LayoutError(
                "layout.virtual_stages",
                self.virtual_stages,
                "interleaving (virtual_stages > 1) needs pipeline > 1",
            )
        parse_rank_order(self.rank_order)

    @property
    def gpus(self) -> int:
        return self.pipeline * self.tensor * self.data * self.context_parallel

    @property
    def experts_folded(self) -> bool:
        """Whether the experts run without the layer's TP (expert tensor parallelism 1 under
        tensor > 1): their expert-parallel group then spans the stage's TP ranks too."""
        return self.expert_tensor_parallel == 1 and self.tensor > 1


class UtilizationModel(Protocol):
    """u as a function of the per-GPU GEMM shapes (issue 5); a float u is the paper's."""

    def utilization(
        self, *, hidden_per_gpu: float, tokens_per_microbatch: float, ffn_per_gpu: float
    ) -> float: ...


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The machine: GPUs per node, peak FLOP/s for the training precision, u, bandwidths."""

    gpus_per_node: int
    peak_flops: float
    utilization: float
    bandwidth: BandwidthProvider
    gpu_memory_bytes: float | None = None
    name: str | None = None
    # Roofline refinement of the compute time (detailed fidelity): element-wise work
    # (layernorm, softmax, dropout, GeLU) moves γ · (Korthikanti activation bytes) through
    # HBM per pass. γ = 0 (the default) is the paper's pure-FLOP model.
    memory_bandwidth_gbps: float | None = None
    memory_traffic_factor: float = 0.0
    # Per-operation roofline (detailed fidelity, estimator.compute): c scales each GEMM's
    # operand and result bytes through HBM, which makes small GEMMs run further below peak;
    # 0 (the default) is the paper's size-independent u. u8 is the FP8 GEMMs' efficiency
    # (fraction of the FP8 peak); None: the same u as 16-bit GEMMs.
    gemm_traffic_factor: float = 0.0
    fp8_utilization: float | None = None
    # FlashAttention-2's efficiency relative to the GEMMs' on this GPU: 1 where FA2 was written
    # for the generation (Ampere), about 0.5 on Hopper (Shah et al. 2024, FlashAttention-3 §4.1).
    # Used when the framework's attention kernel is flash2.
    flash2_efficiency: float = 1.0
    # x0 of the size-dependent GEMM efficiency (detailed fidelity, estimator.compute.size_factor):
    # a linear layer whose per-GPU weight is n x k runs at u·x/(x + x0), x the harmonic mean of
    # n and k; 0 (the default) is a size-independent u.
    gemm_half_size_elements: float = 0.0
    # The GPU's FP32 rate without tensor cores (CUDA cores), FLOP/s: the rate of the attention
    # score and context GEMMs when their head rows are not 16-byte aligned (detailed fidelity,
    # estimator.compute.tensor_core_aligned). None: unknown, that slowdown is not priced.
    cuda_core_peak_flops: float | None = None
    # u8e: a MoE layer's expert GEMMs in FP8, fraction of the FP8 peak (detailed fidelity);
    # None: u8 like every other linear layer.
    fp8_expert_utilization: float | None = None

    def __post_init__(self) -> None:
        _positive_int("cluster.gpus_per_node", self.gpus_per_node)
        if self.cuda_core_peak_flops is not None:
            _positive_float("cluster.cuda_core_peak_flops", self.cuda_core_peak_flops)
        if not (math.isfinite(self.gemm_half_size_elements) and self.gemm_half_size_elements >= 0):
            raise ValidationError(
                "cluster.gemm_half_size_elements",
                self.gemm_half_size_elements,
                "must be a finite number >= 0",
            )
        if not (math.isfinite(self.gemm_traffic_factor) and self.gemm_traffic_factor >= 0):
            raise ValidationError(
                "cluster.gemm_traffic_factor",
                self.gemm_traffic_factor,
                "must be a finite number >= 0",
            )
        if self.gemm_traffic_factor > 0 and self.memory_bandwidth_gbps is None:
            raise ValidationError(
                "cluster.memory_bandwidth_gbps",
                None,
                "is needed when gemm_traffic_factor > 0",
                hint="give the GPU's HBM bandwidth or a gpu preset",
            )
        _positive_float("cluster.flash2_efficiency", self.flash2_efficiency)
        if self.flash2_efficiency > 1:
            raise ValidationError(
                "cluster.flash2_efficiency",
                self.flash2_efficiency,
                "must be in (0, 1]: FlashAttention-2's efficiency relative to the GEMMs",
            )
        for name in ("fp8_utilization", "fp8_expert_utilization"):
            value = getattr(self, name)
            if value is None:
                continue
            _positive_float(f"cluster.{name}", value)
            if value > 1:
                raise ValidationError(
                    f"cluster.{name}",
                    value,
                    "must be in (0, 1]: the fraction of the FP8 peak achieved",
                )
        if self.memory_bandwidth_gbps is not None:
            _positive_float("cluster.memory_bandwidth_gbps", self.memory_bandwidth_gbps)
        if not (math.isfinite(self.memory_traffic_factor) and self.memory_traffic_factor >= 0):
            raise ValidationError(
                "cluster.memory_traffic_factor",
                self.memory_traffic_factor,
                "must be a finite number >= 0",
            )
        if self.memory_traffic_factor > 0 and self.memory_bandwidth_gbps is None:
            raise ValidationError(
                "cluster.memory_bandwidth_gbps",
                None,
                "is needed when memory_traffic_factor > 0",
                hint="give the GPU's HBM bandwidth or a gpu preset",
            )
        _positive_float("cluster.peak_flops", self.peak_flops)
        _positive_float("cluster.utilization", self.utilization)
        if self.utilization > 1:
            raise ValidationError(
                "cluster.utilization",
                self.utilization,
                "must be in (0, 1]: the fraction of peak FLOP/s achieved",
            )
        if self.peak_flops * self.utilization == 0.0:  # both > 0: the product underflowed
            raise ValidationError(
                "cluster.utilization",
                self.utilization,
                f"times the peak ({self.peak_flops:g} FLOP/s) underflows to 0 FLOP/s achieved, "
                "from which no time can be computed",
                hint="give the GPU's peak_tflops (e.g. 312 for an A100) and a utilization "
                "such as 0.5",
            )
        if self.gpu_memory_bytes is not None:
            _positive_float("cluster.gpu_memory_bytes", self.gpu_memory_bytes)


@dataclass(frozen=True, slots=True)
class Scenario:
    """One estimate's full input."""

    model: ModelSpec
    training: TrainingSpec
    layout: LayoutSpec
    cluster: ClusterSpec
    fidelity: Fidelity = Fidelity.DETAILED
    gpus: int | None = None  # when given, must equal p·t·d·cp
    warnings: list[str] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fidelity", parse_enum(Fidelity, "fidelity", self.fidelity))
        self.warnings.extend(
            validate_layout(
                self.model, self.training, self.layout, self.cluster.gpus_per_node, self.gpus
            )
        )

    @property
    def micro_batches(self) -> int:
        """m = gb / (b · d) (docs/design.md §3)."""
        return self.training.global_batch_size // (
            self.training.micro_batch_size * self.layout.data
        )


def validate_training(model: ModelSpec, training: TrainingSpec) -> None:
    """Raise ValidationError for training settings the model cannot use (a token dispatcher
    without experts)."""
    if training.moe_token_dispatcher is MoeDispatcher.FLEX and not model.is_moe:
        raise ValidationError(
            "training.moe_token_dispatcher",
            training.moe_token_dispatcher.value,
            "flex needs an MoE model (model.moe_num_experts > 1); leave it alltoall otherwise",
        )


def validate_layout(
    model: ModelSpec,
    training: TrainingSpec,
    layout: LayoutSpec,
    gpus_per_node: int,
    gpus: int | None = None,
) -> list[str]:
    """Raise LayoutError for an impossible layout; return warnings for odd-but-valid ones."""
    validate_training(model, training)
    p, t, d, v = layout.pipeline, layout.tensor, layout.data, layout.virtual_stages
    cp, ep = layout.context_parallel, layout.expert_parallel
    if gpus is not None and p * t * d * cp != gpus:
        raise LayoutError(
            "layout",
            f"p={p}, t={t}, d={d}, cp={cp}",
            f"p·t·d·cp = {p * t * d * cp} must equal gpus={gpus}",
        )
    if model.num_attention_heads % t:
        raise LayoutError(
            "layout.tensor", t, f"must divide num_attention_heads={model.num_attention_heads}"
        )
    if model.query_groups % t and t % model.query_groups:
        raise LayoutError(
            "layout.tensor",
            t,
            f"must divide num_query_groups={model.query_groups} (or be a multiple of it)",
        )
    b, gb = training.micro_batch_size, training.global_batch_size
    if gb % (b * d):
        raise LayoutError(
            "training.global_batch_size",
            gb,
            f"must be divisible by micro_batch_size·data = {b}·{d} = {b * d}",
        )
    _check_stage_layers(model.num_layers, layout)
    m = gb // (b * d)
    if v > 1 and m % p:
        raise LayoutError(
            "layout.virtual_stages",
            v,
            f"with interleaving the micro-batch count m = gb/(b·d) = {m} must be "
            f"a multiple of pipeline={p} (Megatron's rule)",
        )
    if model.seq_length % cp:
        raise LayoutError(
            "layout.context_parallel", cp, f"must divide seq_length={model.seq_length}"
        )
    if layout.sequence_parallel and t > 1 and model.seq_length % (t * cp):
        raise LayoutError(
            "layout.sequence_parallel",
            True,
            f"needs seq_length={model.seq_length} divisible by tensor·cp={t * cp}",
        )
    etp = layout.expert_tensor_parallel
    if etp is not None:
        if not model.is_moe:
            raise LayoutError(
                "layout.expert_tensor_parallel",
                etp,
                "needs an MoE model (model.moe_num_experts > 1)",
            )
        if etp not in (1, t):
            raise LayoutError(
                "layout.expert_tensor_parallel",
                etp,
                f"must be 1 (each expert whole, its group folded over the TP ranks) or "
                f"tensor={t} (the layer's TP); sizes in between are not modelled",
            )
        if layout.experts_folded and not layout.sequence_parallel:
            raise LayoutError(
                "layout.expert_tensor_parallel",
                etp,
                "1 under tensor > 1 needs sequence_parallel (Megatron-Core runs MoE with TP "
                "only under sequence parallelism)",
            )
    if ep > 1:
        if not model.is_moe:
            raise LayoutError(
                "layout.expert_parallel", ep, "needs an MoE model (model.moe_num_experts > 1)"
            )
        if model.moe_num_experts % ep:
            raise LayoutError(
                "layout.expert_parallel", ep, f"must divide moe_num_experts={model.moe_num_experts}"
            )
        if layout.experts_folded and (t * d * cp) % ep:
            raise LayoutError(
                "layout.expert_parallel",
                ep,
                f"must divide tensor·data·cp = {t * d * cp} (with expert_tensor_parallel 1 "
                "the experts shard the stage's TP and DP ranks)",
            )
        if not layout.experts_folded and (d * cp) % ep:
            raise LayoutError(
                "layout.expert_parallel",
                ep,
                f"must divide data·cp = {d * cp} (experts shard the DP group)",
            )
    warnings = []
    g = gpus_per_node
    if t > 1 and g % t and t % g:
        warnings.append(
            f"tensor={t} and gpus_per_node={g}: neither divides the other, so TP "
            "groups straddle nodes unevenly"
        )
    if t > g:
        warnings.append(f"tensor={t} > gpus_per_node={g}: TP all-reduces cross nodes")
    warnings.extend(
        shape_alignment_warnings(model, t, expert_tensor=1 if layout.experts_folded else t)
    )
    return warnings


# GEMM shapes the engine prices by size alone. Tensor cores want 16-bit dimensions in multiples
# of 8 elements (16 bytes), and widths that fill whole tiles (NVIDIA, "Matrix Multiplication
# Background User's Guide", §2.2 Tensor Core requirements and §3.1 tile quantization). How much
# a misaligned shape costs depends on cuBLAS's kernel choice, so it is named, not priced; the one
# exception is attention's batched GEMMs without FlashAttention, priced on the CUDA cores
# (estimator.compute.tensor_core_aligned).
# BigScience measured the same 40-node layout (t 8, p 10, d 4, MBS 1) at 94.4 TFLOP/s per GPU
# with h = 14,400 (1,800 columns per GPU; a head dimension of 150 or 225, neither a multiple of
# 8) and at 120.1 with h = 13,824 (1,728 columns per GPU, head dimension aligned)
# (bigscience train/tr11-176B-ml/chronicles-prequel.md, "tile and wave quantization", 02-20):
# the two misalignments together. The multiple of 64 columns is read from that example (1,728 =
# 27 x 64 ran fast though it is not a multiple of 128), not from a general rule.
HEAD_DIM_MULTIPLE = 8
GEMM_WIDTH_MULTIPLE = 64


def shape_alignment_warnings(
    model: ModelSpec, tensor: int, expert_tensor: int | None = None
) -> list[str]:
    """Warnings for GEMM dimensions off the tensor-core grid (see GEMM_WIDTH_MULTIPLE); the
    experts' widths split over ``expert_tensor`` (default: ``tensor``)."""
    out: list[str] = []
    h, a = model.hidden_size, model.num_attention_heads
    head_dim = model.head_dim
    if head_dim % HEAD_DIM_MULTIPLE:
        source = f"hidden_size/num_attention_heads = {h}/{a} = "
        if model.kv_channels:
            source = "kv_channels = "
        out.append(
            f"head dimension {source}{head_dim} is not a "
            f"multiple of {HEAD_DIM_MULTIPLE}: FlashAttention pads it, which the estimate does "
            "not price (it may be optimistic); without FlashAttention the batched attention "
            "GEMMs leave the tensor cores, priced at the CUDA cores' FP32 rate where the "
            "cluster names one (see assumptions)"
        )
    widths = {"hidden_size": (h, tensor), "ffn_hidden_size": (model.ffn, tensor)}
    if model.is_moe:
        split = tensor if expert_tensor is None else expert_tensor
        widths["moe_ffn_hidden_size"] = (model.expert_ffn, split)
    for name, (width, ways) in widths.items():
        if width % (ways * GEMM_WIDTH_MULTIPLE):
            per_gpu = f"{width // ways}" if width % ways == 0 else f"{width / ways:.1f}"
            over = "tensor" if ways == tensor else "expert_tensor_parallel"
            out.append(
                f"{name}/{over} = {width}/{ways} = {per_gpu} columns per GPU is not a multiple "
                f"of {GEMM_WIDTH_MULTIPLE}: GEMM tile quantization is not priced (BigScience "
                "measured 27 % more TFLOP/s per GPU on one layout with 1,728 columns per GPU and "
                "an aligned head dimension than with 1,800 and a misaligned one), so the "
                "estimate may be optimistic"
            )
    return out


def _check_stage_layers(layers: int, layout: LayoutSpec) -> None:
    """Even split: l divisible by p·v; uneven: first/last given, the rest even in between
    (Megatron's --decoder-first/last-pipeline-num-layers; the first/last stage's chunks may be
    uneven or empty)."""
    p, v = layout.pipeline, layout.virtual_stages
    first, last = layout.first_stage_layers, layout.last_stage_layers
    if first is None and last is None:
        if layers % (p * v):
            raise LayoutError(
                "model.num_layers",
                layers,
                f"must be divisible by pipeline·virtual_stages = {p}·{v} = {p * v} "
                "(or give layout.first_stage_layers / last_stage_layers)",
            )
        return
    named = [n for n, x in (("first_stage_layers", first), ("last_stage_layers", last)) if x]
    if p < 2:
        raise LayoutError(f"layout.{named[0]}", first or last, "needs pipeline >= 2")
    # With interleaving the first/last stage's layers need not split evenly over its v chunks:
    # Megatron pads them (a chunk one layer short where the embedding or the loss counts as a
    # layer, or an empty chunk); only the middle stages split evenly.
    middle = p - len(named)
    rest = layers - (first or 0) - (last or 0)
    if (
        rest < 0
        or (middle == 0 and rest != 0)
        or (middle > 0 and (rest <= 0 or rest % (middle * v)))
    ):
        raise LayoutError(
            "model.num_layers",
            layers,
            f"minus first/last stage layers leaves {rest} for {middle} middle stage(s): must "
            f"be a positive multiple of {middle}·virtual_stages = {middle * v}",
        )
