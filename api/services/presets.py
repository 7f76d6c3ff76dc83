"""Presets: published model shapes and GPU datasheet figures, with their sources."""

from __future__ import annotations

from functools import cache

from api.schemas import FrameworkPresetOut, GpuPresetOut, Members, ModelPresetOut
from estimator.flops import model_parameters
from estimator.frameworks import FRAMEWORK_NAMES, FRAMEWORK_PRESETS, framework_preset
from estimator.presets import GPU_PRESETS, MODEL_PRESETS


@cache
def model_presets() -> tuple[ModelPresetOut, ...]:
    """GET /v1/presets/models: with the parameter count an estimate of it reports (its layer
    shapes: GQA, gated MLP, MoE, untied embeddings, head width; or the count it states)."""
    return tuple(
        ModelPresetOut.model_validate(Members(preset, parameters=model_parameters(preset.spec)))
        for preset in MODEL_PRESETS.values()
    )


@cache
def gpu_presets() -> tuple[GpuPresetOut, ...]:
    """GET /v1/presets/gpus: dense peak per precision in TFLOP/s."""
    return tuple(
        GpuPresetOut.model_validate(
            Members(gpu, peak_tflops={p.value: flops / 1e12 for p, flops in gpu.peak_flops.items()})
        )
        for gpu in GPU_PRESETS.values()
    )


@cache
def framework_presets() -> tuple[FrameworkPresetOut, ...]:
    """GET /v1/presets/frameworks: every preset, its flags and the names that select it."""
    return tuple(
        FrameworkPresetOut(
            name=fw.name,
            description=fw.description,
            flags=fw.flags(),
            aliases=[n for n in FRAMEWORK_NAMES if n != fw.name and framework_preset(n) is fw],
        )
        for fw in FRAMEWORK_PRESETS.values()
    )
