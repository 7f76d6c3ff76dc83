"""GET /v1/presets/models and /v1/presets/gpus: published shapes and datasheet figures."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import APIRouter

from api import service
from api.schemas import GpuPresetOut, ModelPresetOut

router = APIRouter(prefix="/v1/presets", tags=["presets"])


@lru_cache(maxsize=1)
def _models() -> list[dict[str, Any]]:
    return service.model_presets_body()


@lru_cache(maxsize=1)
def _gpus() -> list[dict[str, Any]]:
    return service.gpu_presets_body()


@router.get("/models", response_model=list[ModelPresetOut])
def model_presets() -> Any:
    """Model shapes as their authors published them, with sources."""
    return _models()


@router.get("/gpus", response_model=list[GpuPresetOut])
def gpu_presets() -> Any:
    """GPU memory and dense peak TFLOP/s per precision, with sources."""
    return _gpus()
