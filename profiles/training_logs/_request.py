"""From the settings a log states, plus the user's hints, to an estimate request.

Hints fill what the log does not state; a hint that contradicts the log is ignored with a
warning (the log is the record of what ran). What is still missing is named with the query
parameter that supplies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from estimator.errors import ValidationError
from profiles.megatron_settings import BY_NAME, Value, build_request
from profiles.training_logs._model import LogHints, MissingField

# Hint (request field / query parameter) -> the Megatron setting it stands for.
_HINT_SETTINGS: dict[str, str] = {
    s.query_parameter: s.name
    for s in BY_NAME.values()
    if s.query_parameter is not None and s.query_parameter not in ("precision", "recompute")
}
_MODEL_FIELDS = frozenset(
    {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size"}
    | {"ffn_hidden_size", "num_query_groups"}
)
_LAYOUT_FIELDS = frozenset(
    {"tensor", "pipeline", "context_parallel", "expert_parallel", "virtual_stages"}
)
_PRECISIONS: dict[str, dict[str, Value]] = {
    "fp32": {"fp16": False, "bf16": False},
    "tf32": {"fp16": False, "bf16": False},
    "fp16": {"fp16": True, "bf16": False},
    "bf16": {"fp16": False, "bf16": True},
    "fp8": {"fp16": False, "bf16": True, "fp8": "hybrid"},
}
_RECOMPUTE: dict[str, Value] = {"none": None, "selective": "selective", "full": "full"}


@dataclass(slots=True)
class ReadRequest:
    """The request read, what is missing, and what was assumed or ignored."""

    request: dict[str, Any]
    missing: list[MissingField] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _field_path(query_parameter: str) -> str:
    if query_parameter in _MODEL_FIELDS:
        return f"model.{query_parameter}"
    if query_parameter in _LAYOUT_FIELDS:
        return f"layout.{query_parameter}"
    if query_parameter == "gpus":
        return "gpus"
    return f"training.{query_parameter}"


def _hinted(hints: LogHints) -> dict[str, Value]:
    """The hints as Megatron settings."""
    out: dict[str, Value] = {}
    for name, setting in _HINT_SETTINGS.items():
        value = getattr(hints, name, None)
        if value is not None:
            out[setting] = value
    if hints.precision is not None:
        if hints.precision not in _PRECISIONS:
            raise ValidationError(
                "precision", hints.precision, f"must be one of {', '.join(_PRECISIONS)}"
            )
        out.update(_PRECISIONS[hints.precision])
    if hints.recompute is not None:
        if hints.recompute not in _RECOMPUTE:
            raise ValidationError("recompute", hints.recompute, "must be none, selective or full")
        out["recompute_granularity"] = _RECOMPUTE[hints.recompute]
    return out


def _check_hints(hints: LogHints) -> None:
    for f in fields(hints):
        value = getattr(hints, f.name)
        if isinstance(value, int) and not isinstance(value, bool):
            low = 0 if f.name == "warmup_iterations" else 1
            if value < low:
                raise ValidationError(f.name, value, f"must be a whole number ≥ {low}")


def read_request(
    stated: Mapping[str, Value],
    hints: LogHints,
    *,
    gpus: int | None,
    vocab_size: int | None,
    where: str,
) -> ReadRequest:
    """The request from what the log states (``stated``, by setting name) and the hints.

    ``gpus`` and ``vocab_size`` are what the log says outside its settings (a world-size line,
    a padded-vocabulary line). ``where`` names the log's settings in messages.
    """
    _check_hints(hints)
    values = dict(stated)
    warnings: list[str] = []
    for name, value in _hinted(hints).items():
        if name not in values or (values[name] is None and name != "recompute_granularity"):
            values[name] = value
        elif values[name] != value:
            warnings.append(
                f"ignored the hint for {name}: the log states {values[name]!r} ({where})"
            )
    if hints.gpus is not None and gpus is None and "world_size" not in stated:
        gpus = hints.gpus
    if hints.vocab_size is not None and vocab_size is None:
        vocab_size = hints.vocab_size
    built = build_request(
        values, source="log", gpus=gpus, vocab_size=vocab_size, field_name=lambda n: n
    )
    missing = [
        MissingField(_field_path(m.query_parameter), m.query_parameter, m.what)
        for m in built.missing
    ]
    if hints.gpus_per_node is None:
        missing.append(
            MissingField(
                "cluster.gpus_per_node",
                "gpus_per_node",
                "GPUs per node (a training log does not say; the profile's is used)",
                required=False,
            )
        )
    return ReadRequest(built.request, missing, built.notes, warnings)
