"""/v1/profiles/{name}/runs and what is read from them: bandwidth, curves, tuning tables.

Uploads take the benchmark output as the raw body (``text/plain``) or as one or several files
of a ``multipart/form-data`` body. The size cap is checked on ``Content-Length`` first and
again while the body streams in, and multipart parts are counted as they stream, so an
oversized upload is refused without being read whole.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from python_multipart.multipart import parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from api import plots, service
from api.deps import Runtime, RuntimeDep, Writer
from api.problems import problem_responses
from api.schemas import (
    BandwidthResponse,
    CurvesResponse,
    RunsPage,
    TuningTableResponse,
    UploadResponse,
)
from estimator.errors import LimitError, ValidationError
from profiles import repository

router = APIRouter(prefix="/v1/profiles", tags=["runs"])

MAX_RANKS = 10_000_000

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
                        }
                    },
                }
            },
        },
    }
}


class _PartCounter:
    """Counts multipart delimiters (``--boundary`` after CRLF) across streamed chunks."""

    def __init__(self, boundary: bytes) -> None:
        self.delimiter = b"\r\n--" + boundary
        self.opening = b"--" + boundary
        self.delimiters = 0
        self._scanned = 0

    def feed(self, buffer: bytearray) -> int:
        """Delimiters seen so far (the first, at the very start, included)."""
        if self._scanned == 0 and len(buffer) >= len(self.opening):
            if buffer.startswith(self.opening):
                self.delimiters += 1
            self._scanned = 1
        start = max(self._scanned, 1)
        while True:
            found = buffer.find(self.delimiter, start)
            if found < 0:
                break
            self.delimiters += 1
            start = found + len(self.delimiter)
        self._scanned = max(start, len(buffer) - len(self.delimiter) + 1, 1)
        return self.delimiters


async def read_capped_body(
    request: Request, *, max_bytes: int, max_files: int
) -> tuple[bytes, bytes | None]:
    """The body (at most ``max_bytes``) and the multipart boundary if it is multipart."""
    length = request.headers.get("content-length")
    if length is not None:
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
    media, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary") if media == b"multipart/form-data" else None
    if media == b"multipart/form-data" and not boundary:
        raise ValidationError("Content-Type", media.decode(), "multipart needs a boundary")
    counter = _PartCounter(boundary) if boundary else None
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk
        if len(buffer) > max_bytes:
            raise LimitError(
                f"the upload exceeds the cap of {max_bytes} bytes (COMMEST_MAX_UPLOAD_BYTES)",
                max_upload_bytes=max_bytes,
            )
        # n delimiters open n - 1 parts (the last one closes the body): refuse early.
        if counter is not None and counter.feed(buffer) - 1 > max_files:
            raise LimitError(
                f"the upload holds more than {max_files} files (COMMEST_MAX_UPLOAD_FILES)",
                max_upload_files=max_files,
            )
    return bytes(buffer), boundary


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            where, f"<{len(data)} bytes>", f"must be UTF-8 text (byte {exc.start} is not)"
        ) from None


async def _multipart_texts(request: Request, body: bytes, max_files: int) -> list[str]:
    async def replay() -> AsyncGenerator[bytes, None]:
        yield body

    parser = MultiPartParser(
        request.headers, replay(), max_files=max_files + 1, max_fields=1000, max_part_size=1 << 20
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise ValidationError("body", "<multipart>", exc.message) from None
    try:
        files = [(key, value) for key, value in form.multi_items()]
        fields = [key for key, value in files if not isinstance(value, UploadFile)]
        if fields:
            raise ValidationError(
                fields[0],
                "<form field>",
                "only files are accepted; give op, ranks, nodes, backend, dtype as query "
                "parameters",
            )
        if not files:
            raise ValidationError("files", 0, "the multipart body holds no file")
        if len(files) > max_files:
            raise LimitError(
                f"the upload holds {len(files)} files, over the cap of {max_files}",
                files=len(files),
                max_upload_files=max_files,
            )
        texts = []
        for key, value in files:
            assert isinstance(value, UploadFile)
            name = value.filename or key
            texts.append(_decode(await value.read(), f"files[{name}]"))
        return texts
    finally:
        await form.close()


def _store(
    runtime: Runtime, name: str, texts: list[str], hints: service.Hints
) -> tuple[dict[str, Any], bool]:
    with runtime.transaction() as session:
        return service.upload_texts(session=session, name=name, texts=texts, hints=hints)


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
    op: Annotated[str | None, Query(description="collective, if the text omits it")] = None,
    ranks: Annotated[
        int | None, Query(ge=1, le=MAX_RANKS, description="rank count, if omitted")
    ] = None,
    nodes: Annotated[
        int | None, Query(ge=1, le=MAX_RANKS, description="node count, if omitted")
    ] = None,
    backend: Annotated[str | None, Query(max_length=32)] = None,
    dtype: Annotated[str | None, Query(max_length=16)] = None,
) -> Any:
    """Store benchmark output: 201 when something new was stored, 200 when all was known."""
    settings = runtime.settings
    body, boundary = await read_capped_body(
        request, max_bytes=settings.max_upload_bytes, max_files=settings.max_upload_files
    )
    if boundary is not None:
        texts = await _multipart_texts(request, body, settings.max_upload_files)
    else:
        texts = [_decode(body, "body")]
    hints = service.Hints(op=op, ranks=ranks, nodes=nodes, backend=backend, dtype=dtype)
    out, stored_new = await run_in_threadpool(_store, runtime, name, texts, hints)
    response.status_code = 201 if stored_new else 200
    return out


@router.get("/{name}/runs", response_model=RunsPage, responses=problem_responses(404, 422, 503))
def list_runs(
    name: str,
    runtime: RuntimeDep,
    op: str | None = None,
    backend: str | None = None,
    points: bool = True,
) -> Any:
    """A profile's runs in upload order, with their points unless ``points=false``."""
    with runtime.read_session() as session:
        runs = repository.list_runs(
            session=session, profile_name=name, op=op, backend=backend, with_points=points
        )
        return {"runs": [service.run_dict(r, points=points) for r in runs], "count": len(runs)}


@router.get(
    "/{name}/bandwidth",
    response_model=BandwidthResponse,
    responses=problem_responses(404, 422, 503),
)
def bandwidth(
    name: str,
    runtime: RuntimeDep,
    op: Annotated[str, Query(description="collective, e.g. all_reduce")],
    ranks: Annotated[int, Query(ge=1, le=MAX_RANKS)],
    nodes: Annotated[int, Query(ge=1, le=MAX_RANKS)],
    size_bytes: Annotated[
        float, Query(alias="bytes", gt=0, le=1e15, allow_inf_nan=False, description="message size")
    ],
) -> Any:
    """Effective bus bandwidth of a collective at a scale and size, and how it was obtained."""
    snapshot = runtime.profiles().profile(name)
    return service.bandwidth_body(
        snapshot=snapshot, op=op, ranks=ranks, nodes=nodes, size_bytes=size_bytes
    )


@router.get(
    "/{name}/curves",
    response_model=CurvesResponse,
    responses={
        200: {"content": {"application/json": {}, "image/png": {}}},
        **problem_responses(404, 422, 503),
    },
)
def curves(
    name: str,
    runtime: RuntimeDep,
    format: Literal["json", "png"] = "json",
    op: str | None = None,
    include_nominal: bool = True,
) -> Any:
    """busbw against message size per run (``format=png``: a log-x plot)."""
    snapshot = runtime.profiles().profile(name)
    body = service.curves_body(snapshot=snapshot, op=op, include_nominal=include_nominal)
    if format == "png":
        title = f"profile {name}: bus bandwidth by message size" + (f" ({op})" if op else "")
        return Response(plots.bandwidth_curves(body["curves"], title=title), media_type="image/png")
    return body


@router.get(
    "/{name}/tuning-table",
    response_model=TuningTableResponse,
    responses=problem_responses(404, 422, 503),
)
def tuning_table(
    name: str,
    runtime: RuntimeDep,
    op: Annotated[str, Query()],
    ranks: Annotated[int, Query(ge=1, le=MAX_RANKS)],
    nodes: Annotated[int | None, Query(ge=1, le=MAX_RANKS)] = None,
) -> Any:
    """Per message size, the fastest backend among the stored runs."""
    snapshot = runtime.profiles().profile(name)
    return service.tuning_body(snapshot=snapshot, op=op, ranks=ranks, nodes=nodes)
