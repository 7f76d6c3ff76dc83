"""Read the model, layout and batch of an estimate request from a Megatron-LM command line.

``parse_megatron_args`` is pure: a launch line in (``torchrun ... pretrain_gpt.py --num-layers
96 ...`` or just the flags), the ``model``/``layout``/``training`` parts of a ``POST
/v1/estimates`` body out, plus notes for the user (flags it ignored, defaults it assumed).
The cluster part comes from elsewhere (``--cluster-profile`` or a request file).

The flags it knows and what they mean come from one table shared with the training-log
reader (``profiles.megatron_settings``); this module only reads a command line: the flags,
their values, and the world size of a torchrun launcher (``--nnodes``/``--nproc-per-node``).
Without ``--global-batch-size`` Megatron uses one micro-batch per data-parallel rank.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any, NamedTuple

from estimator.errors import ValidationError
from profiles.megatron_settings import (
    BOOL_SETTINGS,
    MEGATRON_VOCAB_DIVISOR,
    Value,
    build_request,
    convert,
    flag_name,
    setting_for,
)

__all__ = ["MEGATRON_VOCAB_DIVISOR", "MegatronArgs", "parse_megatron_args"]

# torchrun's flags that give the world size (launcher flags, not Megatron settings).
_LAUNCHER_FLAGS = frozenset({"nproc-per-node", "nnodes"})
# Settings a log states but a command line does not set this way (listed as ignored).
_NOT_FLAGS = frozenset({"rampup_batch_size", "world_size", "data_parallel_size"})

_NUMBER = re.compile(r"^-?\d+(\.\d*)?([eE][-+]?\d+)?$")

# What to say when the command line lacks an essential, by setting.
_MISSING_RULES = {
    "num_layers": (
        "--num-layers",
        "missing from the Megatron command line: add --num-layers N (transformer layers)",
    ),
    "hidden_size": (
        "--hidden-size",
        "missing from the Megatron command line: add --hidden-size N (model width)",
    ),
    "num_attention_heads": (
        "--num-attention-heads",
        "missing from the Megatron command line: add --num-attention-heads N (attention heads)",
    ),
    "seq_length": ("--seq-length", "missing from the Megatron command line: add --seq-length N"),
    "vocab_size": (
        "--vocab-size",
        "the vocabulary comes from a tokenizer file commest cannot read: "
        "pass --vocab-size N (e.g. 50257 for GPT-2 BPE, 128256 for Llama 3)",
    ),
    "world_size": (
        "--gpus",
        "the GPU count is not on the Megatron command line: pass --gpus N "
        "(or a torchrun line with --nnodes and --nproc-per-node)",
    ),
}


class MegatronArgs(NamedTuple):
    """The request parts read from the command line, and notes for the user."""

    request: dict[str, Any]
    notes: list[str]


def _tokens(command: str | Sequence[str]) -> list[str]:
    if not isinstance(command, str):
        return list(command)
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        return shlex.split(text, comments=True)
    except ValueError as exc:  # an unclosed quote
        raise ValidationError(
            "--megatron-args", command, f"is not a shell command line: {exc}"
        ) from None


def _is_value(token: str) -> bool:
    return not token.startswith("-") or bool(_NUMBER.match(token))


def _scan(tokens: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Known flags (by setting or launcher name) -> raw value (True for switches); unknown flags."""
    found: dict[str, str | bool] = {}
    unknown: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or token == "--":
            continue  # the launcher, the script, a stray positional
        name, eq, inline = token[2:].partition("=")
        dashed = name.replace("_", "-")
        setting = setting_for(dashed)
        if setting is not None and setting.name in _NOT_FLAGS:
            setting = None
        key = setting.name if setting is not None else dashed
        if setting is not None and setting.kind == "bool":
            found[key] = True
        elif setting is not None or dashed in _LAUNCHER_FLAGS:
            if eq:
                found[key] = inline
            elif i < len(tokens) and _is_value(tokens[i]):
                found[key] = tokens[i]
                i += 1
            else:
                raise ValidationError(f"--{dashed}", None, "needs a value")
        else:
            unknown.append(f"--{name}")
            if not eq:
                while i < len(tokens) and _is_value(tokens[i]) and not tokens[i].endswith(".py"):
                    i += 1
    return found, unknown


def _whole(flag: str, raw: str | bool) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise ValidationError(flag, raw, "must be a whole number") from None
    if value <= 0:
        raise ValidationError(flag, value, "must be a whole number > 0")
    return value


def _world_from_torchrun(found: dict[str, str | bool], notes: list[str]) -> int | None:
    per_node = found.get("nproc-per-node")
    if per_node is None:
        return None
    nproc = _whole("--nproc-per-node", per_node)
    nodes = 1
    nodes_raw = found.get("nnodes")
    if nodes_raw is not None:
        text = str(nodes_raw)
        if ":" in text:  # elastic MIN:MAX: the job runs at MAX when it can
            text = text.rsplit(":", 1)[1]
            notes.append(f"--nnodes {nodes_raw} is elastic; assumed {text} nodes")
        nodes = _whole("--nnodes", text)
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
    values: dict[str, Value] = {name: False for name in BOOL_SETTINGS}
    for key, raw in found.items():
        setting = setting_for(key)
        if setting is not None:
            values[setting.name] = convert(setting, raw)
    if gpus is not None and gpus <= 0:
        raise ValidationError("--gpus", gpus, "must be a whole number > 0")
    world = gpus if gpus is not None else _world_from_torchrun(found, notes)
    parts = build_request(
        values, source="command_line", gpus=world, vocab_size=vocab_size, field_name=_field
    )
    if parts.missing:
        field, rule = _MISSING_RULES[parts.missing[0].setting]
        raise ValidationError(field, None, rule)
    return MegatronArgs(parts.request, notes + parts.notes)


def _field(name: str) -> str:
    if name == "world_size":
        return "--gpus"
    return flag_name(name)
