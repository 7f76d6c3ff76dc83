"""Read the model, layout and batch of an estimate request from a Megatron-LM command line.

``parse_megatron_args`` is pure: a launch line in (``torchrun ... pretrain_gpt.py --num-layers
96 ...`` or just the flags), the ``model``/``layout``/``training`` parts of a ``POST
/v1/estimates`` body out, plus notes for the user (flags it ignored, defaults it assumed).
The cluster part comes from elsewhere (``--cluster-profile`` or a request file).

The line is split as the shell splits it (``shlex``: quotes, comments, backslash continuations)
and read with ``argparse``: the flags commest models are declared as Megatron-LM and torchrun
declare them (both ``--a-b`` and ``--a_b``), ``parse_known_args`` leaves the rest aside.

Megatron semantics reproduced here (``megatron/training/arguments.py``):

- no ``--fp16``/``--bf16`` means fp32 training; ``--fp8-format`` trains in fp8 on top of bf16;
- with ``--bf16`` gradients are all-reduced in fp32 unless ``--grad-reduce-in-bf16``;
- ``--recompute-activations`` is ``--recompute-granularity selective``; none means none;
- ``--num-layers-per-virtual-pipeline-stage k`` gives v = l / p / k interleaved stages;
- ``--use-distributed-optimizer`` shards the optimizer state: ZeRO stage 1;
- the vocabulary is padded to a multiple of ``--make-vocab-size-divisible-by`` (128) · t;
- no ``--global-batch-size`` means one micro-batch per data-parallel rank (gb = b · d);
- the data-parallel size is world / (t · p · cp); the world comes from ``gpus`` or from the
  ``--nnodes``/``--nproc-per-node`` flags of a torchrun line.
"""

from __future__ import annotations

import argparse
import math
import shlex
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple, NoReturn

from estimator.errors import ValidationError

MEGATRON_VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by default

# Flags that take one integer value.
_INT_FLAGS = frozenset(
    {
        "num-layers",
        "hidden-size",
        "num-attention-heads",
        "seq-length",
        "encoder-seq-length",
        "max-position-embeddings",
        "ffn-hidden-size",
        "num-query-groups",
        "padded-vocab-size",
        "vocab-size",
        "make-vocab-size-divisible-by",
        "tensor-model-parallel-size",
        "pipeline-model-parallel-size",
        "num-layers-per-virtual-pipeline-stage",
        "virtual-pipeline-model-parallel-size",
        "decoder-first-pipeline-num-layers",
        "decoder-last-pipeline-num-layers",
        "context-parallel-size",
        "expert-model-parallel-size",
        "num-experts",
        "moe-router-topk",
        "moe-ffn-hidden-size",
        "micro-batch-size",
        "global-batch-size",
        "nproc-per-node",
    }
)
# Flags that take one value we read as text.
_STR_FLAGS = frozenset({"recompute-granularity", "fp8-format", "nnodes", "moe-layer-freq"})
# Flags that take no value.
_BOOL_FLAGS = frozenset(
    {
        "group-query-attention",
        "swiglu",
        "untie-embeddings-and-output-weights",
        "sequence-parallel",
        "recompute-activations",
        "fp16",
        "bf16",
        "use-distributed-optimizer",
        "overlap-grad-reduce",
        "tp-comm-overlap",
        "grad-reduce-in-bf16",
        "accumulate-allreduce-grads-in-fp32",
    }
)


class MegatronArgs(NamedTuple):
    """The request parts read from the command line, and notes for the user."""

    request: dict[str, Any]
    notes: list[str]


def _missing(flag: str, rule: str) -> ValidationError:
    return ValidationError(flag, None, rule)


def _tokens(command: str | Sequence[str]) -> list[str]:
    """The words of a launch line or script as the shell splits them (continuations joined)."""
    if not isinstance(command, str):
        return list(command)
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # an unclosed quote
        raise ValidationError(
            "--megatron-args", command, f"is not a shell command line: {exc}"
        ) from None


class _Refused(Exception):
    """argparse refused the line for a reason it does not tie to one flag."""


class _FlagParser(argparse.ArgumentParser):
    """The flags commest reads, declared as Megatron-LM and torchrun declare them."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


@lru_cache(maxsize=1)
def _parser() -> _FlagParser:
    parser = _FlagParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for key in sorted(_BOOL_FLAGS | _INT_FLAGS | _STR_FLAGS):
        spellings = dict.fromkeys([f"--{key}", f"--{key.replace('-', '_')}"])
        if key in _BOOL_FLAGS:
            parser.add_argument(*spellings, dest=key, action="store_true", default=None)
        else:  # the value as written; converted (and its errors named) below
            parser.add_argument(*spellings, dest=key, default=None)
    return parser


def _scan(tokens: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Known flags -> their raw value (True for switches); the unknown flags, in order.

    ``parse_known_args`` leaves everything else (the launcher, the script, flags commest does
    not model and their values) aside; of that, the words that look like flags are named in
    a note.
    """
    words = [token for token in tokens if token != "--"]  # no end of options: read them all
    try:
        namespace, rest = _parser().parse_known_args(words)
    except argparse.ArgumentError as exc:  # e.g. a known flag without its value
        flag = (exc.argument_name or "--megatron-args").split("/")[0]
        rule = "needs a value" if "expected one argument" in exc.message else exc.message
        raise ValidationError(flag, None, rule) from None
    except _Refused as exc:
        raise ValidationError("--megatron-args", None, str(exc)) from None
    found = {key: value for key, value in vars(namespace).items() if value is not None}
    unknown = [word.split("=", 1)[0] for word in rest if word.startswith("--")]
    return found, unknown


def _int(found: dict[str, str | bool], key: str) -> int | None:
    raw = found.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw))
    except ValueError:
        hint = " (expand shell variables first)" if "$" in str(raw) else ""
        raise ValidationError(f"--{key}", raw, f"must be a whole number{hint}") from None
    if value <= 0:
        raise ValidationError(f"--{key}", value, "must be a whole number > 0")
    return value


def _world_from_torchrun(found: dict[str, str | bool], notes: list[str]) -> int | None:
    nodes_raw = found.get("nnodes")
    per_node = found.get("nproc-per-node")
    if per_node is None:
        return None
    nproc = _int(found, "nproc-per-node")
    assert nproc is not None
    nodes = 1
    if nodes_raw is not None:
        text = str(nodes_raw)
        if ":" in text:  # elastic MIN:MAX: the job runs at MAX when it can
            text = text.rsplit(":", 1)[1]
            notes.append(f"--nnodes {nodes_raw} is elastic; assumed {text} nodes")
        try:
            nodes = int(text)
        except ValueError:
            raise ValidationError("--nnodes", nodes_raw, "must be a whole number") from None
        if nodes <= 0:
            raise ValidationError("--nnodes", nodes, "must be a whole number > 0")
    return nodes * nproc


def parse_megatron_args(
    command: str | Sequence[str],
    *,
    gpus: int | None = None,
    vocab_size: int | None = None,
) -> MegatronArgs:
    """The ``model``, ``layout`` and ``training`` of a request from a Megatron-LM launch line.

    ``gpus`` (the world size) and ``vocab_size`` supply what the line may not say; ``gpus``
    wins over torchrun's ``--nnodes``/``--nproc-per-node``. A missing essential raises a
    ValidationError whose field is the flag to add.
    """
    found, unknown = _scan(_tokens(command))
    notes: list[str] = []
    if unknown:
        notes.append(f"ignored {len(unknown)} flag(s) commest does not model: {' '.join(unknown)}")

    def need(key: str, what: str) -> int:
        value = _int(found, key)
        if value is None:
            raise _missing(
                f"--{key}", f"missing from the Megatron command line: add --{key} N ({what})"
            )
        return value

    layers = need("num-layers", "transformer layers")
    hidden = need("hidden-size", "model width")
    heads = need("num-attention-heads", "attention heads")
    seq = _int(found, "seq-length") or _int(found, "encoder-seq-length")
    if seq is None:
        seq = _int(found, "max-position-embeddings")
        if seq is None:
            raise _missing(
                "--seq-length", "missing from the Megatron command line: add --seq-length N"
            )
        notes.append(f"no --seq-length: used --max-position-embeddings {seq}")

    tensor = _int(found, "tensor-model-parallel-size") or 1
    pipeline = _int(found, "pipeline-model-parallel-size") or 1
    context = _int(found, "context-parallel-size") or 1
    expert = _int(found, "expert-model-parallel-size") or 1

    padded = _int(found, "padded-vocab-size")
    if padded is not None:
        vocab = padded
    else:
        raw_vocab = vocab_size if vocab_size is not None else _int(found, "vocab-size")
        if raw_vocab is None:
            raise _missing(
                "--vocab-size",
                "the vocabulary comes from a tokenizer file commest cannot read: "
                "pass --vocab-size N (e.g. 50257 for GPT-2 BPE, 128256 for Llama 3)",
            )
        if raw_vocab <= 0:
            raise ValidationError("--vocab-size", raw_vocab, "must be a whole number > 0")
        multiple = (_int(found, "make-vocab-size-divisible-by") or MEGATRON_VOCAB_DIVISOR) * tensor
        vocab = math.ceil(raw_vocab / multiple) * multiple
        if vocab != raw_vocab:
            notes.append(f"vocabulary padded as Megatron does: {raw_vocab} -> {vocab}")

    world = gpus
    if world is None:
        world = _world_from_torchrun(found, notes)
    if world is None:
        raise _missing(
            "--gpus",
            "the GPU count is not on the Megatron command line: pass --gpus N "
            "(or a torchrun line with --nnodes and --nproc-per-node)",
        )
    if world <= 0:
        raise ValidationError("--gpus", world, "must be a whole number > 0")
    model_parallel = tensor * pipeline * context
    if world % model_parallel:
        raise ValidationError(
            "--gpus",
            world,
            f"must be divisible by tensor·pipeline·context = {tensor}·{pipeline}·{context}"
            f" = {model_parallel}",
        )
    data = world // model_parallel

    virtual = 1
    per_virtual = _int(found, "num-layers-per-virtual-pipeline-stage")
    vpp_size = _int(found, "virtual-pipeline-model-parallel-size")
    if per_virtual is not None:
        if layers % (pipeline * per_virtual):
            raise ValidationError(
                "--num-layers-per-virtual-pipeline-stage",
                per_virtual,
                f"must divide num_layers / pipeline = {layers}/{pipeline}",
            )
        virtual = layers // pipeline // per_virtual
    elif vpp_size is not None:
        virtual = vpp_size

    micro = _int(found, "micro-batch-size") or 1
    if "micro-batch-size" not in found:
        notes.append("no --micro-batch-size: assumed 1")
    global_batch = _int(found, "global-batch-size")
    if global_batch is None:
        global_batch = micro * data
        notes.append(f"no --global-batch-size: Megatron uses micro-batch · data = {global_batch}")

    granularity = found.get("recompute-granularity")
    if granularity is not None:
        recompute = str(granularity).lower()
        if recompute not in ("full", "selective"):
            raise ValidationError(
                "--recompute-granularity", granularity, "must be full or selective"
            )
    elif found.get("recompute-activations"):
        recompute = "selective"
    else:
        recompute = "none"

    if found.get("fp16") and found.get("bf16"):
        raise ValidationError("--bf16", True, "cannot be combined with --fp16")
    if "fp8-format" in found:
        precision = "fp8"
    elif found.get("bf16"):
        precision = "bf16"
    elif found.get("fp16"):
        precision = "fp16"
    else:
        precision = "fp32"
        notes.append("no --fp16/--bf16: Megatron trains in fp32")

    model: dict[str, Any] = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "seq_length": seq,
        "vocab_size": vocab,
        "swiglu": bool(found.get("swiglu", False)),
        "tied_embeddings": not found.get("untie-embeddings-and-output-weights", False),
    }
    ffn = _int(found, "ffn-hidden-size")
    if ffn is not None:
        model["ffn_hidden_size"] = ffn
    groups = _int(found, "num-query-groups")
    if groups is not None and found.get("group-query-attention"):
        model["num_query_groups"] = groups
    elif groups is not None:
        notes.append("--num-query-groups without --group-query-attention: Megatron ignores it")
    experts = _int(found, "num-experts")
    if experts is not None and experts > 1:
        model["moe_num_experts"] = experts
        model["moe_top_k"] = _int(found, "moe-router-topk") or 2
        expert_ffn = _int(found, "moe-ffn-hidden-size")
        if expert_ffn is not None:
            model["moe_ffn_hidden_size"] = expert_ffn
        freq = found.get("moe-layer-freq")
        if freq is not None:
            try:
                model["moe_every_k_layers"] = int(str(freq))
            except ValueError:
                notes.append(f"--moe-layer-freq {freq} is a pattern; assumed every layer is MoE")

    layout: dict[str, Any] = {
        "pipeline": pipeline,
        "tensor": tensor,
        "data": data,
        "virtual_stages": virtual,
        "sequence_parallel": bool(found.get("sequence-parallel", False)),
        "context_parallel": context,
        "expert_parallel": expert,
        "zero_stage": 1 if found.get("use-distributed-optimizer") else 0,
        "overlap_dp": bool(found.get("overlap-grad-reduce", False)),
        "overlap_tp": bool(found.get("tp-comm-overlap", False)),
    }
    training: dict[str, Any] = {
        "global_batch_size": global_batch,
        "micro_batch_size": micro,
        "recompute": recompute,
        "precision": precision,
    }
    if found.get("accumulate-allreduce-grads-in-fp32") or (
        found.get("bf16") and not found.get("grad-reduce-in-bf16")
    ):
        training["grad_reduce_precision"] = "fp32"
    for flag, key in (
        ("decoder-first-pipeline-num-layers", "first_stage_layers"),
        ("decoder-last-pipeline-num-layers", "last_stage_layers"),
    ):
        value = _int(found, flag)
        if value is not None:
            layout[key] = value
    return MegatronArgs({"model": model, "layout": layout, "training": training}, notes)
