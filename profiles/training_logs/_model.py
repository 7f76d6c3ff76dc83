"""What a training-log reader hands on: the steady-state iteration time and the request read.

The contract between the format readers (``megatron``, ``nemo``) and their callers (the
repository of measured runs, the API). A reader never guesses a setting: what the log does not
state is listed in ``missing`` with the query parameter that supplies it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

# Listed iterations are capped so that no log makes an answer (or a stored row) huge; the
# counts stay exact.
MAX_LISTED_ITERATIONS = 10_000


@dataclass(frozen=True, slots=True)
class LogHints:
    """What the user supplies for fields a log does not state (query parameters of the upload).

    Names are the estimate request's field names; ``gpus`` is the world size.
    ``warmup_iterations`` overrides how many iterations from the (re)start count as warm-up.
    """

    gpus: int | None = None
    gpus_per_node: int | None = None
    vocab_size: int | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    seq_length: int | None = None
    ffn_hidden_size: int | None = None
    num_query_groups: int | None = None
    tensor: int | None = None
    pipeline: int | None = None
    context_parallel: int | None = None
    expert_parallel: int | None = None
    virtual_stages: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    precision: str | None = None
    recompute: str | None = None
    warmup_iterations: int | None = None


@dataclass(frozen=True, slots=True)
class Interval:
    """One logged interval: the mean iteration time over the iterations up to ``iteration``."""

    iteration: int  # the iteration that ends the interval, as logged
    iteration_time_s: float
    line: int  # 1-based line number of the log line
    global_batch_size: int | None = None
    skipped: int = 0  # iterations the optimizer skipped (loss-scale overflow)
    nan: int = 0  # NaN iterations, or a NaN/inf loss or gradient norm
    events: tuple[str, ...] = ()  # "checkpoint save", "evaluation" seen during the interval


@dataclass(frozen=True, slots=True)
class DroppedInterval:
    """A logged interval left out of the steady state, and why."""

    iteration: int
    reason: str


@dataclass(frozen=True, slots=True)
class MissingField:
    """A request field the log does not state, and the query parameter that supplies it."""

    field: str  # where it goes in the request: model.vocab_size, layout.tensor, gpus, ...
    query_parameter: str
    what: str
    required: bool = True  # False: a default holds (said in ``what``)


@dataclass(slots=True)
class ParsedTrainingLog:
    """Everything read from one training log."""

    format: str  # "megatron-lm", "megatron-deepspeed" or "nemo"
    iteration_time_s: float  # median of the steady-state intervals
    iterations_used: list[int]  # the intervals used (their last iteration), capped
    intervals_used: int
    dropped: list[DroppedInterval]  # capped
    dropped_count: int
    warmup: str  # the warm-up rule as applied, in words
    request: dict[str, Any]  # model / layout / training, as POST /v1/estimates takes them
    missing: list[MissingField] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    last_iteration: int | None = None
    train_iterations: int | None = None  # the M of "iteration N/ M", when logged

    @property
    def complete(self) -> bool:
        """True when the request can be estimated (no required field is missing)."""
        return not any(m.required for m in self.missing)

    @property
    def content_sha256(self) -> str:
        """A digest of what was read (not of the bytes): the same run pasted with CRLF line
        ends, launcher prefixes or a markdown fence digests the same."""
        content = {
            "format": self.format,
            "iteration_time_s": self.iteration_time_s,
            "iterations_used": self.iterations_used,
            "intervals_used": self.intervals_used,
            "request": self.request,
        }
        return hashlib.sha256(
            json.dumps(content, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
