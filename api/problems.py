"""The one place where errors become RFC 9457 problem details (``application/problem+json``).

Every domain error (``estimator.errors``) keeps its ``status`` and ``title``; this module adds
``type`` (a URN per error class), ``detail`` (the error's message), ``instance`` (the request
path) and, where the error knows them, ``field``, ``value`` and ``rule``. Request validation
errors of pydantic become 422 problems with one entry per failing field in ``errors``;
database outages become 503; unknown routes and methods keep their HTTP status (a 405
lists in ``Allow`` every method the path answers). A response model that refuses a number
that is not finite, outside ``api.schemas.finite_answer``, is still a 422, never a 500.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import lru_cache
from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from estimator.errors import (
    AuthError,
    CommestError,
    ConflictError,
    UnavailableError,
    ValidationError,
)

log = logging.getLogger("api")

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:commest:problem:"
_VALUE_CHARS = 200

#: error class -> the last part of its problem ``type`` URN
_SLUGS: dict[type[CommestError], str] = {}


def problem_type(error: type[CommestError] | None, status: int) -> str:
    """The ``type`` URN of a problem: per domain error class, else per HTTP status."""
    if error is not None and error is not CommestError:
        slug = _SLUGS.get(error)
        if slug is None:
            name = error.__name__.removesuffix("Error") or error.__name__
            slug = "".join(f"-{c.lower()}" if c.isupper() else c for c in name).lstrip("-")
            _SLUGS[error] = slug
        return TYPE_PREFIX + slug
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        return "about:blank"
    return TYPE_PREFIX + phrase.lower().replace(" ", "-").replace("'", "")


def safe_value(value: Any) -> Any:
    """A JSON-safe, bounded rendering of an offending value."""
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and len(value) > _VALUE_CHARS:
            return value[:_VALUE_CHARS] + "…"
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping | Sequence) and not isinstance(value, bytes | bytearray):
        text = repr(value)
        if len(text) <= _VALUE_CHARS:
            try:
                json.dumps(value, allow_nan=False)
                return value
            except (TypeError, ValueError):
                return text
        return text[:_VALUE_CHARS] + "…"
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS] + "…"


def problem_response(
    request: Request,
    *,
    status: int,
    title: str,
    detail: str,
    type_: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """A problem-details response; ``extra`` members are added when not None."""
    body: dict[str, Any] = {
        "type": type_ or problem_type(None, status),
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _error_members(exc: CommestError) -> dict[str, Any]:
    members: dict[str, Any] = {}
    if isinstance(exc, ValidationError):
        members.update(field=exc.field, value=safe_value(exc.value), rule=exc.rule)
    for key, value in exc.context.items():
        if key in ("field", "value", "rule") or key in members:
            continue
        if key == "lines":
            members["lines"] = [{"line": n, "text": t} for n, t in value]
        else:
            members[key] = safe_value(value)
    return members


def commest_problem(request: Request, exc: CommestError) -> JSONResponse:
    """The problem-details response of a domain error."""
    headers: dict[str, str] | None = None
    if isinstance(exc, AuthError):
        headers = {"WWW-Authenticate": exc.context.get("challenge", "Bearer")}
    if isinstance(exc, UnavailableError):
        headers = {"Retry-After": "5"}
    members = _error_members(exc)
    members.pop("challenge", None)
    return problem_response(
        request,
        status=exc.status,
        title=exc.title,
        detail=exc.message,
        type_=problem_type(type(exc), exc.status),
        headers=headers,
        **members,
    )


def _loc_field(loc: Sequence[int | str]) -> tuple[str, str]:
    """(where, dotted field) from a pydantic error location such as ('body', 'model', 'x')."""
    where = str(loc[0]) if loc else "body"
    parts = list(loc[1:]) if where in ("body", "query", "path", "header", "cookie") else list(loc)
    field = ""
    for part in parts:
        if isinstance(part, int):
            field += f"[{part}]"
        else:
            field += ("." if field else "") + str(part)
    return where, field or where


def _request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = []
    for err in exc.errors():
        where, field = _loc_field(err.get("loc", ()))
        rule = str(err.get("msg", "invalid"))
        errors.append(
            {
                "in": where,
                "field": field,
                "value": None if err.get("type") == "missing" else safe_value(err.get("input")),
                "rule": rule,
                "code": err.get("type"),
            }
        )
    first = errors[0] if errors else {"field": None, "value": None, "rule": "invalid"}
    detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors) or "invalid request"
    return problem_response(
        request,
        status=422,
        title=ValidationError.title,
        detail=detail,
        type_=problem_type(ValidationError, 422),
        field=first["field"],
        value=first["value"],
        rule=first["rule"],
        errors=errors,
    )


_OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@lru_cache(maxsize=256)
def _path_regex(template: str) -> re.Pattern[str]:
    """``/v1/profiles/{name}`` as a regex matching concrete paths."""
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


def allowed_methods(request: Request) -> list[str]:
    """Every method the app's OpenAPI document serves on the request's path.

    Starlette's own 405 names the methods of the first route that matched the path only; a
    path served by several routes (``GET`` and ``POST /v1/profiles``) answers for all of them.
    """
    path, root = request.scope["path"], request.scope.get("root_path", "")
    path = path.removeprefix(root) if root and path.startswith(root) else path
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if _path_regex(template).fullmatch(path):
            methods |= {m.upper() for m in operations if m in _OPERATIONS}
    if "GET" in methods:
        methods.add("HEAD")  # Starlette answers HEAD wherever it answers GET
    return sorted(methods)


def _http_problem(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    try:
        title = HTTPStatus(exc.status_code).phrase
    except ValueError:
        title = "Error"
    detail = exc.detail if isinstance(exc.detail, str) else title
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.method} {request.url.path}"
    if exc.status_code == 405:
        given = [m for m in headers.get("Allow", "").split(", ") if m]
        allowed = allowed_methods(request) or sorted(given)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} {request.url.path} is not served; it answers {headers['Allow']}"
    return problem_response(
        request,
        status=exc.status_code,
        title=title,
        detail=detail,
        headers=headers or None,
    )


def _non_finite_answer(request: Request, exc: PydanticValidationError) -> JSONResponse:
    """A response model refused a number that is not finite, outside ``finite_answer``; any
    other failure to build a response is an internal error."""
    errors = exc.errors()
    if not errors or any(e["type"] != "finite_number" for e in errors):
        return _internal_problem(request, exc)
    member = next((p for p in reversed(errors[0]["loc"]) if isinstance(p, str)), "answer")
    return problem_response(
        request,
        status=422,
        title=ValidationError.title,
        detail=f"the request gives a non-finite {member}, which no answer can carry: its "
        "figures are outside the range commest computes with",
        type_=problem_type(ValidationError, 422),
    )


def _database_problem(request: Request, exc: DBAPIError) -> JSONResponse:
    if isinstance(exc, IntegrityError):
        return commest_problem(request, ConflictError("the write conflicts with stored data"))
    log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
    return commest_problem(
        request, UnavailableError(f"the database is not reachable ({type(exc).__name__})")
    )


def _pool_timeout_problem(request: Request, exc: PoolTimeoutError) -> JSONResponse:
    return commest_problem(request, UnavailableError("the database connection pool is exhausted"))


def _numeric_problem(request: Request, exc: ArithmeticError) -> JSONResponse:
    log.warning("numeric error on %s %s: %r", request.method, request.url.path, exc)
    return problem_response(
        request,
        status=422,
        title=ValidationError.title,
        detail=f"a value is outside the range commest computes with ({exc})",
        type_=problem_type(ValidationError, 422),
    )


def _internal_problem(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return problem_response(
        request,
        status=500,
        title="Internal error",
        detail="an unexpected error occurred; it has been logged",
    )


E = TypeVar("E", bound=Exception)


def _handler(
    kind: type[E], render: Callable[[Request, E], JSONResponse]
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    """A Starlette exception handler that renders ``kind`` with ``render``."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, kind)
        return render(request, exc)

    return handle


def install(app: FastAPI) -> None:
    """Register every problem-details handler on ``app``."""
    handlers: list[tuple[type[Exception], Callable[..., Awaitable[JSONResponse]]]] = [
        (CommestError, _handler(CommestError, commest_problem)),
        (RequestValidationError, _handler(RequestValidationError, _request_validation)),
        (StarletteHTTPException, _handler(StarletteHTTPException, _http_problem)),
        (DBAPIError, _handler(DBAPIError, _database_problem)),
        (OperationalError, _handler(DBAPIError, _database_problem)),
        (PoolTimeoutError, _handler(PoolTimeoutError, _pool_timeout_problem)),
        (ArithmeticError, _handler(ArithmeticError, _numeric_problem)),  # extreme input
        (PydanticValidationError, _handler(PydanticValidationError, _non_finite_answer)),
        (Exception, _handler(Exception, _internal_problem)),
    ]
    for kind, handle in handlers:
        app.add_exception_handler(kind, handle)
    app.openapi = _documented_problems(app.openapi)  # type: ignore[method-assign]


def _documented_problems(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` that documents the problems every route may answer with.

    FastAPI's own 422 entry (``application/json``, ``HTTPValidationError``) is replaced by the
    problem details this module sends; operations with a JSON request body declare the 400
    FastAPI answers when the body cannot be decoded at all (bytes that are not UTF-8), and
    every operation with a body the 413 of ``api.app.BodyCap``.
    """
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if done:
            return done[0]
        spec = build()
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if "422" in responses and PROBLEM_JSON not in responses["422"].get("content", {}):
                    responses["422"] = problem_responses(422)[422]
                body = operation.get("requestBody", {}).get("content", {})
                if "application/json" in body and "400" not in responses:
                    responses["400"] = problem_responses(400)[400]
                if body and "413" not in responses:
                    responses["413"] = problem_responses(413)[413]
        schemas = spec.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's, now unreferenced
            if f'"#/components/schemas/{unused}"' not in json.dumps(spec):
                schemas.pop(unused, None)
        done.append(spec)
        return spec

    return openapi


#: OpenAPI description of a problem-details response, for ``responses=`` on routes.
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "instance"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "field": {"type": "string"},
        "value": {},
        "rule": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object"}},
    },
}


#: Headers a problem of that status always carries.
_PROBLEM_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "the bearer challenge (RFC 6750)",
            "schema": {"type": "string"},
            "required": True,
        }
    },
    503: {
        "Retry-After": {
            "description": "seconds to wait before retrying",
            "schema": {"type": "string"},
            "required": True,
        }
    },
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting problem-details answers for ``statuses``."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "description": HTTPStatus(status).phrase,
            "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA}},
        }
        if status in _PROBLEM_HEADERS:
            entry["headers"] = _PROBLEM_HEADERS[status]
        out[status] = entry
    return out
