"""Megatron-LM settings -> the ``model``/``layout``/``training`` parts of an estimate request.

One table (:data:`SETTINGS`) names every Megatron-LM argument commest reads, its kind, the
other spellings it goes by (NeMo config keys, older Megatron-LM, Megatron-DeepSpeed) and the
request field (query parameter) that can supply it. Two readers feed it: the command-line
reader (``api.megatron_args``: ``--num-layers 96`` flags) and the training-log reader
(``profiles.training_logs``: the ``num_layers .... 96`` lines of a run's arguments block).
:func:`build_request` turns the values into request parts with Megatron's semantics
(``megatron/training/arguments.py``):

- no fp16/bf16 means fp32 training; an fp8 format trains in fp8 on top of bf16;
- with bf16 gradients are all-reduced in fp32 unless grad_reduce_in_bf16;
- recompute_activations is selective recompute; checkpoint_activations (older Megatron) and
  activations_checkpoint_method without a granularity (older Megatron) are full recompute;
  block recompute of fewer layers than a chunk holds is ``training.recompute_num_layers``;
  recompute_modules other than core_attn are priced as attention-core recompute, and uniform
  recompute in groups of several layers one layer at a time, each in a note;
- num_layers_per_virtual_pipeline_stage k gives v = l / p / k interleaved stages;
- use_distributed_optimizer shards the optimizer state: ZeRO stage 1 (Megatron-DeepSpeed
  states its zero_stage; Megatron-FSDP's data_parallel_sharding_strategy names its stage, and
  PyTorch FSDP2 is stage 3);
- account_for_embedding/loss_in_pipeline_split count the embedding / the loss as a layer of
  the split: the first / last stage holds one layer fewer;
- the vocabulary is padded to a multiple of make_vocab_size_divisible_by (128) · t;
- the data-parallel size is world / (t · p · cp);
- overlap_grad_reduce hides the gradient reduction (``layout.overlap_dp``), overlap_param_gather
  the distributed optimizer's parameter all-gather (``training.framework_overrides``); the
  on-by-default gradient_accumulation_fusion and overlap_p2p_comm (a log prints their value,
  a command line has --no- flags) turned off are framework overrides too;
- CUDA graphs (cuda_graph_impl local or transformer_engine, or the older enable_cuda_graph /
  external_cuda_graph) whose cuda_graph_scope captures a MoE layer's router or preprocessing
  (or whole layers, Megatron's default scope) lift the eager MoE layers' host floor:
  ``training.framework_overrides.cuda_graphs``;
- overlap_moe_expert_parallel_comm hides a measured share of the expert all-to-alls under
  another micro-batch's compute: ``training.framework_overrides.ep_comm_overlap``.

Pure: no I/O. A value that breaks a rule raises ``ValidationError`` whose field is named by the
caller's ``field`` function (``--num-layers`` on a command line, ``num_layers`` in a log).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from estimator.errors import ValidationError

MEGATRON_VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default

Value = int | bool | str | None
Kind = Literal["int", "bool", "str"]
Source = Literal["command_line", "log"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One Megatron-LM argument commest reads."""

    name: str  # args.<name> in Megatron-LM (the log prints it so; the flag is --name-with-dashes)
    kind: Kind
    what: str = ""  # what it is, for messages
    aliases: tuple[str, ...] = ()  # the same setting elsewhere (NeMo, older Megatron, DeepSpeed)
    query_parameter: str | None = None  # the request field / query parameter that supplies it
    minimum: int = 1  # for ints
    # Read only to say so: what the estimate leaves out when the run turns it on (a note).
    unmodelled: str = ""


SETTINGS: tuple[Setting, ...] = (
    # model
    Setting("num_layers", "int", "transformer layers", query_parameter="num_layers"),
    Setting("hidden_size", "int", "model width", query_parameter="hidden_size"),
    Setting("num_attention_heads", "int", "attention heads", query_parameter="num_attention_heads"),
    Setting(
        "seq_length",
        "int",
        "sequence length",
        aliases=("encoder_seq_length",),
        query_parameter="seq_length",
    ),
    Setting("max_position_embeddings", "int", "position embeddings"),
    Setting("ffn_hidden_size", "int", "MLP width", query_parameter="ffn_hidden_size"),
    Setting("group_query_attention", "bool", "grouped-query attention"),
    Setting(
        "num_query_groups",
        "int",
        "key/value head groups",
        aliases=("num_key_value_heads",),
        query_parameter="num_query_groups",
    ),
    # Megatron fills it in as hidden_size / heads when not given, so logs always print it.
    Setting("kv_channels", "int", "attention head width"),
    Setting("padded_vocab_size", "int", "padded vocabulary"),
    Setting("vocab_size", "int", "vocabulary", query_parameter="vocab_size"),
    Setting("make_vocab_size_divisible_by", "int", "vocabulary padding multiple"),
    Setting("swiglu", "bool", "SwiGLU MLP"),
    Setting("untie_embeddings_and_output_weights", "bool", "untied output layer"),
    Setting("num_experts", "int", "experts", aliases=("num_moe_experts",)),
    Setting("moe_router_topk", "int", "experts per token"),
    Setting("moe_ffn_hidden_size", "int", "expert MLP width"),
    Setting("moe_layer_freq", "str", "MoE layer frequency"),
    Setting("moe_token_dispatcher_type", "str", "MoE token dispatcher"),
    Setting("moe_expert_capacity_factor", "str", "expert capacity factor"),
    Setting("moe_pad_expert_input_to_capacity", "bool", "expert inputs padded to capacity"),
    Setting("overlap_moe_expert_parallel_comm", "bool", "overlapped expert-parallel all-to-all"),
    Setting(
        "delay_wgrad_compute",
        "bool",
        "delayed weight-gradient GEMMs",
        unmodelled="the weight-gradient GEMMs are priced where the backward pass runs them",
    ),
    # layout
    Setting("world_size", "int", "GPUs in the run", query_parameter="gpus"),
    Setting("data_parallel_size", "int", "data-parallel size"),
    Setting("tensor_model_parallel_size", "int", "tensor parallel", query_parameter="tensor"),
    Setting("pipeline_model_parallel_size", "int", "pipeline parallel", query_parameter="pipeline"),
    Setting("context_parallel_size", "int", "context parallel", query_parameter="context_parallel"),
    Setting(
        "expert_model_parallel_size", "int", "expert parallel", query_parameter="expert_parallel"
    ),
    Setting("expert_tensor_parallel_size", "int", "expert tensor parallel"),
    Setting("num_layers_per_virtual_pipeline_stage", "int", "layers per virtual stage"),
    Setting(
        "virtual_pipeline_model_parallel_size",
        "int",
        "virtual pipeline stages",
        query_parameter="virtual_stages",
    ),
    Setting("decoder_first_pipeline_num_layers", "int", "layers on the first stage"),
    Setting("decoder_last_pipeline_num_layers", "int", "layers on the last stage"),
    Setting("account_for_embedding_in_pipeline_split", "bool", "embedding counted as a layer"),
    Setting("account_for_loss_in_pipeline_split", "bool", "loss counted as a layer"),
    Setting("sequence_parallel", "bool", "sequence parallel"),
    Setting("use_distributed_optimizer", "bool", "distributed optimizer"),
    Setting("use_megatron_fsdp", "bool", "Megatron-FSDP", aliases=("use_custom_fsdp",)),
    Setting("data_parallel_sharding_strategy", "str", "Megatron-FSDP sharding strategy"),
    Setting("use_torch_fsdp2", "bool", "PyTorch FSDP2 data parallelism"),
    Setting("deepspeed", "bool", "Megatron-DeepSpeed run"),
    Setting("zero_stage", "int", "DeepSpeed ZeRO stage", minimum=0),
    Setting("overlap_grad_reduce", "bool", "overlapped gradient reduce"),
    Setting("overlap_param_gather", "bool", "overlapped parameter all-gather"),
    Setting("tp_comm_overlap", "bool", "overlapped tensor-parallel communication"),
    # Megatron's on-by-default switches: a log prints the value, a command line the --no- flag.
    Setting("overlap_p2p_comm", "bool", "overlapped pipeline sends (a log's value)"),
    Setting("no_overlap_p2p_communication", "bool", "pipeline sends not overlapped"),
    Setting("gradient_accumulation_fusion", "bool", "fused gradient accumulation (a log's value)"),
    Setting("no_gradient_accumulation_fusion", "bool", "gradients accumulated by their own pass"),
    Setting("cp_comm_type", "str", "context-parallel communication"),
    # training
    Setting("micro_batch_size", "int", "micro-batch size", query_parameter="micro_batch_size"),
    Setting("global_batch_size", "int", "global batch size", query_parameter="global_batch_size"),
    Setting("rampup_batch_size", "str", "batch size ramp-up"),
    Setting(
        "recompute_granularity",
        "str",
        "activation recompute",
        aliases=("activations_checkpoint_granularity",),
        query_parameter="recompute",
    ),
    Setting("recompute_method", "str", "full recompute method (uniform or block)"),
    Setting(
        "recompute_num_layers",
        "int",
        "layers per full-recompute group or block",
        aliases=("activations_checkpoint_num_layers",),
        minimum=0,
    ),
    Setting("recompute_modules", "str", "modules selective recompute replays"),
    Setting("recompute_activations", "bool", "selective recompute"),
    Setting("checkpoint_activations", "bool", "full recompute (older Megatron)"),
    Setting("activations_checkpoint_method", "str", "full recompute method (older Megatron)"),
    Setting("fp16", "bool", "fp16 training", query_parameter="precision"),
    Setting("bf16", "bool", "bf16 training", query_parameter="precision"),
    Setting("fp8", "str", "fp8 format", aliases=("fp8_format",), query_parameter="precision"),
    Setting("fp8_hybrid", "bool", "fp8 hybrid format (Megatron-DeepSpeed)"),
    Setting("fp8_e4m3", "bool", "fp8 e4m3 format (Megatron-DeepSpeed)"),
    Setting("grad_reduce_in_bf16", "bool", "bf16 gradient reduction"),
    Setting("accumulate_allreduce_grads_in_fp32", "bool", "fp32 gradient reduction"),
    Setting("fp8_recipe", "str", "fp8 scaling recipe"),
    # FP8 training: the distributed optimizer gathers FP8 weights (Framework.fp8_param_gather)
    Setting("fp8_param_gather", "bool", "FP8 parameter all-gather"),
    # CUDA graphs: captured MoE layers are not floored by the host (Framework.cuda_graphs)
    Setting("cuda_graph_impl", "str", "CUDA graph capture"),
    Setting("cuda_graph_scope", "str", "what CUDA graphs capture"),
    Setting("enable_cuda_graph", "bool", "CUDA graphs (older Megatron)"),
    Setting(
        "external_cuda_graph", "bool", "CUDA graphs through Transformer Engine (older Megatron)"
    ),
)
# Megatron-LM's --cuda-graph-impl choices (megatron/training/arguments.py).
CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine")
# --cuda-graph-scope values whose graphs take in a MoE layer's router or token preprocessing:
# whole layers ("full", the default when no scope is given), whole iterations or micro-batches,
# the MoE block, its router, its preprocessing. "attn", "mlp" and "mamba" leave MoE layers eager.
_MOE_GRAPH_SCOPES = frozenset(
    {"full", "full_iteration", "per_microbatch", "moe", "moe_router", "moe_preprocess"}
)
_OTHER_GRAPH_SCOPES = frozenset({"attn", "mlp", "mamba"})
# Per-tensor FP8 scaling (what commest prices); the block-scaled recipes are priced as it.
_PER_TENSOR_FP8_RECIPES = ("delayed", "tensorwise")

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_ANY_NAME: dict[str, Setting] = {
    **{a: s for s in SETTINGS for a in s.aliases},
    **BY_NAME,
}
BOOL_SETTINGS = frozenset(s.name for s in SETTINGS if s.kind == "bool")
_UNMODELLED = tuple(s for s in SETTINGS if s.unmodelled)

# Settings a log must state (a command line may leave them to Megatron's defaults).
_LOG_REQUIRED = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "micro_batch_size",
    "global_batch_size",
)
# Settings older logs may lack; Megatron's default then holds (named in one note).
_LOG_DEFAULTED = (
    "context_parallel_size",
    "expert_model_parallel_size",
    "sequence_parallel",
    "use_distributed_optimizer",
    "swiglu",
    "untie_embeddings_and_output_weights",
)

FieldName = Callable[[str], str]


def flag_name(name: str) -> str:
    """``num_layers`` -> ``--num-layers`` (how a command line spells a setting)."""
    return "--" + name.replace("_", "-")


def setting_for(name: str) -> Setting | None:
    """The setting an argument name (``num_layers``, ``num-layers``, an alias) stands for."""
    return BY_ANY_NAME.get(name.replace("-", "_"))


def convert(setting: Setting, raw: str | bool, field_name: FieldName = flag_name) -> Value:
    """A raw value (flag text, ``True``/``None`` as a log prints it) as the setting's kind."""
    where = field_name(setting.name)
    if isinstance(raw, bool):
        if setting.kind == "bool":
            return raw
        raise ValidationError(where, raw, "needs a value")
    text = raw.strip()
    if text in ("None", "null", ""):
        return None
    if setting.kind == "bool":
        lowered = text.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValidationError(where, raw, "must be True or False")
    if setting.kind == "str":
        return text
    if text.startswith("[") and text.endswith("]"):  # Megatron-DeepSpeed prints [8]
        text = text[1:-1].strip().strip("'\"")
    try:
        value = int(text)
    except ValueError:
        hint = " (expand shell variables first)" if "$" in text else ""
        raise ValidationError(where, raw, f"must be a whole number{hint}") from None
    if value < setting.minimum:
        raise ValidationError(where, value, f"must be a whole number ≥ {setting.minimum}")
    return value


def canonical(values: Mapping[str, Value]) -> dict[str, Value]:
    """Values keyed by the table's names; a setting's own name wins over its aliases."""
    out: dict[str, Value] = {}
    for key, value in values.items():
        setting = setting_for(key)
        if setting is None:
            continue
        if key.replace("-", "_") == setting.name or setting.name not in out:
            out[setting.name] = value
    return out


@dataclass(frozen=True, slots=True)
class MissingSetting:
    """A setting the source did not give, and the query parameter that supplies it."""

    setting: str
    query_parameter: str
    what: str


@dataclass(slots=True)
class MegatronRequest:
    """Request parts read from Megatron settings; ``missing`` lists what must still be given."""

    model: dict[str, Any] = field(default_factory=dict)
    layout: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    missing: list[MissingSetting] = field(default_factory=list)

    @property
    def request(self) -> dict[str, Any]:
        """``{"model", "layout", "training"}`` as ``POST /v1/estimates`` takes them."""
        return {"model": self.model, "layout": self.layout, "training": self.training}


def _missing(name: str, query_parameter: str | None = None) -> MissingSetting:
    setting = BY_NAME[name]
    return MissingSetting(name, query_parameter or setting.query_parameter or name, setting.what)


def build_request(
    values: Mapping[str, Value],
    *,
    source: Source,
    gpus: int | None = None,
    vocab_size: int | None = None,
    field_name: FieldName = flag_name,
) -> MegatronRequest:
    """Request parts from settings (keyed by the table's names, see :func:`canonical`).

    ``gpus`` (the world size) and ``vocab_size`` supply what the settings may not say. On a
    ``command_line`` an absent setting takes Megatron's default; in a ``log`` the essentials
    (layout sizes, batch, precision) must be stated, else they are listed in ``missing``.
    """
    out = MegatronRequest()
    v = dict(values)
    notes = out.notes
    in_log = source == "log"

    def num(name: str) -> int | None:
        value = v.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def flag(name: str) -> bool:
        return v.get(name) is True

    def need(name: str) -> int | None:
        value = num(name)
        if value is None:
            out.missing.append(_missing(name))
        return value

    layers = need("num_layers")
    hidden = need("hidden_size")
    heads = need("num_attention_heads")
    seq = num("seq_length")
    if seq is None:
        seq = num("max_position_embeddings")
        if seq is None:
            out.missing.append(_missing("seq_length"))
        else:
            notes.append(f"no seq_length: used max_position_embeddings {seq}")

    sizes_known = True

    def sized(name: str) -> int:
        nonlocal sizes_known
        value = num(name)
        if value is None:
            if in_log and name in _LOG_REQUIRED:
                out.missing.append(_missing(name))
                sizes_known = False
            return 1
        return value

    tensor = sized("tensor_model_parallel_size")
    pipeline = sized("pipeline_model_parallel_size")
    context = sized("context_parallel_size")
    expert = sized("expert_model_parallel_size")

    padded = num("padded_vocab_size")
    raw_vocab = vocab_size if vocab_size is not None else num("vocab_size")
    if padded is not None:
        vocab: int | None = padded
        if raw_vocab is not None and raw_vocab != padded:
            notes.append(f"vocab_size is the padded vocabulary: {raw_vocab} -> {padded}")
    elif raw_vocab is not None:
        if raw_vocab <= 0:
            raise ValidationError(field_name("vocab_size"), raw_vocab, "must be a whole number > 0")
        multiple = (num("make_vocab_size_divisible_by") or MEGATRON_VOCAB_DIVISOR) * tensor
        vocab = math.ceil(raw_vocab / multiple) * multiple
        if vocab != raw_vocab:
            notes.append(f"vocabulary padded as Megatron does: {raw_vocab} -> {vocab}")
    else:
        vocab = None
        out.missing.append(_missing("vocab_size"))

    if out.missing and not in_log:
        return out  # a command line reports its first missing essential, nothing after it
    world = gpus if gpus is not None else num("world_size")
    data: int | None = None
    if world is None:
        out.missing.append(_missing("world_size"))
    elif sizes_known:
        if world <= 0:
            raise ValidationError(field_name("world_size"), world, "must be a whole number > 0")
        model_parallel = tensor * pipeline * context
        if world % model_parallel:
            raise ValidationError(
                field_name("world_size"),
                world,
                f"must be divisible by tensor·pipeline·context = {tensor}·{pipeline}·{context}"
                f" = {model_parallel}",
            )
        data = world // model_parallel
        stated = num("data_parallel_size")
        if stated is not None and stated != data:
            raise ValidationError(
                field_name("data_parallel_size"),
                stated,
                f"disagrees with world / (tensor·pipeline·context) = {world}/{model_parallel}",
            )

    virtual = 1
    per_virtual = num("num_layers_per_virtual_pipeline_stage")
    vpp_size = num("virtual_pipeline_model_parallel_size")
    if per_virtual is not None and layers is not None:
        if layers % (pipeline * per_virtual):
            raise ValidationError(
                field_name("num_layers_per_virtual_pipeline_stage"),
                per_virtual,
                f"must divide num_layers / pipeline = {layers}/{pipeline}",
            )
        virtual = layers // pipeline // per_virtual
    elif vpp_size is not None:
        virtual = vpp_size

    micro = num("micro_batch_size")
    if micro is None:
        if in_log:
            out.missing.append(_missing("micro_batch_size"))
        else:
            notes.append("no --micro-batch-size: assumed 1")
        micro = 1
    global_batch = num("global_batch_size")
    if global_batch is None and not in_log and data is not None:
        global_batch = micro * data
        notes.append(f"no --global-batch-size: Megatron uses micro-batch · data = {global_batch}")
    elif global_batch is None:
        out.missing.append(_missing("global_batch_size"))
    rampup = v.get("rampup_batch_size")
    if isinstance(rampup, str):
        notes.append(
            f"rampup_batch_size {rampup}: the batch grows during the first iterations; "
            f"the estimate uses the full global batch {global_batch}"
        )

    recompute = _recompute(v, field_name, notes)
    replayed_layers = None
    if layers is not None and pipeline is not None and virtual is not None:
        recompute, replayed_layers = _recompute_extent(
            v, field_name, notes, recompute, layers // pipeline // virtual
        )
    precision = _precision(v, field_name, notes, out, in_log=in_log)

    model = out.model
    if layers is not None:
        model["num_layers"] = layers
    if hidden is not None:
        model["hidden_size"] = hidden
    if heads is not None:
        model["num_attention_heads"] = heads
    if seq is not None:
        model["seq_length"] = seq
    if vocab is not None:
        model["vocab_size"] = vocab
    model["swiglu"] = flag("swiglu")
    model["tied_embeddings"] = not flag("untie_embeddings_and_output_weights")
    ffn = num("ffn_hidden_size")
    if ffn is not None:
        model["ffn_hidden_size"] = ffn
    groups = num("num_query_groups")
    gqa = v.get("group_query_attention")
    if groups is not None and (gqa is True or (gqa is None and groups != heads)):
        model["num_query_groups"] = groups
    elif groups is not None and groups > 1 and gqa is False:
        notes.append("num_query_groups without group_query_attention: Megatron ignores it")
    kv_channels = num("kv_channels")
    if kv_channels is not None and (
        hidden is None or heads is None or hidden % heads or kv_channels != hidden // heads
    ):
        model["kv_channels"] = kv_channels
    experts = num("num_experts")
    if experts is not None and experts > 1:
        model["moe_num_experts"] = experts
        model["moe_top_k"] = num("moe_router_topk") or 2
        expert_ffn = num("moe_ffn_hidden_size")
        if expert_ffn is not None:
            model["moe_ffn_hidden_size"] = expert_ffn
        freq = v.get("moe_layer_freq")
        if isinstance(freq, str):
            try:
                model["moe_every_k_layers"] = int(freq)
            except ValueError:
                notes.append(f"moe_layer_freq {freq} is a pattern; assumed every layer is MoE")
        dispatcher = v.get("moe_token_dispatcher_type")
        if isinstance(dispatcher, str):
            kind = dispatcher.strip().lower()
            if kind in ("alltoall", "flex"):
                out.training["moe_token_dispatcher"] = kind
            else:  # allgather, alltoall_seq: every routed copy moves, as an all-to-all
                notes.append(f"moe_token_dispatcher_type {dispatcher}: priced as alltoall")
        _capacity(v, field_name, notes, out)

    layout = out.layout
    layout["pipeline"] = pipeline
    layout["tensor"] = tensor
    if data is not None:
        layout["data"] = data
    zero = num("zero_stage") if flag("deepspeed") else _fsdp_stage(v, field_name)
    layout.update(
        {
            "virtual_stages": virtual,
            "sequence_parallel": flag("sequence_parallel"),
            "context_parallel": context,
            "expert_parallel": expert,
            "zero_stage": zero
            if zero is not None
            else (1 if flag("use_distributed_optimizer") else 0),
            "overlap_dp": flag("overlap_grad_reduce"),
            "overlap_tp": flag("tp_comm_overlap"),
        }
    )
    expert_tp = num("expert_tensor_parallel_size")
    if expert_tp is not None and expert_tp != tensor:  # Megatron's default: the layer's TP
        layout["expert_tensor_parallel"] = expert_tp
    for name, key in (
        ("decoder_first_pipeline_num_layers", "first_stage_layers"),
        ("decoder_last_pipeline_num_layers", "last_stage_layers"),
    ):
        value = num(name)
        if value is not None:
            layout[key] = value
    if layers is not None and pipeline is not None and pipeline > 1:
        layout.update(_split_accounting(v, field_name, layers, pipeline, virtual or 1))

    training = out.training
    if global_batch is not None:
        training["global_batch_size"] = global_batch
    training["micro_batch_size"] = micro
    training["recompute"] = recompute
    if replayed_layers is not None:
        training["recompute_num_layers"] = replayed_layers
    if precision is not None:
        training["precision"] = precision
    if flag("accumulate_allreduce_grads_in_fp32") or (
        flag("bf16") and not flag("grad_reduce_in_bf16")
    ):
        training["grad_reduce_precision"] = "fp32"

    recipe = v.get("fp8_recipe")
    if (
        precision == "fp8"
        and isinstance(recipe, str)
        and recipe.strip().lower() not in _PER_TENSOR_FP8_RECIPES
    ):
        notes.append(
            f"{field_name('fp8_recipe')} {recipe}: priced as per-tensor FP8 (block-scaled "
            "FP8's own casts and GEMM speed are not modelled)"
        )
    # Framework flags the line turns on over the preset's (megatron-lm leaves both off).
    overrides: dict[str, bool] = {}
    if flag("overlap_param_gather"):
        overrides["overlap_param_gather"] = True
    # Only the interleaved schedule overlaps its sends (older Megatron: off unless asked).
    p2p_off = flag("no_overlap_p2p_communication") or v.get("overlap_p2p_comm") is False
    if p2p_off and virtual is not None and virtual > 1:
        overrides["overlap_p2p"] = False
    if flag("no_gradient_accumulation_fusion") or v.get("gradient_accumulation_fusion") is False:
        overrides["grad_accum_fusion"] = False
    _cp_comm_type(v, field_name, notes, context)
    if _cuda_graphs(v, field_name, notes, moe=experts is not None and experts > 1):
        overrides["cuda_graphs"] = True
    if precision == "fp8" and isinstance(recipe, str) and recipe.strip().lower() == "tensorwise":
        # Current scaling: each local expert's tensors quantized by kernels of their own.
        overrides["fp8_current_scaling"] = True
    if precision == "fp8" and flag("fp8_param_gather"):
        # The distributed optimizer's parameter all-gather moves 1-byte FP8 weights.
        overrides["fp8_param_gather"] = True
    if flag("overlap_moe_expert_parallel_comm"):
        # A share of the expert all-to-alls hidden under another micro-batch's compute.
        overrides["ep_comm_overlap"] = True
    if overrides:
        training["framework_overrides"] = overrides
    for setting in _UNMODELLED:
        turned_on = v.get(setting.name)
        if turned_on not in (None, False, "none", "None"):
            shown = "" if turned_on is True else f" {turned_on}"
            notes.append(f"{field_name(setting.name)}{shown}: {setting.unmodelled}")

    if in_log:
        assumed = [name for name in _LOG_DEFAULTED if name not in v]
        if assumed:
            notes.append(
                "not stated in the log, Megatron's defaults assumed: " + ", ".join(assumed)
            )
    return out


# Megatron-FSDP's --data-parallel-sharding-strategy -> the ZeRO stage it equals.
_FSDP_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _fsdp_stage(v: Mapping[str, Value], field_name: FieldName) -> int | None:
    """The ZeRO stage of Megatron-FSDP's sharding strategy (or of PyTorch FSDP2, which shards
    parameters, gradients and optimizer states: 3); None without either, or with no_shard,
    which leaves the distributed optimizer's rule."""
    if v.get("use_torch_fsdp2") is True:
        return 3
    if v.get("use_megatron_fsdp") is not True:
        return None
    raw = v.get("data_parallel_sharding_strategy")
    strategy = raw.strip().lower() if isinstance(raw, str) else "no_shard"  # Megatron's default
    if strategy not in _FSDP_SHARDING:
        raise ValidationError(
            field_name("data_parallel_sharding_strategy"),
            raw,
            "must be " + ", ".join(_FSDP_SHARDING),
        )
    return _FSDP_SHARDING[strategy] or None


def _listed(raw: Value) -> list[str]:
    """A setting that takes several values, as a command line gives them ("attn moe_router")
    or a log prints them ("['attn', 'moe_router']"), lower-cased, "none" dropped."""
    if not isinstance(raw, str):
        return []
    return [word for word in re.findall(r"[a-z0-9_+]+", raw.lower()) if word != "none"]


def _cp_comm_type(
    v: Mapping[str, Value], field_name: FieldName, notes: list[str], context: int | None
) -> None:
    """Megatron's context parallelism other than the ring (p2p, the default, as priced) is
    named: a2a (Ulysses-style all-to-all), allgather and a2a+p2p are priced as the ring."""
    if not context or context < 2:
        return
    kinds = sorted(set(_listed(v.get("cp_comm_type"))) - {"p2p"})
    if kinds:
        notes.append(
            f"{field_name('cp_comm_type')} {' '.join(kinds)}: priced as the ring (p2p) exchange "
            "of K/V under the attention kernel; other context-parallel communication is not "
            "modelled"
        )


def _split_accounting(
    v: Mapping[str, Value], field_name: FieldName, layers: int, pipeline: int, virtual: int
) -> dict[str, int]:
    """First/last stage layers when the embedding or the loss counts as a layer of the split
    (Megatron-Core ``account_for_embedding_in_pipeline_split`` / ``..._loss_...``): the
    (virtual) stages split num_layers + 1 (+ 1) evenly, the first chunk one layer short for the
    embedding, the last one for the loss."""
    embedding = v.get("account_for_embedding_in_pipeline_split") is True
    loss = v.get("account_for_loss_in_pipeline_split") is True
    if not (embedding or loss):
        return {}
    flag = field_name(
        "account_for_embedding_in_pipeline_split"
        if embedding
        else "account_for_loss_in_pipeline_split"
    )
    for explicit in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        if v.get(explicit) is not None:
            raise ValidationError(flag, True, f"cannot be combined with {field_name(explicit)}")
    total = layers + int(embedding) + int(loss)
    if total % (pipeline * virtual):
        raise ValidationError(
            flag,
            True,
            f"num_layers + {int(embedding) + int(loss)} = {total} must be a multiple of "
            f"pipeline · virtual stages = {pipeline * virtual}",
        )
    per_stage = total // pipeline
    split: dict[str, int] = {}
    if embedding:
        split["first_stage_layers"] = per_stage - 1
    if loss:
        split["last_stage_layers"] = per_stage - 1
    return split


def _cuda_graphs(
    v: Mapping[str, Value], field_name: FieldName, notes: list[str], *, moe: bool
) -> bool:
    """Whether the run's CUDA graphs capture its MoE layers' router or preprocessing (or
    more), which lifts the eager MoE layers' host floor (``Framework.cuda_graphs``)."""
    impl = v.get("cuda_graph_impl")
    where = field_name("cuda_graph_impl")
    if isinstance(impl, str):
        impl = impl.strip().lower()
        if impl not in CUDA_GRAPH_IMPLS:
            raise ValidationError(where, impl, "must be none, local or transformer_engine")
    older = [name for name in ("enable_cuda_graph", "external_cuda_graph") if v.get(name) is True]
    if impl in (None, "none") and not older:
        return False
    named = f"{where} {impl}" if impl not in (None, "none") else field_name(older[0])
    scopes = _listed(v.get("cuda_graph_scope"))
    unknown = [s for s in scopes if s not in _MOE_GRAPH_SCOPES and s not in _OTHER_GRAPH_SCOPES]
    if unknown:
        notes.append(
            f"{field_name('cuda_graph_scope')} {' '.join(unknown)}: not a scope commest knows; "
            "taken as leaving the MoE layers eager"
        )
    if scopes:
        named += f" ({field_name('cuda_graph_scope')} {' '.join(scopes)})"
    captured = not scopes or any(scope in _MOE_GRAPH_SCOPES for scope in scopes)
    if not moe:
        notes.append(
            f"{named}: commest prices host time only for eager MoE layers, so CUDA graphs do "
            "not change this dense model's estimate"
        )
    elif captured:
        notes.append(
            f"{named}: the MoE layers' router and preprocessing are captured, so their host "
            "time is not priced (training.framework_overrides.cuda_graphs)"
        )
    else:
        notes.append(
            f"{named}: the graphs leave the MoE layers eager, so each still takes at least "
            "the host's time to issue it (the breakdown's host term)"
        )
    return captured


def _capacity(
    v: Mapping[str, Value], field_name: FieldName, notes: list[str], out: MegatronRequest
) -> None:
    """Megatron's expert capacity: padded to it, every expert runs capacity x the mean load
    (``training.moe_capacity_factor``); without padding it only caps the busiest expert."""
    raw = v.get("moe_expert_capacity_factor")
    if not isinstance(raw, str):
        return
    where = field_name("moe_expert_capacity_factor")
    try:
        factor = float(raw)
    except ValueError:
        raise ValidationError(
            where, raw, "must be a number (tokens per expert over the mean)"
        ) from None
    if not math.isfinite(factor) or factor <= 0:
        raise ValidationError(where, raw, "must be a finite number > 0")
    padded = v.get("moe_pad_expert_input_to_capacity") is True
    if padded and factor >= 1:
        out.training["moe_capacity_factor"] = factor
    elif padded:
        notes.append(
            f"{where} {raw} below 1 drops tokens even when routing is balanced: "
            "priced at the balanced load (1.0)"
        )
    else:
        notes.append(
            f"{where} {raw} without {field_name('moe_pad_expert_input_to_capacity')}: it caps "
            "the busiest expert; balanced routing assumed (set training.moe_capacity_factor "
            "for a measured imbalance)"
        )


def _recompute(v: Mapping[str, Value], field_name: FieldName, notes: list[str]) -> str:
    granularity = v.get("recompute_granularity")
    if isinstance(granularity, str):
        recompute = granularity.lower()
        if recompute not in ("full", "selective"):
            raise ValidationError(
                field_name("recompute_granularity"), granularity, "must be full or selective"
            )
        return recompute
    if v.get("recompute_activations") is True:
        return "selective"
    if v.get("checkpoint_activations") is True:
        notes.append("checkpoint_activations (older Megatron): full recompute")
        return "full"
    method = v.get("activations_checkpoint_method")
    if isinstance(method, str) and "recompute_granularity" not in v:
        notes.append(f"activations_checkpoint_method {method} (older Megatron): full recompute")
        return "full"
    return "none"


def _recompute_extent(
    v: Mapping[str, Value], field_name: FieldName, notes: list[str], recompute: str, chunk: int
) -> tuple[str, int | None]:
    """What of a layer Megatron's recompute covers, against what commest prices: full recompute
    of every layer or of the first N of each chunk (``recompute_num_layers``), or selective
    recompute of the attention core (Korthikanti et al. 2022).

    ``chunk`` is the layers of one (virtual) pipeline stage: ``recompute_method block`` replays
    the first ``recompute_num_layers`` of each and keeps the others' activations."""
    method_name = "recompute_method" if "recompute_method" in v else "activations_checkpoint_method"
    method, count = v.get(method_name), v.get("recompute_num_layers")
    if recompute == "full" and isinstance(count, int):
        if method == "block" and count == 0:
            notes.append(
                f"{field_name(method_name)} block with "
                f"{field_name('recompute_num_layers')} 0: no layer is recomputed"
            )
            return "none", None
        if method == "block" and count < chunk:
            return recompute, count
        if method == "uniform" and count > 1:
            notes.append(
                f"{field_name(method_name)} uniform with "
                f"{field_name('recompute_num_layers')} {count}: Megatron keeps one input per "
                f"{count} layers and replays them {count} at a time; priced one layer at a time "
                "(the same replayed compute, activation memory counted per layer)"
            )
    if recompute == "selective":
        named = _listed(v.get("recompute_modules"))
        if named and named != ["core_attn"]:
            notes.append(
                f"{field_name('recompute_modules')} {' '.join(named)}: priced as selective "
                "recompute of the attention core (core_attn, Megatron's default); other "
                "modules' replay is not modelled"
            )
    return recompute, None


def _precision(
    v: Mapping[str, Value],
    field_name: FieldName,
    notes: list[str],
    out: MegatronRequest,
    *,
    in_log: bool,
) -> str | None:
    if v.get("fp16") is True and v.get("bf16") is True:
        raise ValidationError(
            field_name("bf16"), True, f"cannot be combined with {field_name('fp16')}"
        )
    if isinstance(v.get("fp8"), str) or v.get("fp8_hybrid") is True or v.get("fp8_e4m3") is True:
        return "fp8"
    if v.get("bf16") is True:
        return "bf16"
    if v.get("fp16") is True:
        return "fp16"
    if in_log and "fp16" not in v and "bf16" not in v:
        out.missing.append(_missing("bf16", "precision"))
        return None
    notes.append(
        f"no {field_name('fp16')}/{field_name('bf16')}: Megatron trains in fp32"
        if not in_log
        else "fp16 and bf16 are False: the run trained in fp32"
    )
    return "fp32"
