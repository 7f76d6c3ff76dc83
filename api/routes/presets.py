"""GET /v1/presets/models and /v1/presets/gpus: published shapes and datasheet figures."""

from __future__ import annotations

from fastapi import APIRouter

from api.schemas import GpuPresetOut, ModelPresetOut
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
