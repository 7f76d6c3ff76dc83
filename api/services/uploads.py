"""Uploads: a profile's benchmark texts as stored, listed, removed, disabled and enabled."""

from __future__ import annotations

from sqlalchemy.orm import Session

from api.schemas import UploadOut, UploadPatch, UploadsPage
from api.services.runs import page_members, upload_out
from profiles import repository


def list_uploads(*, session: Session, name: str, limit: int, offset: int) -> UploadsPage:
    """GET /v1/profiles/{name}/uploads: one page, oldest first, without the texts."""
    page = repository.list_uploads(session=session, profile_name=name, limit=limit, offset=offset)
    return UploadsPage(uploads=[upload_out(i) for i in page.items], **page_members(page))


def remove_upload(*, session: Session, name: str, upload_id: int) -> None:
    """DELETE /v1/profiles/{name}/uploads/{id}: the upload and its runs go."""
    repository.remove_upload(session=session, profile_name=name, upload_id=upload_id)


def patch_upload(*, session: Session, name: str, upload_id: int, body: UploadPatch) -> UploadOut:
    """PATCH /v1/profiles/{name}/uploads/{id}: disable or enable it."""
    info = repository.set_upload_disabled(
        session=session, profile_name=name, upload_id=upload_id, disabled=body.disabled
    )
    return upload_out(info)
