"""Presets: published model shapes and GPU datasheet figures, with their sources."""

from __future__ import annotations

from functools import cache
from typing import Any

from api.schemas import ModelIn
from estimator import megatron_parameters
from estimator.presets import GPU_PRESETS, MODEL_PRESETS

_MODEL_FIELDS = tuple(name for name in ModelIn.model_fields if name != "preset")


@cache
def model_presets() -> list[dict[str, Any]]:
    """GET /v1/presets/models."""
    out = []
    for key, preset in MODEL_PRESETS.items():
        spec = preset.spec
        out.append(
            {
                "key": key,
                "source": preset.source,
                "published_parameters": preset.published_parameters,
                "parameters": megatron_parameters(spec)
                if spec.num_parameters is None
                else float(spec.num_parameters),
                "spec": {name: getattr(spec, name) for name in _MODEL_FIELDS},
            }
        )
    return out


@cache
def gpu_presets() -> list[dict[str, Any]]:
    """GET /v1/presets/gpus."""
    return [
        {
            "key": key,
            "name": gpu.name,
            "memory_bytes": gpu.memory_bytes,
            "peak_tflops": {p.value: flops / 1e12 for p, flops in gpu.peak_flops.items()},
            "source": gpu.source,
        }
        for key, gpu in GPU_PRESETS.items()
    ]
