"""Profiles: clusters (GPU model, GPUs per node, peak FLOP/s, u) as stored resources."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.schemas import GB, ProfileCreate, ProfileRead, ProfilesPage, ProfileUpdate
from estimator.errors import ConflictError, ValidationError
from profiles import repository

_NOT_NULL = ("name", "gpu_model", "gpus_per_node", "description")


def _memory_bytes(gb: float | None) -> int | None:
    return None if gb is None else round(gb * GB)


def create_profile(*, session: Session, body: ProfileCreate) -> ProfileRead:
    """POST /v1/profiles."""
    profile = repository.create_profile(
        session=session,
        name=body.name,
        gpu_model=body.gpu_model,
        gpus_per_node=body.gpus_per_node,
        peak_tflops=body.peak_tflops,
        peak_tflops_by_dtype=body.peak_tflops_by_dtype,
        gpu_memory_bytes=_memory_bytes(body.gpu_memory_gb),
        utilization=body.utilization,
        description=body.description,
    )
    session.flush()
    return ProfileRead.model_validate(profile)


def list_profiles(*, session: Session, offset: int, limit: int) -> ProfilesPage:
    """Profiles by name, one page at a time, and how many there are."""
    rows = repository.list_profiles(session=session, offset=offset, limit=limit)
    total = repository.count_profiles(session=session)
    return ProfilesPage(profiles=[ProfileRead.model_validate(p) for p in rows], count=total)


def get_profile(*, session: Session, name: str) -> ProfileRead:
    """One profile; NotFoundError otherwise."""
    return ProfileRead.model_validate(repository.get_profile(session=session, name=name))


def update_profile(*, session: Session, name: str, body: ProfileUpdate) -> ProfileRead:
    """PATCH /v1/profiles/{name}: the fields given change; nominal profiles keep their name."""
    changes: repository.ProfileChanges = {}
    for key in body.model_fields_set:
        value = getattr(body, key)
        if value is None and key in _NOT_NULL:
            raise ValidationError(key, None, "cannot be null")
        if key == "gpu_memory_gb":
            changes["gpu_memory_bytes"] = _memory_bytes(value)
        else:
            changes[key] = value  # type: ignore[literal-required]
    current = repository.get_profile(session=session, name=name)
    if current.nominal and "name" in changes and changes["name"] != name:
        raise ConflictError(f"profile {name!r} is built in (nominal) and keeps its name", name=name)
    profile = repository.update_profile(session=session, name=name, changes=changes)
    session.flush()
    return ProfileRead.model_validate(profile)


def delete_profile(*, session: Session, name: str) -> None:
    """DELETE /v1/profiles/{name}; built-in nominal profiles cannot be deleted (409)."""
    profile = repository.get_profile(session=session, name=name)
    if profile.nominal:
        raise ConflictError(
            f"profile {name!r} is built in (nominal) and is restored on every start; "
            "it cannot be deleted",
            name=name,
        )
    repository.delete_profile(session=session, name=name)
