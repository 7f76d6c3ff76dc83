"""/v1/profiles/{name}/uploads: the benchmark texts a profile holds, and managing them.

Removing an upload deletes its runs; disabling keeps them but stops them answering bandwidth
queries. Either way every answer derived from the profile changes at once (its revision is
renewed, so no cache serves the old one).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from api.deps import RuntimeDep, Writer
from api.problems import problem_responses
from api.schemas import UploadOut, UploadPatch, UploadsPage
from api.services import uploads as service
from profiles.repository import MAX_PAGE

router = APIRouter(prefix="/v1/profiles", tags=["uploads"])

ProfileName = Annotated[str, Path(description="profile name")]
UploadId = Annotated[int, Path(ge=1, le=2**63 - 1, description="upload id")]


@router.get(
    "/{name}/uploads", response_model=UploadsPage, responses=problem_responses(404, 422, 503)
)
def list_uploads(
    name: ProfileName,
    runtime: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> UploadsPage:
    """A page of the profile's uploads (file name, label, flags, disabled, run count)."""
    with runtime.read_session() as session:
        return service.list_uploads(session=session, name=name, limit=limit, offset=offset)


@router.delete(
    "/{name}/uploads/{upload_id}",
    status_code=204,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 422, 503),
)
def remove_upload(name: ProfileName, upload_id: UploadId, runtime: RuntimeDep) -> Response:
    """Delete an upload with its runs."""
    with runtime.transaction() as session:
        service.remove_upload(session=session, name=name, upload_id=upload_id)
    return Response(status_code=204)


@router.patch(
    "/{name}/uploads/{upload_id}",
    response_model=UploadOut,
    dependencies=[Writer],
    responses=problem_responses(401, 404, 422, 503),
)
def patch_upload(
    name: ProfileName, upload_id: UploadId, body: UploadPatch, runtime: RuntimeDep
) -> UploadOut:
    """``{"disabled": true}`` stops an upload's runs answering; ``false`` brings them back."""
    with runtime.transaction() as session:
        return service.patch_upload(session=session, name=name, upload_id=upload_id, body=body)
