"""Published training runs of GPT-style models, for validating the estimator (issue 5).

``published_runs.csv`` holds one row per run whose shape, layout, batch and measurement were all
published; ``SOURCES.md`` cites every source and says how each measurement converts to a time:
T = FLOPs_per_iteration / (TFLOP/s per GPU · 1e12 · gpus), with the FLOPs formula the authors
used (column ``flops_formula``). An empty cell means "not published".
"""

from __future__ import annotations

import csv
import io
from importlib import resources

__all__ = ["COLUMNS", "PUBLISHED_RUNS_FILE", "load_published_runs"]

PUBLISHED_RUNS_FILE = "published_runs.csv"

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
    "notes",
)


def load_published_runs() -> list[dict[str, str]]:
    """The rows of ``published_runs.csv`` as strings keyed by column ('' = unknown)."""
    text = resources.files(__name__).joinpath(PUBLISHED_RUNS_FILE).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))
