"""/v1/profiles/{name}/runs and what is read from them: bandwidth, curves, tuning tables.

Uploads take the benchmark output as the raw body (``text/plain``, its name in ``filename``)
or as one or several files of a ``multipart/form-data`` body (at most
``COMMEST_MAX_UPLOAD_FILES``, counted by Starlette's parser as they stream in); an oversized
upload is refused without being read whole. A multipart body may carry one form field
``hints``: a JSON object keyed by file name, each value the hints of that file (``op``,
``ranks``, ``nodes``, ``backend``, ``dtype``) and its ``label``, over the query's. Every text is
parsed before the write transaction opens; errors name the file they are about.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError
from python_multipart.multipart import parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from api.deps import RuntimeDep, Writer
from api.problems import problem_responses
from api.runtime import Runtime
from api.schemas import (
    MAX_RANKS,
    BandwidthQuery,
    BandwidthResponse,
    CurvesResponse,
    FileHints,
    Op,
    RunsPage,
    TuningTableResponse,
    UploadHints,
    UploadResponse,
)
from api.services import runs as service
from estimator.errors import LimitError, ValidationError
from profiles.repository import MAX_PAGE
from profiles.uploads import PreparedUpload

_PER_FILE_HINTS = TypeAdapter(dict[str, FileHints])
_HINTS_FIELD = "hints"

router = APIRouter(prefix="/v1/profiles", tags=["runs"])

_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "nccl-tests / rccl-tests / OSU output, as text or as uploaded files",
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                        },
                        "hints": {
                            "type": "string",
                            "description": (
                                'JSON: {"<file name>": {"ranks": 16, "nodes": 2, '
                                '"label": "..."}, ...}, over the query parameters'
                            ),
                        },
                    },
                }
            },
        },
    }
}


def _declared_length(request: Request, max_bytes: int) -> None:
    """LimitError before anything is read when ``Content-Length`` is over the cap."""
    length = request.headers.get("content-length")
    if length is None:
        return
    try:
        declared = int(length)
    except ValueError:
        raise ValidationError("Content-Length", length, "must be a whole number") from None
    if declared > max_bytes:
        raise LimitError(
            f"the upload is {declared} bytes, over the cap of {max_bytes} bytes "
            "(COMMEST_MAX_UPLOAD_BYTES)",
            size_bytes=declared,
            max_upload_bytes=max_bytes,
        )


async def _capped_body(request: Request, max_bytes: int) -> bytes:
    """The body, refused as soon as it streams past ``max_bytes``."""
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk
        if len(buffer) > max_bytes:
            raise LimitError(
                f"the upload exceeds the cap of {max_bytes} bytes (COMMEST_MAX_UPLOAD_BYTES)",
                max_upload_bytes=max_bytes,
            )
    return bytes(buffer)


def _multipart_problem(message: str, max_files: int) -> LimitError | ValidationError:
    """The problem of a multipart body Starlette's parser refused (``message`` is its)."""
    if message.startswith("Too many files") and max_files == 1:  # an endpoint of one file
        return ValidationError(
            "files", "<multipart>", "holds more than one file: send one file per request"
        )
    if message.startswith("Too many files"):
        return LimitError(
            f"the upload holds more than {max_files} files (COMMEST_MAX_UPLOAD_FILES)",
            max_upload_files=max_files,
        )
    return ValidationError("body", "<multipart>", message)


def _file_hints(raw: str) -> dict[str, FileHints]:
    """The ``hints`` form field: file name -> that file's hints and label."""
    try:
        return _PER_FILE_HINTS.validate_json(raw)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValidationError(
            f"hints.{where}" if where else "hints",
            first.get("input") if not isinstance(first.get("input"), dict) else "<object>",
            f"{first['msg']}; give a JSON object keyed by file name, e.g. "
            '{"a.txt": {"ranks": 16, "nodes": 2, "label": "after the NIC swap"}}',
        ) from None


Texts = list[tuple[str | None, str]]


async def _multipart_texts(
    request: Request, max_files: int, hint_names: str, *, per_file_hints: bool = False
) -> tuple[Texts, str | None]:
    """The (file name, text) of each file of a multipart body, and the raw ``hints`` field
    when ``per_file_hints`` allows one. Starlette's parser refuses the part past
    ``max_files`` (or ``max_fields`` form fields) while the body streams in."""
    try:
        form = await request.form(max_files=max_files, max_fields=max_files)
    except MultiPartException as exc:  # a request outside an app (tests) gets it as is
        raise _multipart_problem(exc.message, max_files) from None
    except HTTPException as exc:  # inside an app Starlette turns it into a 400
        if exc.status_code != 400:
            raise  # e.g. the 413 of api.app.BodyCap
        raise _multipart_problem(str(exc.detail), max_files) from None
    try:
        items = list(form.multi_items())
        fields = [(key, value) for key, value in items if not isinstance(value, UploadFile)]
        allowed = per_file_hints and len(fields) == 1 and fields[0][0] == _HINTS_FIELD
        if fields and not allowed:
            also = " and one 'hints' field (JSON per file name)" if per_file_hints else ""
            raise ValidationError(
                next((k for k, _ in fields if k != _HINTS_FIELD), fields[0][0]),
                "<form field>",
                f"only files{also} are accepted; give {hint_names} as query parameters",
            )
        files = [(key, value) for key, value in items if isinstance(value, UploadFile)]
        if not files:
            raise ValidationError("files", 0, "the multipart body holds no file")
        texts: Texts = []
        for key, value in files:
            assert isinstance(value, UploadFile)
            name = value.filename or key
            texts.append((name, service.decode_upload(await value.read(), f"files[{name}]")))
        return texts, (str(fields[0][1]) if fields else None)
    finally:
        await form.close()


async def _read(
    request: Request,
    *,
    max_bytes: int,
    max_files: int,
    hint_names: str,
    filename: str | None = None,
    per_file_hints: bool = False,
) -> tuple[Texts, str | None]:
    """The size cap is checked on ``Content-Length`` before anything is read, then while the
    body streams in (here for a raw body, by ``api.app.BodyCap`` for a multipart one)."""
    _declared_length(request, max_bytes)
    media, params = parse_options_header(request.headers.get("content-type", ""))
    if media != b"multipart/form-data":
        return [
            (filename, service.decode_upload(await _capped_body(request, max_bytes), "body"))
        ], None
    if not params.get(b"boundary"):
        raise ValidationError("Content-Type", media.decode(), "multipart needs a boundary")
    return await _multipart_texts(request, max_files, hint_names, per_file_hints=per_file_hints)


async def read_named_upload(
    request: Request,
    *,
    max_bytes: int,
    max_files: int,
    hint_names: str = "op, ranks, nodes, backend, dtype",
) -> list[tuple[str | None, str]]:
    """The texts of an upload with their file names: the raw body (no name), or each file of a
    multipart body (no form field). ``hint_names`` are the query parameters a form field is
    pointed to."""
    texts, _ = await _read(request, max_bytes=max_bytes, max_files=max_files, hint_names=hint_names)
    return texts


async def read_upload(request: Request, *, max_bytes: int, max_files: int) -> list[str]:
    """The benchmark texts of an upload: the raw body, or each file of a multipart body."""
    named = await read_named_upload(request, max_bytes=max_bytes, max_files=max_files)
    return [text for _, text in named]


async def read_benchmark_upload(
    request: Request, *, max_bytes: int, max_files: int, filename: str | None = None
) -> tuple[Texts, dict[str, FileHints]]:
    """The benchmark texts of an upload with their file names (``filename`` names a raw
    body), and the per-file hints of a multipart body's ``hints`` field."""
    texts, raw_hints = await _read(
        request,
        max_bytes=max_bytes,
        max_files=max_files,
        hint_names="op, ranks, nodes, backend, dtype, label",
        filename=filename,
        per_file_hints=True,
    )
    return texts, (_file_hints(raw_hints) if raw_hints is not None else {})


def _store(
    runtime: Runtime, name: str, prepared: list[PreparedUpload]
) -> tuple[UploadResponse, bool]:
    with runtime.transaction() as session:
        return service.store_uploads(session=session, name=name, prepared=prepared)


@router.post(
    "/{name}/runs",
    response_model=UploadResponse,
    status_code=201,
    dependencies=[Writer],
    openapi_extra=_UPLOAD_BODY,
    responses={
        200: {"description": "everything was already stored", "model": UploadResponse},
        **problem_responses(401, 404, 413, 422, 503),
    },
)
async def upload_runs(
    name: str,
    request: Request,
    response: Response,
    runtime: RuntimeDep,
    hints: Annotated[UploadHints, Query()],
    label: Annotated[
        str | None, Query(min_length=1, max_length=128, description="a label for the upload(s)")
    ] = None,
    filename: Annotated[
        str | None,
        Query(min_length=1, max_length=255, description="the raw body's file name"),
    ] = None,
) -> UploadResponse:
    """Store benchmark output: 201 when something new was stored, 200 when all was known.

    An upload whose text names a GPU of another family than the profile's, or a busbw beyond
    what its links carry, is stored with ``flags`` (its answers are then weak); disable it
    with ``PATCH .../uploads/{id}`` if it was a mistake. The same table sent again (CRLF line
    ends, a markdown fence, launcher prefixes) is the same upload.
    """
    settings = runtime.settings
    texts, per_file = await read_benchmark_upload(
        request,
        max_bytes=settings.max_upload_bytes,
        max_files=settings.max_upload_files,
        filename=filename,
    )
    prepared = await run_in_threadpool(
        service.prepare_uploads, texts=texts, hints=hints, label=label, per_file=per_file
    )
    out, stored_new = await run_in_threadpool(_store, runtime, name, prepared)
    response.status_code = 201 if stored_new else 200
    return out


@router.get("/{name}/runs", response_model=RunsPage, responses=problem_responses(404, 422, 503))
def list_runs(
    name: str,
    runtime: RuntimeDep,
    op: Op | None = None,
    backend: Annotated[str | None, Query(max_length=32)] = None,
    points: bool = True,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> RunsPage:
    """A page of the profile's runs in upload order (``next_offset`` gives the next one), with
    their points unless ``points=false``."""
    with runtime.read_session() as session:
        return service.list_runs(
            session=session,
            name=name,
            op=op,
            backend=backend,
            points=points,
            limit=limit,
            offset=offset,
        )


@router.get(
    "/{name}/bandwidth",
    response_model=BandwidthResponse,
    responses=problem_responses(404, 422, 503),
)
def bandwidth(
    name: str, runtime: RuntimeDep, query: Annotated[BandwidthQuery, Query()]
) -> BandwidthResponse:
    """Effective bus bandwidth of a collective at a scale and size, and how it was obtained."""
    snapshot = runtime.profiles().profile(name)
    return service.bandwidth(
        snapshot=snapshot,
        op=query.op,
        ranks=query.ranks,
        nodes=query.nodes,
        size_bytes=query.size_bytes,
    )


@router.get(
    "/{name}/curves",
    response_model=CurvesResponse,
    responses={
        200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}},
        **problem_responses(404, 422, 503),
    },
)
def curves(
    name: str,
    runtime: RuntimeDep,
    format: Literal["json", "png"] = "json",
    op: Op | None = None,
    include_nominal: bool = True,
) -> CurvesResponse | Response:
    """busbw against message size per enabled run (``format=png``: a log-x plot)."""
    if format == "png":  # a bounded pick of the runs, whatever the profile holds
        with runtime.read_session() as session:
            picked = service.picture_curves(
                session=session, name=name, op=op, include_nominal=include_nominal
            )
        png = service.curves_png(picked=picked, name=name, op=op)
        return Response(png, media_type="image/png")
    with runtime.read_session() as session:
        return service.curves(session=session, name=name, op=op, include_nominal=include_nominal)


@router.get(
    "/{name}/tuning-table",
    response_model=TuningTableResponse,
    responses=problem_responses(404, 422, 503),
)
def tuning_table(
    name: str,
    runtime: RuntimeDep,
    op: Annotated[Op, Query()],
    ranks: Annotated[int, Query(ge=1, le=MAX_RANKS)],
    nodes: Annotated[int | None, Query(ge=1, le=MAX_RANKS)] = None,
) -> TuningTableResponse:
    """Per message size, the fastest backend among the enabled runs."""
    with runtime.read_session() as session:
        return service.tuning_table(session=session, name=name, op=op, ranks=ranks, nodes=nodes)
