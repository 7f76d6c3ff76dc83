"""Read the model, layout and batch of an estimate request from a Megatron-LM command line.

``parse_megatron_args`` is pure: a launch line in (``torchrun ... pretrain_gpt.py --num-layers
96 ...`` or just the flags), the ``model``/``layout``/``training`` parts of a ``POST
/v1/estimates`` body out, plus notes for the user (flags it ignored, defaults it assumed).
The cluster part comes from elsewhere (``--cluster-profile`` or a request file).

The flags it knows and what they mean come from one table shared with the training-log
reader (``profiles.megatron_settings``); this module only reads a command line: the flags,
their values, and the world size of a torchrun launcher (``--nnodes``/``--nproc-per-node``).
Without ``--global-batch-size`` Megatron uses one micro-batch per data-parallel rank.

The line is split as the shell splits it (``shlex``: quotes, comments, backslash
continuations); a whole launch script works too, as Megatron-LM's examples write them: a
variable assigned (``GPT_ARGS="--num-layers 96 ..."``) is expanded where ``$GPT_ARGS`` or
``${GPT_ARGS}`` appears, word-split as the shell splits an unquoted expansion (values assigned
earlier expand inside later ones; other parameter expansions are left as written). Then it is
read with ``argparse``: every setting of the table is declared as a flag,
in each of its spellings (``--a-b``, ``--a_b`` and its aliases), beside the launcher's; and
``parse_known_args`` leaves the rest aside (named in a note).
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple, NoReturn

from estimator.errors import ValidationError
from profiles.megatron_settings import (
    BOOL_SETTINGS,
    MEGATRON_VOCAB_DIVISOR,
    SETTINGS,
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
_NOT_FLAGS = frozenset(
    {
        "rampup_batch_size",
        "world_size",
        "data_parallel_size",
        # on by default: a command line turns them off with their --no- flag
        "overlap_p2p_comm",
        "gradient_accumulation_fusion",
    }
)
# Flags that take one or more values (Megatron declares them with nargs="+").
_LIST_FLAGS = frozenset({"cuda_graph_scope", "recompute_modules", "cp_comm_type"})


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


_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Expansions may nest (A="$B $B"), so what they produce is capped, not just the input.
_MAX_EXPANDED_CHARS = 1_000_000


def _tokens(command: str | Sequence[str]) -> list[str]:
    if not isinstance(command, str):
        return list(command)
    text = command.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:  # an unclosed quote
        raise ValidationError(
            "--megatron-args", command, f"is not a shell command line: {exc}"
        ) from None
    return _expand(words)


def _expand(words: list[str]) -> list[str]:
    """``words`` with the script's ``NAME=value`` assignments taken out and ``$NAME`` expanded."""
    variables: dict[str, str] = {}
    tokens: list[str] = []
    produced = 0

    def value_of(match: re.Match[str]) -> str:
        return variables.get(match.group(1) or match.group(2), match.group(0))

    for word in words:
        expanded = _REFERENCE.sub(value_of, word) if variables else word
        produced += len(expanded)
        if produced > _MAX_EXPANDED_CHARS:
            raise ValidationError(
                "--megatron-args",
                None,
                f"its shell variables expand to more than {_MAX_EXPANDED_CHARS:,} characters",
            )
        assignment = _ASSIGNMENT.fullmatch(expanded)
        if assignment is not None:
            variables[assignment.group(1)] = assignment.group(2)
        elif expanded == word:
            tokens.append(word)
        else:  # an unquoted expansion is split into words, as the shell does
            tokens.extend(expanded.split())
    return tokens


class _Refused(Exception):
    """argparse refused the line for a reason it does not tie to one flag."""


class _FlagParser(argparse.ArgumentParser):
    """The flags commest reads, declared as Megatron-LM and torchrun declare them."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


@lru_cache(maxsize=1)
def _parser() -> _FlagParser:
    parser = _FlagParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for setting in SETTINGS:
        if setting.name in _NOT_FLAGS:
            continue
        names = (setting.name, *setting.aliases)
        spellings = dict.fromkeys(s for n in names for s in (flag_name(n), "--" + n))
        if setting.kind == "bool":
            parser.add_argument(*spellings, dest=setting.name, action="store_true", default=None)
        elif setting.name in _LIST_FLAGS:  # the values joined by spaces (the table reads them)
            parser.add_argument(*spellings, dest=setting.name, nargs="+", default=None)
        else:  # the value as written; converted (and its errors named) by the table
            parser.add_argument(*spellings, dest=setting.name, default=None)
    for flag in sorted(_LAUNCHER_FLAGS):
        spellings = dict.fromkeys([f"--{flag}", f"--{flag.replace('-', '_')}"])
        parser.add_argument(*spellings, dest=flag, default=None)
    return parser


def _scan(tokens: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """Known flags (by setting or launcher name) -> raw value (True for switches); unknown flags.

    ``parse_known_args`` leaves everything else (the launcher, the script, flags commest does
    not model and their values) aside; of that, the words that look like flags are named.
    """
    words = [token for token in tokens if token != "--"]
    try:
        namespace, rest = _parser().parse_known_args(words)
    except argparse.ArgumentError as exc:
        flag = (exc.argument_name or "--megatron-args").split("/")[0]
        rule = "needs a value" if "expected one argument" in exc.message else exc.message
        raise ValidationError(flag, None, rule) from None
    except _Refused as exc:
        raise ValidationError("--megatron-args", None, str(exc)) from None
    found = {
        key: " ".join(value) if isinstance(value, list) else value
        for key, value in vars(namespace).items()
        if value is not None
    }
    unknown = [word.split("=", 1)[0] for word in rest if word.startswith("--")]
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
    values: dict[str, Value] = {name: False for name in BOOL_SETTINGS if name not in _NOT_FLAGS}
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
