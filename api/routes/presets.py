"""GET /v1/presets/models, /gpus and /frameworks: published shapes, datasheet figures and the
training-software presets of the detailed fidelity."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import FrameworkPresetOut, GpuPresetOut, ModelPresetOut
from api.services import presets as service

router = APIRouter(prefix="/v1/presets", tags=["presets"])


@router.get("/models", response_model=list[ModelPresetOut])
def model_presets() -> tuple[ModelPresetOut, ...]:
    """Model shapes as their authors published them, with sources."""
    return service.model_presets()


@router.get("/gpus", response_model=list[GpuPresetOut])
def gpu_presets() -> tuple[GpuPresetOut, ...]:
    """GPU memory and dense peak TFLOP/s per precision, with sources."""
    return service.gpu_presets()


@router.get("/frameworks", response_model=list[FrameworkPresetOut])
def framework_presets() -> tuple[FrameworkPresetOut, ...]:
    """Training-software presets: what each overlaps, fuses and shards (every flag)."""
    return service.framework_presets()
