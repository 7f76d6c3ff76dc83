"""Published training runs of GPT-style models, for validating the estimator (issue 5).

``published_runs.csv`` holds one row per run whose shape, layout, batch and measurement were all
published; ``SOURCES.md`` cites every source and says how each measurement converts to a time:
T = FLOPs_per_iteration / (TFLOP/s per GPU · 1e12 · gpus), with the FLOPs formula the authors
used (column ``flops_formula``). An empty cell means "not published" (or the column's default);
column ``inferred`` names the cells that were inferred rather than read from the source, and a
row with a non-empty ``exclude_reason`` is kept for the record but never scored.
"""

from __future__ import annotations

import csv
import io
from importlib import resources

__all__ = ["COLUMNS", "FRAMEWORKS", "PUBLISHED_RUNS_FILE", "load_published_runs"]

PUBLISHED_RUNS_FILE = "published_runs.csv"

FRAMEWORKS: tuple[str, ...] = (
    "megatron-lm",
    "nemo",
    "megatron-bridge",
    "deepspeed",
    "torchtitan",
    "fsdp",
    "llm-foundry",
    "other",
)

COLUMNS: tuple[str, ...] = (
    "id",
    "source",
    "source_ref",
    "model",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "vocab_size",
    "ffn_hidden_size",
    "num_query_groups",
    "swiglu",
    "gpu",
    "gpus",
    "tensor",
    "pipeline",
    "data",
    "virtual_stages",
    "first_stage_layers",
    "last_stage_layers",
    "sequence_parallel",
    "recompute",
    "flash_attention",
    "global_batch_size",
    "micro_batch_size",
    "precision",
    "measured_iteration_time_s",
    "measured_tflops_per_gpu",
    "flops_formula",
    # issue 11: parallelism beyond (p, t, d), MoE shape, software, provenance
    "context_parallel",  # blank = 1
    "expert_parallel",  # blank = 1
    "zero_stage",  # 0-3: distributed optimizer = 1, FSDP SHARD_GRAD_OP = 2, FULL_SHARD = 3
    "moe_num_experts",  # blank for dense models
    "moe_top_k",
    "moe_ffn_hidden_size",
    "moe_every_k_layers",
    "tied_embeddings",  # true/false
    "framework",  # see FRAMEWORKS
    "framework_version",  # as published
    "year",
    "overlap_flags",  # semicolon-separated, as published
    "measured_tokens_per_s_per_gpu",  # the published throughput, when the source gives one
    "inferred",  # semicolon-separated names of columns whose values are inferred, not published
    "exclude_reason",  # non-blank = excluded from scoring, with that reason
    "notes",
    "kv_channels",  # attention head width where it is not hidden_size/num_attention_heads
    "expert_tensor_parallel",  # the experts' own TP where not the layer's (1: folded over TP)
    "moe_token_dispatcher",  # flex (DeepEP / HybridEP) where the recipe sets it; blank: alltoall
    "measured_memory_gib",  # the peak memory per GPU the source prints, where it prints one
    "recompute_num_layers",  # block recompute: layers replayed per pipeline chunk; blank: all
)


def load_published_runs() -> list[dict[str, str]]:
    """The rows of ``published_runs.csv`` as strings keyed by column ('' = unknown)."""
    text = resources.files(__name__).joinpath(PUBLISHED_RUNS_FILE).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))
