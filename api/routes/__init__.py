"""One router per resource; ``api.app`` mounts them all (and only) from ``ROUTERS``."""

from __future__ import annotations

from fastapi import APIRouter

from api.routes import (
    baselines,
    calibrations,
    checks,
    estimates,
    health,
    matrices,
    plans,
    presets,
    profiles,
    runs,
    timelines,
    training_logs,
    uploads,
    validation,
)

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    estimates.router,
    matrices.router,
    plans.router,
    checks.router,
    baselines.router,
    profiles.router,
    runs.router,
    uploads.router,
    training_logs.router,
    calibrations.router,
    presets.router,
    timelines.router,
    validation.router,
)
