"""Request and response schemas of the REST API (pydantic v2), apart from the ORM models.

Families by role: ``*In`` are parts of a request, ``*Request`` whole request bodies, ``*Out``
parts of a response, ``*Response`` whole response bodies; profiles follow
``ProfileCreate / ProfileUpdate / ProfileRead``. Requests forbid unknown fields: a misspelt
knob is a 422, never silently ignored. Range rules that the engine also checks (layout
divisibility, model shape) are left to the engine, which names the field and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasPath,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    computed_field,
    field_validator,
    model_validator,
    with_config,
)
from pydantic import ValidationError as PydanticValidationError
from typing_extensions import TypedDict

from api import model_build
from estimator.bandwidth import Collective, TrafficKind, parse_collective
from estimator.errors import ValidationError
from estimator.frameworks import DEFAULT_FRAMEWORK, FRAMEWORK_NAMES, TrainerKind
from estimator.specs import Fidelity, MoeDispatcher, Precision, Recompute
from estimator.traffic import Algorithm

#: 1-64 characters of [A-Za-z0-9._-], but not "." or "..": URL clients normalise those path
#: segments away, so a resource of that name could never be read back.
NAME_PATTERN = (
    r"^(?:[A-Za-z0-9_-]|[A-Za-z0-9_-][A-Za-z0-9._-]|\.[A-Za-z0-9_-]|[A-Za-z0-9._-]{3,64})$"
)
NAME_RULE = (
    "must be 1-64 characters of A-Z a-z 0-9 . _ - and not '.' or '..' "
    "(URL clients normalise those away)"
)


def _name(value: str) -> str:
    if re.fullmatch(NAME_PATTERN, value) is None:
        raise ValueError(NAME_RULE)
    return value


#: A profile or baseline name (the JSON schema states the pattern; the error states the rule).
Name = Annotated[
    str,
    AfterValidator(_name),
    WithJsonSchema({"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 64}),
]


def _collective(value: Any) -> Any:
    """A user's spelling of a collective (``allreduce``, ``all-reduce``) as its name."""
    if isinstance(value, str):
        try:
            return parse_collective(value)
        except ValidationError:
            return value  # the enum's own error lists the names
    return value


#: A collective (query parameter ``op``): nccl-tests names, common spellings accepted.
Op = Annotated[Collective, BeforeValidator(_collective)]
GB = 1e9  # the API's gigabyte: 10^9 bytes (memory figures in GB are converted at the edge)

EXAMPLE_ESTIMATE: dict[str, Any] = {
    "model": {"preset": "gpt3-175b"},
    "layout": {
        "pipeline": 8,
        "tensor": 8,
        "data": 24,
        "virtual_stages": 1,
        "sequence_parallel": False,
        "zero_stage": 0,
    },
    "training": {
        "global_batch_size": 1536,
        "micro_batch_size": 1,
        "recompute": "full",
        "precision": "fp16",
    },
    "cluster": {"profile": "dgx-a100-nominal", "utilization": 0.5},
    "fidelity": "detailed",
}

EXAMPLE_SCALAR_C: dict[str, Any] = {
    "model": {
        "num_layers": 96,
        "hidden_size": 12288,
        "num_attention_heads": 96,
        "seq_length": 2048,
        "vocab_size": 51200,
    },
    "layout": {"pipeline": 8, "tensor": 8, "data": 24},
    "training": {"global_batch_size": 1536, "micro_batch_size": 1, "recompute": "full"},
    "cluster": {
        "gpus_per_node": 8,
        "peak_tflops": 312,
        "utilization": 0.5,
        "bandwidth_gbps": {"tp": 200, "pp": 20, "dp": 20},
        "gpu_memory_gb": 80,
    },
    "fidelity": "paper",
}


EXAMPLE_FRAMEWORK: dict[str, Any] = {
    "model": {"preset": "llama3-70b"},
    "layout": {
        "pipeline": 4,
        "tensor": 4,
        "data": 4,
        "virtual_stages": 5,
        "sequence_parallel": True,
        "context_parallel": 2,
        "zero_stage": 1,
    },
    "training": {
        "global_batch_size": 128,
        "micro_batch_size": 1,
        "recompute": "none",
        "precision": "fp8",
        "framework": "nemo",
        "framework_overrides": {"overlap_param_gather": False},
    },
    "cluster": {"profile": "dgx-h100-nominal"},
    "fidelity": "detailed",
}

#: Fraction of GPU memory a check or plan keeps free by default (docs/design.md, "Memory
#: headroom"): the caching allocator's fragmentation, NCCL's buffers and the CUDA context.
DEFAULT_MEMORY_HEADROOM = 0.10
#: Iteration times within this fraction of each other are one group of a plan (a tie).
DEFAULT_TIE_TOLERANCE = 0.03
MAX_COUNT = 2**31 - 1  # what every database stores as an integer
MAX_FLOAT = 1e15  # far beyond any figure the API takes, far below overflow
MAX_GPU_MEMORY_GB = 1e6  # a stored profile keeps bytes in a 64-bit integer
Count = Annotated[int, Field(le=MAX_COUNT)]  # > 0 is the engine's rule (it names the field)
MAX_PARAMETERS = 10**15  # a model's stated parameter count (no database column holds it)
Tflops = Annotated[float, Field(gt=0, le=MAX_FLOAT)]
DtypeKey = Annotated[str, Field(min_length=1, max_length=16)]


class _In(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        defer_build=model_build.DEFER,  # the CLI builds on first use (api/model_build.py)
    )


# --- estimate request parts -------------------------------------------------------------------


class _ModelShape(BaseModel):
    """The shape fields of a GPT-style model (``estimator.ModelSpec``'s), written once."""

    num_layers: Count | None = None
    hidden_size: Count | None = None
    num_attention_heads: Count | None = None
    seq_length: Count | None = None
    vocab_size: Count | None = None
    ffn_hidden_size: Count | None = None
    swiglu: bool | None = None
    num_query_groups: Count | None = None
    tied_embeddings: bool | None = None
    num_parameters: Annotated[int, Field(le=MAX_PARAMETERS)] | None = None
    moe_num_experts: Count | None = None
    moe_top_k: Count | None = None
    moe_every_k_layers: Count | None = None
    moe_ffn_hidden_size: Count | None = None
    kv_channels: Count | None = Field(
        None,
        description="width of one attention head where it is not hidden_size/num_attention_heads "
        "(Megatron's --kv-channels, Hugging Face's head_dim; Qwen3: 128)",
    )


class ModelIn(_In, _ModelShape):
    """A GPT-style model: a preset, explicit shape fields, or a preset plus overrides."""

    preset: str | None = Field(None, description="key of GET /v1/presets/models")


class _LayoutShape(BaseModel):
    """The layout fields a plan sweeps (``estimator.LayoutSpec``'s first six), written once."""

    pipeline: Count
    tensor: int
    data: Count
    virtual_stages: Count = 1
    sequence_parallel: bool = False
    zero_stage: Count = 0


class LayoutIn(_In, _LayoutShape):
    """The parallel layout (p, t, d) and its refinements; defaults are Megatron's."""

    context_parallel: Count = 1
    expert_parallel: int = 1
    expert_tensor_parallel: Count | None = Field(
        None,
        description="the experts' own tensor parallelism (Megatron-Core's "
        "--expert-tensor-parallel-size): left out, the layer's tensor; 1 runs each expert "
        "whole, its expert-parallel group spanning the stage's tensor·data·cp ranks "
        "(parallel folding; needs sequence_parallel under tensor > 1)",
    )
    rank_order: str = "tp-dp-pp"
    scatter_gather: bool = True
    overlap_dp: bool = False
    overlap_tp: bool = False
    first_stage_layers: Count | None = Field(
        None, description="layers on the first pipeline stage (Megatron's uneven split)"
    )
    last_stage_layers: Count | None = Field(
        None, description="layers on the last pipeline stage (Megatron's uneven split)"
    )


def _framework_name(value: str) -> str:
    if value.strip().lower() not in FRAMEWORK_NAMES:
        raise ValueError(f"unknown framework preset; known: {', '.join(FRAMEWORK_NAMES)}")
    return value.strip().lower()


#: A framework preset name (``estimator.frameworks``): the schema lists them, the error too.
FrameworkName = Annotated[
    str,
    AfterValidator(_framework_name),
    WithJsonSchema({"type": "string", "enum": list(FRAMEWORK_NAMES)}),
]


class FrameworkOverridesIn(_In):
    """Flags of the framework preset to override (``estimator.frameworks.Framework``); a flag
    left out keeps the preset's value. Every resolved flag is named in the answer."""

    tp_overlap_wgrad: bool | None = Field(
        None, description="backward TP collective under the weight-gradient GEMM"
    )
    sp_gather_overlap: bool | None = Field(
        None, description="SP's backward re-gather under the input-gradient GEMM"
    )
    grad_accum_fusion: bool | None = Field(
        None, description="weight-gradient GEMM accumulates into the fp32 main gradient"
    )
    tp_comm_overlap: bool | None = Field(
        None, description="TP collectives pipelined with the GEMMs (userbuffers, async TP)"
    )
    overlap_grad_reduce: bool | None = Field(
        None, description="DP gradient reduction under the last micro-batch's backward pass"
    )
    overlap_param_gather: bool | None = Field(
        None, description="distributed optimizer's parameter all-gather under the next forward"
    )
    overlap_p2p: bool | None = Field(None, description="pipeline sends under compute (interleaved)")
    cp_overlap: bool | None = Field(None, description="CP ring exchange under attention")
    cp_torch_ring: bool | None = Field(
        None,
        description="PyTorch's experimental ring attention (torchtitan): K/V gathered at the "
        "query head count, fp32 dK/dV passed at every ring step",
    )
    fsdp_prefetch: bool | None = Field(
        None, description="ZeRO-3/FSDP: next layer's gather under this layer's compute"
    )
    zero3_regather_for_recompute: bool | None = Field(
        None, description="ZeRO-3: gather again for a replayed forward"
    )
    grad_reduce_per_microbatch: bool | None = Field(
        None, description="ZeRO-2/3: reduce-scatter gradients every micro-batch"
    )
    zero3_list_collectives: bool | None = Field(
        None,
        description="ZeRO-3 gathers into and reduces from lists of per-rank views, which "
        "PyTorch copies through a flat buffer, one copy per rank (DeepSpeed 2021)",
    )
    zero3_rank_loop: bool | None = Field(
        None,
        description="ZeRO-3 builds each gather's output list in a Python loop over the ranks "
        "after a synchronize, the GPU idle (DeepSpeed 2021): one eager op per rank",
    )
    pp_scatter_gather: bool | None = Field(
        None,
        description="pipeline sends of 1/t of the activation, all-gathered over the TP group "
        "(Megatron's scatter/gather, DeepSpeed's partitioned sends)",
    )
    pp_scatter_gather_grads: bool | None = Field(
        None,
        description="pipeline gradients sent as 1/t and all-gathered like the activations "
        "(off: sent whole, DeepSpeed before v0.5.4)",
    )
    pp_regather_output: bool | None = Field(
        None,
        description="the partitioned output a stage sent is all-gathered over TP again before "
        "its backward pass (DeepSpeed's pipeline engine)",
    )
    pp_blocking_p2p: bool | None = Field(
        None,
        description="each pipeline send and receive blocks on its own (DeepSpeed's pipeline "
        "engine): four transfers per micro-batch instead of two",
    )
    pp_grad_reduce_after_schedule: bool | None = Field(
        None,
        description="with a pipeline, gradients are reduced only after the last micro-batch "
        "(DeepSpeed's pipeline engine): nothing of the reduction hides",
    )
    bf16_optimizer: bool | None = Field(
        None,
        description="DeepSpeed's BF16_Optimizer with bf16 and ZeRO-1: the whole gradient "
        "all-reduced over DP, then the weights all-gathered; the tied embedding's gradient "
        "reduced in fp32",
    )
    tp_fp8_all_gather: bool | None = Field(
        None,
        description="FP8 with sequence parallelism: TP all-gathers move FP8 (1-byte) elements, "
        "cast on the sequence shard (torchao float8 TP, torchtitan)",
    )
    sp_regather_saved_shard: bool | None = Field(
        None,
        description="SP: keep only the input's sequence shard and all-gather it again for the "
        "weight gradient (Megatron); off: the gathered input is saved (DTensor TP)",
    )
    zero3_gathers_per_layer: int | None = Field(
        None, ge=1, le=1024, description="ZeRO-3 collectives per layer and pass"
    )
    zero3_persistence_threshold: int | None = Field(
        None,
        ge=0,
        le=10**12,
        description="ZeRO-3: parameters with fewer elements stay gathered (DeepSpeed's "
        "stage3_param_persistence_threshold); 0: every tensor gathered per layer",
    )
    zero2_per_layer: bool | None = Field(
        None,
        description="ZeRO-2 as FSDP SHARD_GRAD_OP: per-layer gather before the forward and "
        "reduce-scatter after the backward; off: whole-stage buckets (DeepSpeed, Megatron)",
    )
    optimizer_bytes_per_parameter: float | None = Field(
        None, ge=0, le=1e4, description="HBM bytes the optimizer step moves per owned parameter"
    )
    compute_efficiency: float | None = Field(
        None,
        gt=0,
        le=2,
        description="the framework's compute speed relative to the fitted roofline (1: as "
        "fitted, every preset)",
    )
    layer_host_s: float | None = Field(
        None,
        ge=0,
        le=1,
        description="host seconds every transformer layer adds per micro-batch, forward and "
        "backward (a third more when replayed): the GPU waits on the host (breakdown term "
        "host); the DeepSpeed presets carry the value fitted on Megatron-DeepSpeed runs of "
        '2022 (README "Accuracy"); 0: not priced',
    )
    moe_layer_host_s: float | None = Field(
        None,
        ge=0,
        le=1,
        description="host seconds to issue one eager MoE layer's forward and backward per "
        "micro-batch: the layer takes at least this long (breakdown term host); the "
        "Megatron-Core presets carry the value fitted on an eager Megatron-LM recipe "
        '(README "Accuracy"); 0: not priced',
    )
    cuda_graphs: bool | None = Field(
        None,
        description="the MoE layers' router and dispatcher preprocessing (or more) run as "
        "captured CUDA graphs, so moe_layer_host_s does not apply",
    )
    fp8_current_scaling: bool | None = Field(
        None,
        description="FP8 scales from each tensor's own amax (Transformer Engine's current "
        "scaling, Megatron's --fp8-recipe tensorwise) rather than an amax history: an eager MoE "
        "layer's host time grows by 4 kernel launches per local expert and quantized tensor",
    )
    ep_comm_overlap: bool | None = Field(
        None,
        description="Megatron-Core's expert-parallel all-to-all overlap "
        "(--overlap-moe-expert-parallel-comm): with two or more micro-batches, 36.55 % of the "
        "expert all-to-alls run hidden under another micro-batch's compute (NVIDIA's Nsight "
        "measurement; the on-link time is reported in full)",
    )
    fp8_param_gather: bool | None = Field(
        None,
        description="in FP8 training the data-parallel parameter all-gather (distributed "
        "optimizer, ZeRO-3/FSDP) moves FP8 weights, 1 byte each (Megatron's "
        "--fp8-param-gather, NeMo's fp8_params, torchao's FSDP float8 all-gather); no effect "
        "in 16-bit training",
    )
    attention_kernel: Literal["fused", "flash2", "triton"] | None = Field(
        None,
        description="fused (TE/cuDNN, FlashAttention-3), flash2 (FlashAttention-2) or triton "
        "(FlashAttention in Triton, llm-foundry's attn_impl: triton)",
    )
    grad_reduce_fp32: bool | None = Field(
        None,
        description="gradients reduced over data parallelism in fp32 unless "
        "grad_reduce_precision says otherwise (torchtitan's FSDP2 reduce dtype)",
    )
    fused_elementwise: bool | None = Field(
        None, description="fused norms/RoPE/activations (Megatron/TE kernels, torch.compile)"
    )
    tp_comm_overlap_backward: bool | None = Field(
        None,
        description="tp_comm_overlap covers the backward pass and replays too; off: the "
        "forward pass only (PyTorch's async TP)",
    )
    selective_recompute: Literal["attention", "op-sac"] | None = Field(
        None,
        description="what recompute: selective replays: the attention core (Korthikanti et al. "
        "2022) or torch's op-level SAC (every other GEMM and the element-wise ops: torchtitan)",
    )
    fsdp_backward_prefetch: Literal["pre", "post"] | None = Field(
        None,
        description="FSDP BackwardPrefetch: pre (the next gather before this layer's gradients, "
        "hidden) or post (after them: exposed; Composer's default)",
    )
    recompute_early_stop: bool | None = Field(
        None,
        description="full recompute stops once the backward pass has every tensor it needs, "
        "before each dense layer's last GEMM (FC2) and its output's TP collective: PyTorch >= "
        "2.1 non-reentrant checkpoint (FSDP trainers); off: the whole forward is replayed "
        "(Megatron, DeepSpeed, torchtitan since Aug. 2025)",
    )


class _Numerics(_In):
    """Numerics shared by estimates and plans."""

    global_batch_size: Count
    precision: Precision = Precision.FP16
    grad_reduce_precision: Precision | None = None
    flash_attention: bool = Field(
        True,
        description="FlashAttention: no materialised s² scores (memory, HBM traffic); "
        "false for runs without it (Megatron-LM before 2023)",
    )
    framework: FrameworkName = Field(
        DEFAULT_FRAMEWORK,
        description="the training software's preset: what it overlaps, fuses and shards "
        "(detailed fidelity; GET /v1/presets/frameworks)",
    )
    framework_overrides: FrameworkOverridesIn | None = Field(
        None, description="flags of the preset to override"
    )
    recompute_num_layers: int | None = Field(
        None,
        ge=0,
        le=MAX_COUNT,
        description="with recompute: full, partial recompute as Megatron's --recompute-method "
        "block --recompute-num-layers N: the first N layers of each (virtual) pipeline chunk "
        "replay their forward pass, the others keep their activations (default: every layer)",
    )
    moe_capacity_factor: float | None = Field(
        None,
        ge=1,
        le=MAX_FLOAT,
        description="MoE: tokens on the busiest expert rank over the mean (default: balanced)",
    )
    moe_token_dispatcher: MoeDispatcher = Field(
        MoeDispatcher.ALLTOALL,
        description="MoE, detailed fidelity: how routed tokens reach their experts (Megatron's "
        "--moe-token-dispatcher-type): alltoall, every routed copy on the wire; flex (DeepEP, "
        "HybridEP), a token crosses to each remote node once over RDMA and reaches each rank "
        "once over NVLink",
    )


class TrainingIn(_Numerics):
    """Batch and numerics of one iteration."""

    micro_batch_size: Count = 1
    recompute: Recompute = Recompute.FULL


class PlanTrainingIn(_Numerics):
    """Batch and numerics for a plan; micro-batch size and recompute, when given, pin the
    sweep to that value (the plan's list constraints widen it)."""

    micro_batch_size: Count | None = None
    recompute: Recompute | None = None


class BandwidthIn(_In):
    """The paper's scalar C per kind of traffic: bus bandwidth in GB/s (10^9 B/s)."""

    tp: float = Field(gt=0, le=MAX_FLOAT)
    pp: float = Field(gt=0, le=MAX_FLOAT)
    dp: float = Field(gt=0, le=MAX_FLOAT)
    cp: float | None = Field(None, gt=0, le=MAX_FLOAT, description="default: tp")
    expert: float | None = Field(None, gt=0, le=MAX_FLOAT, description="default: dp")
    embedding_sync: float | None = Field(None, gt=0, le=MAX_FLOAT, description="default: dp")


class ClusterIn(_In):
    """A stored profile, or explicit figures (GPUs per node, peak, u, scalar bandwidths)."""

    profile: str | None = Field(None, description="name of a profile (GET /v1/profiles)")
    gpus_per_node: Count | None = None
    peak_tflops: float | None = Field(None, gt=0, le=MAX_FLOAT, description="dense TFLOP/s per GPU")
    utilization: float | None = Field(None, gt=0, le=1, description="u, fraction of peak")
    bandwidth_gbps: BandwidthIn | None = None
    gpu: str | None = Field(None, description="key of GET /v1/presets/gpus")
    gpu_memory_gb: float | None = Field(None, gt=0, le=MAX_FLOAT, description="GB = 10^9 bytes")
    memory_bandwidth_gbps: float | None = Field(
        None,
        gt=0,
        le=MAX_FLOAT,
        description="HBM GB/s (default: the GPU preset's or nominal profile's)",
    )
    memory_traffic_factor: float | None = Field(
        None,
        ge=0,
        le=MAX_FLOAT,
        description="γ of the roofline refinement of compute time (detailed fidelity); "
        "default: the nominal profile's fitted γ, else 0 (pure FLOPs/(u·F))",
    )
    gemm_traffic_factor: float | None = Field(
        None,
        ge=0,
        le=MAX_FLOAT,
        description="c: GEMM operand bytes through HBM (detailed fidelity); default: the fitted "
        "c of the GPU family, else 0",
    )
    gemm_half_size_elements: float | None = Field(
        None,
        ge=0,
        le=MAX_FLOAT,
        description="x0 of the size-dependent GEMM efficiency (detailed fidelity): a linear "
        "layer whose per-GPU weight is n x k runs at u·x/(x + x0), x = 2nk/(n + k); default: "
        "the fitted x0 of the GPU family with a profile, else 0 (one u for every size)",
    )
    fp8_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="u8: FP8 GEMM efficiency, fraction of the FP8 peak; default: the fitted u8 "
        "of the GPU family, else u",
    )
    fp8_expert_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="u8e: FP8 efficiency of a MoE layer's expert GEMMs, fraction of the FP8 "
        "peak; default: the fitted u8e of the GPU family, else u8",
    )
    flash2_efficiency: float | None = Field(
        None,
        gt=0,
        le=1,
        description="FlashAttention-2's efficiency relative to the GEMMs on this GPU "
        "(default: the GPU family's, 0.5 on Hopper; 1 otherwise)",
    )
    cuda_core_peak_tflops: float | None = Field(
        None,
        gt=0,
        le=MAX_FLOAT,
        description="FP32 TFLOP/s of the GPU without tensor cores (detailed fidelity): the rate "
        "of attention's batched GEMMs (no FlashAttention) when head_dim x element bytes is not "
        "a multiple of 16; default: the GPU preset's or profile GPU family's FP32 datasheet "
        "figure, else unknown (that slowdown not priced)",
    )


class _ScenarioIn(_In):
    model: ModelIn
    layout: LayoutIn
    training: TrainingIn
    fidelity: Fidelity = Fidelity.DETAILED
    gpus: Count | None = Field(None, description="when given, must equal p·t·d·cp")


class EstimateRequest(_ScenarioIn):
    """POST /v1/estimates."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [EXAMPLE_ESTIMATE, EXAMPLE_SCALAR_C, EXAMPLE_FRAMEWORK]},
    )

    cluster: ClusterIn


#: Which traffic a matrix shows: every entry, or only what crosses the network.
TrafficView = Literal["all", "network"]


class TrafficMatrixRequest(EstimateRequest):
    """POST /v1/traffic-matrices: an estimate request plus the matrix's form.

    ``view``: ``all`` (every entry) or ``network`` (only entries between different nodes:
    intra-node GPU pairs, or the node-level diagonal, left out; the PNG then shows GB/s,
    bytes per iteration over the iteration time).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{**EXAMPLE_ESTIMATE, "format": "json", "level": "node"}]},
    )

    format: Literal["json", "csv", "png"] = "json"
    level: Literal["gpu", "node"] = "gpu"
    algorithm: Algorithm = Algorithm.RING
    view: TrafficView = Field(
        "all",
        description="all entries, or network: only traffic between different nodes",
    )


#: Sizes of one kind of parallelism for a plan to sweep (1 to 16 of them).
ParallelSizes = Annotated[
    list[Annotated[int, Field(ge=1, le=MAX_COUNT)]] | None, Field(min_length=1, max_length=16)
]


class PlanConstraints(_In):
    """What a plan may sweep; each list narrows (or widens) the swept values."""

    max_tensor: int | None = Field(None, ge=1, le=MAX_COUNT)
    micro_batch_sizes: list[Count] | None = Field(None, min_length=1, max_length=64)
    zero_stages: list[Literal[0, 1, 2, 3]] | None = Field(None, min_length=1)
    recompute: list[Recompute] | None = Field(
        None,
        min_length=1,
        description="recompute modes to sweep (default: all three, or training.recompute)",
    )
    recompute_num_layers: list[Count] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="block recompute to sweep beside full recompute: for each N, the layouts "
        "with recompute full again, replaying the first N layers of each pipeline chunk "
        "(only where a chunk holds more than N); each layout names its own "
        "recompute_num_layers",
    )
    sequence_parallel: list[bool] | None = Field(None, min_length=1)
    max_virtual_stages: int = Field(8, ge=1, le=64)
    drop_infeasible: bool = False
    memory_headroom: float = Field(
        DEFAULT_MEMORY_HEADROOM,
        ge=0,
        lt=1,
        description="fraction of GPU memory kept free: a layout fits when its memory is within "
        "(1 - headroom) of the capacity (docs/design.md, Memory headroom)",
    )
    tensor_within_node: bool = Field(
        False, description="only layouts whose tensor size divides the GPUs per node"
    )
    precision: list[Precision] | None = Field(
        None,
        min_length=1,
        max_length=len(Precision),
        description="precisions to sweep (default: training.precision); each layout names its own",
    )
    context_parallel: ParallelSizes = Field(
        None,
        description="context-parallel sizes to sweep; default: 1, plus the powers of two that "
        "divide gpus and keep >= 4096 tokens per rank when seq_length >= 16384 (detailed "
        "fidelity; docs/design.md, Planner candidates)",
    )
    expert_parallel: ParallelSizes = Field(
        None,
        description="expert-parallel sizes to sweep (each divides the expert count; a layout "
        "takes those that divide its d·cp); default: 1, and for a MoE model every power of two "
        "that divides the expert count and gpus (detailed fidelity)",
    )
    experts_folded: list[bool] | None = Field(
        None,
        min_length=1,
        max_length=2,
        description="whether to sweep layouts with the experts folded over TP "
        "(expert_tensor_parallel 1: t > 1 under SP, the EP size dividing t·d·cp); default: "
        "[false, true] for a MoE model in detailed fidelity, else [false]",
    )


class PlanRequest(PlanConstraints):
    """POST /v1/plans: every valid layout of ``gpus`` GPUs, ranked by iteration time.

    The constraints may be given at the top level or grouped under ``constraints`` (not both
    for the same one).
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "model": {"preset": "gpt3-175b"},
                    "training": {"global_batch_size": 1536, "precision": "fp16"},
                    "cluster": {"profile": "dgx-a100-nominal", "utilization": 0.5},
                    "gpus": 1536,
                    "top_k": 10,
                    "max_tensor": 8,
                },
                {
                    "model": {"preset": "gpt3-175b"},
                    "training": {"global_batch_size": 1536},
                    "cluster": {"profile": "dgx-a100-nominal", "utilization": 0.5},
                    "gpus": 1536,
                    "constraints": {"max_tensor": 8, "zero_stages": [0, 1]},
                },
            ]
        },
    )

    model: ModelIn
    training: PlanTrainingIn
    cluster: ClusterIn
    fidelity: Fidelity = Fidelity.DETAILED
    gpus: int = Field(gt=0, le=MAX_COUNT)
    top_k: int = Field(10, ge=1, le=10_000)
    tie_tolerance: float = Field(
        DEFAULT_TIE_TOLERANCE,
        ge=0,
        le=1,
        description="layouts within this fraction of a group's fastest time are one group, "
        "ranked by t within a node, then fewer communication seconds",
    )
    constraints: PlanConstraints | None = Field(
        None,
        description="the constraints grouped; the server moves them to the top level",
        exclude=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _lift_constraints(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("constraints") is None:
            return data
        constraints = data["constraints"]
        if not isinstance(constraints, dict):
            raise ValueError("constraints must be an object")
        known = list(PlanConstraints.model_fields)
        unknown = sorted(set(constraints) - set(known))
        if unknown:
            raise ValueError(f"unknown constraints {unknown}; known: {known}")
        twice = sorted(set(constraints) & set(data))
        if twice:
            raise ValueError(f"{twice} given both at the top level and under constraints")
        lifted = {k: v for k, v in data.items() if k != "constraints"}
        lifted.update(constraints)
        return lifted


class CheckRequest(EstimateRequest):
    """POST /v1/checks: an estimate request and exactly one criterion."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {**EXAMPLE_ESTIMATE, "max_iteration_time_s": 30.0},
                {**EXAMPLE_ESTIMATE, "baseline": "gpt3-main", "tolerance": 0.05},
            ]
        },
    )

    max_iteration_time_s: float | None = Field(None, gt=0, le=MAX_FLOAT)
    baseline: Name | None = None
    tolerance: float | None = Field(
        None, ge=0, le=MAX_FLOAT, description="fraction over the baseline allowed (default 0.05)"
    )
    memory_headroom: float = Field(
        DEFAULT_MEMORY_HEADROOM,
        ge=0,
        lt=1,
        description="fraction of GPU memory kept free (allocator fragmentation, NCCL buffers, "
        "CUDA context; docs/design.md): the layout must fit in (1 - headroom) of the capacity",
    )
    allow_memory_overflow: bool = Field(
        False,
        description="true: a layout over the usable GPU memory does not fail the check "
        "(the memory comparison is still reported)",
    )
    max_communication_ratio: float | None = Field(
        None, ge=0, le=1, description="fail when the exposed communication share is above this"
    )
    max_bubble_ratio: float | None = Field(
        None, ge=0, le=1, description="fail when the pipeline bubble share is above this"
    )
    min_mfu: float | None = Field(
        None, gt=0, le=1, description="fail when the model FLOPs utilization is below this"
    )


class BaselinePut(_In):
    """PUT /v1/baselines/{name}: an estimate request, or ``{"request", "iteration_time_s"}``."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"request": EXAMPLE_ESTIMATE, "iteration_time_s": 24.1}]},
    )

    request: EstimateRequest
    iteration_time_s: float | None = Field(
        None, gt=0, description="the time to hold as the baseline (default: the prediction)"
    )

    @model_validator(mode="before")
    @classmethod
    def _wrap_bare_request(cls, data: Any) -> Any:
        if isinstance(data, dict) and "request" not in data and "iteration_time_s" not in data:
            return {"request": data}
        return data


class CalibrationEstimateIn(_ScenarioIn):
    """An estimate request whose cluster is the calibrated profile (cluster may be left out)."""

    cluster: ClusterIn | None = None


class CalibrationRunIn(_In):
    """One layout run on the cluster and its measured iteration time."""

    request: CalibrationEstimateIn
    measured_iteration_time_s: float = Field(gt=0, le=MAX_FLOAT)
    label: str | None = Field(None, max_length=200)


class CalibrationRequest(_In):
    """POST /v1/profiles/{name}/calibrations."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "runs": [
                        {
                            "request": {
                                k: v for k, v in EXAMPLE_ESTIMATE.items() if k != "cluster"
                            },
                            "measured_iteration_time_s": 26.0,
                            "label": "gpt3 p8 t8 d24",
                        }
                    ],
                    "apply": True,
                }
            ]
        },
    )

    stored_run_ids: list[Annotated[int, Field(ge=1, le=MAX_COUNT)]] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="measured runs stored from training logs (GET .../training-logs) to fit on",
    )
    use_stored_runs: bool = Field(
        False, description="fit on every measured run stored for the profile"
    )
    runs: list[CalibrationRunIn] = Field(
        default_factory=list, max_length=1000, validate_default=True
    )
    apply: bool = False
    force: bool = Field(
        False,
        description="with apply: set a fitted u outside the plausible range [0.15, 0.95] "
        "of peak too (without it such a fit is a 422 and changes nothing)",
    )

    @field_validator("runs")
    @classmethod
    def _some_runs(
        cls, runs: list[CalibrationRunIn], info: ValidationInfo
    ) -> list[CalibrationRunIn]:
        stored = info.data.get("stored_run_ids") is not None or info.data.get("use_stored_runs")
        if not runs and not stored:
            raise ValueError(
                "must hold at least one measured run, or name stored ones "
                "(stored_run_ids, use_stored_runs)"
            )
        return runs

    @model_validator(mode="after")
    def _one_way_to_name_stored_runs(self) -> CalibrationRequest:
        if self.use_stored_runs and self.stored_run_ids is not None:
            raise ValueError("give stored_run_ids or use_stored_runs, not both")
        return self


class ProfileCreate(_In):
    """POST /v1/profiles."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "my-a100-cluster",
                    "gpu_model": "A100-SXM4-80GB",
                    "gpus_per_node": 8,
                    "peak_tflops": 312,
                    "utilization": 0.45,
                    "gpu_memory_gb": 80,
                    "description": "training cluster, HDR IB",
                }
            ]
        },
    )

    name: Name
    gpu_model: str = Field(min_length=1, max_length=64)
    gpus_per_node: int = Field(ge=1, le=1024)
    peak_tflops: float | None = Field(None, gt=0, le=MAX_FLOAT)
    peak_tflops_by_dtype: dict[DtypeKey, Tflops] | None = Field(None, max_length=32)
    utilization: float | None = Field(None, gt=0, le=1)
    gpu_memory_gb: float | None = Field(None, gt=0, le=MAX_GPU_MEMORY_GB)
    description: str = Field("", max_length=10_000)


class ProfileUpdate(_In):
    """PATCH /v1/profiles/{name}: only the fields given change; null clears a nullable one."""

    name: Name | None = None
    gpu_model: str | None = Field(None, min_length=1, max_length=64)
    gpus_per_node: int | None = Field(None, ge=1, le=1024)
    peak_tflops: float | None = Field(None, gt=0, le=MAX_FLOAT)
    peak_tflops_by_dtype: dict[DtypeKey, Tflops] | None = Field(None, max_length=32)
    utilization: float | None = Field(None, gt=0, le=1)
    gpu_memory_gb: float | None = Field(None, gt=0, le=MAX_GPU_MEMORY_GB)
    description: str | None = Field(None, max_length=10_000)


MAX_RANKS = 10_000_000


class UploadHints(BaseModel):
    """What the uploader says about a benchmark text that the text may not say itself (the
    query parameters of POST /v1/profiles/{name}/runs); where both say, the text wins."""

    op: Op | None = Field(None, description="collective, if the text omits it")
    ranks: int | None = Field(None, ge=1, le=MAX_RANKS, description="rank count, if omitted")
    nodes: int | None = Field(None, ge=1, le=MAX_RANKS, description="node count, if omitted")
    backend: str | None = Field(None, max_length=32)
    dtype: str | None = Field(None, max_length=16)


class BandwidthQuery(BaseModel):
    """The query parameters of GET /v1/profiles/{name}/bandwidth: a collective at a scale and
    message size."""

    op: Op = Field(description="collective, e.g. all_reduce")
    ranks: int = Field(ge=1, le=MAX_RANKS)
    nodes: int = Field(ge=1, le=MAX_RANKS)
    size_bytes: float = Field(
        alias="bytes", ge=1, le=1e15, allow_inf_nan=False, description="message size (>= 1 byte)"
    )


class FileHints(UploadHints):
    """Hints and a label for one file of a multipart upload (the ``hints`` form field, a JSON
    object keyed by file name); they override the query parameters for that file."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(None, min_length=1, max_length=128)


class UploadPatch(BaseModel):
    """PATCH /v1/profiles/{name}/uploads/{id}: disable an upload (its runs stop answering
    bandwidth queries) or enable it again."""

    model_config = ConfigDict(extra="forbid")

    disabled: bool


# --- responses --------------------------------------------------------------------------------
#
# Built from domain objects (``Model.model_validate(obj)``, ``from_attributes``): an attribute
# whose name differs from the JSON member is mapped with ``validation_alias``, members the domain
# object lacks are given with ``Members``. The JSON member names are the contract.


class Members:
    """A domain object's attributes plus (or overridden by) a few members an answer adds.

    ``RunOut.model_validate(Members(run, already_stored=True))`` reads every other field from
    ``run``; a member given here is never read from the object (``points=None`` does not load
    a run's points).
    """

    __slots__ = ("_members", "_source")

    def __init__(self, source: object, /, **members: Any) -> None:
        self._source = source
        self._members = members

    def __getattr__(self, name: str) -> Any:
        if name in self._members:
            return self._members[name]
        return getattr(self._source, name)


class _Out(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        from_attributes=True,
        populate_by_name=True,  # a response also reads back from its own JSON
        json_schema_serialization_defaults_required=True,  # every member is always sent
        allow_inf_nan=False,  # JSON has no Infinity or NaN: see finite_answer
        defer_build=model_build.DEFER,  # as _In
    )


@contextmanager
def finite_answer(inputs: Mapping[str, Any]) -> Iterator[None]:
    """Build a response inside: a number in it that is not finite (which JSON cannot carry)
    becomes a ValidationError naming ``inputs``, the request values the answer came from.

    Every response model refuses Infinity and NaN, so this is the one place where an answer
    the figures cannot give turns into a 422 instead of a 200 carrying an invalid number.
    """
    try:
        yield
    except PydanticValidationError as exc:
        errors = exc.errors()
        if not errors or any(e["type"] != "finite_number" for e in errors):
            raise
        first = errors[0]
        member = next((p for p in reversed(first["loc"]) if isinstance(p, str)), "answer")
        raise ValidationError(
            ", ".join(inputs),
            dict(inputs) if len(inputs) > 1 else next(iter(inputs.values()), None),
            f"gives a non-finite {member} ({first['input']}), which no answer can carry: "
            "the figures are outside the range commest computes with",
        ) from None


class RatiosOut(_Out):
    """Shares of the iteration time (from an ``Estimate``)."""

    communication: float = Field(validation_alias="communication_ratio")
    bubble: float = Field(validation_alias="bubble_ratio")


class ThroughputOut(_Out):
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float


class BandwidthQualityOut(_Out):
    """How far a bandwidth answer is from data (from an ``estimator.BandwidthAnswer``).

    ``distance_octaves``: |log2(size / nearest measured size)| of the runs that answered (0 at a
    measured size); ``derived_placement``: measured at another (ranks, nodes);
    ``derived_op``: another collective's runs stood in; ``weak``: nominal, more than 2 binary
    orders of magnitude from measured sizes, beyond its rule's bound, a lower bound, or from an
    upload flagged as not matching the profile; ``advice``: what to upload to make it strong.
    """

    distance_octaves: float
    derived_placement: bool
    derived_op: Collective | None
    weak: bool
    advice: str | None


class CollectiveOut(_Out):
    """One collective of the iteration with the bandwidth used and where it came from."""

    kind: TrafficKind
    term: str
    op: Collective
    ranks: int
    nodes: int
    size_bytes: float
    calls_per_iteration: float
    busbw_gbps: float
    method: str
    source: str
    quality: BandwidthQualityOut
    time_per_call_s: float
    link_time_s: float
    scope: str = Field(
        description="which members of the group exchange its bytes: group (all of them); a "
        "flex MoE dispatch's legs: across_nodes (one rank per node, the same position; priced "
        "on the whole group's placement, sized so its off-node share is what crosses) and "
        "within_node (the group's ranks on one node)"
    )


class MemoryOut(_Out):
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    total_bytes: float
    capacity_bytes: float | None
    fits: bool | None


class ClusterOut(_Out):
    """The cluster figures the estimate used, and where each came from (from an
    ``api.scenario.ResolvedCluster``)."""

    profile: str | None
    gpus_per_node: int = Field(validation_alias=AliasPath("spec", "gpus_per_node"))
    peak_tflops: float
    utilization: float = Field(validation_alias=AliasPath("spec", "utilization"))
    utilization_source: str
    gpu_memory_bytes: float | None = Field(validation_alias=AliasPath("spec", "gpu_memory_bytes"))
    memory_bandwidth_gbps: float | None = Field(
        validation_alias=AliasPath("spec", "memory_bandwidth_gbps")
    )
    memory_traffic_factor: float = Field(
        validation_alias=AliasPath("spec", "memory_traffic_factor")
    )
    gemm_traffic_factor: float = Field(validation_alias=AliasPath("spec", "gemm_traffic_factor"))
    gemm_half_size_elements: float = Field(
        validation_alias=AliasPath("spec", "gemm_half_size_elements")
    )
    fp8_utilization: float | None = Field(validation_alias=AliasPath("spec", "fp8_utilization"))
    fp8_expert_utilization: float | None = Field(
        validation_alias=AliasPath("spec", "fp8_expert_utilization")
    )
    flash2_efficiency: float = Field(validation_alias=AliasPath("spec", "flash2_efficiency"))
    cuda_core_peak_tflops: float | None
    bandwidth: str


class FrameworkOut(_Out):
    """The training software the estimate assumed: the preset and every resolved flag."""

    name: str
    description: str
    flags: dict[str, bool | int | float | str] = Field(
        description="every behaviour flag, overrides applied"
    )

    @model_validator(mode="before")
    @classmethod
    def _from_framework(cls, data: Any) -> Any:
        if hasattr(data, "flags") and callable(data.flags):
            return {"name": data.name, "description": data.description, "flags": data.flags()}
        return data


class RunsValidatedOut(_Out):
    """How the detailed model did on a handful of published runs, predicted out of sample by
    ``commest validate`` (too few for percentiles: their least and greatest error)."""

    runs: int = Field(description="published runs, scored out of sample")
    mean_abs_error_pct: float = Field(description="mean |predicted - measured| / measured, %")
    mean_error_pct: float = Field(
        description="mean signed error, %: below 0, those runs took longer than predicted"
    )
    min_error_pct: float = Field(description="the least signed error of those runs, %")
    max_error_pct: float = Field(description="the greatest signed error of those runs, %")
    misses_target: bool = Field(description="mean |error| above the validation's 8 % target")


class FineGrainedMoeValidatedOut(RunsValidatedOut):
    """The published MoE runs whose experts are narrower than the model (``commest validate``,
    kind "fine-grained moe")."""


class SameModelValidatedOut(RunsValidatedOut):
    """The published runs of this estimate's own model (the same layers, width, heads, experts
    and MLP width) under its kind of trainer (``commest validate --model``)."""

    model: str = Field(description="the name(s) the published runs give the model")


class ValidatedOut(_Out):
    """How the detailed model did on the published runs of this estimate's kind of trainer,
    predicted out of sample by ``commest validate`` (README "Accuracy")."""

    trainer_kind: TrainerKind = Field(description="the kind of trainer the framework preset is")
    runs: int = Field(description="published runs of that kind, scored out of sample")
    mean_abs_error_pct: float = Field(description="mean |predicted - measured| / measured, %")
    mean_error_pct: float = Field(
        description="mean signed error, %: below 0, those runs took longer than predicted"
    )
    error_p10_pct: float = Field(description="10th percentile of the signed error, %")
    error_p90_pct: float = Field(description="90th percentile of the signed error, %")
    misses_target: bool = Field(
        description="mean |error| above the validation's 8 % per-family target (the estimate "
        "then warns)"
    )
    fine_grained_moe: FineGrainedMoeValidatedOut | None = Field(
        default=None,
        description="the model's experts are narrower than the model (moe_ffn_hidden_size < "
        "hidden_size): how the published runs of such models were off, the figures that apply "
        "to this estimate more than its kind's (iteration_time_range_s spans them); null for "
        "other models",
    )
    same_model: SameModelValidatedOut | None = Field(
        default=None,
        description="commest was validated on published runs of this very model (the same "
        "layers, width, heads, experts and MLP width) under this kind of trainer: how far those "
        "were off; null when there are none",
    )


def _terms(value: Any) -> Any:
    """A breakdown as ``{term: seconds}`` (the engine's ``Breakdown.as_dict``)."""
    return value.as_dict() if hasattr(value, "as_dict") else value


class EstimateResponse(_Out):
    """POST /v1/estimates (from an ``api.scenario.Answer``: an estimate and its cluster)."""

    iteration_time_s: float = Field(validation_alias=AliasPath("estimate", "iteration_time_s"))
    iteration_time_range_s: tuple[float, float] | None = Field(
        validation_alias=AliasPath("estimate", "iteration_time_range_s"),
        description="[low, high]: the measured time if this estimate erred as the middle 80 % "
        "of published runs of its kind of trainer did (out of sample; see validated), widened "
        "for MoE whose experts are narrower than the model to the least and greatest error of "
        "such runs (see warnings); null in paper fidelity",
    )
    breakdown_s: Annotated[dict[str, float], BeforeValidator(_terms)] = Field(
        validation_alias=AliasPath("estimate", "breakdown")
    )
    link_time_s: dict[str, float] = Field(validation_alias=AliasPath("estimate", "link_s"))
    ratios: RatiosOut = Field(validation_alias="estimate")
    throughput: ThroughputOut = Field(validation_alias=AliasPath("estimate", "throughput"))
    traffic_bytes_per_gpu: dict[str, float] = Field(
        validation_alias=AliasPath("estimate", "traffic_bytes")
    )
    collectives: list[CollectiveOut] = Field(
        validation_alias=AliasPath("estimate", "collectives"),
        description="with the quality of each bandwidth answer",
    )
    memory: MemoryOut = Field(validation_alias=AliasPath("estimate", "memory"))
    micro_batches: int = Field(validation_alias=AliasPath("estimate", "micro_batches"))
    parameters: float = Field(validation_alias=AliasPath("estimate", "parameters"))
    parameters_per_gpu: float = Field(validation_alias=AliasPath("estimate", "gpu_parameters"))
    model_flops_per_iteration: float = Field(validation_alias=AliasPath("estimate", "model_flops"))
    hardware_flops_per_iteration: float = Field(
        validation_alias=AliasPath("estimate", "hardware_flops")
    )
    gpus: int = Field(validation_alias=AliasPath("estimate", "scenario", "layout", "gpus"))
    fidelity: Fidelity = Field(validation_alias=AliasPath("estimate", "scenario", "fidelity"))
    framework: FrameworkOut = Field(
        validation_alias=AliasPath("estimate", "scenario", "training", "framework"),
        description="the framework preset and flags the detailed fidelity assumed",
    )
    cluster: ClusterOut
    assumptions: list[str]
    warnings: list[str] = Field(
        description="the engine's warnings, then one line per weak bandwidth answer"
    )
    validated: ValidatedOut | None = Field(
        validation_alias=AliasPath("estimate", "validated"),
        description="the out-of-sample error on published runs of this kind of trainer "
        "(detailed fidelity; null in paper fidelity)",
    )


@with_config(ConfigDict(extra="forbid", allow_inf_nan=False))
class TrafficRowOut(TypedDict):
    """One sparse entry: bytes per iteration from GPU (or node) ``src`` to ``dst``. A typed
    dict, not a model: a matrix has up to millions of rows, and a dict validates ~4x faster."""

    src: int
    dst: int
    bytes: float
    kind: TrafficKind


class TrafficTotalsOut(_Out):
    bytes: float
    by_kind: dict[str, float]
    entries: int


class TrafficMatrixResponse(_Out):
    """POST /v1/traffic-matrices with ``format: json``: the sparse rows and their totals."""

    gpus: int
    gpus_per_node: int
    level: Literal["gpu", "node"]
    size: int = Field(validation_alias=AliasPath("traffic", "size"))
    algorithm: Algorithm
    view: TrafficView = "all"
    unit: Literal["bytes per iteration"] = "bytes per iteration"
    rows: list[TrafficRowOut]
    totals: TrafficTotalsOut
    iteration_time_s: float = Field(validation_alias=AliasPath("result", "iteration_time_s"))


class PlanLayoutOut(_LayoutShape, _Out):
    """One swept layout: the layout fields and the training fields a plan sweeps."""

    micro_batch_size: int
    recompute: Recompute
    recompute_num_layers: int | None = Field(
        None,
        # absent unless a block recompute was swept: a layout moved into an estimate request
        # (its training fields into training) stays the request it was before
        exclude_if=lambda value: value is None,
        description="block recompute (a training field): layers replayed per pipeline chunk; "
        "absent: every layer, or no full recompute",
    )
    context_parallel: int = 1
    expert_parallel: int = 1
    expert_tensor_parallel: int | None = Field(
        None, description="1 when the experts are folded over TP; absent: the layer's tensor"
    )
    precision: Precision = Precision.FP16


class PlanEntryOut(_Out):
    rank: int
    layout: PlanLayoutOut
    iteration_time_s: float
    breakdown_s: dict[str, float]
    micro_batches: int
    memory_bytes: float
    fits: bool | None = Field(description="memory within (1 - memory_headroom) of the GPU's")
    group: int = Field(
        1, description="tie group (1 = the fastest): iteration times within tie_tolerance"
    )
    communication_s: float = Field(
        0.0,
        description="exposed communication seconds (breakdown less compute, bubble, optimizer, "
        "host)",
    )
    tensor_within_node: bool = Field(True, description="t divides the GPUs per node")


class PlanResponse(_Out):
    """POST /v1/plans."""

    gpus: int
    evaluated: int
    feasible: int | None
    layouts: list[PlanEntryOut]
    cluster: ClusterOut
    assumptions: list[str]
    warnings: list[str]
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM
    usable_memory_bytes: float | None = Field(
        None, description="GPU memory a layout may use: capacity·(1 - memory_headroom)"
    )
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE
    context_parallel: list[int] = Field(
        default_factory=lambda: [1], description="the context-parallel sizes swept"
    )
    expert_parallel: list[int] = Field(
        default_factory=lambda: [1], description="the expert-parallel sizes swept"
    )
    experts_folded: list[bool] = Field(
        default_factory=lambda: [False],
        description="whether layouts with the experts folded over TP were swept (true) too",
    )


class BaselineRead(_Out):
    name: str
    iteration_time_s: float
    request: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class BaselineWritten(BaselineRead):
    predicted_iteration_time_s: float
    source: Literal["predicted", "given"]


class BaselineHeld(BaselineRead):
    """The baseline a check was held to, and the fraction over it allowed."""

    tolerance: float


class CheckComparisonOut(_Out):
    """One comparison a check made: ``value`` against ``limit`` by ``relation``."""

    name: Literal["iteration_time_s", "memory_bytes", "communication_ratio", "bubble_ratio", "mfu"]
    value: float
    limit: float | None = Field(description="null: nothing to compare against (unknown capacity)")
    relation: Literal["<=", ">="]
    passed: bool | None = Field(description="null when the limit is unknown")
    enforced: bool = Field(
        description="false: reported only (memory with allow_memory_overflow, unknown capacity)"
    )
    detail: str


class CheckMemoryOut(_Out):
    """The memory side of a check: the per-GPU total against the capacity less the headroom."""

    total_bytes: float
    capacity_bytes: float | None
    memory_headroom: float
    usable_bytes: float | None
    fits: bool | None
    allow_memory_overflow: bool


class CheckResponse(_Out):
    """POST /v1/checks."""

    passed: bool
    criterion: Literal["budget", "baseline"]
    predicted_iteration_time_s: float
    limit_s: float
    margin_s: float
    margin_pct: float
    baseline: BaselineHeld | None
    estimate: EstimateResponse
    memory: CheckMemoryOut
    comparisons: list[CheckComparisonOut] = Field(
        description="every comparison made: the time criterion, memory, then each threshold given"
    )
    reasons: list[str] = Field(description="why the check failed, one line per failed comparison")


def _text(value: Any) -> Any:
    return "" if value is None else value


class ProfileRead(_Out):
    """A stored profile (from the ORM ``Profile``)."""

    name: str
    gpu_model: str
    gpus_per_node: int
    peak_tflops: float | None
    peak_tflops_by_dtype: dict[str, float] | None
    gpu_memory_bytes: int | None
    utilization: float | None
    utilization_source: str | None
    description: Annotated[str, BeforeValidator(_text)]
    nominal: bool
    created_at: datetime
    updated_at: datetime

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpu_memory_gb(self) -> float | None:
        """``gpu_memory_bytes`` in GB (10^9 bytes)."""
        return None if self.gpu_memory_bytes is None else self.gpu_memory_bytes / GB


class ProfilesPage(_Out):
    profiles: list[ProfileRead]
    count: int


class PointOut(_Out):
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    in_place: bool


def _listed(value: Any) -> Any:
    return [] if value is None else value


class RunOut(_Out):
    """A stored run (from the ORM ``Run``); ``points`` is null when not asked for."""

    id: int
    upload_id: int
    collective: str
    tool: str
    backend: str | None
    ranks: int
    nodes: int
    ranks_per_node: int | None
    gpu_model: str | None
    dtype: str | None
    tool_version: str | None
    alpha_us: float | None
    beta_gbps: float | None = Field(description="the fitted β in algbw (S / T); = beta_algbw_gbps")
    beta_algbw_gbps: float | None
    beta_busbw_gbps: float | None = Field(description="the fitted β as bus bandwidth")
    warnings: Annotated[list[str], BeforeValidator(_listed)]
    created_at: datetime
    points: list[PointOut] | None
    already_stored: bool | None = Field(None, description="uploads only: it was stored before")


class FlagOut(_Out):
    """What about an upload does not match its profile (``gpu_mismatch``,
    ``exceeds_hardware``)."""

    code: str
    message: str


class UploadOut(_Out):
    """An upload without its text (from a ``profiles.repository.UploadInfo``)."""

    id: int
    filename: str | None
    label: str | None
    sha256: str = Field(description="of the bytes as sent")
    content_digest: str | None = Field(
        description="of the parsed runs: the upload's identity (null: a duplicate from before)"
    )
    size_bytes: int
    disabled: bool
    flags: list[FlagOut]
    run_count: int
    created_at: datetime
    already_stored: bool | None = Field(None, description="uploads only: it was stored before")


class UploadResponse(_Out):
    runs: list[RunOut]
    warnings: list[str]
    uploads: list[UploadOut] = Field(description="one per text or file, in the order sent")
    flags: list[FlagOut] = Field(description="every upload's flags (also in warnings)")


class _Page(_Out):
    count: int = Field(description="items on this page")
    total: int = Field(description="items in all")
    limit: int
    offset: int
    next_offset: int | None = Field(description="offset of the next page; null on the last")


class RunsPage(_Page):
    runs: list[RunOut]


class UploadsPage(_Page):
    uploads: list[UploadOut]


class BandwidthResponse(_Out):
    profile: str
    op: Collective
    ranks: int
    nodes: int
    bytes: float
    busbw_gbps: float
    algbw_gbps: float
    time_us: float
    method: str
    source: str
    quality: BandwidthQualityOut
    warnings: list[str] = Field(description="why the answer is weak, and what to upload")


class CurveOut(_Out):
    """One stored run's (or nominal) curve (from ``profiles.bandwidth.CurveData``)."""

    op: str
    ranks: int
    nodes: int
    backend: str
    dtype: str | None
    run_id: int | None
    label: str
    nominal: bool
    in_place: bool
    sizes_bytes: list[int]
    busbw_gbps: list[float]
    alpha_us: float | None
    beta_gbps: float | None = Field(description="the fitted β in algbw (S / T); = beta_algbw_gbps")
    beta_algbw_gbps: float | None
    beta_busbw_gbps: float | None = Field(description="the fitted β as bus bandwidth")


class CurvesResponse(_Out):
    profile: str
    curves: list[CurveOut]


class TuningRowOut(_Out):
    size_bytes: int
    best_backend: str
    busbw_gbps: float


class TuningTableResponse(_Out):
    profile: str
    op: Collective
    ranks: int
    nodes: int | None
    rows: list[TuningRowOut]


class ResidualOut(_Out):
    label: str | None
    measured_s: float
    predicted_s: float
    residual_s: float
    residual_pct: float
    scaled_s: float | None = Field(None, description="A = T(u=1) - B; null in listings")
    fixed_s: float | None = Field(None, description="B, the time independent of u")


class CalibrationResponse(_Out):
    """A stored calibration (from the ORM ``Calibration``)."""

    id: int
    profile: str
    utilization: float
    mape_pct: float
    residuals: list[ResidualOut]
    applied: bool | None = Field(description="null in listings: not recorded per calibration")
    created_at: datetime
    warnings: list[str] = Field(
        default_factory=list,
        description="a fitted u outside the plausible range [0.15, 0.95] of peak",
    )


class ModelShapeOut(_ModelShape, _Out):
    """A model's shape fields (from an ``estimator.ModelSpec``)."""


class ErrorSummaryOut(_Out):
    """How far some published runs were predicted off, out of sample."""

    rows: int = Field(description="published runs")
    mean_abs_error_pct: float = Field(description="mean |predicted - measured| / measured, %")
    max_abs_error_pct: float = Field(description="the largest |error|, %")
    mean_error_pct: float = Field(
        description="mean signed error, %: below 0, those runs took longer than predicted"
    )


class ValidationLayoutOut(_Out):
    """A published run's parallel layout."""

    pipeline: int
    tensor: int
    data: int
    context_parallel: int
    expert_parallel: int
    virtual_stages: int


class ValidationRowOut(_Out):
    """One published run commest was scored on, predicted out of sample."""

    id: str
    source: str = Field(description="the source family (validation/SOURCES.md)")
    source_ref: str = Field(description="where it is published: document, table, row")
    model: str = Field(description="the name the published run gives its model")
    framework: str = Field(description="the framework preset it was scored with")
    kinds: list[str] = Field(description="its kinds: dense/moe, precision, trainer, GPU family")
    gpu: str
    gpus: int
    layout: ValidationLayoutOut
    precision: str
    global_batch_size: int
    predicted_s: float = Field(description="commest's iteration time, s")
    measured_s: float = Field(description="the published iteration time, s")
    error_pct: float = Field(description="(predicted - measured) / measured, %")
    fitted_on: str = Field(description="the fit that scored it (never one that saw it)")


class ValidationOut(_Out):
    """``commest validate``'s published runs, as scored today (out of sample)."""

    summary: ErrorSummaryOut = Field(description="every scored run")
    selection: ErrorSummaryOut = Field(description="the runs listed in ``rows``")
    by_source: dict[str, ErrorSummaryOut]
    by_kind: dict[str, ErrorSummaryOut]
    sources: list[str] = Field(description="the names ``source`` takes")
    models: list[str] = Field(description="the names ``model`` takes")
    kinds: list[str] = Field(description="the names ``kind`` takes")
    rows: list[ValidationRowOut]


class ModelPresetOut(_Out):
    """A published model shape (from an ``estimator.presets.ModelPreset``)."""

    key: str
    source: str
    published_parameters: float | None
    parameters: float
    spec: ModelShapeOut


class GpuPresetOut(_Out):
    """A GPU datasheet (from an ``estimator.presets.GpuPreset``)."""

    key: str
    name: str
    memory_bytes: float
    peak_tflops: dict[str, float]
    source: str


class FrameworkPresetOut(FrameworkOut):
    """A framework preset (GET /v1/presets/frameworks) and the other names it answers to."""

    aliases: list[str]


class HealthResponse(_Out):
    status: Literal["ok"]
    version: str


class ReadyResponse(_Out):
    status: Literal["ready"]
    database: str


# --- training logs ----------------------------------------------------------------------------


class TrainingLogHints(BaseModel):
    """What the uploader supplies that a training log does not state (the query parameters of
    POST /v1/profiles/{name}/training-logs); where the log states a field, the log wins."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(None, max_length=200, description="a name for the run")
    gpus: int | None = Field(None, ge=1, le=MAX_COUNT, description="GPUs of the run (world)")
    gpus_per_node: int | None = Field(None, ge=1, le=1024)
    vocab_size: int | None = Field(None, ge=1, le=MAX_COUNT, description="before padding")
    num_layers: int | None = Field(None, ge=1, le=MAX_COUNT)
    hidden_size: int | None = Field(None, ge=1, le=MAX_COUNT)
    num_attention_heads: int | None = Field(None, ge=1, le=MAX_COUNT)
    seq_length: int | None = Field(None, ge=1, le=MAX_COUNT)
    ffn_hidden_size: int | None = Field(None, ge=1, le=MAX_COUNT)
    num_query_groups: int | None = Field(None, ge=1, le=MAX_COUNT)
    tensor: int | None = Field(None, ge=1, le=MAX_COUNT)
    pipeline: int | None = Field(None, ge=1, le=MAX_COUNT)
    context_parallel: int | None = Field(None, ge=1, le=MAX_COUNT)
    expert_parallel: int | None = Field(None, ge=1, le=MAX_COUNT)
    virtual_stages: int | None = Field(None, ge=1, le=MAX_COUNT)
    micro_batch_size: int | None = Field(None, ge=1, le=MAX_COUNT)
    global_batch_size: int | None = Field(None, ge=1, le=MAX_COUNT)
    precision: Precision | None = None
    recompute: Recompute | None = None
    warmup_iterations: int | None = Field(
        None, ge=0, le=MAX_COUNT, description="iterations after a (re)start left out (default 10)"
    )


class DroppedIntervalOut(_Out):
    iteration: int = Field(description="the logged iteration that ends the interval")
    reason: str


class MissingFieldOut(_Out):
    field: str = Field(description="where it goes in the request")
    query_parameter: str = Field(description="the query parameter that supplies it")
    what: str
    required: bool


class MeasuredRequestOut(_Out):
    """The run's ``model``, ``layout`` and ``training``, as POST /v1/estimates takes them."""

    model: dict[str, Any]
    layout: dict[str, Any]
    training: dict[str, Any]


class MeasuredRunRead(_Out):
    """A stored measured run (from the ORM ``MeasuredRun``)."""

    id: int
    profile: str
    label: str
    file_name: str | None
    format: str = Field(description="megatron-lm, megatron-deepspeed or nemo")
    iteration_time_s: float = Field(description="median of the steady-state intervals")
    intervals_used: int
    iterations_used: list[int]
    dropped: list[DroppedIntervalOut]
    request: MeasuredRequestOut
    hints: dict[str, Any] = Field(description="the query parameters that filled gaps")
    notes: list[str]
    warnings: list[str]
    created_at: datetime


class TrainingLogResponse(MeasuredRunRead):
    """POST /v1/profiles/{name}/training-logs: the run read and stored."""

    already_stored: bool
    dropped_count: int
    warmup: str = Field(description="how warm-up iterations were left out")
    missing: list[MissingFieldOut] = Field(
        description="fields the log does not state that have a default (required ones are a 422)"
    )


class MeasuredRunsPage(_Out):
    runs: list[MeasuredRunRead]
    count: int


# --- timelines (POST /v1/timelines) -----------------------------------------------------------

from estimator.timeline import DEFAULT_SHOWN, MAX_SHOWN  # noqa: E402


class TimelineRequest(EstimateRequest):
    """POST /v1/timelines: an estimate request plus the timeline's form."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{**EXAMPLE_ESTIMATE, "format": "json"}]},
    )

    format: Literal["json", "png", "svg"] = "json"
    max_microbatches_shown: int = Field(
        DEFAULT_SHOWN,
        ge=1,
        le=MAX_SHOWN,
        description="micro-batches scheduled and drawn (at least 2·pipeline); with more, the "
        "first and last ones are shown and the steady state between them elided",
    )


@with_config(ConfigDict(extra="forbid", allow_inf_nan=False))
class TimelineEventOut(TypedDict):
    """One block of a stage's lane. ``microbatch``/``chunk`` are null for iteration-level work
    (gradient reduction, optimizer step) and idle gaps. A typed dict: a timeline has thousands."""

    stage: int
    kind: Literal[
        "forward", "backward", "recompute", "tp_comm", "pp_comm", "dp_comm", "optimizer", "idle"
    ]
    microbatch: int | None
    chunk: int | None
    start_s: float
    end_s: float
    after_gap: bool


class TimelineResponse(_Out):
    """POST /v1/timelines with ``format: json``: every stage's schedule of one iteration."""

    schedule: Literal["1f1b", "interleaved"]
    pipeline_stages: int
    microbatches: int
    virtual_stages: int
    iteration_time_s: float = Field(description="the engine's (as POST /v1/estimates)")
    makespan_s: float = Field(description="first forward to last backward on this schedule")
    engine_pipeline_s: float = Field(description="the engine's m·T + bubble")
    period_s: float = Field(description="T: the slowest stage's time per micro-batch")
    bubble_s: float = Field(description="makespan − m·T")
    bubble_ratio: float = Field(description="bubble_s / iteration_time_s")
    truncated: bool = Field(description="some micro-batches are elided")
    elided_microbatches: int
    elided_s: float = Field(
        description="time the elided micro-batches take: events with after_gap are drawn this "
        "much earlier to close the gap"
    )
    events: list[TimelineEventOut]
    assumptions: list[str]
    warnings: list[str]
